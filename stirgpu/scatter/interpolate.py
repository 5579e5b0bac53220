"""STIR's ``interpolate_projdata`` for cylindrical scanners, linear B-splines (what STIR's scatter
estimation configures): segment 0 of low-resolution data (the simulated scatter) sampled at the
bins of segment 0 of another geometry of the same scanner radius.

As STIR does it:

1. with ``remove_interleaving``, the views are doubled: the new odd-parity bins are the old ones
   (the last view's successor is view 0 with the tangential positions mirrored), the others the
   mean of their four neighbours; the first and last tangential positions are 0;
2. the segment is extended by 5 bins on each side of each dimension: axial edge planes copied,
   views wrapped over 180 degrees (view ``-1`` is the last view with ``s`` mirrored), then
   tangential edge values copied, in that order;
3. every output index maps to an input index ``index * step + offset`` per dimension (the ratios
   of the samplings in ``m``, ``phi`` and ``s`` at bin 0, and the offsets of bin 0), where the
   separable linear B-spline is evaluated, indices past the extended array mirrored back.
"""

from __future__ import annotations

import numpy as np

from ..errors import GeometryError
from ..geometry import ProjDataInfo

__all__ = ["EXTENSION", "interpolate_segment_zero", "non_interleaved"]

#: bins added on each side of each dimension before interpolating (STIR's ``extend_segment``)
EXTENSION = 5
_F = np.float32


def _element(sino: np.ndarray, min_tang: int, view: int, tang: int) -> float:
    """STIR's ``sino_element``: views past the last wrap to the first with ``s`` mirrored; 0
    outside the tangential range."""
    num_views, num_tang = sino.shape
    t = -tang if view >= num_views else tang
    if not min_tang <= t < min_tang + num_tang:
        return 0.0
    return float(sino[view % num_views, t - min_tang])


def non_interleaved(sino: np.ndarray, min_tang: int) -> np.ndarray:
    """One sinogram (views, tangential) with twice the views (step 1 of the module docstring)."""
    num_views, num_tang = sino.shape
    out = np.zeros((2 * num_views, num_tang), dtype=np.float32)
    for view in range(2 * num_views):
        for tang in range(min_tang + 1, min_tang + num_tang - 1):
            if (view + tang) % 2 == 0:
                in_view = view // 2 if view % 2 == 0 else (view + 1) // 2
                out[view, tang - min_tang] = _element(sino, min_tang, in_view, tang)
            else:
                other = (view + 1) // 2
                out[view, tang - min_tang] = (
                    _F(_element(sino, min_tang, view // 2, tang))
                    + _F(_element(sino, min_tang, view // 2 + 1, tang))
                    + _F(_element(sino, min_tang, other, tang - 1))
                    + _F(_element(sino, min_tang, other, tang + 1))
                ) / _F(4)
    return out


def _extended(segment: np.ndarray, min_tang: int) -> np.ndarray:
    """(axial, view, tangential) grown by EXTENSION on each side (step 2 of the docstring); index
    ``i`` of the result is index ``i - EXTENSION`` of the segment (``i - EXTENSION + min_tang``
    tangentially).  The views of segment 0 of a cylindrical scanner cover 180 degrees, where STIR
    flips (its wrapping for 360 degrees and nearest-neighbour fallback do not arise here)."""
    e = EXTENSION
    na, nv, nt = segment.shape
    out = np.zeros((na + 2 * e, nv + 2 * e, nt + 2 * e), dtype=np.float32)
    out[e : e + na, e : e + nv, e : e + nt] = segment
    out[:e] = out[e]
    out[na + e :] = out[na + e - 1]
    # tangential index j holds position j - e + min_tang; its mirror -(j - e + min_tang)
    j = np.arange(nt + 2 * e)
    pos = j - e + min_tang
    sym = min(abs(min_tang - e), min_tang + nt - 1 + e)
    sym_idx = sym + e - min_tang
    mirrored = np.where(pos < -sym, sym_idx, np.where(pos > sym, -sym + e - min_tang, -pos + e - min_tang))
    out[:, :e] = out[:, nv : nv + e][:, :, mirrored]
    out[:, nv + e :] = out[:, e : 2 * e][:, :, mirrored]
    out[:, :, :e] = out[:, :, e : e + 1]
    out[:, :, nt + e :] = out[:, :, nt + e - 1 : nt + e]
    return out


def _linear_weights(positions: np.ndarray, size: int) -> np.ndarray:
    """(outputs, size): linear B-spline weights at ``positions`` (indices of an array of
    ``size``), indices outside mirrored about the first and last (STIR's ``spline_convolution``)."""
    w = np.zeros((len(positions), size))
    k = np.floor(positions).astype(np.int64)
    frac = positions - k
    for kk, weight in ((k, 1 - frac), (k + 1, frac)):
        idx = np.where(kk < 0, -kk, np.where(kk > size - 1, 2 * (size - 1) - kk, kk))
        if idx.min() < 0 or idx.max() > size - 1:
            raise GeometryError("interpolate_projdata: the output lies too far outside the input data")
        np.add.at(w, (np.arange(len(positions)), idx), weight)
    return w


def _index_map(out_pdi: ProjDataInfo, in_pdi: ProjDataInfo, remove_interleaving: bool):
    """(offset, step) per dimension (axial, view, tangential): input index = output index * step
    + offset, in STIR's float arithmetic."""
    in_m, out_m = _F(in_pdi.get_sampling_in_m(0)), _F(out_pdi.get_sampling_in_m(0))
    axial = ((_F(out_pdi.get_m(0, 0)) - _F(in_pdi.get_m(0, 0))) / in_m, out_m / in_m)
    in_phi = (_F(in_pdi.get_phi(1)) - _F(in_pdi.get_phi(0))) / _F(2 if remove_interleaving else 1)
    out_phi = _F(out_pdi.get_phi(1)) - _F(out_pdi.get_phi(0))
    view = ((_F(out_pdi.get_phi(0)) - _F(in_pdi.get_phi(0))) / in_phi, out_phi / in_phi)
    in_s, out_s = _F(in_pdi.get_sampling_in_s()), _F(out_pdi.get_sampling_in_s())
    tang = ((_F(out_pdi.get_s(0)) - _F(in_pdi.get_s(0))) / in_s, out_s / in_s)
    return axial, view, tang


def _check(out_pdi: ProjDataInfo, in_pdi: ProjDataInfo) -> None:
    if out_pdi.is_arc_corrected() != in_pdi.is_arc_corrected():
        raise GeometryError("interpolate_projdata needs both data arc-corrected or both not arc-corrected")
    a, b = out_pdi.get_scanner(), in_pdi.get_scanner()
    if abs(a.inner_ring_radius - b.inner_ring_radius) > 1:
        raise GeometryError("interpolate_projdata needs both data of scanners with the same ring radius")
    if a.scanner_geometry != "Cylindrical" or b.scanner_geometry != "Cylindrical":
        raise GeometryError("interpolate_projdata: only cylindrical scanners are supported")
    if out_pdi.is_tof_data() or in_pdi.is_tof_data():
        raise GeometryError("interpolate_projdata: only non-TOF data are supported")


def interpolate_segment_zero(
    segment: np.ndarray, in_pdi: ProjDataInfo, out_pdi: ProjDataInfo, remove_interleaving: bool = True
) -> np.ndarray:
    """``segment`` (segment 0 of ``in_pdi`` by sinogram: axial, view, tangential) sampled at
    segment 0 of ``out_pdi`` (same order), float32."""
    _check(out_pdi, in_pdi)
    if remove_interleaving and in_pdi.is_arc_corrected():
        raise GeometryError("interpolate_projdata: removing the interleaving needs non-arc-corrected data")
    min_tang = in_pdi.get_min_tangential_pos_num()
    data = np.asarray(segment, dtype=np.float32)
    num_views = in_pdi.get_num_views()
    if remove_interleaving:
        data = np.stack([non_interleaved(sino, min_tang) for sino in data])
        num_views *= 2
    if num_views < EXTENSION:
        raise GeometryError(f"interpolate_projdata: {num_views} views, fewer than STIR's extension by {EXTENSION}")
    coef = _extended(data, min_tang).astype(np.float64)
    (a_off, a_step), (v_off, v_step), (t_off, t_step) = _index_map(out_pdi, in_pdi, remove_interleaving)
    e = EXTENSION
    axial = np.arange(out_pdi.get_num_axial_poss(0)) * float(a_step) + float(a_off) + e
    views = np.arange(out_pdi.get_num_views()) * float(v_step) + float(v_off) + e
    out_t0 = out_pdi.get_min_tangential_pos_num()
    tangs = np.arange(out_t0, out_t0 + out_pdi.get_num_tangential_poss()) * float(t_step) + float(t_off)
    tangs = tangs - min_tang + e
    wa, wv, wt = (_linear_weights(p, n) for p, n in zip((axial, views, tangs), coef.shape, strict=True))
    return np.einsum("ai,vj,tk,ijk->avt", wa, wv, wt, coef, optimize=True).astype(np.float32)
