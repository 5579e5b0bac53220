"""Time-of-flight sampling of projection data (what STIR's ``ProjDataInfo`` knows about TOF).

STIR's rules (``ProjDataInfo::set_tof_mash_factor``, ``get_k``, ``get_sampling_in_k`` in
``ProjDataInfo.cxx``; ``TOF_conversions.h``; ``ParallelprojHelper.cxx``), all in STIR's float32
arithmetic where STIR stores a float, so that bin centres and boundaries equal STIR's to the bit:

* a scanner is TOF-ready when its maximum number of (unmashed) timing positions, their size (ps)
  and its timing resolution (ps) are all positive; data of a scanner that is not, or with a TOF
  mashing factor of 0, are non-TOF (one timing position, mashing factor 0);
* the mashing factor must divide the scanner's maximum number of timing positions; the data then
  have ``N = max / mash`` timing positions numbered ``-N//2 .. -N//2 + N - 1`` (odd N: symmetric;
  even N: one more below zero);
* a timing position is ``w = c/2 * mash * size_ps`` mm wide (``c/2`` = 0.149896229 mm/ps), and
  its centre along the LOR is ``k * w`` for odd N and ``k * w + w/2`` for even N;
* the Gaussian TOF kernel has sigma = (c/2 * timing resolution) / 2.355 mm.

Values are immutable; see ``docs/tof.md``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError

__all__ = ["TofSampling", "SPEED_OF_LIGHT_MM_PER_PS_DIV2", "tof_delta_time_to_mm", "mm_to_tof_delta_time"]

#: STIR's ``speed_of_light_in_mm_per_ps_div2`` (``common.h``): mm of LOR per ps of time difference
SPEED_OF_LIGHT_MM_PER_PS_DIV2 = 0.299792458 * 0.5

#: STIR's FWHM -> sigma factor of the TOF kernel (``ParallelprojHelper.cxx``)
FWHM_OVER_SIGMA = 2.355

_F = np.float32


def tof_delta_time_to_mm(delta_ps: float) -> float:
    """STIR's ``tof_delta_time_to_mm``: ps -> mm, computed in double, returned as float32."""
    return float(_F(float(delta_ps) * SPEED_OF_LIGHT_MM_PER_PS_DIV2))


def mm_to_tof_delta_time(mm: float) -> float:
    """STIR's ``mm_to_tof_delta_time``: mm -> ps (double).  STIR divides by c/2; its build
    (``-ffast-math``) multiplies by the reciprocal, which rounds differently: that is taken."""
    return float(mm) * (1.0 / SPEED_OF_LIGHT_MM_PER_PS_DIV2)


def is_tof_ready(max_num_timing_poss: int, size_of_timing_pos: float, timing_resolution: float) -> bool:
    """STIR's ``Scanner::is_tof_ready``."""
    return max_num_timing_poss > 0 and size_of_timing_pos > 0 and timing_resolution > 0


@dataclasses.dataclass(frozen=True)
class TofSampling:
    """The TOF sampling of projection data: mashing factor, timing positions, their widths.

    Build it with :meth:`of` (STIR's ``set_tof_mash_factor``).  ``mash_factor == 0`` is
    non-TOF data: one timing position, number 0.
    """

    mash_factor: int
    num_poss: int
    # both follow from the scanner, which ProjDataInfo compares to float32 precision
    #: width of one (mashed) timing position, mm (STIR's ``tof_increament_in_mm``, float32)
    increment_mm: float = dataclasses.field(compare=False)
    #: the scanner's timing resolution (FWHM, ps)
    timing_resolution_ps: float = dataclasses.field(compare=False)

    @classmethod
    def non_tof(cls) -> TofSampling:
        return cls(0, 1, 0.0, 0.0)

    @classmethod
    def of(cls, scanner, mash_factor: int) -> TofSampling:
        """STIR's ``ProjDataInfo::set_tof_mash_factor(mash_factor)`` for ``scanner``."""
        mash = int(mash_factor)
        if mash < 0:
            raise GeometryError(f"tof_mash_factor must be >= 0 (0: non-TOF data), got {mash}")
        max_poss = int(scanner.max_num_timing_poss)
        size_ps = float(scanner.size_of_timing_pos)
        ready = is_tof_ready(max_poss, size_ps, float(scanner.timing_resolution))
        if mash == 0 or not ready:
            # STIR: a scanner that is not TOF-ready gives non-TOF data whatever the mashing factor
            return cls.non_tof()
        if mash > max_poss:
            raise GeometryError(
                f"tof_mash_factor {mash} exceeds the {max_poss} (unmashed) TOF time bins of {scanner.name!r}"
            )
        if max_poss % mash:
            raise GeometryError(
                f"tof_mash_factor {mash} does not divide the {max_poss} (unmashed) TOF time bins of "
                f"{scanner.name!r} (STIR refuses it)"
            )
        # STIR: tof_delta_time_to_mm(tof_mash_factor * size_of_timing_pos), the product in float
        increment = tof_delta_time_to_mm(float(_F(_F(mash) * _F(size_ps))))
        return cls(mash, max_poss // mash, increment, float(scanner.timing_resolution))

    # -- STIR's accessors ------------------------------------------------------------------
    @property
    def is_tof(self) -> bool:
        """STIR's ``is_tof_data``: a positive mashing factor (even if it leaves one position)."""
        return self.mash_factor > 0

    @property
    def min_pos(self) -> int:
        # C++'s -N/2 truncates towards zero: -(N // 2) for positive N
        return -(self.num_poss // 2)

    @property
    def max_pos(self) -> int:
        return self.min_pos + self.num_poss - 1

    @property
    def positions(self) -> np.ndarray:
        """The timing position numbers, ascending (the order of the data's TOF axis)."""
        return np.arange(self.min_pos, self.max_pos + 1, dtype=np.int64)

    def check_pos(self, timing_pos: int) -> int:
        k = int(timing_pos)
        if not self.min_pos <= k <= self.max_pos:
            raise GeometryError(f"timing position {k} out of range [{self.min_pos}, {self.max_pos}]")
        return k

    def k(self, timing_pos: int) -> float:
        """STIR's ``get_k``: centre (mm, float32) of a timing position along the LOR, relative to
        the LOR's midpoint.  Any integer is accepted, as STIR's formula does (neighbours outside
        the range give the sampling at the ends)."""
        # STIR's build fuses ``k * inc + inc / 2`` (one rounding, FMA); in double both the
        # product (int times float32) and the sum are exact, so rounding once to float32 is that
        inc = float(_F(self.increment_mm))
        centre = int(timing_pos) * inc + (inc / 2 if self.num_poss % 2 == 0 else 0.0)
        return float(_F(centre))

    def sampling_in_k(self, timing_pos: int = 0) -> float:
        """STIR's ``get_sampling_in_k``: width (mm, float32) of a timing position,
        (k(t+1) - k(t-1)) / 2 in float32."""
        t = int(timing_pos)
        return float(_F(_F(_F(self.k(t + 1)) - _F(self.k(t - 1))) / _F(2)))

    def centres_mm(self) -> np.ndarray:
        """Centre (mm) of each timing position, ascending position number (float64 holding
        STIR's float32 values)."""
        return np.array([self.k(t) for t in self.positions], dtype=np.float64)

    def boundaries_mm(self, timing_pos: int) -> tuple[float, float]:
        """STIR's ``tof_bin_boundaries_mm[k]``: (low, high), centre -+ sampling / 2, float32."""
        k = self.check_pos(timing_pos)
        c, w = _F(self.k(k)), _F(self.sampling_in_k(k))
        half = _F(w / _F(2))
        return float(_F(c - half)), float(_F(c + half))

    def boundaries_ps(self, timing_pos: int) -> tuple[float, float]:
        """STIR's ``tof_bin_boundaries_ps[k]``: the mm boundaries in ps, float32."""
        lo, hi = self.boundaries_mm(timing_pos)
        return float(_F(mm_to_tof_delta_time(lo))), float(_F(mm_to_tof_delta_time(hi)))

    def delta_time_ps(self, timing_pos: int) -> float:
        """STIR's ``get_tof_delta_time``: the centre in ps (double)."""
        return mm_to_tof_delta_time(self.k(self.check_pos(timing_pos)))

    def bin_of_delta_time(self, delta_ps: float) -> int:
        """STIR's ``get_tof_bin``: the timing position whose [low, high) ps boundaries hold
        ``delta_ps``; 0 for non-TOF data.  A delta time in no position -- outside the range, or
        in one of the float32 gaps between neighbouring boundaries -- gives the lowest position,
        as STIR's does (STIR warns too)."""
        if not self.is_tof:
            return 0
        d = float(delta_ps)
        for k in self.positions:
            lo, hi = self.boundaries_ps(int(k))
            if lo <= d < hi:
                return int(k)
        return self.min_pos

    def sigma_mm(self) -> float:
        """Sigma (mm) of STIR's Gaussian TOF kernel: ``tof_delta_time_to_mm(resolution) / 2.355``
        (double, as ``ParallelprojHelper`` computes it before scaling)."""
        return tof_delta_time_to_mm(self.timing_resolution_ps) / FWHM_OVER_SIGMA
