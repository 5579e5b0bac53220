"""TOF projections on the GPU (``cuda/joseph_tof.cu``) against the CPU kernels
(``stirgpu.kernels.tof.cpu``), and through the projectors and OSEM.

The GPU kernels do the CPU's float32 operations in its order but take their own erf
(``tof_erf``, within 1.1e-7; the wide kernels CUDA's ``erff``, within 2 ulp) where the CPU rounds a
double ``erf``: forward projections agree to a few float32 ulp of the maximum (bound 1e-6), back
projections also add into voxels in another order (atomics; 1e-5).  The register kernels'
forward projections are their host build's bit for bit.
A chunk's TOF bins may be any range: its values are the whole projection's bit for bit, on
the GPU as on the CPU.  The host build of the same source (``test_kernels_cuda_host.py``)
checks the sliding window's logic against the CPU bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.chunk import JosephChunk
from stirgpu.kernels.joseph.cpu import endpoints_array
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof
from stirgpu.projectors import ProjectorPair

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("both_lor_orders")]

DMI = "GE Discovery MI 4 rings"
CASES = {
    "dmi-mash29": (DMI, 29, 12, 61),  # 13 bins: 8 registers
    "dmi-mash13": (DMI, 13, 12, 61),  # 29 bins: 12 registers
    "dmi-unmashed": (DMI, 1, 4, 31),  # 377 bins: the wide kernels
    "vision-mash8": ("Siemens Vision 600", 8, 12, 61),  # 33 bins
    "vision-mash12-even": ("Siemens Vision 600", 12, 12, 61),  # 22 bins
}


def _case(name, mrd=2):
    scanner, mash, views, tang = CASES[name]
    pdi = ProjDataInfo.construct(Scanner.from_name(scanner), 1, mrd, views, tang, tof_mash_factor=mash)
    info = stir_default_image_info(pdi)
    nz, ny, nx = info.shape
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n) for n in (nz, ny, nx)), indexing="ij")
    img = ((x / 0.6) ** 2 + (y / 0.5) ** 2 <= 1) * (1 + np.random.default_rng(mash).uniform(0, 0.2, info.shape))
    chunk = JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    return pdi, info, img.astype(np.float32), stir_image_frame(info), chunk


def _relative(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_back_agree_with_the_cpu(cp, name):
    """Every case's TOF forward projection (all segments, one launch) is the CPU's to 1e-6 of
    the maximum (the GPU's own erf, a few ulp), its back projection to 1e-5 (atomics' order too);
    the cases take register windows of 13 to 33 bins and the wide kernels (377 bins)."""
    pdi, info, img, frame, chunk = _case(name)
    cpu = forward_chunk_tof(chunk, pdi, img, frame)
    gpu = forward_chunk_tof(chunk, pdi, cp.asarray(img), frame)
    assert _relative(cp.asnumpy(gpu), cpu) <= 1e-6
    y = np.random.default_rng(2).uniform(0, 1, cpu.shape).astype(np.float32)
    want = back_chunk_tof(chunk, pdi, y, np.zeros_like(img), frame)
    got = back_chunk_tof(chunk, pdi, cp.asarray(y), cp.zeros(img.shape, np.float32), frame)
    assert _relative(cp.asnumpy(got), want) <= 1e-5


@pytest.mark.parametrize("name", ["dmi-mash29", "dmi-mash13", "vision-mash12-even"])
def test_register_kernels_forward_is_their_host_builds_bit_for_bit(cp, tmp_path, name):
    """Every float operation of the register kernels, their erf (``tof_erf``) included, is an
    explicitly rounded one: NVRTC contracts none and no hardware approximation enters, so the GPU's
    forward projection is the host build's (``tests/cuda_host``) bit for bit."""
    import test_kernels_cuda_host as host

    pdi, info, img, frame, chunk = _case(name)
    want, kernel = host.tof_forward(host.build_host_kernels(tmp_path, False), chunk, pdi, img, frame)
    assert "wide" not in kernel
    got = forward_chunk_tof(chunk, pdi, cp.asarray(img), frame)
    np.testing.assert_array_equal(cp.asnumpy(got).reshape(-1), want)


@pytest.mark.parametrize("name", ["dmi-mash29", "vision-mash12-even"])
def test_tof_bin_ranges_are_the_whole_projection_bit_for_bit(cp, name):
    """A chunk of any run of TOF bins (the first, one inside, the last three, around 0) gives
    the whole projection's values of those bins bit for bit: the TOF coordinate is counted from
    the data's bin 0, whatever the chunk's first.  Guards the first bin's offset."""
    pdi, info, img, frame, chunk = _case(name)
    dev = cp.asarray(img)
    part = pdi.chunk_tables(1)
    whole = cp.asnumpy(forward_chunk_tof(part, pdi, dev, frame))
    lo, hi = pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num()
    for poss in (range(lo, lo + 1), range(lo + 2, lo + 6), range(hi - 2, hi + 1), range(-1, 2)):
        got = cp.asnumpy(forward_chunk_tof(part, pdi, dev, frame, timing_poss=poss))
        np.testing.assert_array_equal(got, whole[poss[0] - lo : poss[-1] - lo + 1])


def test_back_projection_is_the_adjoint(cp):
    """<A x, y> == <x, A^T y> for the TOF kernels (float64 dot products) to 1e-5: float32
    rounding and atomics only.  Guards the back kernel's weights against the forward's."""
    pdi, info, img, frame, chunk = _case("dmi-mash29")
    x = cp.asarray(img)
    y = cp.asarray(np.random.default_rng(4).uniform(0, 1, chunk.num_lors * pdi.get_num_tof_poss()).astype(np.float32))
    ax = forward_chunk_tof(chunk, pdi, x, frame)
    aty = back_chunk_tof(chunk, pdi, y, cp.zeros(img.shape, np.float32), frame)
    lhs, rhs = float(cp.dot(ax.astype(cp.float64), y.astype(cp.float64))), float(cp.vdot(x.astype(cp.float64), aty))
    assert abs(lhs - rhs) <= 1e-5 * abs(lhs)


def test_endpoints_kernel_is_stirs_bit_for_bit(cp):
    """The endpoints kernel (the LORs STIR hands libparallelproj, times rescale) equals the CPU's
    endpoints of every LOR of a multi-part chunk bit for bit: the tables' packing and the GPU's
    endpoint arithmetic."""
    from stirgpu.kernels.joseph.cuda import endpoints

    pdi, info, img, frame, chunk = _case("dmi-mash29")
    r = np.float32(frame[2])
    start, end = endpoints(chunk.device(cp.cuda.Device().id), r, cp.cuda.Device().id)
    ends = [endpoints_array(t) for t in chunk.host]
    for got, i in ((start, 0), (end, 1)):
        want = np.concatenate([(e[i].reshape(-1, 3) * r).astype(np.float32) for e in ends])
        np.testing.assert_array_equal(cp.asnumpy(got), want)


@pytest.fixture(scope="module")
def small_tof():
    name = "dmi-mash29"
    pdi, info, img, frame, chunk = _case(name, mrd=3)
    return pdi, info, img


@pytest.mark.parametrize("views_per_chunk", [1, 5, None])
def test_projectors_on_the_gpu_agree_with_the_cpu_for_any_plan(small_tof, views_per_chunk):
    """Through the engine with chunks of 1, 5 and every view: the GPU's TOF projections are the
    CPU's to the kernels' bounds (forward 1e-6, back 1e-5 of the maximum)."""
    pdi, info, img = small_tof
    results = {}
    for backend in ("cpu", "cuda"):
        pair = ProjectorPair(backend=backend, max_views_per_chunk=views_per_chunk)
        pair.set_up(pdi, info)
        fwd = ProjDataInMemory(pdi)
        pair.forward_project(fwd, img)
        results[backend] = (fwd.as_array(), np.asarray(pair.back_project(None, fwd)))
    (f_cpu, b_cpu), (f_gpu, b_gpu) = results["cpu"], results["cuda"]
    assert _relative(f_gpu, f_cpu) <= 1e-6
    assert _relative(b_gpu, b_cpu) <= 1e-5


def test_gpu_forward_is_the_same_for_any_plan_and_subsets(small_tof):
    """A subset's TOF forward projection on the GPU is the same bit for bit with chunks of one
    view and of every view (each bin is computed on its own, whatever the chunk)."""
    pdi, info, img = small_tof
    outs = []
    for views in (1, None):
        pair = ProjectorPair(backend="cuda", max_views_per_chunk=views)
        pair.set_up(pdi, info)
        fwd = ProjDataInMemory(pdi)
        pair.forward_project(fwd, img, subset_num=2, num_subsets=3)
        outs.append(fwd.as_array())
    np.testing.assert_array_equal(outs[0], outs[1])


def test_osem_on_tof_data_agrees_with_the_cpu(small_tof):
    """Four OSEM subiterations on the same TOF data: the GPU's estimate is the CPU's to 1e-4 of
    the maximum (the projections' float32 differences carried through four multiplicative
    updates)."""
    from stirgpu.recon import OSEM, PoissonLogLikelihood

    pdi, info, img = small_tof
    pair = ProjectorPair(backend="cpu")
    pair.set_up(pdi, info)
    y = ProjDataInMemory(pdi)
    pair.forward_project(y, img)
    y.fill(np.random.default_rng(5).poisson(y.as_array() * 20).astype(np.float32))
    images = {}
    for backend in ("cpu", "cuda"):
        recon = OSEM(PoissonLogLikelihood(y), ProjectorPair(backend=backend), info, num_subsets=4, num_subiterations=4)
        recon.set_up()
        x = recon.initial_image(1.0)
        for n in range(1, 5):
            x, _ = recon.update(x, n)
        images[backend] = x.get() if backend == "cuda" else np.asarray(x)
    assert _relative(images["cuda"], images["cpu"]) <= 1e-4
