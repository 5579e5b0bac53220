"""TOF forward and back projections against STIR's own Parallelproj projector (libparallelproj
2.0.7, CPU build), on generated cases: GE Discovery MI and Siemens Vision 600, odd and even
numbers of TOF bins, mashed and unmashed, small view and tangential sets.

The bar is 3e-5 of STIR's maximum; measured: forward projections equal STIR's bit for bit, back
projections differ by < 1e-6 (the order of float32 additions into a voxel).

Even numbers of TOF bins: this STIR's Parallelproj projector returns zeros for them (forward and
back; ``test_stir_projector_even_tof_bins``, a strict expected failure that turns into a pass when
STIR is fixed).  For them the reference is libparallelproj's ``joseph3d_tof_sino_fwd/back`` from
the same STIR build, driven as STIR's ``ForwardProjectorByBinParallelproj`` drives it: STIR's float32
endpoints (``stir_lors``, equal to STIR's to the bit: ``test_stir_lors.py``) given end first, bin
width ``get_sampling_in_k`` and sigma ``tof_delta_time_to_mm(resolution) / 2.355`` from STIR's
own objects, both times ``1 / vx``, 4 sigmas.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import (
    stir_default_image_info,
    stir_float_geometry,
    stir_image_frame,
    stir_lor_endpoints,
)
from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof

pytestmark = pytest.mark.stir

BAR = 3e-5
DMI = "GE Discovery MI 4 rings"
VISION = "Siemens Vision 600"


@dataclasses.dataclass(frozen=True)
class TofCase:
    scanner: str
    tof_mash: int
    span: int
    max_ring_diff: int
    num_views: int
    num_tangential_poss: int = 41

    @property
    def label(self) -> str:
        short = {DMI: "DMI4", VISION: "Vision600"}[self.scanner]
        return f"{short}-mash{self.tof_mash}-{self.num_bins()}bins"

    def num_bins(self) -> int:
        return Scanner.from_name(self.scanner).max_num_timing_poss // self.tof_mash


ODD_CASES = [
    TofCase(DMI, 29, 1, 1, 8),  # 13 bins, 3 segments
    TofCase(DMI, 13, 3, 1, 8),  # 29 bins
    TofCase(VISION, 8, 1, 1, 7),  # 33 bins, 3 segments
]
EVEN_CASES = [
    TofCase(VISION, 1, 3, 1, 7),  # 264 bins: unmashed
    TofCase(VISION, 11, 1, 1, 7),  # 24 bins, 3 segments
]


def _ids(cases):
    return [c.label for c in cases]


def stir_pdi(stir, case):
    sc = stir.Scanner.get_scanner_from_name(case.scanner)
    return stir.ProjDataInfo.construct_proj_data_info(
        sc, case.span, case.max_ring_diff, case.num_views, case.num_tangential_poss, False, case.tof_mash
    )


def ours_pdi(case) -> ProjDataInfo:
    return ProjDataInfo.construct(
        Scanner.from_name(case.scanner),
        case.span,
        case.max_ring_diff,
        case.num_views,
        case.num_tangential_poss,
        tof_mash_factor=case.tof_mash,
    )


def phantom(shape, seed) -> np.ndarray:
    """An ellipse with a hot ball and low noise, inside the FOV (no FOV truncation needed)."""
    nz, ny, nx = shape
    z, y, x = np.meshgrid(np.linspace(-1, 1, nz), np.linspace(-1, 1, ny), np.linspace(-1, 1, nx), indexing="ij")
    img = ((x / 0.6) ** 2 + (y / 0.5) ** 2 <= 1).astype(np.float32)
    img += 2.0 * ((x - 0.3) ** 2 + (y + 0.2) ** 2 + z**2 <= 0.05)
    img += np.random.default_rng(seed).uniform(0, 0.1, shape) * (x**2 + y**2 < 0.8)
    return img.astype(np.float32)


def _stir_image(stir, spdi, values=None):
    img = stir.FloatVoxelsOnCartesianGrid(
        spdi, 1.0, stir.FloatCartesianCoordinate3D(0, 0, 0), stir.IntCartesianCoordinate3D(-1, -1, -1)
    )
    img.fill(0.0 if values is None else values.flat)
    return img


def stir_projections(stir, case, image, data):
    """STIR's TOF forward projection of ``image`` and back projection of ``data`` (as_array order:
    [tof][sinogram][view][tangential])."""
    spdi = stir_pdi(stir, case)
    img = _stir_image(stir, spdi, image)
    fp = stir.ForwardProjectorByBinParallelproj()
    fp.set_restrict_to_cylindrical_FOV(False)
    fp.set_up(spdi, img)
    out = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fp.forward_project(out, img)
    bp = stir.BackProjectorByBinParallelproj()
    bp.set_restrict_to_cylindrical_FOV(False)
    bp.set_up(spdi, img)
    src = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    src.fill(np.ascontiguousarray(data, dtype=np.float32).flat)
    back = _stir_image(stir, spdi)
    bp.back_project(back, src)
    return np.asarray(out.as_array()).reshape(data.shape), np.asarray(back.as_array())


def segment_blocks(pdi):
    """(segment, first sinogram, count) in STIR's in-memory order."""
    start = 0
    for seg in pdi.segment_nums_stir_order:
        n = pdi.get_num_axial_poss(seg)
        yield seg, start, n
        start += n


def ours_projections(pdi, image, data):
    """Our TOF forward and back projections, segment by segment, in STIR's as_array order."""
    info = stir_default_image_info(pdi)
    frame = stir_image_frame(info)
    fwd = np.zeros_like(data)
    back = np.zeros(info.shape, np.float32)
    for seg, a, n in segment_blocks(pdi):
        t = pdi.chunk_tables(seg)
        got = forward_chunk_tof(t, pdi, image, frame)  # (tof, view, axial, tang)
        fwd[:, a : a + n] = np.transpose(got, (0, 2, 1, 3))
        vals = np.ascontiguousarray(np.transpose(data[:, a : a + n], (0, 2, 1, 3)))
        back_chunk_tof(t, pdi, vals, back, frame)
    return fwd, back


def _inputs(case):
    pdi = ours_pdi(case)
    shape = stir_default_image_info(pdi).shape
    image = phantom(shape, seed=case.num_bins())
    data_shape = (
        pdi.get_num_tof_poss(),
        pdi.get_num_axial_poss_total(),
        pdi.get_num_views(),
        pdi.get_num_tangential_poss(),
    )
    data = np.random.default_rng(7).uniform(0.5, 1.5, data_shape).astype(np.float32)
    return pdi, image, data


def _rel(ours, ref) -> float:
    scale = float(np.abs(ref).max())
    assert scale > 0, "the reference is all zero: the case tests nothing"
    return float(np.abs(ours.astype(np.float64) - ref).max()) / scale


@pytest.mark.parametrize("case", ODD_CASES, ids=_ids(ODD_CASES))
def test_tof_projections_match_stir(stir, case):
    pdi, image, data = _inputs(case)
    assert pdi.get_num_tof_poss() % 2 == 1
    ref_fwd, ref_back = stir_projections(stir, case, image, data)
    fwd, back = ours_projections(pdi, image, data)
    f, b = _rel(fwd, ref_fwd), _rel(back, ref_back)
    print(f"{case.label}: forward {f:.2e}, back {b:.2e} of STIR's maximum")
    assert f <= BAR and b <= BAR


@pytest.mark.xfail(strict=True, reason="this STIR's Parallelproj projector gives zeros for even numbers of TOF bins")
def test_stir_projector_even_tof_bins(stir):
    case = EVEN_CASES[1]
    pdi, image, data = _inputs(case)
    ref_fwd, ref_back = stir_projections(stir, case, image, data)
    fwd, back = ours_projections(pdi, image, data)
    assert _rel(fwd, ref_fwd) <= BAR and _rel(back, ref_back) <= BAR


def libparallelproj_projections(stir, reference_stir, case, image, data):
    """libparallelproj's TOF sinogram projections driven as STIR's Parallelproj projector drives
    it (see the module docstring), in STIR's as_array order."""
    lib = reference_stir.library("libparallelproj.so")
    spdi = stir_pdi(stir, case)
    pdi = ours_pdi(case)
    origin, voxel_size, rescale = stir_image_frame(stir_default_image_info(pdi))
    ntof = spdi.get_num_tof_poss()
    width = np.float32(np.float32(spdi.get_sampling_in_k(stir.Bin(0, 0, 0, 0, 0))) * rescale)
    res_mm = np.float32(np.float64(spdi.get_scanner().get_timing_resolution()) * 0.299792458 * 0.5)
    sigma = np.array([np.float64(res_mm) / 2.355 * np.float64(rescale)], np.float32)
    offset = np.zeros(1, np.float32)
    tangs = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)
    starts, ends = [], []
    for seg, _, n in segment_blocks(pdi):  # STIR's in-memory LOR order: [segment][axial][view][tang]
        g = stir_float_geometry(pdi, seg, np.arange(pdi.get_num_views()), np.arange(n), tangs)
        s, e = stir_lor_endpoints(g)
        starts.append(np.swapaxes(s, 0, 1).reshape(-1, 3))
        ends.append(np.swapaxes(e, 0, 1).reshape(-1, 3))
    xstart = np.ascontiguousarray((np.concatenate(starts) * rescale).astype(np.float32))
    xend = np.ascontiguousarray((np.concatenate(ends) * rescale).astype(np.float32))
    nl = len(xstart)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    dims = np.array(image.shape, np.int32)
    tof_args = (ctypes.c_float(width), ptr(sigma), ptr(offset), ctypes.c_float(4.0), ctypes.c_short(ntof))
    lors = np.zeros(nl * ntof, np.float32)  # [lor][tof], libparallelproj's order
    lib.joseph3d_tof_sino_fwd(
        ptr(xend), ptr(xstart), ptr(image), ptr(origin), ptr(voxel_size), ptr(lors), ctypes.c_size_t(nl), ptr(dims),
        *tof_args, ctypes.c_ubyte(0), ctypes.c_ubyte(0), 0, 64,
    )  # fmt: skip
    fwd = lors.reshape(nl, ntof).T.reshape(data.shape)
    pp_data = np.ascontiguousarray(data.reshape(ntof, nl).T)
    back = np.zeros(image.shape, np.float32)
    lib.joseph3d_tof_sino_back(
        ptr(xend), ptr(xstart), ptr(back), ptr(origin), ptr(voxel_size), ptr(pp_data), ctypes.c_size_t(nl), ptr(dims),
        *tof_args, ctypes.c_ubyte(0), ctypes.c_ubyte(0), 0, 64,
    )  # fmt: skip
    return fwd, back


@pytest.mark.parametrize("case", EVEN_CASES + ODD_CASES[:1], ids=_ids(EVEN_CASES + ODD_CASES[:1]))
def test_tof_projections_match_libparallelproj_as_stir_drives_it(stir, reference_stir, case):
    """Even numbers of TOF bins (and one odd case, which ties this reference to STIR's own)."""
    pdi, image, data = _inputs(case)
    ref_fwd, ref_back = libparallelproj_projections(stir, reference_stir, case, image, data)
    fwd, back = ours_projections(pdi, image, data)
    f, b = _rel(fwd, ref_fwd), _rel(back, ref_back)
    print(f"{case.label}: forward {f:.2e}, back {b:.2e} of libparallelproj's maximum")
    assert f <= BAR and b <= BAR


@pytest.mark.parametrize("case", [ODD_CASES[0], ODD_CASES[2]], ids=_ids([ODD_CASES[0], ODD_CASES[2]]))
def test_streaming_projectors_match_stir_with_fov_and_subsets(stir, case):
    """The CPU ForwardProjector / BackProjector (chunks of 3 views with all their TOF bins) with
    STIR's cylindrical FOV truncation, on subset 1 of 4, against STIR's projector on that subset."""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import ProjectorPair

    pdi, image, data = _inputs(case)
    image = image + 0.5  # reaches the image's rim: the FOV truncation matters
    spdi = stir_pdi(stir, case)
    img = _stir_image(stir, spdi, image)
    fp = stir.ForwardProjectorByBinParallelproj()
    fp.set_restrict_to_cylindrical_FOV(True)
    fp.set_up(spdi, img)
    out = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fp.forward_project(out, img, 1, 4)
    bp = stir.BackProjectorByBinParallelproj()
    bp.set_restrict_to_cylindrical_FOV(True)
    bp.set_up(spdi, img)
    src = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    src.fill(data.flat)
    back = _stir_image(stir, spdi)
    bp.back_project(back, src, 1, 4)
    ref_fwd, ref_back = np.asarray(out.as_array()).reshape(data.shape), np.asarray(back.as_array())

    pair = ProjectorPair(backend="cpu", max_views_per_chunk=3)
    pair.set_up(pdi, stir_default_image_info(pdi))
    ours = ProjDataInMemory(pdi)
    pair.forward_project(ours, image, subset_num=1, num_subsets=4)
    given = ProjDataInMemory(pdi)
    given.fill(data)
    ours_back = np.asarray(pair.back_project(None, given, subset_num=1, num_subsets=4))
    f, b = _rel(ours.as_array().reshape(data.shape), ref_fwd), _rel(ours_back, ref_back)
    print(f"{case.label} subset 1/4 with FOV: forward {f:.2e}, back {b:.2e} of STIR's maximum")
    assert f <= BAR and b <= BAR
