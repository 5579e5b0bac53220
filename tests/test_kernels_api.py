"""Argument validation and dispatch of the explicit-endpoint entry points, the kernels' frame
(``kernel_geometry``) and the FOV helpers around the Joseph kernels (CPU only; the chunk entry
points' checks are in ``test_kernels_chunks.py``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from stirgpu.errors import DeviceError, GeometryError, StirGpuError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import (
    UNITS,
    apply_cylindrical_fov,
    cylindrical_fov_mask,
    joseph_back,
    joseph_forward,
    kernel_geometry,
    stir_rim,
)
from stirgpu.kernels.joseph.lors import stir_image_frame

ORG, VOX = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


def _lors(n=4):
    s = np.zeros((n, 3))
    e = np.zeros((n, 3))
    s[:, 2], e[:, 2] = -30.0, 30.0
    return s, e


def test_import_does_no_work():
    """Importing stirgpu.kernels loads neither numba nor a GPU library (nothing compiles or
    probes at import time)."""
    code = "import sys, stirgpu.kernels; print(sorted(m for m in ('numba', 'cupy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_array_module_and_a_missing_cupy(monkeypatch):
    """numpy arrays and anything not cupy's are numpy's; where cupy cannot be imported, asking for
    it (a cupy array seen, the CUDA backend) is a DeviceError naming the install extras."""
    from stirgpu.arrays import array_module, import_cupy
    from stirgpu.errors import DeviceError

    assert array_module(np.zeros(2)) is np and array_module([1.0]) is np
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(DeviceError, match=r"needs cupy \(pip install 'stirgpu\[cuda12\]' or 'stirgpu\[cuda13\]'\)"):
        import_cupy()


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(xstart=np.zeros((4, 2))), "xstart: expected shape"),
        (dict(xend=np.zeros((5, 3))), "same shape"),
        (dict(xstart=np.zeros((4, 3), np.int32)), "xstart: expected dtype"),
        (dict(image=np.zeros((3, 3, 3), np.float64)), "image: expected dtype float32"),
        (dict(image=np.zeros((3, 3), np.float32)), "image: expected a 3-D"),
        (dict(image=np.zeros((3, 3, 6), np.float32)[:, :, ::2]), "image: must be C-contiguous"),
        (dict(origin=(0.0, 1.0)), "origin: expected 3"),
        (dict(origin=(0.0, np.nan, 1.0)), "origin: must be finite"),
        (dict(voxel_size=(1.0, 0.0, 1.0)), "voxel_size: must be positive"),
        (dict(out=np.zeros(3, np.float32)), "out: expected shape"),
        (dict(image=[[[1.0]]]), "image: expected a numpy array"),
    ],
)
def test_forward_rejects_bad_arguments(bad, match):
    """Each malformed argument is refused with an error naming it; nothing is computed."""
    s, e = _lors()
    args = dict(xstart=s, xend=e, image=np.zeros((3, 3, 3), np.float32), origin=ORG, voxel_size=VOX)
    args.update(bad)
    with pytest.raises(StirGpuError, match=match):
        joseph_forward(**args)


def test_back_rejects_bad_arguments_and_leaves_output_alone():
    """A bad ``values`` or a read-only / wrong-dtype ``out_image`` is refused before anything is
    written."""
    s, e = _lors()
    img = np.full((3, 3, 3), 7.0, np.float32)
    with pytest.raises(GeometryError, match="values: expected shape"):
        joseph_back(s, e, np.ones(3, np.float32), img, ORG, VOX)
    with pytest.raises(StirGpuError, match="values: expected dtype float32"):
        joseph_back(s, e, np.ones(4, np.float64), img, ORG, VOX)
    ro = img.copy()
    ro.setflags(write=False)
    with pytest.raises(StirGpuError, match="out_image: must be writable"):
        joseph_back(s, e, np.ones(4, np.float32), ro, ORG, VOX)
    with pytest.raises(StirGpuError, match="out_image: expected dtype"):
        joseph_back(s, e, np.ones(4, np.float32), img.astype(np.float64), ORG, VOX)
    assert np.all(img == 7.0)


def test_empty_inputs():
    """Zero LORs: forward returns an empty array, back leaves the image unchanged."""
    s = np.zeros((0, 3))
    img = np.ones((2, 2, 2), np.float32)
    assert joseph_forward(s, s, img, ORG, VOX).shape == (0,)
    joseph_back(s, s, np.zeros(0, np.float32), img, ORG, VOX)
    assert np.all(img == 1.0)


def test_float64_endpoints_are_rounded_to_float32():
    """libparallelproj takes float32 endpoints: float64 ones are rounded to float32 first, so they
    give bit for bit what their float32 roundings give (endpoints that float32 cannot hold, on
    random oblique rays), and a ray through a ones-row gives its length exactly.  Guards against
    float64 endpoints projected in float64 (numbers libparallelproj would not give) or truncated
    instead of rounded."""
    rng = np.random.default_rng(2)
    s = rng.uniform(-30, 30, (64, 3)) + 1e-9  # not float32 numbers
    e = -s + rng.normal(size=(64, 3))
    img = rng.random((9, 10, 11), dtype=np.float32)
    org, vox = (-4.1, -4.6, -5.05), (1.1, 1.05, 1.0)
    a = joseph_forward(s, e, img, org, vox)
    assert np.count_nonzero(a) > 32
    np.testing.assert_array_equal(a, joseph_forward(s.astype(np.float32), e.astype(np.float32), img, org, vox))
    s, e = _lors()
    ones = np.ones((1, 1, 20), np.float32)
    got = joseph_forward(s.astype(np.float32), e.astype(np.float32), ones, ORG, VOX)
    np.testing.assert_array_equal(got, joseph_forward(s, e, ones, ORG, VOX))
    assert got[0] == 20.0


class _FakeCudaArray:
    """Quacks like a CUDA array (CUDA array interface + DLPack device) without a GPU."""

    def __init__(self, shape, typestr="<f4", device=0):
        self.shape = shape
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (0, False),
            "strides": None,
            "version": 3,
        }
        self._device = device

    def __dlpack_device__(self):
        return (2, self._device)


def test_mixed_host_and_device_arrays_are_refused():
    """All arrays of a call must live in one place; a CUDA image with host endpoints (or two
    GPUs) is a DeviceError naming the arguments."""
    s, e = _lors()
    with pytest.raises(DeviceError, match="image is on a CUDA device but xstart is on the host"):
        joseph_forward(s, e, _FakeCudaArray((3, 3, 3)), ORG, VOX)
    with pytest.raises(DeviceError, match="out_image is on CUDA device 1 but xstart on device 0"):
        joseph_back(
            _FakeCudaArray((4, 3)),
            _FakeCudaArray((4, 3)),
            _FakeCudaArray((4,)),
            _FakeCudaArray((3, 3, 3), device=1),
            ORG,
            VOX,
        )
    with pytest.raises(StirGpuError, match="image: expected dtype float32"):
        joseph_forward(_FakeCudaArray((4, 3)), _FakeCudaArray((4, 3)), _FakeCudaArray((3, 3, 3), "<f8"), ORG, VOX)


def test_kernel_geometry_is_stirs_frame_in_x_voxel_units_or_mm():
    """The kernels' frame of an ImageInfo is STIR's Parallelproj frame (``stir_image_frame``):
    the centre of voxel [0, 0, 0] in the gantry frame (z centred on the scanner) and the voxel
    sizes, float32, times ``rescale = 1 / vx`` in STIR's units, times 1 in mm (where they are the
    gantry origin and voxel sizes themselves, float32 numbers here).  Guards against an origin
    that is not the gantry origin, units applied twice or not at all, and a bad ``units`` or
    missing geometry accepted."""
    ii = ImageInfo((31, 57, 57), (3.375, 2.5, 2.5), origin=(0.0, 2.0, -3.0))
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), span=1, max_ring_diff=2, num_views=8)
    assert UNITS == ("stir", "mm")
    mm = kernel_geometry(ii, pdi, units="mm")
    assert mm.units == "mm" and mm.proj_data_info is pdi
    assert mm.origin == (-15 * 3.375, 2.0 - 28 * 2.5, -3.0 - 28 * 2.5) == tuple(ii.gantry_origin)
    assert mm.voxel_size == (3.375, 2.5, 2.5) and mm.frame[2] == 1
    stir = kernel_geometry(ii, pdi)
    assert stir.units == "stir" and stir.frame[2] == np.float32(1 / np.float32(2.5))
    for got, want in zip(stir.frame, stir_image_frame(ii), strict=True):
        assert np.array_equal(got, want) and np.asarray(got).dtype == np.float32
    for got, want in zip(mm.frame, stir_image_frame(ii, stir_units=False), strict=True):
        assert np.array_equal(got, want)
    assert stir.origin == pytest.approx(np.array(mm.origin) / 2.5, rel=1e-7)
    assert stir.voxel_size == pytest.approx((1.35, 1.0, 1.0), rel=1e-7)
    with pytest.raises(GeometryError, match="image_info"):
        kernel_geometry(object(), pdi)
    with pytest.raises(GeometryError, match="proj_data_info"):
        kernel_geometry(ii, None)
    with pytest.raises(GeometryError, match="units"):
        kernel_geometry(ii, pdi, units="cm")


@pytest.mark.parametrize("n", [127, 128, 5, 6])
def test_cylindrical_fov_mask_is_stir_truncate_rim(n):
    """STIR's truncate_rim in index space: centre (xs+xe)/2 and radius (xe-xs)/2 with C integer
    division, voxels at distance^2 >= radius^2 zeroed.  Checked on odd and even sizes against a
    direct transcription of that rule."""
    ii = ImageInfo((3, n, n), (1.0, 1.0, 1.0))
    mask = cylindrical_fov_mask(ii)
    xs = -(n // 2)
    xe = xs + n - 1
    c = int((xs + xe) / 2)  # C truncation toward zero
    r = (xe - xs) // 2
    want = np.array([[(c - x) ** 2 + (c - y) ** 2 < r * r for x in range(xs, xe + 1)] for y in range(xs, xe + 1)])
    np.testing.assert_array_equal(mask, want)
    if n == 127:
        assert mask[63, 1] and not mask[63, 0] and not mask[0, 0] and mask.sum() < n * n
    assert cylindrical_fov_mask(ii, rim=1).sum() < mask.sum()


def test_apply_cylindrical_fov_never_touches_the_input():
    """apply_cylindrical_fov returns a masked copy (or writes into ``out``); the caller's image
    is unchanged unless it is passed as ``out``."""
    ii = ImageInfo((2, 9, 9), (1.0, 1.0, 1.0))
    img = np.ones(ii.shape, np.float32)
    mask = cylindrical_fov_mask(ii)
    r = apply_cylindrical_fov(img, mask)
    assert np.all(img == 1.0)
    assert r.dtype == np.float32 and r.sum() == 2 * mask.sum()
    apply_cylindrical_fov(img, mask, out=img)
    assert img.sum() == 2 * mask.sum()
    with pytest.raises(GeometryError, match="do not match"):
        apply_cylindrical_fov(img, mask[:-1])
    nan = np.full(ii.shape, np.nan, np.float32)
    r = apply_cylindrical_fov(nan, mask)
    assert np.all(r[:, ~mask] == 0) and np.all(np.isnan(r[:, mask]))


def test_stir_rim_is_zero_for_real_scanners():
    """STIR's rim for the Parallelproj truncation is 0 unless nx exceeds twice the inner ring
    radius in mm (a unit mix in STIR, reproduced)."""
    assert stir_rim(127, 382.5) == 0
    assert stir_rim(1000, 382.5) == 117
