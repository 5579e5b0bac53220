"""How the Joseph kernels take and return CUDA arrays, and how they refuse bad ones.

Inputs are used in place whatever protocol they come through (cupy, the CUDA array interface,
DLPack, torch); results live where the inputs live and have their kind (a torch tensor in gives a
torch tensor out); wrong dtypes, layouts, shapes and arrays in two places are refused with a
stirgpu error that names the argument, before any kernel runs.  Numbers are compared with the
CPU kernels: forward projections bit for bit, back projections to float32 summation order
(``BACK_RTOL`` of the maximum: the GPU adds with atomics).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import BACK_RTOL

from stirgpu.errors import DeviceError, GeometryError, StirGpuError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, joseph_back, joseph_forward
from stirgpu.kernels.joseph.lors import stir_image_frame

ORG, VOX = (-3.0, -4.0, -4.0), (1.0, 1.0, 1.0)


@pytest.fixture(scope="module")
def lors():
    rng = np.random.default_rng(31)
    p0 = rng.uniform(-12, 12, (500, 3))
    p1 = rng.uniform(-12, 12, (500, 3))
    img = rng.random((7, 9, 9), dtype=np.float32)
    return p0.astype(np.float32), p1.astype(np.float32), img


@pytest.fixture(scope="module")
def chunk_setup():
    """ECAT 953 (span 3, 16 views, 40 tangential positions) and an image of an odd and an even
    size with a shifted origin, its STIR frame and a random image."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=2, num_views=16, num_tangential_poss=40)
    ii = ImageInfo((31, 33, 32), (3.375, 4.0, 4.0), origin=(0.0, 1.0, -2.0))
    image = np.random.default_rng(6).random(ii.shape, dtype=np.float32)
    return pdi, ii, stir_image_frame(ii), image


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(np.abs(want))))


class CAIOnly:
    """Exposes only __cuda_array_interface__ (like numba or pycuda arrays)."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = a.__cuda_array_interface__


class DLPackOnly:
    """Exposes only the DLPack protocol, and the shape and dtype every array library's arrays
    have (the entry points read them to check the arguments before importing a GPU library)."""

    def __init__(self, a):
        self._a = a
        self.shape, self.dtype = a.shape, a.dtype

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_import_does_no_work():
    """Importing the GPU kernel modules neither imports cupy nor compiles anything (a process
    that never projects on a GPU must not need cupy or pay NVRTC); runs without a GPU too."""
    code = (
        "import sys, stirgpu.kernels, stirgpu.kernels.backends, stirgpu.kernels.joseph.cuda, "
        "stirgpu.kernels.tof.cuda, stirgpu.kernels.cuda.images, stirgpu.kernels.cuda.compile as m; "
        "assert 'cupy' not in sys.modules, 'cupy imported at import time'; "
        "assert m.compiled_module.cache_info().currsize == 0"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.parametrize("wrap", [CAIOnly, DLPackOnly])
def test_protocols_are_used_in_place(cp, lors, wrap):
    """Forward through CAI-only / DLPack-only inputs equals the cupy result bit for bit (a cupy
    array comes back), and a back projection into a wrapped image writes into the wrapped
    memory (no copy) and returns the wrapper; guards against a silent copy of an argument."""
    p0, p1, img = lors
    d0, d1, dimg = cp.asarray(p0), cp.asarray(p1), cp.asarray(img)
    want = cp.asnumpy(joseph_forward(d0, d1, dimg, ORG, VOX))
    got = joseph_forward(wrap(d0), wrap(d1), wrap(dimg), ORG, VOX)
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(got), want)
    vals = cp.asarray(np.random.default_rng(1).random(p0.shape[0], dtype=np.float32))
    plain = joseph_back(d0, d1, vals, cp.zeros(img.shape, cp.float32), ORG, VOX)
    out = cp.zeros(img.shape, cp.float32)
    res = joseph_back(wrap(d0), wrap(d1), wrap(vals), wrap(out), ORG, VOX)
    assert isinstance(res, wrap)
    assert float(out.max()) > 0
    _close(cp.asnumpy(out), cp.asnumpy(plain))


@pytest.mark.gpu
def test_out_is_overwritten_and_returned(cp, lors, chunk_setup):
    """``out=`` receives the forward projection (old content discarded) and is returned, for
    explicit endpoints and for a chunk; an ``out`` on the host beside a GPU image is refused
    (GeometryError naming it) -- guards against writing into or returning a temporary."""
    p0, p1, img = lors
    d0, d1, dimg = cp.asarray(p0), cp.asarray(p1), cp.asarray(img)
    out = cp.full(p0.shape[0], 7.0, cp.float32)
    assert joseph_forward(d0, d1, dimg, ORG, VOX, out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), joseph_forward(p0, p1, img, ORG, VOX))
    pdi, _, frame, image = chunk_setup
    t = pdi.chunk_tables(0)
    out = cp.full(t.shape, 7.0, cp.float32)
    assert forward_chunk(t, pdi, cp.asarray(image), frame, out=out) is out
    np.testing.assert_array_equal(cp.asnumpy(out), forward_chunk(t, pdi, image, frame))
    with pytest.raises(GeometryError, match="out"):
        forward_chunk(t, pdi, cp.asarray(image), frame, out=np.zeros(t.shape, np.float32))


@pytest.mark.gpu
def test_torch_in_torch_out(cp, lors):
    """torch CUDA tensors in -> torch tensor out (same device), equal to the CPU result bit for
    bit, a prepared torch image too; the back projection accumulates into the torch tensor itself
    and returns it.  Guards the result's kind and zero-copy DLPack interop with torch."""
    from stirgpu.kernels.cuda.images import prepare_image

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    p0, p1, img = lors
    t0, t1, timg = (torch.from_numpy(a).cuda() for a in (p0, p1, img))
    want = joseph_forward(p0, p1, img, ORG, VOX)
    for image in (timg, prepare_image(timg)):
        got = joseph_forward(t0, t1, image, ORG, VOX)
        assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.float32
        np.testing.assert_array_equal(got.cpu().numpy(), want)
    vals = torch.ones(p0.shape[0], dtype=torch.float32, device="cuda")
    out = torch.full(img.shape, 2.0, dtype=torch.float32, device="cuda")
    assert joseph_back(t0, t1, vals, out, ORG, VOX) is out
    host = joseph_back(p0, p1, np.ones(p0.shape[0], np.float32), np.zeros(img.shape, np.float32), ORG, VOX)
    _close(out.cpu().numpy() - 2.0, host)


@pytest.mark.gpu
def test_chunk_tables_are_made_once_and_reusable(cp, chunk_setup):
    """A JosephChunk made once projects as the ChunkTables it comes from (forward bit for bit,
    back to summation order), is taken as it is, and uploads its tables once per device: what
    OSEM's fused step and the engine's kept chunks rely on."""
    from stirgpu.kernels.joseph.chunk import JosephChunk, as_chunk

    pdi, ii, frame, image = chunk_setup
    img = cp.asarray(image)
    dev = cp.cuda.Device().id
    for tables in (pdi.chunk_tables(0), [pdi.chunk_tables(s, views=[1, 5, 6]) for s in pdi.segment_nums]):
        chunk = JosephChunk(tables, pdi)
        assert as_chunk(chunk, pdi) is chunk
        want = forward_chunk(tables, pdi, image, frame)
        for _ in range(2):
            np.testing.assert_array_equal(cp.asnumpy(forward_chunk(chunk, pdi, img, frame)), want)
        assert chunk.device(dev) is chunk.device(dev)
        values = cp.asarray(np.random.default_rng(2).random(want.shape, dtype=np.float32))
        a = back_chunk(tables, pdi, values, cp.zeros(ii.shape, cp.float32), frame)
        b = back_chunk(chunk, pdi, values, cp.zeros(ii.shape, cp.float32), frame)
        _close(cp.asnumpy(b), cp.asnumpy(a))


@pytest.mark.gpu
def test_prepared_image(cp, lors, chunk_setup):
    """prepare_image once, project many times: the chunk kernels and the explicit ones read its
    framed copies and give the plain image's numbers bit for bit (the CPU's), and prepare_image
    takes a prepared image as it is.  Guards the framed walks (unchecked loads from the copies)
    against reading other voxels than the checked walks of the plain image."""
    from stirgpu.kernels.cuda.images import PreparedImage, prepare_image

    pdi, ii, frame, image = chunk_setup
    img = cp.asarray(image)
    prep = prepare_image(img)
    assert isinstance(prep, PreparedImage) and prep.framed is not None
    assert prepare_image(prep) is prep
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        want = forward_chunk(t, pdi, image, frame)
        np.testing.assert_array_equal(cp.asnumpy(forward_chunk(t, pdi, img, frame)), want)
        np.testing.assert_array_equal(cp.asnumpy(forward_chunk(t, pdi, prep, frame)), want)
    p0, p1, small = lors
    sprep = prepare_image(cp.asarray(small))
    got = joseph_forward(cp.asarray(p0), cp.asarray(p1), sprep, ORG, VOX)
    np.testing.assert_array_equal(cp.asnumpy(got), joseph_forward(p0, p1, small, ORG, VOX))


@pytest.mark.gpu
def test_empty_inputs(cp):
    """Zero LORs: an empty result, no launch, the image untouched."""
    e = cp.zeros((0, 3), cp.float32)
    img = cp.ones((3, 4, 5), cp.float32)
    assert joseph_forward(e, e, img, ORG, VOX).shape == (0,)
    assert joseph_back(e, e, cp.zeros(0, cp.float32), img, ORG, VOX) is img
    assert float(img.sum()) == 60.0


@pytest.mark.gpu
@pytest.mark.parametrize(
    "bad,err,word",
    [
        ("image_f64", StirGpuError, "image"),
        ("image_noncontig", StirGpuError, "C-contiguous"),
        ("image_2d", GeometryError, "image"),
        ("xstart_shape", GeometryError, "xstart"),
        ("xend_int", StirGpuError, "xend"),
        ("host_image", DeviceError, "image"),
        ("out_shape", GeometryError, "out"),
        ("voxel_size", GeometryError, "voxel_size"),
        ("python_list", StirGpuError, "image"),
    ],
)
def test_bad_arguments_are_refused(cp, lors, bad, err, word):
    """Each bad argument raises a stirgpu error naming it (float32 and float64 endpoints are both
    taken, so an integer one stands for a wrong dtype)."""
    p0, p1, img = lors
    args = dict(xstart=cp.asarray(p0), xend=cp.asarray(p1), image=cp.asarray(img), origin=ORG, voxel_size=VOX)
    if bad == "image_f64":
        args["image"] = cp.asarray(img, dtype=cp.float64)
    elif bad == "image_noncontig":
        args["image"] = cp.asarray(img)[:, :, ::2]
    elif bad == "image_2d":
        args["image"] = cp.asarray(img)[0]
    elif bad == "xstart_shape":
        args["xstart"] = cp.asarray(p0)[:, :2].copy()
    elif bad == "xend_int":
        args["xend"] = cp.asarray(p1).astype(cp.int32)
    elif bad == "host_image":
        args["image"] = img
    elif bad == "out_shape":
        args["out"] = cp.zeros(3, cp.float32)
    elif bad == "voxel_size":
        args["voxel_size"] = (1.0, 0.0, 1.0)
    elif bad == "python_list":
        args["image"] = img.tolist()
    with pytest.raises(err, match=word):
        joseph_forward(**args)


@pytest.mark.gpu
def test_chunk_functions_refuse_arrays_in_two_places(cp, chunk_setup):
    """A chunk's values on the host and its image on the GPU (or the other way round) are
    refused before any kernel runs, and the image is left alone."""
    pdi, ii, frame, _ = chunk_setup
    t = pdi.chunk_tables(0)
    out = cp.zeros(ii.shape, cp.float32)
    with pytest.raises(GeometryError, match="values and out_image"):
        back_chunk(t, pdi, np.ones(t.shape, np.float32), out, frame)
    with pytest.raises(GeometryError, match="values and out_image"):
        back_chunk(t, pdi, cp.ones(t.shape, cp.float32), np.zeros(ii.shape, np.float32), frame)
    assert float(cp.abs(out).max()) == 0.0
