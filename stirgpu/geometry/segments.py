"""The segments of cylindrical projection data: which ring differences each holds and how
many axial positions it has (STIR's ``ProjDataInfoCylindrical`` ring-difference arrays).

Two ways in, as in STIR: ring-difference ranges listed in a header
(:func:`segments_from_ring_differences`), or a span and a maximum ring difference
(:func:`span_ring_differences`, STIR's ``construct_proj_data_info``).  Formulas in
``docs/conventions.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..errors import GeometryError

__all__ = ["SegmentInfo", "segments_from_ring_differences", "span_ring_differences"]


@dataclasses.dataclass(frozen=True)
class SegmentInfo:
    """One segment: its ring-difference range and axial sampling."""

    segment_num: int
    min_ring_diff: int
    max_ring_diff: int
    num_axial_poss: int
    #: axial distance between consecutive axial positions (mm)
    sampling_in_m: float
    #: m = axial_pos * sampling_in_m - m_offset   (m is centred on the scanner)
    m_offset: float

    @property
    def average_ring_difference(self) -> float:
        return 0.5 * (self.min_ring_diff + self.max_ring_diff)


def segments_from_ring_differences(
    n_rings: int,
    ring_spacing: float,
    min_ring_diff: Sequence[int],
    max_ring_diff: Sequence[int],
    num_axial_poss: Sequence[int] | None,
) -> tuple[SegmentInfo, ...]:
    """The segments of ring-difference ranges given in ascending order (the one holding ring
    difference 0 becomes segment 0, the others are numbered outwards), with the axial positions
    given per segment or, when ``num_axial_poss`` is None, STIR's default for these ranges."""
    rd_min = [int(v) for v in min_ring_diff]
    rd_max = [int(v) for v in max_ring_diff]
    i0 = _segment_zero_index(n_rings, rd_min, rd_max)
    if num_axial_poss is None:
        axial = _stir_axial_poss(n_rings, rd_min, rd_max, i0)
    else:
        axial = [int(v) for v in num_axial_poss]
        if len(axial) != len(rd_min):
            raise GeometryError(f"ProjDataInfo: num_axial_poss has {len(axial)} entries for {len(rd_min)} segments")
    segments = []
    for i, (a, b, nax) in enumerate(zip(rd_min, rd_max, axial, strict=True)):
        seg = i - i0
        # STIR: half the ring spacing where a segment combines ring differences, else full
        sampling = ring_spacing if a == b else ring_spacing / 2
        _check_axial_poss(seg, a, b, nax, sampling == ring_spacing)
        # STIR's m_offset makes m symmetric about the scanner centre: (min + max) * sampling / 2
        segments.append(SegmentInfo(seg, a, b, nax, sampling, (nax - 1) * sampling / 2))
    return tuple(segments)


def span_ring_differences(
    n_rings: int, span: int, max_ring_diff: int, scanner_name: str
) -> tuple[list[int], list[int]]:
    """The ascending (min, max) ring-difference ranges of STIR's span ``S`` (``ProjDataInfoCTI`` in
    ``ProjDataInfo.cxx``): segment 0 covers [-(S-1)/2, (S-1)/2] for odd ``S`` and [-S/2, S/2]
    (S + 1 differences) for even ``S``; each further segment the next ``S`` ring differences; the
    last segment (segment 0 itself where an even span's exceeds it) is clipped at
    ``max_ring_diff``."""
    if not 1 <= span <= 2 * n_rings - 1:
        raise GeometryError(
            f"construct: span must be in [1, {2 * n_rings - 1}] for the {n_rings} rings "
            f"of {scanner_name!r} (got {span})"
        )
    if not 0 <= max_ring_diff < n_rings:
        raise GeometryError(
            f"construct: max_ring_diff must be in [0, {n_rings - 1}] for {scanner_name!r} (got {max_ring_diff})"
        )
    if max_ring_diff < (span - 1) // 2:
        raise GeometryError(f"construct: max_ring_diff {max_ring_diff} is smaller than (span-1)/2 = {(span - 1) // 2}")
    lo0 = -((span - 1) // 2) if span % 2 else -(span // 2)
    hi0 = lo0 + span - 1 if span % 2 else lo0 + span
    pos = [(lo0, min(hi0, max_ring_diff))]
    while pos[-1][1] < max_ring_diff:
        a = pos[-1][1] + 1
        pos.append((a, min(a + span - 1, max_ring_diff)))
    neg = [(-b, -a) for a, b in reversed(pos[1:])]
    ranges = neg + pos
    return [a for a, _ in ranges], [b for _, b in ranges]


def _segment_zero_index(n_rings: int, rd_min: list[int], rd_max: list[int]) -> int:
    """Where in the list the segment holding ring difference 0 is, after checking that the
    ranges are possible, ascending and contiguous."""
    if len(rd_min) != len(rd_max) or not rd_min:
        raise GeometryError(
            "ProjDataInfo: min_ring_diff and max_ring_diff must be non-empty and of "
            f"equal length (got {len(rd_min)} and {len(rd_max)})"
        )
    for i, (a, b) in enumerate(zip(rd_min, rd_max, strict=True)):
        if a > b:
            raise GeometryError(
                f"ProjDataInfo: segment {i} (in file order) has min ring difference {a} > max ring difference {b}"
            )
        if max(abs(a), abs(b)) >= n_rings:
            raise GeometryError(
                f"ProjDataInfo: ring difference range [{a}, {b}] impossible for a scanner with {n_rings} rings"
            )
        if i and a != rd_max[i - 1] + 1:
            raise GeometryError(
                "ProjDataInfo: segments must be listed in ascending, contiguous "
                f"ring-difference order; [{rd_min[i - 1]}, {rd_max[i - 1]}] is followed "
                f"by [{a}, {b}]"
            )
    zero = [i for i, (a, b) in enumerate(zip(rd_min, rd_max, strict=True)) if a <= 0 <= b]
    if not zero:
        raise GeometryError(
            f"ProjDataInfo: no segment contains ring difference 0 (ranges {list(zip(rd_min, rd_max, strict=True))})"
        )
    return zero[0]


def _stir_axial_poss(n_rings: int, rd_min: Sequence[int], rd_max: Sequence[int], i0: int) -> list[int]:
    """Axial positions per segment as STIR's ``construct_proj_data_info`` makes them
    (``ProjDataInfo.cxx``): span-1 data (segment 0 holds ring difference 0 only) has N - |RD|;
    otherwise segment 0 has 2N - 1 and every other segment 2N - 1 - 2 min|RD|, even one that a
    maximum ring difference clipped to a single ring difference (those keep full ring spacing,
    so they reach past the scanner's ends: STIR's rule, not a physical count)."""
    if rd_min[i0] == rd_max[i0]:
        return [n_rings - abs(a) for a in rd_min]
    return [
        2 * n_rings - 1 if a <= 0 <= b else 2 * n_rings - 1 - 2 * min(abs(a), abs(b))
        for a, b in zip(rd_min, rd_max, strict=True)
    ]


def _check_axial_poss(seg: int, a: int, b: int, nax: int, full_ring_spacing: bool) -> None:
    """STIR's own checks on a given number of axial positions (``ProjDataInfoCylindrical.cxx``,
    ``initialise_ring_diff_arrays``): at half ring spacing an even count puts the positions between
    the usual locations (STIR refuses it); at full ring spacing every count is accepted."""
    if nax < 1:
        raise GeometryError(
            f"ProjDataInfo: segment {seg} (ring differences [{a}, {b}]) needs at least one axial position (got {nax})"
        )
    if not full_ring_spacing and nax % 2 == 0:
        raise GeometryError(
            f"ProjDataInfo: segment {seg} (ring differences [{a}, {b}]) is sampled at half "
            f"the ring spacing, so STIR requires an odd number of axial positions (got {nax})"
        )
