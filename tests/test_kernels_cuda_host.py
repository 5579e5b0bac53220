"""The CUDA TOF kernels' own source (stirgpu/kernels/cuda/joseph_stir_tof.cu, after
joseph_stir.cu), compiled for the host (tests/cuda_host/joseph_host.cpp: each thread of a
launch run in turn, the float intrinsics as the host's IEEE float operations without
contraction, erff the host libm's), against the numba kernels (stirgpu/kernels/cpu_stir_tof.py).

What this checks without a GPU: the register window that slides with the walk's TOF coordinate
(both directions, every register size the module is built for, and the wide kernels), the bins
written once each and zeroed where the walk never reaches them, TOF-bin ranges of a chunk,
several parts, the skipped all-zero LORs, the non-TOF kernels and the endpoints kernel of
joseph_stir.cu, and the launch arguments cuda_stir_tof builds (sizes, order and C types of what
cupy is given).  With the host's erff the wide kernels' forward projections are the numba ones
bit for bit; the register kernels share bin edges between neighbouring bins (one erff fewer per
bin), so theirs agree to float32 rounding (bound 1e-6 of the maximum), and any TOF-bin range of
a chunk is the whole projection's bit for bit; back projections also add into voxels in another
order.  What it cannot check: NVRTC's compilation, cupy's launches, and CUDA's erff
(tests/test_kernels_gpu_tof.py, on a GPU).
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import REPO_ROOT

from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels import JosephChunk, back_chunk, forward_chunk
from stirgpu.kernels.joseph import cuda as cuda_stir
from stirgpu.kernels.joseph.cpu import endpoints_array
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
from stirgpu.kernels.joseph.slabs import SlabLaunch
from stirgpu.kernels.tof import cuda as cuda_stir_tof
from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof, stir_tof_tables, window_size

SOURCES = (REPO_ROOT / "stirgpu" / "kernels" / "cuda", REPO_ROOT / "tests" / "cuda_host")
DMI = "GE Discovery MI 4 rings"


def build_host_kernels(folder, axial_major: bool, options=()):
    """The kernels built for the host in ``folder`` in one LOR order (``cuda_stir.order_option``),
    with more compiler ``options``; skips the test where there is no C++ compiler."""
    cxx = shutil.which(os.environ.get("CXX") or "g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build the TOF kernels for the host")
    lib = folder / "libjoseph_host.so"
    cmd = [cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", f"-DSG_STIR_THREADS={cuda_stir.THREADS}"]
    cmd += [cuda_stir.order_option(axial_major), *options]
    cmd += [*(f"-I{d}" for d in SOURCES), str(SOURCES[1] / "joseph_host.cpp"), "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(lib))


@pytest.fixture(scope="module", params=[False, True], ids=["view-major", "axial-major"])
def host_kernels(request, tmp_path_factory):
    """The kernels built for the host in each LOR order: every test runs on both, so each
    order's threads take every LOR of a part once."""
    return build_host_kernels(tmp_path_factory.mktemp("joseph_host"), request.param)


_C_SCALARS = {np.int32: ctypes.c_int, np.float32: ctypes.c_float}


def _c(a):
    if isinstance(a, ctypes.c_void_p):
        return a
    return a.ctypes.data_as(ctypes.c_void_p) if isinstance(a, np.ndarray) else _C_SCALARS[type(a)](a)


def _entry(lib, name: str):
    """The host entry of kernel ``name`` (``fwd_stir_tof<8>`` -> ``fwd_stir_tof_8``)."""
    return getattr(lib, name.replace("<", "_").replace(">", "") if "<" in name else name + "_")


def _launch(lib, name, parts, args):
    """cuda_stir.launch's one launch of a chunk's parts, on the host."""
    _entry(lib, name)(ctypes.c_uint(parts.blocks), *map(_c, args))


def framed_copies(img):
    """``cuda_workspaces.padded_copies`` on the host: A (z, y, x) and B (z, x, y), each with a
    one-voxel zero frame."""
    a = np.pad(img, 1)
    return a, np.ascontiguousarray(a.transpose(0, 2, 1))


def host_forward(lib, parts, img, frame_args, framed: bool):
    """``fwd_stir`` on the host over ``parts``, reading the image's framed copies or (``framed``
    false, null pointers) the image itself; every value must be written."""
    out = np.full(parts.num_lors, np.nan, np.float32)
    copies = framed_copies(img) if framed else (ctypes.c_void_p(None),) * 2
    _launch(lib, "fwd_stir", parts, (*parts.args, img.reshape(-1), *copies, *frame_args, out))
    return out


def _tof_launch(lib, kind, chunk, pdi, image, frame, poss, window, arrays):
    """cuda_stir_tof's launch of ``kind`` on the host, with its kernel choice and arguments
    (``arrays``: the chunk's arrays after the TOF arguments).  Returns the kernel's name."""
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    tof, first, nb = stir_tof_tables(pdi, r, poss)
    name = cuda_stir_tof.kernel_name(kind, window or cuda_stir_tof.plane_window(tof))
    frame_args = cuda_stir.frame_args(image, org, vs, r)
    extra = cuda_stir_tof.tof_arguments(tof, first, nb)
    parts = chunk.packed()
    _launch(lib, name, parts, cuda_stir_tof.kernel_arguments(parts, frame_args, extra, *arrays))
    return name


def tof_forward(lib, chunk, pdi, img, frame, poss=None, window=None):
    """cuda_stir_tof.forward's launch, on the host."""
    nb = pdi.get_num_tof_poss() if poss is None else len(poss)
    out = np.full(nb * chunk.num_lors, np.nan, np.float32)  # every value must be written
    name = _tof_launch(lib, "fwd", chunk, pdi, img, frame, poss, window, (img.reshape(-1), out))
    return out, name


def tof_back(lib, chunk, pdi, values, shape, frame, poss=None, window=None):
    """cuda_stir_tof.back's launch, on the host."""
    img = np.zeros(shape, np.float32)
    along_x = cuda_stir.transposed_accumulator(np, img)
    _tof_launch(lib, "back", chunk, pdi, img, frame, poss, window, (values, img.reshape(-1), along_x))
    assert along_x.any() and img.any()  # walks along x and along y or z both took part
    cuda_stir.fold(img, along_x)
    return img


def _case(scanner, mash, views=6, tang=33, mrd=1):
    pdi = ProjDataInfo.construct(Scanner.from_name(scanner), 1, mrd, views, tang, tof_mash_factor=mash)
    info = stir_default_image_info(pdi)
    nz, ny, nx = info.shape
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n) for n in (nz, ny, nx)), indexing="ij")
    img = ((x / 0.6) ** 2 + (y / 0.5) ** 2 <= 1) * (1 + np.random.default_rng(mash).uniform(0, 0.2, info.shape))
    chunk = JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    return pdi, img.astype(np.float32), stir_image_frame(info), chunk


def _relative(a, b):
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())


CASES = {
    "dmi-mash29-odd": (DMI, 29, None),  # 13 bins, window 6: 6 registers
    "dmi-mash13": (DMI, 13, None),  # 29 bins, window 10: 10 registers
    "dmi-unmashed-wide": (DMI, 1, None),  # 377 bins, window 101 clamped to 64: the wide kernels
    "vision-mash8-odd": ("Siemens Vision 600", 8, None),  # 33 bins
    "vision-mash12-even": ("Siemens Vision 600", 12, None),  # 22 bins
    "vision-mash4-even": ("Siemens Vision 600", 4, None),  # 66 bins, window 13: 14 registers
    "dmi-mash29-16-registers": (DMI, 29, 16),  # a window in more registers than it needs
    "dmi-mash29-wide": (DMI, 29, 64),  # the wide kernels on a narrow window
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tof_kernels_compute_the_numba_numbers(host_kernels, case):
    scanner, mash, window = CASES[case]
    views, tang = (3, 17) if mash == 1 else (6, 33)
    pdi, img, frame, chunk = _case(scanner, mash, views, tang)
    got, name = tof_forward(host_kernels, chunk, pdi, img, frame, window=window)
    want = forward_chunk_tof(chunk, pdi, img, frame)
    wide = "wide" in name
    assert wide == (mash == 1 or window == cuda_stir_tof.WIDE_MAX), name
    if wide:
        np.testing.assert_array_equal(got, want.reshape(-1))
    else:
        assert not np.isnan(got).any()
        assert _relative(got, want.reshape(-1)) < 1e-6
    y = np.random.default_rng(5).uniform(0, 1, got.size).astype(np.float32)
    y[: chunk.shapes[0][2] * 3] = 0  # LORs whose TOF values are all 0 are skipped (some of them)
    back = tof_back(host_kernels, chunk, pdi, y, img.shape, frame, window=window)
    assert _relative(back, back_chunk_tof(chunk, pdi, y, np.zeros_like(img), frame)) < 2e-6


@pytest.mark.parametrize("scanner, mash", [(DMI, 29), (DMI, 13), ("Siemens Vision 600", 12)])
def test_even_and_odd_numbers_of_tof_bins_and_bin_ranges(host_kernels, scanner, mash):
    """A chunk's TOF bins may be any consecutive range of the data's (the window still slides
    over all of them; bins outside the range are dropped): each range's values are the
    whole projection's, bit for bit."""
    pdi, img, frame, chunk = _case(scanner, mash)
    whole, _ = tof_forward(host_kernels, chunk, pdi, img, frame)
    lo, hi = pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num()
    nb = hi - lo + 1
    per_bin = whole.reshape(-1)
    for poss in (range(lo, lo + 1), range(lo + 1, lo + 5), range(hi - 3, hi + 1), range(0, 2), range(lo, lo + nb - 1)):
        got, _ = tof_forward(host_kernels, chunk, pdi, img, frame, poss=poss)
        want = forward_chunk_tof(chunk, pdi, img, frame, timing_poss=poss).reshape(-1)
        # the weights' rounding, against the whole projection's scale (tails are small)
        assert np.abs(got - want).max() <= 1e-6 * np.abs(whole).max()
        first = poss[0] - lo
        parts, o = [], 0
        for nv, na, nt in chunk.shapes:
            k = nv * na * nt
            parts.append(per_bin[nb * o : nb * (o + k)].reshape(nb, k)[first : first + len(poss)].reshape(-1))
            o += k
        np.testing.assert_array_equal(got, np.concatenate(parts))


def test_plane_window_bounds_every_planes_window():
    """The register size: floor(it_f - d) .. ceil(it_f + d) in float32, clamped to
    libparallelproj's 64 bins, never spans more than plane_window bins, over TOF coordinates
    dense around integers and the scanners' parameters."""
    rng = np.random.default_rng(7)
    base = np.arange(-300, 300, dtype=np.float32)
    eps = np.float32(1e-6) * rng.uniform(-8, 8, base.size).astype(np.float32)
    it_f = np.concatenate([base + eps, base + np.float32(0.5), rng.uniform(-300, 300, 4000).astype(np.float32)])
    it_f = it_f.astype(np.float32)
    for scanner, mash in [(DMI, 29), (DMI, 13), (DMI, 1), ("Siemens Vision 600", 8), ("Siemens Vision 600", 4)]:
        pdi = ProjDataInfo.construct(Scanner.from_name(scanner), 1, 0, 4, 9, tof_mash_factor=mash)
        for rescale in (0.25, 0.5, 1.0 / 2.086, 1.0):
            tof, _, _ = stir_tof_tables(pdi, rescale)
            width, sigma, ns = (np.float32(v) for v in tof[:3])
            d = np.float32(np.float32(ns * sigma) / width)
            lo = np.floor(np.float32(it_f - d))
            hi = np.ceil(np.float32(it_f + d))
            widest = min(int((hi - lo + 1).max()), cuda_stir_tof.WIDE_MAX)
            assert widest <= cuda_stir_tof.plane_window(tof) <= window_size(tof)


def test_walks_in_both_directions_are_covered(host_kernels):
    """The TOF coordinate rises along some walks and falls along others (the principal axis's
    direction): the case's LORs include both, so both register windows were checked above."""
    pdi, img, frame, chunk = _case(DMI, 29)
    ends = [endpoints_array(t) for t in chunk.host]
    e_minus_s = np.concatenate([(e - s).reshape(-1, 3) for s, e in ends])
    principal = np.argmax(np.abs(e_minus_s), axis=1)
    sign = np.sign(e_minus_s[np.arange(len(principal)), principal])
    assert (sign > 0).any() and (sign < 0).any()


def test_non_tof_kernels_and_endpoints(host_kernels):
    """joseph.cu's chunk forward (bit for bit), back and endpoints (bit for bit)."""
    pdi, img, frame, chunk = _case(DMI, 29)
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    single = JosephChunk(chunk_tables := pdi.chunk_tables(pdi.segment_nums[0]), pdi)
    part = single.packed()
    nv, na, nt = chunk.shapes[0]
    k = nv * na * nt
    frame_args = cuda_stir.frame_args(img, org, vs, r)
    out = host_forward(host_kernels, part, img, frame_args, framed=False)
    np.testing.assert_array_equal(out, forward_chunk(single, pdi, img, frame).reshape(-1))
    np.testing.assert_array_equal(host_forward(host_kernels, part, img, frame_args, framed=True), out)
    back = np.zeros(img.shape, np.float32)
    along_x = cuda_stir.transposed_accumulator(np, back)
    whole = (np.int32(0), np.int32(img.shape[0]))
    _launch(host_kernels, "back_stir", part, (*part.args, out, back.reshape(-1), along_x, *frame_args, *whole))
    assert along_x.any() and back.any()
    cuda_stir.fold(back, along_x)
    want = back_chunk(single, pdi, out, np.zeros_like(img), frame)
    assert _relative(back, want) < 2e-6
    start, end = np.full((k, 3), np.nan, np.float32), np.full((k, 3), np.nan, np.float32)
    _launch(host_kernels, "endpoints_stir", part, (*part.args, r, start, end))
    s_ref, e_ref = endpoints_array(chunk.host[0])
    np.testing.assert_array_equal(start, (s_ref.reshape(-1, 3) * r).astype(np.float32))
    np.testing.assert_array_equal(end, (e_ref.reshape(-1, 3) * r).astype(np.float32))
    assert chunk_tables.num_lors == k


@pytest.fixture(scope="module")
def axial_host_kernels(tmp_path_factory):
    """The kernels built for the host in the axial-major order, the one slab launches need."""
    return build_host_kernels(tmp_path_factory.mktemp("joseph_host_axial"), True)


@pytest.mark.parametrize("planes", [1, 4, 9, 70])
def test_back_projection_in_slabs_is_one_launchs(axial_host_kernels, planes):
    """The back projection's slab launches (joseph.cu's stir_clip_to_slab, the directories of
    JosephChunk.host_slabs) add what one launch over the whole image adds, to float32 summation
    order, however thin the slabs: every corner once, in the slab of its plane, on every segment
    of a scanner's ring differences (the most oblique LORs cross every slab)."""
    pdi, img, frame, chunk = _case(DMI, 1, views=4, tang=21, mrd=35)
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    part = chunk.packed()
    rng = np.random.default_rng(planes)
    values = rng.uniform(0.5, 1.5, part.num_lors).astype(np.float32)
    frame_args = cuda_stir.frame_args(img, org, vs, r)

    def back_in(launches, directories):
        back = np.zeros(img.shape, np.float32)
        along_x = cuda_stir.transposed_accumulator(np, back)
        for s in launches:
            d = directories[s.offset : s.offset + len(directories) // len(launches)]
            slab = part._replace(directory=np.ascontiguousarray(d), blocks=s.blocks)
            z = (np.int32(s.z_lo), np.int32(s.z_hi))
            _launch(
                axial_host_kernels, "back_stir", slab, (*slab.args, values, back.reshape(-1), along_x, *frame_args, *z)
            )
        cuda_stir.fold(back, along_x)
        return back

    n0 = img.shape[0]
    whole = back_in([SlabLaunch(0, n0, 0, part.blocks)], part.directory)
    directories, launches = chunk.host_slabs(part.directory, planes, n0, org[0], vs[0], r)
    assert len(launches) == -(-n0 // planes) and launches[-1].z_hi == n0
    in_slabs = back_in(launches, directories)
    assert whole.any() and _relative(in_slabs, whole) < 2e-6
    np.testing.assert_array_equal(in_slabs == 0, whole == 0)  # no corner lost or added
    if 4 * planes <= n0:  # thin slabs run a share of the LORs each
        assert max(s.blocks for s in launches) < part.blocks


def explicit_lors(rng, n, shape, org):
    """n random LORs through and around an image of ``shape`` whose voxel [0, 0, 0] is at
    ``org`` (unit voxels), with the cases libparallelproj 2.0.7 decides apart: zero-length LORs,
    LORs in a face plane, parallel to an axis, and grazing an entry face."""
    span = np.asarray(shape, np.float32)
    lo, hi = org - 0.5 - 4, org - 0.5 + span + 4
    xs = rng.uniform(lo, hi, (n, 3)).astype(np.float32)
    xe = rng.uniform(lo, hi, (n, 3)).astype(np.float32)
    xe[:8] = xs[:8]  # zero length: no contribution
    xs[8:16, 0] = xe[8:16, 0] = org[0] - 0.5  # in the lower z face: inside the slab
    xs[16:24, 1] = xe[16:24, 1] = org[1] - 0.5 + span[1]  # in the upper y face
    xs[24:32, 0], xe[24:32, 0] = org[0] - 0.25, org[0] + 0.2  # enters below plane 0, floors differ
    return xs, xe


def test_explicit_endpoint_kernels(host_kernels):
    """joseph.cu's explicit-endpoint kernels (fwd_lors, back_lors: libparallelproj's joseph3d_fwd
    / joseph3d_back) compute the numba kernels' numbers: the forward bit for bit, framed or not,
    the back projection to float32 summation order."""
    from stirgpu.kernels import joseph_back, joseph_forward

    rng = np.random.default_rng(11)
    shape, n = (9, 21, 17), 3000
    org = np.array([-4.0, -10.0, -8.0], np.float32)
    vox = np.ones(3, np.float32)
    img = rng.uniform(-1, 2, shape).astype(np.float32)
    xs, xe = explicit_lors(rng, n, shape, org)
    frame_args = (*(np.int32(v) for v in shape), *org, *vox)
    blocks = -(-n // cuda_stir.THREADS)
    want = joseph_forward(xs, xe, img, org, vox)
    for framed in (False, True):
        out = np.full(n, np.nan, np.float32)
        copies = framed_copies(img) if framed else (ctypes.c_void_p(None),) * 2
        _entry(host_kernels, "fwd_lors")(
            ctypes.c_uint(blocks),
            *map(_c, (xs, xe)),
            ctypes.c_longlong(n),
            *map(_c, (img.reshape(-1), *copies, *frame_args, out)),
        )
        np.testing.assert_array_equal(out, want)
    assert (want != 0).sum() > n // 4 and (want[:8] == 0).all()
    y = rng.uniform(0, 1, n).astype(np.float32)
    back = np.zeros(shape, np.float32)
    along_x = cuda_stir.transposed_accumulator(np, back)
    _entry(host_kernels, "back_lors")(
        ctypes.c_uint(blocks),
        *map(_c, (xs, xe)),
        ctypes.c_longlong(n),
        *map(_c, (y, back.reshape(-1), along_x, *frame_args)),
    )
    cuda_stir.fold(back, along_x)
    assert _relative(back, joseph_back(xs, xe, y, np.zeros(shape, np.float32), org, vox)) < 2e-6


def test_kernel_choice(host_kernels):
    """The smallest register window that holds the window, the wide kernels above 32 bins up to
    libparallelproj's 64 (wider windows are clamped to 64 bins, so none is asked for), a clear
    error beyond; every register size has its host entries."""
    assert cuda_stir_tof.kernel_name("fwd", 6) == "fwd_stir_tof<6>"
    assert cuda_stir_tof.kernel_name("back", 11) == "back_stir_tof<12>"
    assert cuda_stir_tof.kernel_name("fwd", 32) == "fwd_stir_tof<32>"
    assert cuda_stir_tof.kernel_name("fwd", 33) == "fwd_stir_tof_wide"
    assert cuda_stir_tof.kernel_name("fwd", 64) == "fwd_stir_tof_wide"
    for n in cuda_stir_tof.SLOTS:
        assert _entry(host_kernels, f"fwd_stir_tof<{n}>") and _entry(host_kernels, f"back_stir_tof<{n}>")
    from stirgpu.errors import DeviceError

    with pytest.raises(DeviceError, match="65 TOF bins"):
        cuda_stir_tof.kernel_name("fwd", 65)


def test_lor_order_choice():
    """Axial-major threads for every non-TOF projection, and for the TOF kernels where the image
    is larger than the GPU's L2 cache (docs/kernel-tuning.md measured both sides)."""
    l2 = 50 << 20
    assert cuda_stir.axial_major("fwd", 10 << 20, l2)
    assert cuda_stir.axial_major("fwd", 600 << 20, l2)
    assert cuda_stir.axial_major("back", 41 << 20, l2)
    assert cuda_stir.axial_major("back", 515 << 20, l2)
    assert not cuda_stir.axial_major("back", 41 << 20, l2, tof=True)
    assert cuda_stir.axial_major("back", 515 << 20, l2, tof=True)
    assert not cuda_stir.axial_major("fwd", 30 << 20, l2, tof=True)
    assert cuda_stir.axial_major("fwd", 515 << 20, l2, tof=True)
    assert cuda_stir.axial_major("back", 515 << 20, l2, tof=True)
    assert cuda_stir.order_option(True) == "-DSTIR_AXIAL_MAJOR=1"
    assert cuda_stir.order_option(False) == "-DSTIR_AXIAL_MAJOR=0"


def test_the_register_kernels_erf_is_within_1_1e_7_of_erf(host_kernels):
    """``tof_erf`` (the register kernels' bin edges) against erf in double precision, on every
    float32 from 0 to 5 spaced 2^-18 apart and around its joins (2^f's range ends, 3.92): odd,
    0 at 0, 1 from 3.92 on, within 1.1e-7 (CUDA's erff: 2 ulp, up to 1.2e-7 near 1)."""
    x = np.concatenate(
        [np.arange(0, 5, 2.0**-18), np.nextafter(np.float32(3.92), [0, 10]), np.linspace(0.4, 0.5, 4097)]
    ).astype(np.float32)
    x = np.concatenate([x, -x])
    y = np.empty_like(x)
    host_kernels.tof_erf_(ctypes.c_int(x.size), _c(x), _c(y))
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.abs(y - exact).max() <= 1.1e-7
    np.testing.assert_array_equal(y[: x.size // 2], -y[x.size // 2 :])
    assert y[0] == 0.0 and np.all(np.abs(y[np.abs(x) >= 3.92]) == 1.0)


def test_one_launch_covers_every_part_of_a_chunk(host_kernels):
    """A chunk's parts share one launch, each part whole blocks of it (``stir_part_of_thread``):
    parts of any size (none a multiple of the block), and parts without LORs first, between and
    last, give each LOR exactly the projection of its own part, TOF and non-TOF."""
    pdi, img, frame, _ = _case(DMI, 29)
    empty = pdi.chunk_tables(0, views=range(0))
    tables = [empty, pdi.chunk_tables(0, views=range(1, 4)), empty, pdi.chunk_tables(1), pdi.chunk_tables(-1), empty]
    chunk = JosephChunk(tables, pdi)
    parts = chunk.packed()
    sizes = [nv * na * nt for nv, na, nt in chunk.shapes]
    assert int(parts.n_parts) == 6 and parts.num_lors == sum(sizes) and 0 in sizes
    assert all(k % cuda_stir.THREADS for k in sizes if k)
    assert parts.blocks == sum(-(-k // cuda_stir.THREADS) for k in sizes)
    got, _ = tof_forward(host_kernels, chunk, pdi, img, frame)
    assert not np.isnan(got).any()
    nb = pdi.get_num_tof_poss()
    per_part = [tof_forward(host_kernels, JosephChunk([t], pdi), pdi, img, frame)[0] for t in tables if t.num_lors]
    np.testing.assert_array_equal(got, np.concatenate(per_part))
    assert got.size == nb * parts.num_lors
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    want = forward_chunk(chunk, pdi, img, frame).reshape(-1)
    for framed in (False, True):
        out = host_forward(host_kernels, parts, img, cuda_stir.frame_args(img, org, vs, r), framed)
        np.testing.assert_array_equal(out, want)


def test_parts_index_their_views_in_the_geometrys_transaxial_sets(host_kernels):
    """The kernels read a part's transaxial values from its geometry's sets, row by view
    (``cuda_stir.pack_parts``): parts of spread views (a subset's), of a run of views, of some
    axial positions only, of another FOV radius, and a chunk of some tangential positions only --
    the last two each a set of their own, packed after the first -- give every LOR the CPU's
    forward projection (TOF and non-TOF) and endpoints, bit for bit."""
    pdi, img, frame, _ = _case(DMI, 29, views=12)
    t = range(-5, 6)
    chunks = [
        [
            pdi.chunk_tables(0, views=[1, 4, 7, 10]),
            pdi.chunk_tables(1, views=range(2, 6)),
            pdi.chunk_tables(-1, views=[0, 11], axial_poss=[0, 2]),
            pdi.chunk_tables(0, views=[2, 8], radius=20.0),
        ],
        [pdi.chunk_tables(0, views=[3, 9], tangential_poss=t), pdi.chunk_tables(1, views=[0], tangential_poss=t)],
    ]
    first = JosephChunk(chunks[0], pdi)
    # the second chunk shares the first's transaxial tables (as a call's chunks do) and adds a set
    chunks = [first, JosephChunk(chunks[1], pdi, first.transaxial)]
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    frame_args = cuda_stir.frame_args(img, org, vs, r)
    missed = 0
    for chunk in chunks:
        parts = chunk.packed()
        n = parts.num_lors
        want = forward_chunk(chunk, pdi, img, frame).reshape(-1)
        for framed in (False, True):
            np.testing.assert_array_equal(host_forward(host_kernels, parts, img, frame_args, framed), want)
        start, end = np.full((n, 3), np.nan, np.float32), np.full((n, 3), np.nan, np.float32)
        _launch(host_kernels, "endpoints_stir", parts, (*parts.args, r, start, end))
        ends = [endpoints_array(t) for t in chunk.host]
        for got, k in ((start, 0), (end, 1)):
            want = np.concatenate([(e[k].reshape(-1, 3) * r).astype(np.float32) for e in ends])
            np.testing.assert_array_equal(got, want)
        missed += int((start == 0).all(axis=1).sum())
        # the wide kernels: bit for bit
        got, _ = tof_forward(host_kernels, chunk, pdi, img, frame, window=cuda_stir_tof.WIDE_MAX)
        np.testing.assert_array_equal(got, forward_chunk_tof(chunk, pdi, img, frame).reshape(-1))
    assert missed  # some LORs miss the smaller FOV cylinder
    sets = first.transaxial.complete_sets()
    assert len(sets) == 3 and all(t[0].shape[0] == pdi.get_num_views() for t in sets.values())
    assert chunks[1].packed().X.size == sum(t[0].size * 6 for t in sets.values())


@pytest.mark.parametrize("axial_major", [False, True], ids=["view-major", "axial-major"])
def test_framed_and_checked_walks_in_one_launch(tmp_path, axial_major):
    """The forward kernel reads the image's zero-framed copies where a walk's samples stay inside
    them, else the image with bounds checks (``stir_framed``).  Built with the coordinates' bound
    lowered to 40 voxels, one launch takes both paths (walks whose in-plane coordinates stay
    below 40, and the others), on an image with an axis of fewer voxels than the FOV's diameter
    (walks that leave the image) and voxels of another size along z: CPU's numbers, bit for bit."""
    lib = build_host_kernels(tmp_path, axial_major, ["-DSTIR_FRAMED_LIMIT=40.0f"])
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 16, 63)
    info = stir_default_image_info(pdi)
    nz, ny, nx = info.shape
    assert ny > 40 and nx > 40
    rng = np.random.default_rng(7)
    img = rng.uniform(0.5, 1.5, (nz, ny - 20, nx)).astype(np.float32)
    frame = stir_image_frame(info)
    chunk = JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    frame_args = cuda_stir.frame_args(img, org, vs, r)
    want = forward_chunk(chunk, pdi, img, frame).reshape(-1)
    assert np.count_nonzero(want) > want.size // 2
    for framed in (False, True):
        np.testing.assert_array_equal(host_forward(lib, chunk.packed(), img, frame_args, framed), want)
