"""The detectors STIR's scatter simulation puts at each end of a bin (``find_detectors``,
``ProjDataInfoCylindricalNoArcCorr::find_cartesian_coordinates_of_detection``).

For view v and tangential position t (``N`` detectors per ring) the crystals are
``(v + (t >> 1)) mod N`` and ``(v - ((t + 1) >> 1) + N/2) mod N``; a span-1 segment of ring
difference d at axial position a joins rings whose mean is ``m / ring spacing + (rings - 1)/2``.
Crystal c of ring r sits on the circle of the *effective* radius R (inner radius + depth of
interaction) at ``psi = 2 pi c / N + view offset``: ``(z, y, x) = (r * ring spacing - middle,
-R cos psi, R sin psi)``, z centred on the scanner as the images are.  STIR can do this only for
non-arc-corrected, span-1, unmashed, non-TOF data of a cylindrical scanner; anything else is
refused here with STIR's reason.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..geometry import ProjDataInfo

__all__ = ["DetectorPairs", "detector_pairs"]


@dataclasses.dataclass(frozen=True, eq=False)
class DetectorPairs:
    """Every bin's two detectors: ``positions`` (detectors, 3) in mm (z, y, x; gantry frame, z = 0
    at the scanner's axial centre), and per segment a (views, axial, tangential, 2) array of
    indices into ``positions``."""

    positions: np.ndarray
    pairs: dict[int, np.ndarray]


def _check_supported(pdi: ProjDataInfo) -> None:
    sc = pdi.get_scanner()
    if pdi.is_arc_corrected():
        raise GeometryError("scatter simulation: STIR can only handle non-arc-corrected data")
    if sc.scanner_geometry != "Cylindrical":
        raise GeometryError(
            f"scatter simulation: the {sc.scanner_geometry} scanner geometry is not supported "
            "(cylindrical scanners only)"
        )
    if pdi.is_tof_data():
        raise GeometryError("scatter simulation: TOF data are not supported (STIR simulates non-TOF scatter)")
    if pdi.get_view_mashing_factor() != 1:
        raise GeometryError(
            f"scatter simulation: view mashing {pdi.get_view_mashing_factor()} is not supported "
            "(STIR finds the detectors of unmashed data only)"
        )
    if sc.num_detectors_per_ring % 2:
        raise GeometryError(
            f"scatter simulation: {sc.num_detectors_per_ring} detectors per ring (STIR needs an even number)"
        )
    for seg in pdi.segments:
        if seg.min_ring_diff != seg.max_ring_diff:
            raise GeometryError(
                f"scatter simulation: segment {seg.segment_num} combines ring differences "
                f"{seg.min_ring_diff}..{seg.max_ring_diff} (STIR needs span 1: no axial compression)"
            )


def _crystals(pdi: ProjDataInfo) -> tuple[np.ndarray, np.ndarray]:
    """(views, tangential) crystal numbers of each bin's two ends."""
    n = pdi.get_scanner().num_detectors_per_ring
    v = np.arange(pdi.get_num_views())[:, None]
    t = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)[None, :]
    if t.min() < -(n // 2) + 1 or t.max() > n // 2:
        raise GeometryError(
            f"scatter simulation: tangential positions {t.min()}..{t.max()} exceed what {n} detectors per ring can form"
        )
    return (v + (t >> 1) + n) % n, (v - ((t + 1) >> 1) + n // 2) % n


def _rings(pdi: ProjDataInfo, segment_num: int) -> tuple[np.ndarray, np.ndarray]:
    """(axial positions) ring numbers of each sinogram's two ends."""
    sc = pdi.get_scanner()
    seg = pdi.segment(segment_num)
    m = np.asarray(pdi.get_m(segment_num, np.arange(seg.num_axial_poss)), dtype=np.float64)
    ring_sum = np.rint(2 * m / sc.ring_spacing + (sc.num_rings - 1)).astype(np.int64)
    d = seg.max_ring_diff
    r1, r2 = (ring_sum - d) // 2, (ring_sum + d) // 2
    rings = np.concatenate([r1, r2])
    if np.any((ring_sum - d) % 2) or rings.min() < 0 or rings.max() >= sc.num_rings:
        raise GeometryError(f"scatter simulation: segment {segment_num}'s axial positions do not fall on ring pairs")
    return r1, r2


def _crystal_positions(pdi: ProjDataInfo) -> np.ndarray:
    """(rings * detectors per ring, 3) positions (mm), index ``ring * N + crystal``, in STIR's
    float32 arithmetic."""
    sc = pdi.get_scanner()
    n = sc.num_detectors_per_ring
    f32 = np.float32
    two_pi = 2 * np.pi
    psi = ((two_pi / n) * np.arange(n)).astype(f32) + f32(sc.intrinsic_azimuthal_tilt)
    psi = np.mod(psi, f32(two_pi)).astype(f32)  # STIR's to_0_2pi
    radius = f32(sc.effective_ring_radius)
    z = (np.arange(sc.num_rings, dtype=f32) * f32(sc.ring_spacing) + f32(pdi.get_m(0, 0))).astype(f32)
    out = np.empty((sc.num_rings, n, 3), dtype=np.float64)
    out[:, :, 0] = z[:, None]
    out[:, :, 1] = (-radius * np.cos(psi))[None, :]
    out[:, :, 2] = (radius * np.sin(psi))[None, :]
    return out.reshape(-1, 3)


def detector_pairs(pdi: ProjDataInfo) -> DetectorPairs:
    """The detectors of every bin of ``pdi`` (only the detectors some bin uses are kept)."""
    _check_supported(pdi)
    n = pdi.get_scanner().num_detectors_per_ring
    c1, c2 = _crystals(pdi)
    full: dict[int, np.ndarray] = {}
    for seg in pdi.segment_nums:
        r1, r2 = _rings(pdi, seg)
        a = r1[None, :, None] * n + c1[:, None, :]
        b = r2[None, :, None] * n + c2[:, None, :]
        full[seg] = np.stack(np.broadcast_arrays(a, b), axis=-1)
    used, inverse = np.unique(np.concatenate([p.ravel() for p in full.values()]), return_inverse=True)
    pairs, start = {}, 0
    for seg, p in full.items():
        pairs[seg] = inverse[start : start + p.size].reshape(p.shape)
        start += p.size
    return DetectorPairs(positions=_crystal_positions(pdi)[used], pairs=pairs)
