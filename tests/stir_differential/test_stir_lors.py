"""stirgpu.kernels.joseph.lors reproduces STIR's float32 geometry bit for bit.

Identities checked, without tolerance (the module exists to make STIR's float32 roundings,
which decide the stepping axis at 45-degree views and inside / outside at image faces):

* STIR's ``get_phi``, ``get_s``, ``get_m`` and ``get_tantheta`` equal ours for every segment,
  view, axial and tangential position;
* the image frame STIR's Parallelproj projector hands libparallelproj equals ours;
* libparallelproj 2.0.3 (the reference STIR's own CPU build, through ctypes) fed with our
  endpoints and frame gives STIR's own forward projection, bit for bit, every bin.

Guards against numpy's float32 trigonometry (not glibc's), a changed order of operations, a
float constant computed in the wrong precision, and losing the fast-math ``rsqrtss`` step.
"""

from __future__ import annotations

import ctypes
import dataclasses

import cases as C
import numpy as np
import pytest

from stirgpu.kernels.joseph.lors import stir_float_geometry, stir_image_frame, stir_lor_endpoints

pytestmark = pytest.mark.stir

DIAGONAL = C.mmr_unmashed("mMR-native-views", 16, 32, restrict_fov=False, seed=63)


def _f32(values) -> np.ndarray:
    return np.array(list(values), dtype=np.float32)


@pytest.mark.parametrize("case", C.params(C.quick_cases() + C.every_scanner_cases()))
def test_bin_coordinates_equal_stirs(stir, case):
    spdi = C.stir_proj_data_info(stir, case)
    pdi = C.stirgpu_proj_data_info(case)
    views = np.arange(pdi.get_num_views())
    tangs = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)
    for seg in pdi.segment_nums:
        axs = np.arange(pdi.get_num_axial_poss(seg))
        g = stir_float_geometry(pdi, seg, views, axs, tangs)
        theirs = {
            "phi": _f32(spdi.get_phi(stir.Bin(seg, int(v), 0, 0)) for v in views),
            "s": _f32(spdi.get_s(stir.Bin(seg, 0, 0, int(t))) for t in tangs),
            "m": _f32(spdi.get_m(stir.Bin(seg, 0, int(a), 0)) for a in axs),
            "tantheta": _f32(spdi.get_tantheta(stir.Bin(seg, 0, 0, int(t))) for t in tangs),
        }
        for name, values in theirs.items():
            ours = getattr(g, name)
            bad = np.nonzero(ours != values)[0]
            assert bad.size == 0, (
                f"segment {seg}: {name} differs at {bad[:5]}: ours {ours[bad[:5]]}, STIR {values[bad[:5]]}"
            )


@pytest.mark.parametrize("case", C.params(C.quick_cases() + C.every_scanner_cases()))
def test_default_image_equals_stirs(stir, case):
    """``stir_default_image_info`` (what ``cases.stirgpu_image_info`` uses) is STIR's
    ``VoxelsOnCartesianGrid(proj_data_info, zoom, origin, sizes)`` to the last bit: voxel sizes
    (fast-math reciprocals), shape (x and y sized from their own voxel size) and index ranges."""
    img = C.stir_image(stir, case, C.stir_proj_data_info(stir, case))
    info = C.stirgpu_image_info(case, C.stirgpu_proj_data_info(case))
    v = img.get_voxel_size()
    assert np.array_equal(np.array(info.voxel_size, np.float32), np.array([v[1], v[2], v[3]], np.float32))
    assert tuple(info.shape) == tuple(np.asarray(img.as_array()).shape)
    lo = img.get_min_indices()
    assert tuple(info.min_indices) == (lo[1], lo[2], lo[3])


def _stir_frame(img):
    """The frame STIR's ParallelprojHelper computes from a STIR image (its own accessors)."""
    v = img.get_voxel_size()
    vs = np.array([v[1], v[2], v[3]], np.float32)
    lo, hi = img.get_min_indices(), img.get_max_indices()
    first = img.get_physical_coordinates_for_indices(lo)
    org = np.array([first[1], first[2], first[3]], np.float32)
    org[0] = np.float32(org[0] - np.float32(np.float32((lo[1] + hi[1]) / np.float32(2)) * vs[0]))
    rescale = np.float32(np.float32(1) / vs[2])
    return (org * rescale).astype(np.float32), (vs * rescale).astype(np.float32)


@pytest.mark.parametrize("case", C.params(C.quick_cases()))
def test_image_frame_equals_stirs(stir, case):
    """Origin and voxel sizes handed to libparallelproj, from an ImageInfo with STIR's float
    voxel sizes: equal to what STIR's projector computes from its image."""
    spdi = C.stir_proj_data_info(stir, case)
    img = C.stir_image(stir, case, spdi)
    v = img.get_voxel_size()
    info = dataclasses.replace(
        C.stirgpu_image_info(case, C.stirgpu_proj_data_info(case)), voxel_size=(v[1], v[2], v[3])
    )
    origin, voxel_size, _ = stir_image_frame(info)
    stir_origin, stir_voxel_size = _stir_frame(img)
    assert np.array_equal(origin, stir_origin), (origin, stir_origin)
    assert np.array_equal(voxel_size, stir_voxel_size), (voxel_size, stir_voxel_size)


@pytest.mark.parametrize("case", C.params(C.quick_cases() + (DIAGONAL,)))
def test_libparallelproj_with_our_geometry_gives_stirs_forward_projection(stir, reference_stir, case):
    lib = reference_stir.library("libparallelproj.so")
    spdi = C.stir_proj_data_info(stir, case)
    pdi = C.stirgpu_proj_data_info(case)
    img = C.stir_image(stir, case, spdi)
    info = C.stirgpu_image_info(case, pdi)
    image = case.rng(salt=5).uniform(0, 1, info.shape).astype(np.float32)
    img.fill(image.flat)
    # the image frame from STIR's own image (its default voxel sizes come from fast-math
    # reciprocals; see test_image_frame_equals_stirs), so that this checks the endpoints
    v = img.get_voxel_size()
    exact = dataclasses.replace(info, voxel_size=(v[1], v[2], v[3]))
    origin, voxel_size, rescale = stir_image_frame(exact)

    fp = stir.ForwardProjectorByBinParallelproj()
    fp.set_restrict_to_cylindrical_FOV(False)
    fp.set_up(spdi, img)
    out = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fp.forward_project(out, img)
    ref = np.asarray(out.as_array()).reshape(-1)

    tangs = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)
    starts, ends = [], []
    for seg in pdi.segment_nums_stir_order:  # STIR's in-memory order: [segment][axial][view][tangential]
        g = stir_float_geometry(pdi, seg, np.arange(pdi.get_num_views()), np.arange(pdi.get_num_axial_poss(seg)), tangs)
        s, e = stir_lor_endpoints(g)
        starts.append(np.swapaxes(s, 0, 1).reshape(-1, 3))
        ends.append(np.swapaxes(e, 0, 1).reshape(-1, 3))
    xstart = np.ascontiguousarray((np.concatenate(starts) * rescale).astype(np.float32))
    xend = np.ascontiguousarray((np.concatenate(ends) * rescale).astype(np.float32))
    ours = np.zeros(len(xstart), np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    dims = np.array(info.shape, np.int32)
    lib.joseph3d_fwd(
        ptr(xstart),
        ptr(xend),
        ptr(np.ascontiguousarray(image)),
        ptr(origin),
        ptr(voxel_size),
        ptr(ours),
        ctypes.c_size_t(len(ours)),
        ptr(dims),
        0,
        64,
    )
    bad = np.nonzero(ours != ref)[0]
    assert bad.size == 0, (
        f"{bad.size} of {ref.size} bins differ, largest by "
        f"{np.max(np.abs(ours - ref)) / np.max(ref):.2e} of the maximum"
    )
