"""How the CUDA backend takes and returns arrays, and how it refuses bad ones.

Inputs are used in place whatever protocol they come through (cupy, the CUDA array
interface, DLPack, torch); results live where the inputs live and have their kind;
wrong dtypes, layouts, shapes and host arrays are refused with a stirgpu error that
names the argument, before any kernel runs.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from stirgpu.errors import DeviceError, GeometryError, StirGpuError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import stir_scaled_geometry

pytestmark = pytest.mark.gpu

ORG, VOX = (-3.0, -4.0, -4.0), (1.0, 1.0, 1.0)


@pytest.fixture(scope="module")
def lors():
    rng = np.random.default_rng(31)
    p0 = rng.uniform(-12, 12, (500, 3))
    p1 = rng.uniform(-12, 12, (500, 3))
    img = rng.random((7, 9, 9), dtype=np.float32)
    return p0.astype(np.float32), p1.astype(np.float32), img


class CAIOnly:
    """Exposes only __cuda_array_interface__ (like numba or pycuda arrays)."""

    def __init__(self, a):
        self._a = a
        self.__cuda_array_interface__ = a.__cuda_array_interface__


class DLPackOnly:
    """Exposes only the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_import_does_no_work():
    """Importing the backend neither imports cupy nor compiles anything."""
    code = (
        "import sys, stirgpu.kernels.cuda_backend, stirgpu.kernels.cuda_compile as m; "
        "assert 'cupy' not in sys.modules, 'cupy imported at import time'; "
        "assert m.compiled_module.cache_info().currsize == 0"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("wrap", [CAIOnly, DLPackOnly])
def test_protocols_are_used_in_place(cp, cb, lors, wrap):
    """Forward through CAI-only / DLPack-only inputs equals the cupy result, and a back
    projection into a wrapped image writes into the wrapped memory (no copy)."""
    p0, p1, img = lors
    d0, d1, dimg = cp.asarray(p0), cp.asarray(p1), cp.asarray(img)
    want = cb.joseph_forward(d0, d1, dimg, ORG, VOX).get()
    got = cb.joseph_forward(wrap(d0), wrap(d1), wrap(dimg), ORG, VOX)
    assert isinstance(got, cp.ndarray)
    np.testing.assert_array_equal(got.get(), want)
    out = cp.zeros(img.shape, cp.float32)
    vals = cp.ones(p0.shape[0], cp.float32)
    res = cb.joseph_back(wrap(d0), wrap(d1), wrap(vals), wrap(out), ORG, VOX)
    assert isinstance(res, wrap)
    assert float(out.sum()) > 0


def test_out_is_overwritten_and_returned(cp, cb, lors):
    """``out=`` receives the forward projection (old content discarded) and is returned."""
    p0, p1, img = lors
    out = cp.full(p0.shape[0], 7.0, cp.float32)
    res = cb.joseph_forward(cp.asarray(p0), cp.asarray(p1), cp.asarray(img), ORG, VOX, out=out)
    assert res is out
    want = cb.joseph_forward(cp.asarray(p0), cp.asarray(p1), cp.asarray(img), ORG, VOX).get()
    np.testing.assert_array_equal(out.get(), want)


def test_torch_in_torch_out(cp, cb, lors):
    """torch CUDA tensors in -> torch tensor out (same device), equal to the cupy result;
    back projection accumulates into the torch tensor itself."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    p0, p1, img = lors
    t0, t1, timg = (torch.from_numpy(a).cuda() for a in (p0, p1, img))
    got = cb.joseph_forward(t0, t1, timg, ORG, VOX)
    assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.float32
    want = cb.joseph_forward(cp.asarray(p0), cp.asarray(p1), cp.asarray(img), ORG, VOX).get()
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    out = torch.zeros(img.shape, dtype=torch.float32, device="cuda")
    assert cb.joseph_back(t0, t1, torch.ones(p0.shape[0], device="cuda"), out, ORG, VOX) is out
    assert float(out.sum()) > 0


def test_device_tables_are_reusable(cp, cb):
    """upload_tables once, project many times: same result as passing ChunkTables."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=2, num_views=16, num_tangential_poss=40)
    ii = ImageInfo((31, 33, 33), (3.375, 4.0, 4.0))
    kg = stir_scaled_geometry(ii)
    t = pdi.chunk_tables(0)
    dt = cb.upload_tables(t)
    assert dt.shape == t.shape and dt.views is t.views
    img = cp.asarray(np.random.default_rng(5).random(ii.shape, dtype=np.float32))
    a = cb.forward_chunk(t, img, kg.origin, kg.voxel_size, scale=kg.scale).get()
    b = cb.forward_chunk(dt, img, kg.origin, kg.voxel_size, scale=kg.scale).get()
    np.testing.assert_array_equal(a, b)
    assert cb.upload_tables(dt) is dt


def test_prepared_image(cp, cb):
    """prepare_image once, forward many times: equal to projecting the plain image, through
    cuda_backend and through the public stirgpu.kernels API (which sees its CUDA array
    interface); the copies are a snapshot taken at preparation."""
    from stirgpu.kernels import forward_chunk as api_forward_chunk

    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=2, num_views=16, num_tangential_poss=40)
    ii = ImageInfo((31, 33, 32), (3.375, 4.0, 4.0), origin=(0.0, 1.0, -2.0))
    kg = stir_scaled_geometry(ii)
    img = cp.asarray(np.random.default_rng(6).random(ii.shape, dtype=np.float32))
    prep = cb.prepare_image(img)
    assert cb.prepare_image(prep) is prep
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        want = cb.forward_chunk(
            t, img, kg.origin, kg.voxel_size, scale=kg.scale, options=cb.KernelOptions(variant="tiled")
        ).get()
        got = cb.forward_chunk(t, prep, kg.origin, kg.voxel_size, scale=kg.scale).get()
        np.testing.assert_array_equal(got, want)
        via_api = api_forward_chunk(t, prep, kg.origin, kg.voxel_size, scale=kg.scale)
        np.testing.assert_array_equal(via_api.get(), want)
    img *= 2  # the prepared copies do not follow
    again = cb.forward_chunk(pdi.chunk_tables(0), prep, kg.origin, kg.voxel_size, scale=kg.scale).get()
    np.testing.assert_array_equal(
        again,
        cb.forward_chunk(
            pdi.chunk_tables(0),
            img / 2,
            kg.origin,
            kg.voxel_size,
            scale=kg.scale,
            options=cb.KernelOptions(variant="tiled"),
        ).get(),
    )


def test_empty_inputs(cp, cb):
    """Zero LORs: an empty result, no launch, the image untouched."""
    e = cp.zeros((0, 3), cp.float32)
    img = cp.ones((3, 4, 5), cp.float32)
    assert cb.joseph_forward(e, e, img, ORG, VOX).shape == (0,)
    cb.joseph_back(e, e, cp.zeros(0, cp.float32), img, ORG, VOX)
    assert float(img.sum()) == 60.0


@pytest.mark.parametrize(
    "bad,err,word",
    [
        ("image_f64", StirGpuError, "image"),
        ("image_noncontig", StirGpuError, "C-contiguous"),
        ("image_2d", GeometryError, "image"),
        ("xstart_shape", GeometryError, "xstart"),
        ("dtype_mix", GeometryError, "xend"),
        ("host_image", DeviceError, "image"),
        ("out_shape", GeometryError, "out"),
        ("voxel_size", GeometryError, "voxel_size"),
        ("python_list", StirGpuError, "image"),
    ],
)
def test_bad_arguments_are_refused(cp, cb, lors, bad, err, word):
    """Each bad argument raises a stirgpu error naming it."""
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
    elif bad == "dtype_mix":
        args["xend"] = cp.asarray(p1, dtype=cp.float64)
    elif bad == "host_image":
        args["image"] = img
    elif bad == "out_shape":
        args["out"] = cp.zeros(3, cp.float32)
    elif bad == "voxel_size":
        args["voxel_size"] = (1.0, 0.0, 1.0)
    elif bad == "python_list":
        args["image"] = img.tolist()
    with pytest.raises(err, match=word):
        cb.joseph_forward(**args)
