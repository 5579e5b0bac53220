"""Argument validation, dispatch and the helpers around the Joseph kernels (CPU only)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from stirgpu.errors import DeviceError, GeometryError, StirGpuError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import (
    apply_cylindrical_fov,
    back_chunk,
    cylindrical_fov_mask,
    forward_chunk,
    joseph_back,
    joseph_forward,
    stir_rim,
    stir_scaled_geometry,
)

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


def test_chunk_functions_validate_tables_and_shapes():
    """forward_chunk/back_chunk check that tables are ChunkTables-like and that arrays match
    tables.shape (nv, na, nt)."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=4, num_views=8, num_tangential_poss=32)
    tables = pdi.chunk_tables(0, views=[0, 1])
    img = np.zeros((31, 21, 21), np.float32)
    with pytest.raises(GeometryError, match="tables"):
        forward_chunk(object(), img, ORG, VOX)
    with pytest.raises(GeometryError, match="out: expected shape"):
        forward_chunk(tables, img, ORG, VOX, out=np.zeros((2, 31, 31), np.float32))
    with pytest.raises(GeometryError, match="values: expected shape"):
        back_chunk(tables, np.zeros((1, 31, 32), np.float32), img, ORG, VOX)
    with pytest.raises(GeometryError, match="scale"):
        forward_chunk(tables, img, ORG, VOX, scale=float("inf"))


def test_multi_part_chunks_are_their_parts_one_after_the_other():
    """A sequence of ChunkTables (the parts of a chunk spanning several segments) projects to
    the parts' results one after the other, flat; its back projection equals the parts'
    back projections added; mismatched parts and sizes are refused naming the problem; the
    packed layout of the GPU kernels holds each part's header and tables."""
    from stirgpu.kernels.tables import HEADER, pack_tables, packed_length

    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=4, num_views=8, num_tangential_poss=32)
    parts = [pdi.chunk_tables(s, views=[1, 5]) for s in pdi.segment_nums]
    rng = np.random.default_rng(3)
    img = rng.random((15, 21, 21), dtype=np.float32)
    org, vox = (-21.0, -31.0, -31.0), (3.0, 3.1, 3.1)
    one = [forward_chunk(t, img, org, vox) for t in parts]
    got = forward_chunk(parts, img, org, vox)
    np.testing.assert_array_equal(got, np.concatenate([a.reshape(-1) for a in one]))
    assert np.count_nonzero(got) > got.size // 4
    vals = rng.random(got.size, dtype=np.float32)
    want = np.zeros_like(img)
    o = 0
    for t in parts:
        back_chunk(t, vals[o : o + t.num_lors].reshape(t.shape), want, org, vox)
        o += t.num_lors
    back = back_chunk(parts, vals, np.zeros_like(img), org, vox)
    np.testing.assert_allclose(back, want, rtol=0, atol=1e-6 * want.max())
    with pytest.raises(GeometryError, match="out: expected shape"):
        forward_chunk(parts, img, org, vox, out=np.zeros(got.size - 1, np.float32))
    with pytest.raises(GeometryError, match="tangential"):
        forward_chunk([parts[0], pdi.chunk_tables(0, views=[0], tangential_poss=range(-4, 4))], img, org, vox)
    with pytest.raises(GeometryError, match="at least one part"):
        forward_chunk([], img, org, vox)
    packed = pack_tables(parts)
    assert packed.shape == (packed_length([t.shape for t in parts]),)
    k = 2
    start, bin0, nv, na = packed[HEADER * k : HEADER * k + 4]
    assert (nv, na) == parts[k].shape[:2] and bin0 == sum(t.num_lors for t in parts[:k])
    np.testing.assert_array_equal(packed[int(start) : int(start) + 2], parts[k].cos_phi)


def test_empty_inputs():
    """Zero LORs: forward returns an empty array, back leaves the image unchanged."""
    s = np.zeros((0, 3))
    img = np.ones((2, 2, 2), np.float32)
    assert joseph_forward(s, s, img, ORG, VOX).shape == (0,)
    joseph_back(s, s, np.zeros(0, np.float32), img, ORG, VOX)
    assert np.all(img == 1.0)


def test_float32_endpoints_are_accepted():
    """parallelproj takes float32 endpoints; they are read as float64 and give the same
    integral as float64 endpoints of the same (exactly representable) values."""
    s, e = _lors()
    img = np.ones((1, 1, 20), np.float32)
    a = joseph_forward(s.astype(np.float32), e.astype(np.float32), img, ORG, VOX)
    b = joseph_forward(s, e, img, ORG, VOX)
    np.testing.assert_array_equal(a, b)
    assert a[0] == 20.0


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


def test_stir_scaled_geometry_is_gantry_origin_and_x_voxel_units():
    """The kernel frame of an ImageInfo: origin = gantry_origin (z centred on the scanner),
    voxel sizes in mm, scale = 1 / vx (STIR's x-voxel units)."""
    ii = ImageInfo((31, 57, 57), (3.375, 2.5, 2.5), origin=(0.0, 2.0, -3.0))
    kg = stir_scaled_geometry(ii)
    assert kg.origin == pytest.approx((-15 * 3.375, 2.0 - 28 * 2.5, -3.0 - 28 * 2.5))
    assert kg.voxel_size == (3.375, 2.5, 2.5)
    assert kg.scale == pytest.approx(0.4)
    assert stir_scaled_geometry(ii, stir_units=False).scale == 1.0
    with pytest.raises(GeometryError, match="image_info"):
        stir_scaled_geometry(object())


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
