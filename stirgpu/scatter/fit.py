"""STIR's ``ScatterEstimation::upsample_and_fit_scatter_estimate`` (and its utility
``upsample_and_fit_single_scatter``): a low-resolution scatter estimate brought to the measured
data's geometry and scaled to the measured data in the tails.

1. segment 0 of the estimate interpolated to segment 0 of the data (:mod:`.interpolate`, linear
   B-splines, interleaving removed);
2. STIR's ``inverse_SSRB``: each sinogram of every segment is the direct sinogram at its axial
   position ``m``, or the linear interpolation between the two nearest;
3. the normalisation undone (``undo_factors`` multiplied in: the efficiencies and attenuation
   the measured data carry; none for STIR's trivial normalisation);
4. one scale factor per sinogram: the measured data over the estimate, both summed over the
   weights (the tail mask); 1 where the estimate's sinogram sums to 0 or its weighted sum is at
   most 0.001 of its mean bin;
5. the factors clamped to ``[min_scale_factor, max_scale_factor]``, then smoothed along the
   axial positions of each segment by a mean over ``2 half_filter_width + 1`` sinograms (edge
   values repeated), and applied.

With both bounds 1 and no normalisation, STIR skips 3-5 (the output of step 2); with equal bounds,
every factor is that bound.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..formats import ProjData, ProjDataInMemory
from ..geometry import ProjDataInfo
from .interpolate import interpolate_segment_zero

__all__ = ["FitSettings", "ScatterFit", "inverse_ssrb", "scale_factors_per_sinogram", "upsample_and_fit"]

_F = np.float32
#: STIR's factor where a sinogram's fit is undefined
DEFAULT_SCALE = 1.0


@dataclasses.dataclass(frozen=True)
class FitSettings:
    """STIR's utility's defaults (``upsample_and_fit_single_scatter``)."""

    min_scale_factor: float = 1e-5
    max_scale_factor: float = 1e5
    half_filter_width: int = 1
    remove_interleaving: bool = True


@dataclasses.dataclass
class ScatterFit:
    """The scaled scatter, the factors per segment (by axial position, after smoothing; None
    where STIR skips the fit) and the sinograms where the fit fell back to 1 (STIR warns)."""

    scatter: ProjDataInMemory
    scale_factors: dict[int, np.ndarray] | None
    defaulted: list[tuple[int, int]]


def inverse_ssrb(direct: np.ndarray, pdi: ProjDataInfo, direct_pdi: ProjDataInfo | None = None) -> ProjDataInMemory:
    """STIR's ``inverse_SSRB``: ``direct`` (segment 0 of ``direct_pdi`` by sinogram; default:
    of ``pdi``) to every segment of ``pdi``."""
    src = pdi if direct_pdi is None else direct_pdi
    if (src.get_num_views(), src.get_num_tangential_poss()) != (pdi.get_num_views(), pdi.get_num_tangential_poss()):
        raise GeometryError("inverse SSRB: the direct sinograms must have the output's views and tangential positions")
    in_m = np.asarray(src.get_m(0, np.arange(src.get_num_axial_poss(0))), dtype=_F)
    big = np.finfo(_F).max
    out = ProjDataInMemory(pdi)
    for seg in pdi.segment_nums:
        sinos = np.empty((pdi.get_num_axial_poss(seg),) + direct.shape[1:], dtype=_F)
        for ax in range(pdi.get_num_axial_poss(seg)):
            m = _F(pdi.get_m(seg, ax))
            sinos[ax] = _nearest_direct(direct, in_m, m, big)
        out.set_segment_by_sinogram(sinos, seg)
    return out


def _nearest_direct(direct: np.ndarray, in_m: np.ndarray, m, big) -> np.ndarray:
    """The direct sinogram at ``m`` (STIR's search: the first one no farther than both
    neighbours, taken as is within 1e-4 mm, else interpolated with the nearer neighbour)."""
    last = len(in_m) - 1
    for i in range(len(in_m)):
        prev = big if i == 0 else abs(m - in_m[i - 1])
        cur = abs(m - in_m[i])
        nxt = big if i == last else abs(m - in_m[i + 1])
        if cur <= prev and cur <= nxt:
            if cur <= 1e-4:
                return direct[i]
            other, dist = (i - 1, prev) if prev < nxt else (i + 1, nxt)
            total = dist + cur
            return direct[other] * _F(cur / total) + direct[i] * _F(dist / total)
    raise GeometryError(f"inverse SSRB: no direct sinogram near m = {m} mm")


def scale_factors_per_sinogram(
    data: ProjData, estimate: ProjData, weights: ProjData
) -> tuple[dict[int, np.ndarray], list[tuple[int, int]]]:
    """STIR's ``get_scale_factors_per_sinogram``: per segment, per axial position, the weighted
    data over the weighted estimate (step 4 of the module docstring), and where it fell back."""
    pdi = weights.get_proj_data_info()
    bins_per_sinogram = pdi.get_num_views() * pdi.get_num_tangential_poss()
    factors, defaulted = {}, []
    for seg in pdi.segment_nums:
        w = weights.get_segment_by_sinogram(seg).astype(np.float64)
        est = estimate.get_segment_by_sinogram(seg).astype(np.float64)
        meas = data.get_segment_by_sinogram(seg).astype(np.float64)
        est_total = est.sum(axis=(1, 2))
        weighted_est = (est * w).sum(axis=(1, 2))
        weighted_meas = (meas * w).sum(axis=(1, 2))
        undefined = (est_total == 0) | (weighted_est <= est_total / bins_per_sinogram * 0.001)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(undefined, DEFAULT_SCALE, weighted_meas / np.where(undefined, 1.0, weighted_est))
        factors[seg] = f
        defaulted += [(seg, int(ax)) for ax in np.flatnonzero(undefined & (est_total != 0))]
    return factors, defaulted


def _smoothed(factors: np.ndarray, half_width: int) -> np.ndarray:
    """A mean over ``2 half_width + 1`` neighbours, edge values repeated beyond the ends (STIR's
    ``ArrayFilter1DUsingConvolution`` with constant boundary conditions)."""
    if half_width == 0:
        return factors
    padded = np.concatenate([np.full(half_width, factors[0]), factors, np.full(half_width, factors[-1])])
    kernel = np.full(2 * half_width + 1, 1.0 / (2 * half_width + 1))
    return np.convolve(padded, kernel, mode="valid")


def _check_inputs(data: ProjData, estimate: ProjData, weights: ProjData, settings: FitSettings) -> None:
    if weights.get_proj_data_info() != data.get_proj_data_info():
        raise GeometryError("upsample and fit scatter: the weights (tail mask) must have the data's geometry")
    if settings.half_filter_width < 0:
        raise ValueError(f"upsample and fit scatter: half filter width {settings.half_filter_width} is negative")
    if settings.min_scale_factor > settings.max_scale_factor:
        raise ValueError("upsample and fit scatter: the minimum scale factor exceeds the maximum")


def upsample_and_fit(
    data: ProjData,
    estimate: ProjData,
    weights: ProjData,
    settings: FitSettings | None = None,
    undo_factors: ProjData | None = None,
) -> ScatterFit:
    """The scatter ``estimate`` (low resolution) in ``data``'s geometry, scaled to ``data`` over
    ``weights`` (module docstring)."""
    s = settings or FitSettings()
    _check_inputs(data, estimate, weights, s)
    pdi = data.get_proj_data_info()
    direct_pdi = pdi.reduce_segment_range(0, 0)
    direct = interpolate_segment_zero(
        estimate.get_segment_by_sinogram(0), estimate.get_proj_data_info(), direct_pdi, s.remove_interleaving
    )
    upsampled = inverse_ssrb(direct, pdi)
    if s.min_scale_factor == 1 and s.max_scale_factor == 1 and undo_factors is None:
        return ScatterFit(upsampled, None, [])
    if undo_factors is not None:
        if undo_factors.get_proj_data_info() != pdi:
            raise GeometryError("upsample and fit scatter: the normalisation factors must have the data's geometry")
        for seg in pdi.segment_nums:
            upsampled.set_segment_by_view(
                upsampled.get_segment_by_view(seg) * undo_factors.get_segment_by_view(seg), seg
            )
    if s.min_scale_factor == s.max_scale_factor:
        if s.min_scale_factor == 1:
            return ScatterFit(upsampled, None, [])
        factors = {seg: np.full(pdi.get_num_axial_poss(seg), float(_F(s.min_scale_factor))) for seg in pdi.segment_nums}
        defaulted: list[tuple[int, int]] = []
    else:
        factors, defaulted = scale_factors_per_sinogram(data, upsampled, weights)
        lo, hi = float(_F(s.min_scale_factor)), float(_F(s.max_scale_factor))
        factors = {seg: _smoothed(np.clip(f, lo, hi), s.half_filter_width) for seg, f in factors.items()}
    for seg in pdi.segment_nums:
        scaled = upsampled.get_segment_by_sinogram(seg) * factors[seg].astype(_F)[:, None, None]
        upsampled.set_segment_by_sinogram(scaled, seg)
    return ScatterFit(upsampled, factors, defaulted)
