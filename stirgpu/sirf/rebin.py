"""STIR's single-slice rebinning (``stir::SSRB``), behind SIRF's ``AcquisitionData.rebin``.

Geometry (:func:`ssrb_geometry`, STIR's ``SSRB(const ProjDataInfo&, ...)``): output segment ``k``
combines the input segments ``k c - c // 2 .. k c + c // 2`` (``c`` = ``num_segments_to_combine``,
odd), taking their ring differences; its axial positions span the input segments' ``m`` range at
the output's axial sampling; ``num_views_to_combine`` neighbouring views become one (the view
offset moves to their centre); ``num_tang_poss_to_trim`` tangential positions fewer in all (STIR
removes that many in total, keeping the centred positions); output segments up to
``(m - c // 2) / c`` (C's integer division) for the input's largest segment ``m`` processed.

Values (:func:`ssrb`, STIR's ``SSRB(ProjData&, const ProjData&, bool)``): each output sinogram is
the float32 sum, in STIR's order (input segments ascending, then views), of the input sinograms at
the same ``m`` (to 1e-4 mm) of the segments it combines, views ``c_v o .. c_v o + c_v - 1`` added
into view ``o``; with ``do_normalisation`` divided by (contributing sinograms x views combined).
One input segment (one timing position) is in memory at a time.
"""

from __future__ import annotations

import logging

import numpy as np

from ..formats import ProjData
from ..geometry import ProjDataInfo
from .errors import InputError, NotSupported

__all__ = ["ssrb_geometry", "ssrb"]

_LOG = logging.getLogger("stirgpu.sirf")
#: STIR's tolerance on equal axial coordinates ``m`` (mm)
_SAME_M = 1e-4


def _c_div(a: int, b: int) -> int:
    """C's integer division (towards zero), as STIR computes the last output segment."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def ssrb_geometry(
    pdi: ProjDataInfo,
    num_segments_to_combine: int,
    num_views_to_combine: int = 1,
    num_tang_poss_to_trim: int = 0,
    max_in_segment_num_to_process: int = -1,
    num_tof_bins_to_combine: int = 1,
) -> ProjDataInfo:
    """The geometry of the rebinned data (module docstring); each bad argument is one error naming it."""
    c, cv, trim = int(num_segments_to_combine), int(num_views_to_combine), int(num_tang_poss_to_trim)
    if c < 1 or c % 2 == 0:
        raise InputError(f"rebin: num_segments_to_combine ({c}) needs to be odd and positive")
    if cv < 1 or pdi.get_num_views() % cv:
        raise InputError(f"rebin: num_views_to_combine ({cv}) must divide the number of views ({pdi.get_num_views()})")
    if int(num_tof_bins_to_combine) != 1:
        raise NotSupported(
            f"rebin: num_tof_bins_to_combine {num_tof_bins_to_combine}: combining TOF bins is not provided"
        )
    max_in = int(max_in_segment_num_to_process)
    max_in = pdi.get_max_segment_num() if max_in < 0 else max_in
    if max_in > pdi.get_max_segment_num():
        raise InputError(
            f"rebin: max_in_segment_num_to_process ({max_in}) is too large: the data have maximum segment number "
            f"{pdi.get_max_segment_num()}"
        )
    if not 0 <= trim < pdi.get_num_tangential_poss():
        raise InputError(f"rebin: too large number of tangential positions to trim ({trim})")
    out_max = _c_div(max_in - c // 2, c)
    if out_max < 0:
        raise InputError(f"rebin: max_in_segment_num_to_process ({max_in}) is too small: no output segments")
    if out_max * c + c // 2 > pdi.get_max_segment_num():
        raise InputError(
            f"rebin: num_segments_to_combine ({c}) needs input segments up to {out_max * c + c // 2}; the data have "
            f"{pdi.get_max_segment_num()}"
        )
    rd_min, rd_max, num_axial = [], [], []
    spacing = pdi.scanner.ring_spacing
    for k in range(-out_max, out_max + 1):
        ins = range(k * c - c // 2, k * c + c // 2 + 1)
        lo, hi = pdi.get_min_ring_difference(ins[0]), pdi.get_max_ring_difference(ins[-1])
        min_m = min(float(pdi.get_m(s, 0)) for s in ins)
        max_m = max(float(pdi.get_m(s, pdi.get_num_axial_poss(s) - 1)) for s in ins)
        n = (max_m - min_m) / (spacing if lo == hi else spacing / 2) + 1
        if abs(round(n) - n) > 1e-3:
            raise InputError(f"rebin: the number of axial positions of output segment {k} would be {n:g}, not whole")
        rd_min.append(lo)
        rd_max.append(hi)
        num_axial.append(round(n))
    return pdi.replace(
        min_ring_diff=rd_min,
        max_ring_diff=rd_max,
        num_axial_poss=num_axial,
        num_views=pdi.get_num_views() // cv,
        num_tangential_poss=pdi.get_num_tangential_poss() - trim,
    )


def ssrb(out: ProjData, data: ProjData, do_normalisation: bool = True) -> ProjData:
    """Fill ``out`` (of :func:`ssrb_geometry`'s geometry for ``data``) with the rebinned values; returns it."""
    opdi, ipdi = out.get_proj_data_info(), data.get_proj_data_info()
    cv = ipdi.get_num_views() // opdi.get_num_views()
    lo_t = max(ipdi.get_min_tangential_pos_num(), opdi.get_min_tangential_pos_num())
    hi_t = min(ipdi.get_max_tangential_pos_num(), opdi.get_max_tangential_pos_num())
    in_t = slice(lo_t - ipdi.get_min_tangential_pos_num(), hi_t - ipdi.get_min_tangential_pos_num() + 1)
    out_t = slice(lo_t - opdi.get_min_tangential_pos_num(), hi_t - opdi.get_min_tangential_pos_num() + 1)
    for k in opdi.segment_nums:
        ins = _input_segments(ipdi, opdi, k)
        out_m = np.asarray(opdi.get_m(k, np.arange(opdi.get_num_axial_poss(k))), dtype=np.float64)
        maps = {s: _same_m(out_m, ipdi, s) for s in ins}
        counts = np.zeros(out_m.size, dtype=np.int64)
        for m in maps.values():
            counts += m >= 0
        for t in range(opdi.get_min_tof_pos_num(), opdi.get_max_tof_pos_num() + 1):
            total = np.zeros((out_m.size, opdi.get_num_views(), opdi.get_num_tangential_poss()), dtype=np.float32)
            for s in ins:
                found = maps[s] >= 0
                sinos = data.get_segment_by_sinogram(s, t)[maps[s][found]][:, :, in_t]
                for j in range(cv):
                    total[found, :, out_t] += sinos[:, j::cv]
            if do_normalisation:
                hit = counts > 0
                total[hit] /= (counts[hit] * cv).astype(np.float32)[:, None, None]
            out.set_segment_by_sinogram(total, k, t)
        for a in np.flatnonzero(counts == 0):
            _LOG.warning("rebin: no sinograms contributing to output segment %d, axial position %d", k, a)
    return out


def _input_segments(ipdi: ProjDataInfo, opdi: ProjDataInfo, k: int) -> list[int]:
    """The input segments whose ring differences lie inside output segment ``k``'s (ascending)."""
    lo, hi = opdi.get_min_ring_difference(k), opdi.get_max_ring_difference(k)
    inside = []
    for s in ipdi.segment_nums:
        a, b = ipdi.get_min_ring_difference(s), ipdi.get_max_ring_difference(s)
        if lo <= a and b <= hi:
            inside.append(s)
        elif not (a > hi or b < lo):
            raise InputError(
                f"rebin: input segment {s} (ring differences {a}..{b}) overlaps output segment {k} ({lo}..{hi})"
            )
    return inside


def _same_m(out_m: np.ndarray, ipdi: ProjDataInfo, s: int) -> np.ndarray:
    """For each output axial position, the first axial position of input segment ``s`` at the same
    ``m`` (-1: none)."""
    in_m = np.asarray(ipdi.get_m(s, np.arange(ipdi.get_num_axial_poss(s))), dtype=np.float64)
    close = np.abs(out_m[:, None] - in_m[None, :]) < _SAME_M
    return np.where(close.any(axis=1), close.argmax(axis=1), -1)
