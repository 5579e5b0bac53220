"""Projection-data geometry of cylindrical scanners (STIR's ``ProjDataInfoCylindrical``).

Both STIR flavours are covered: not arc-corrected (``ProjDataInfoCylindricalNoArcCorr``:
tangential positions equally spaced in angle) and arc-corrected
(``ProjDataInfoCylindricalArcCorr``: equally spaced in mm).  Every formula is in
``docs/conventions.md``; STIR's sources are the final word.

Values are immutable.  Subsets are *selections* of views
(:meth:`ProjDataInfo.select`, ``selection.py``), so a subset is just another view of the same
geometry, never a copy of data.  The segments' ring differences and axial positions are worked out
in ``segments.py``, the LORs of bins from their coordinates in ``lors.py``; :class:`SegmentInfo`,
:class:`ChunkTables` and :class:`Selection` are importable from here too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import GeometryError
from .lors import ChunkTables, half_chords, lor_endpoints_from, read_only
from .scanner import Scanner
from .segments import SegmentInfo, segments_from_ring_differences, span_ring_differences
from .selection import Selection
from .tof import TofSampling

__all__ = ["ProjDataInfo", "SegmentInfo", "ChunkTables", "Selection"]


def _tof_sampling(scanner: Scanner, num_tof_poss: int, tof_mash_factor: int | None) -> TofSampling:
    """The TOF sampling from a mashing factor and/or a number of TOF positions (they must agree)."""
    if num_tof_poss < 1:
        raise GeometryError(f"ProjDataInfo: num_tof_poss must be >= 1 (got {num_tof_poss})")
    max_poss = scanner.max_num_timing_poss
    if tof_mash_factor is None:
        if num_tof_poss == 1:
            return TofSampling.non_tof()
        if not scanner.is_tof_ready() or max_poss % num_tof_poss:
            raise GeometryError(
                f"ProjDataInfo: {num_tof_poss} TOF positions impossible for {scanner.name!r} "
                f"({max_poss} unmashed TOF time bins, TOF-ready: {scanner.is_tof_ready()}): "
                "the number must divide the unmashed bins"
            )
        tof_mash_factor = max_poss // num_tof_poss
    tof = TofSampling.of(scanner, tof_mash_factor)
    if num_tof_poss != 1 and tof.num_poss != num_tof_poss:
        raise GeometryError(
            f"ProjDataInfo: num_tof_poss={num_tof_poss} disagrees with tof_mash_factor={tof_mash_factor} "
            f"({tof.num_poss} positions for {scanner.name!r})"
        )
    return tof


class ProjDataInfo:
    """Geometry of (non-TOF or TOF) projection data of a cylindrical scanner.

    Parameters
    ----------
    scanner
        The :class:`Scanner`.
    min_ring_diff, max_ring_diff
        Ring-difference range of each segment, in ascending order.  The segment
        containing ring difference 0 is segment 0; the others are numbered
        outwards (-1, +1, ...), as in STIR.
    num_views, num_tangential_poss
        Views (mashing = num_detectors_per_ring / 2 / num_views) and tangential positions.
        A number of views that does not divide the unmashed views is accepted as STIR accepts
        it: no half-mash shift of the view offset, mashing factor rounded down.
    arc_corrected
        ``True`` for STIR's ``ArcCorr`` flavour (``s = t * tangential_sampling``),
        ``False`` for ``NoArcCorr`` (``s = R sin(t pi / N_det)``).
    num_axial_poss
        Per segment, as STIR takes them from a header; when ``None``, what STIR's
        ``construct_proj_data_info`` gives these ring differences (span 1: N - |RD|; span > 1:
        2N - 1 - 2 min|RD|).  A count sampled at half ring spacing must be odd (STIR's check).
    tangential_sampling
        Arc-corrected bin size in mm (STIR's ``effective central bin size``); default the
        scanner's default bin size.  Ignored for non-arc-corrected data.
    min_tangential_pos_num
        Default ``-(num_tangential_poss // 2)``.
    num_tof_poss
        Number of TOF positions (1: non-TOF).  Without ``tof_mash_factor``, a number above 1
        gives the mashing factor ``max_num_timing_poss / num_tof_poss`` (which must divide).
    tof_mash_factor
        STIR's TOF mashing factor (0: non-TOF data); the number of TOF positions is then the
        scanner's maximum number of timing positions divided by it (``geometry.tof``, STIR's
        ``set_tof_mash_factor``).  With ``num_tof_poss`` too, both must agree.
    """

    __slots__ = (
        "_scanner",
        "_segments",
        "_seg_index",
        "_num_views",
        "_num_tang",
        "_min_tang",
        "_arc_corrected",
        "_tang_sampling",
        "_tof",
        "_phi_offset",
    )

    def __init__(
        self,
        scanner: Scanner,
        min_ring_diff: Sequence[int],
        max_ring_diff: Sequence[int],
        num_views: int,
        num_tangential_poss: int,
        arc_corrected: bool,
        num_axial_poss: Sequence[int] | None = None,
        tangential_sampling: float | None = None,
        min_tangential_pos_num: int | None = None,
        num_tof_poss: int = 1,
        tof_mash_factor: int | None = None,
    ):
        if not isinstance(scanner, Scanner):
            raise GeometryError(f"ProjDataInfo: scanner must be a stirgpu Scanner, not {type(scanner).__name__}")
        if scanner.scanner_geometry.lower() != "cylindrical":
            raise GeometryError(
                f"ProjDataInfo: scanner {scanner.name!r} has geometry "
                f"{scanner.scanner_geometry!r}; stirgpu supports cylindrical scanners only"
            )
        n_rings = scanner.num_rings
        segments = segments_from_ring_differences(
            n_rings, scanner.ring_spacing, min_ring_diff, max_ring_diff, num_axial_poss
        )
        num_views = int(num_views)
        n_half = scanner.num_detectors_per_ring // 2
        if num_views < 1:
            raise GeometryError(f"ProjDataInfo: num_views must be >= 1 (got {num_views})")
        num_tangential_poss = int(num_tangential_poss)
        if num_tangential_poss < 1:
            raise GeometryError(f"ProjDataInfo: num_tangential_poss must be >= 1 (got {num_tangential_poss})")
        # STIR (ProjDataInfoCylindricalNoArcCorr.cxx) refuses more non-arc-corrected positions
        # than the scanner has; arc-corrected data may have any number
        if not arc_corrected and num_tangential_poss > scanner.max_num_non_arccorrected_bins:
            raise GeometryError(
                f"ProjDataInfo: num_tangential_poss={num_tangential_poss} exceeds the "
                f"{scanner.max_num_non_arccorrected_bins} non-arc-corrected bins of "
                f"{scanner.name!r} (STIR refuses such data)"
            )
        tof = _tof_sampling(scanner, int(num_tof_poss), tof_mash_factor)

        self._scanner = scanner
        self._segments = segments
        self._seg_index = {s.segment_num: k for k, s in enumerate(segments)}
        self._num_views = num_views
        self._num_tang = num_tangential_poss
        self._min_tang = -(num_tangential_poss // 2) if min_tangential_pos_num is None else int(min_tangential_pos_num)
        self._arc_corrected = bool(arc_corrected)
        ts = scanner.default_bin_size if tangential_sampling is None else float(tangential_sampling)
        if not ts > 0:
            raise GeometryError(f"ProjDataInfo: tangential_sampling must be positive (got {ts})")
        self._tang_sampling = ts
        self._tof = tof
        # STIR (ProjDataInfoCylindrical.cxx): the scanner's intrinsic tilt, plus half a mash for
        # view-mashed data; views that do not divide the unmashed ones are accepted (STIR warns)
        # without that shift
        mash = n_half // num_views if n_half % num_views == 0 else 1
        self._phi_offset = scanner.intrinsic_azimuthal_tilt + (math.pi / n_half) * (mash - 1) / 2

    # -- construction like STIR ---------------------------------------------------------
    @classmethod
    def construct(
        cls,
        scanner: Scanner,
        span: int,
        max_ring_diff: int,
        num_views: int | None = None,
        num_tangential_poss: int | None = None,
        arc_corrected: bool = False,
        num_tof_poss: int = 1,
        tof_mash_factor: int | None = None,
    ) -> ProjDataInfo:
        """Like STIR's ``ProjDataInfo::construct_proj_data_info(scanner, span, max_delta,
        num_views, num_tangential_poss, arc_corrected, tof_mashing_factor)``; TOF as in the
        constructor (``tof_mash_factor`` 0 or None with ``num_tof_poss`` 1: non-TOF).

        The segments of span ``S``: :func:`stirgpu.geometry.segments.span_ring_differences`.
        Defaults: all views (no mashing), the scanner's maximum number of tangential positions
        (non-arc-corrected) or default number of arc-corrected bins.
        """
        lo, hi = span_ring_differences(scanner.num_rings, int(span), int(max_ring_diff), scanner.name)
        if num_views is None:
            num_views = scanner.num_views_unmashed
        if num_tangential_poss is None:
            num_tangential_poss = (
                scanner.default_num_arccorrected_bins if arc_corrected else scanner.max_num_non_arccorrected_bins
            )
        return cls(
            scanner,
            lo,
            hi,
            num_views,
            num_tangential_poss,
            arc_corrected,
            num_tof_poss=num_tof_poss,
            tof_mash_factor=tof_mash_factor,
        )

    def replace(self, **changes) -> ProjDataInfo:
        """A copy with constructor arguments changed."""
        kw: dict[str, Any] = dict(
            scanner=self._scanner,
            min_ring_diff=[s.min_ring_diff for s in self._segments],
            max_ring_diff=[s.max_ring_diff for s in self._segments],
            num_views=self._num_views,
            num_tangential_poss=self._num_tang,
            arc_corrected=self._arc_corrected,
            tangential_sampling=self._tang_sampling,
            min_tangential_pos_num=self._min_tang,
            tof_mash_factor=self._tof.mash_factor,
            num_axial_poss=[s.num_axial_poss for s in self._segments],
        )
        if "num_tof_poss" in changes and "tof_mash_factor" not in changes:
            kw["tof_mash_factor"] = None
        if "num_tangential_poss" in changes and "min_tangential_pos_num" not in changes:
            kw["min_tangential_pos_num"] = None
        # new ring differences get STIR's default axial positions unless given too
        if ({"min_ring_diff", "max_ring_diff"} & changes.keys()) and "num_axial_poss" not in changes:
            kw["num_axial_poss"] = None
        kw.update(changes)
        return ProjDataInfo(**kw)

    def reduce_segment_range(self, min_segment_num: int, max_segment_num: int) -> ProjDataInfo:
        """STIR's ``reduce_segment_range``: keep segments min..max (must include 0)."""
        if not (self.get_min_segment_num() <= min_segment_num <= 0 <= max_segment_num <= self.get_max_segment_num()):
            raise GeometryError(
                f"reduce_segment_range: [{min_segment_num}, {max_segment_num}] must "
                f"contain 0 and lie in [{self.get_min_segment_num()}, "
                f"{self.get_max_segment_num()}]"
            )
        keep = [s for s in self._segments if min_segment_num <= s.segment_num <= max_segment_num]
        return self.replace(
            min_ring_diff=[s.min_ring_diff for s in keep],
            max_ring_diff=[s.max_ring_diff for s in keep],
            num_axial_poss=[s.num_axial_poss for s in keep],
        )

    # -- value semantics ---------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if other is self:  # every projector call compares its stores' geometry with its own
            return True
        if not isinstance(other, ProjDataInfo):
            return NotImplemented
        return (
            self._scanner == other._scanner
            and self._segments == other._segments
            and self._num_views == other._num_views
            and self._num_tang == other._num_tang
            and self._min_tang == other._min_tang
            and self._arc_corrected == other._arc_corrected
            and self._tof == other._tof
            and (not self._arc_corrected or math.isclose(self._tang_sampling, other._tang_sampling, rel_tol=2e-6))
        )

    def __hash__(self) -> int:
        return hash((self._num_views, self._num_tang, len(self._segments), self._arc_corrected))

    def __repr__(self) -> str:
        sc = self._scanner
        named = Scanner.is_known(sc.name) and Scanner.from_name(sc.name) == sc
        return (
            f"ProjDataInfo({f'Scanner.from_name({sc.name!r})' if named else repr(sc)}, "
            f"min_ring_diff={[s.min_ring_diff for s in self._segments]}, "
            f"max_ring_diff={[s.max_ring_diff for s in self._segments]}, "
            f"num_views={self._num_views}, num_tangential_poss={self._num_tang}, "
            f"arc_corrected={self._arc_corrected}"
            + (f", tangential_sampling={self._tang_sampling!r}" if self._arc_corrected else "")
            + (f", tof_mash_factor={self._tof.mash_factor}" if self._tof.is_tof else "")
            + ")"
        )

    # -- STIR accessors ----------------------------------------------------------------
    def get_scanner(self) -> Scanner:
        return self._scanner

    @property
    def scanner(self) -> Scanner:
        return self._scanner

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        """Segments in ascending ring-difference order (the order of Interfile files)."""
        return self._segments

    @property
    def segment_nums(self) -> tuple[int, ...]:
        return tuple(s.segment_num for s in self._segments)

    @property
    def segment_nums_stir_order(self) -> tuple[int, ...]:
        """0, +1, -1, +2, -2, ...: the order of ``as_array()`` and ProjDataInMemory."""
        out = [0]
        for k in range(1, max(-self.get_min_segment_num(), self.get_max_segment_num()) + 1):
            out += [s for s in (k, -k) if s in self._seg_index]
        return tuple(out)

    def segment(self, segment_num: int) -> SegmentInfo:
        try:
            return self._segments[self._seg_index[int(segment_num)]]
        except KeyError:
            raise GeometryError(
                f"segment {segment_num} out of range [{self.get_min_segment_num()}, {self.get_max_segment_num()}]"
            ) from None

    def get_min_segment_num(self) -> int:
        return self._segments[0].segment_num

    def get_max_segment_num(self) -> int:
        return self._segments[-1].segment_num

    def get_num_segments(self) -> int:
        return len(self._segments)

    def get_num_views(self) -> int:
        return self._num_views

    def get_min_view_num(self) -> int:
        return 0

    def get_max_view_num(self) -> int:
        return self._num_views - 1

    def get_view_mashing_factor(self) -> int:
        return self._scanner.num_views_unmashed // self._num_views

    def get_num_tangential_poss(self) -> int:
        return self._num_tang

    def get_min_tangential_pos_num(self) -> int:
        return self._min_tang

    def get_max_tangential_pos_num(self) -> int:
        return self._min_tang + self._num_tang - 1

    def get_num_axial_poss(self, segment_num: int) -> int:
        return self.segment(segment_num).num_axial_poss

    def get_min_axial_pos_num(self, segment_num: int) -> int:
        self.segment(segment_num)
        return 0

    def get_max_axial_pos_num(self, segment_num: int) -> int:
        return self.segment(segment_num).num_axial_poss - 1

    def get_min_ring_difference(self, segment_num: int) -> int:
        return self.segment(segment_num).min_ring_diff

    def get_max_ring_difference(self, segment_num: int) -> int:
        return self.segment(segment_num).max_ring_diff

    def get_max_ring_difference_overall(self) -> int:
        return max(max(abs(s.min_ring_diff), abs(s.max_ring_diff)) for s in self._segments)

    # -- TOF (geometry.tof; STIR's accessors) ---------------------------------------------
    @property
    def tof(self) -> TofSampling:
        """The TOF sampling (mashing factor, timing positions, widths)."""
        return self._tof

    def get_num_tof_poss(self) -> int:
        return self._tof.num_poss

    def get_tof_mash_factor(self) -> int:
        """STIR's TOF mashing factor: 0 for non-TOF data."""
        return self._tof.mash_factor

    def get_min_tof_pos_num(self) -> int:
        return self._tof.min_pos

    def get_max_tof_pos_num(self) -> int:
        return self._tof.max_pos

    def is_tof_data(self) -> bool:
        """STIR's rule: a positive TOF mashing factor (even one that leaves one position)."""
        return self._tof.is_tof

    def get_k(self, timing_pos: int) -> float:
        """Centre (mm) of a timing position along the LOR from its midpoint (STIR's ``get_k``)."""
        return self._tof.k(timing_pos)

    def get_sampling_in_k(self, timing_pos: int = 0) -> float:
        """Width (mm) of a timing position (STIR's ``get_sampling_in_k``)."""
        return self._tof.sampling_in_k(timing_pos)

    def get_tof_delta_time(self, timing_pos: int) -> float:
        return self._tof.delta_time_ps(timing_pos)

    def get_tof_bin(self, delta_time_ps: float) -> int:
        return self._tof.bin_of_delta_time(delta_time_ps)

    def tof_bin_boundaries_mm(self, timing_pos: int) -> tuple[float, float]:
        return self._tof.boundaries_mm(timing_pos)

    def tof_bin_boundaries_ps(self, timing_pos: int) -> tuple[float, float]:
        return self._tof.boundaries_ps(timing_pos)

    def create_non_tof_clone(self) -> ProjDataInfo:
        """The same geometry without TOF (STIR's ``create_non_tof_clone``)."""
        return self.replace(tof_mash_factor=0)

    def get_num_non_tof_sinograms(self) -> int:
        return self.get_num_axial_poss_total()

    def is_arc_corrected(self) -> bool:
        return self._arc_corrected

    @property
    def arc_corrected(self) -> bool:
        return self._arc_corrected

    def get_tangential_sampling(self) -> float:
        """Arc-corrected bin size (mm); for non-arc-corrected data, the central bin size."""
        if self._arc_corrected:
            return self._tang_sampling
        return self._scanner.effective_ring_radius * math.sin(math.pi / self._scanner.num_detectors_per_ring)

    def get_sampling_in_s(self) -> float:
        return self.get_tangential_sampling()

    def get_sampling_in_m(self, segment_num: int) -> float:
        return self.segment(segment_num).sampling_in_m

    def get_azimuthal_angle_offset(self) -> float:
        return self._phi_offset

    def get_azimuthal_angle_sampling(self) -> float:
        return math.pi / self._num_views

    def get_num_axial_poss_total(self) -> int:
        return sum(s.num_axial_poss for s in self._segments)

    def get_num_sinograms(self) -> int:
        """Sinograms over all segments (and TOF positions), as STIR counts them."""
        return self.get_num_axial_poss_total() * self._tof.num_poss

    def num_bins(self, segment_num: int | None = None) -> int:
        """Bins in one segment (one TOF position), or in all data when ``segment_num`` is None."""
        if segment_num is None:
            return self.get_num_sinograms() * self._num_views * self._num_tang
        return self.get_num_axial_poss(segment_num) * self._num_views * self._num_tang

    @property
    def total_num_bins(self) -> int:
        return self.num_bins()

    # -- coordinates (vectorised, float64) -----------------------------------------------
    def _check_range(self, name: str, idx: np.ndarray, lo: int, hi: int) -> None:
        if idx.size and (idx.min() < lo or idx.max() > hi):
            raise GeometryError(f"{name} out of range [{lo}, {hi}]: got values in [{idx.min()}, {idx.max()}]")

    def get_phi(self, view) -> np.ndarray | float:
        """Azimuthal angle (radians) of view(s)."""
        v = np.asarray(view)
        self._check_range("view", v, 0, self._num_views - 1)
        out = v * (math.pi / self._num_views) + self._phi_offset
        return float(out) if out.ndim == 0 else out

    def get_s(self, tangential_pos) -> np.ndarray | float:
        """Signed distance (mm) of the LOR from the scanner axis."""
        t = np.asarray(tangential_pos)
        self._check_range("tangential position", t, self._min_tang, self.get_max_tangential_pos_num())
        if self._arc_corrected:
            out = t * self._tang_sampling
        else:
            out = self._scanner.effective_ring_radius * np.sin(t * (math.pi / self._scanner.num_detectors_per_ring))
        return float(out) if np.ndim(out) == 0 else out

    def get_m(self, segment_num: int, axial_pos) -> np.ndarray | float:
        """Axial position (mm) of the LOR's centre, relative to the scanner's axial centre."""
        seg = self.segment(segment_num)
        a = np.asarray(axial_pos)
        self._check_range(f"axial position of segment {segment_num}", a, 0, seg.num_axial_poss - 1)
        out = a * seg.sampling_in_m - seg.m_offset
        return float(out) if out.ndim == 0 else out

    def get_tantheta(self, segment_num: int, tangential_pos) -> np.ndarray | float:
        """tan of the polar angle: Delta * ring_spacing / (2 sqrt(R^2 - s^2))."""
        seg = self.segment(segment_num)
        s = np.asarray(self.get_s(tangential_pos))
        R = self._scanner.effective_ring_radius
        out = (seg.average_ring_difference * self._scanner.ring_spacing) / (2.0 * np.sqrt(R * R - s * s))
        return float(out) if out.ndim == 0 else out

    def lor_endpoints(
        self, segment_num: int, view, axial_pos, tangential_pos, radius: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Endpoints of the LORs of the given bins (indices broadcast together).

        Returns ``(start, end)``, float64 arrays of shape ``broadcast + (3,)`` in the
        axis order **(z, y, x)**, mm, gantry frame, clipped to the cylinder of ``radius``
        (default: the scanner's max FOV radius).  A LOR with ``|s| >= radius`` has
        ``start == end`` (zero length).  Same formulas as :class:`ChunkTables`.
        """
        r = self._scanner.max_FOV_radius if radius is None else float(radius)
        v, a, t = np.broadcast_arrays(np.asarray(view), np.asarray(axial_pos), np.asarray(tangential_pos))
        phi = np.asarray(self.get_phi(v), dtype=np.float64)
        s = np.asarray(self.get_s(t), dtype=np.float64)
        m = np.asarray(self.get_m(segment_num, a), dtype=np.float64)
        tt = np.asarray(self.get_tantheta(segment_num, t), dtype=np.float64)
        return lor_endpoints_from(phi, s, m, tt, r)

    def chunk_tables(
        self,
        segment_num: int,
        views: Iterable[int] | None = None,
        radius: float | None = None,
        axial_poss: Iterable[int] | None = None,
        tangential_poss: Iterable[int] | None = None,
    ) -> ChunkTables:
        """Tables for a geometry-aware kernel: one segment, some views (default all), optional
        sub-ranges of axial and tangential positions.  See :class:`ChunkTables`."""
        seg = self.segment(segment_num)
        r = self._scanner.max_FOV_radius if radius is None else float(radius)
        if not r > 0:
            raise GeometryError(f"chunk_tables: radius must be positive (got {r})")
        v = np.arange(self._num_views) if views is None else np.asarray(list(views), dtype=np.int64)
        ax = np.arange(seg.num_axial_poss) if axial_poss is None else np.asarray(list(axial_poss), dtype=np.int64)
        tg = (
            np.arange(self._min_tang, self._min_tang + self._num_tang)
            if tangential_poss is None
            else np.asarray(list(tangential_poss), dtype=np.int64)
        )
        phi = np.atleast_1d(np.asarray(self.get_phi(v), dtype=np.float64))
        s = np.atleast_1d(np.asarray(self.get_s(tg), dtype=np.float64))
        return ChunkTables(
            segment=seg.segment_num,
            views=read_only(v.astype(np.int64)),
            axial_poss=read_only(ax.astype(np.int64)),
            tangential_poss=read_only(tg.astype(np.int64)),
            cos_phi=read_only(np.cos(phi)),
            sin_phi=read_only(np.sin(phi)),
            s=read_only(s),
            half_chord=read_only(half_chords(s, r)),
            tantheta=read_only(np.atleast_1d(np.asarray(self.get_tantheta(seg.segment_num, tg), dtype=np.float64))),
            m=read_only(np.atleast_1d(np.asarray(self.get_m(seg.segment_num, ax), dtype=np.float64))),
            radius=r,
        )

    # -- subsets and selections ----------------------------------------------------------
    def subset_views(self, subset_num: int, num_subsets: int) -> np.ndarray:
        """Views of subset ``subset_num`` of ``num_subsets``, exactly as STIR assigns them
        (trivial symmetries): views v with (v - min_view) % num_subsets == subset_num."""
        subset_num, num_subsets = int(subset_num), int(num_subsets)
        if num_subsets < 1 or not 0 <= subset_num < num_subsets:
            raise GeometryError(
                f"subset {subset_num} of {num_subsets}: need num_subsets >= 1 and 0 <= subset_num < num_subsets"
            )
        if num_subsets > self._num_views:
            raise GeometryError(f"{num_subsets} subsets but only {self._num_views} views")
        return np.arange(subset_num, self._num_views, num_subsets, dtype=np.int64)

    def subsets_are_balanced(self, num_subsets: int) -> bool:
        """True when every subset has the same number of views (OSMAPOSL's requirement,
        with or without subset sensitivities)."""
        return self._num_views % int(num_subsets) == 0

    def select(self, segments: Iterable[int] | None = None, views: Iterable[int] | None = None) -> Selection:
        """A selection of segments and views of this geometry (a subset is one)."""
        return Selection.of(self, segments, views)

    def subset(self, subset_num: int, num_subsets: int, segments: Iterable[int] | None = None) -> Selection:
        return self.select(segments, self.subset_views(subset_num, num_subsets))

    def __getitem__(self, key) -> Selection:
        """``pdi[segments, views]`` with ints, slices or sequences (tomosipo-style slicing)."""
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2:
            raise GeometryError("ProjDataInfo[...] takes (segments, views)")
        seg_key, view_key = key
        all_segs = np.array(self.segment_nums)
        if isinstance(seg_key, slice):
            lo = self.get_min_segment_num() if seg_key.start is None else seg_key.start
            hi = self.get_max_segment_num() + 1 if seg_key.stop is None else seg_key.stop
            segs = [s for s in all_segs[(all_segs >= lo) & (all_segs < hi)]][:: seg_key.step or 1]
        else:
            segs = np.atleast_1d(seg_key).tolist()
        views = np.arange(self._num_views)[view_key] if isinstance(view_key, slice) else np.atleast_1d(view_key)
        return self.select(segs, views)
