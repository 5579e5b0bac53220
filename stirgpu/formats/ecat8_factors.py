"""Bin efficiencies from an ECAT8 norm file, bin for bin STIR's
``BinNormalisationFromECAT8::get_uncalibrated_bin_efficiency``, computed box by box (a segment, a
range of views and axial positions, every tangential position) with numpy.

For a bin (segment ``s``, view ``v``, axial position ``a``, tangential position ``t``) of
non-arc-corrected data with view mashing ``M``:

* ``ring1 + ring2`` is fixed by ``(s, a)`` (``calc_ring1_plus_ring2``); every ring difference ``d``
  of the segment with that parity and both rings on the scanner contributes the ring pair
  ``ring1 = (sum - d) / 2``, ``ring2 = (sum + d) / 2``;
* each unmashed view ``u = v M + k`` gives the detectors ``det1, det2`` of ``(u, t)`` (STIR's
  ``get_det_num_pair_for_view_tangential_pos_num``);
* a pair contributes ``eff[ring1, det1] * eff[ring2, det2] * geo[ring1 + ring2, t] /
  axial[sino(ring1, ring2)]`` (axial effects of the Siemens sinogram holding that ring pair, 1
  where the norm file has none: ring differences beyond its maximum), the sum over pairs times
  ``interference[t, u mod crystals per block]``;
* the unmashed views are summed as STIR sums them: STIR adds a running total over the views (the
  view sum is not reset between them), so view ``k`` of ``M`` counts ``M - k`` times.  Without
  mashing this is the plain sum; with mashing it is what STIR's numbers are.

Each component can be left out (STIR's ``use_*`` keys); dead time is never applied (STIR's key is
not parsed and its default is off).  STIR's calibration factor is 1 here as in STIR (its
``post_processing`` sets 1) and the branching ratio 1 (STIR's radionuclide of the normalisation is
never set), so the efficiency is the uncalibrated one.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..geometry import ProjDataInfo
from .abilities import StoreAbilities
from .ecat8_norm import Ecat8Norm
from .projdata import ProjData
from .storage_order import StorageOrder

__all__ = ["Ecat8Components", "Ecat8Efficiencies", "Ecat8NormalisationFactors", "siemens_sinogram_index"]

#: STIR's ``BinNormalisation::apply`` divides by ``max(1e-20, efficiency)``
MIN_EFFICIENCY = np.float32(1e-20)
#: views computed at once (bounds the temporaries: views x axial positions x tangential float64)
_VIEWS_PER_STEP = 8


@dataclasses.dataclass(frozen=True)
class Ecat8Components:
    """STIR's ``use_*`` keys of ``Bin Normalisation From ECAT8`` (all on by default, as STIR)."""

    detector_efficiencies: bool = True
    geometric_factors: bool = True
    crystal_interference_factors: bool = True
    axial_effects_factors: bool = True


def _ring_sums(pdi: ProjDataInfo, segment: int, axial: np.ndarray) -> np.ndarray:
    """``ring1 + ring2`` of the axial positions of ``segment`` (STIR's ``calc_ring1_plus_ring2``)."""
    lo, hi = pdi.get_min_axial_pos_num(segment), pdi.get_max_axial_pos_num(segment)
    compressed = pdi.get_min_ring_difference(segment) != pdi.get_max_ring_difference(segment)
    x = 2 * axial - (lo + hi)
    # C++ integer division truncates towards zero
    step = np.trunc(x / 2).astype(np.int64) if compressed else x
    return step + pdi.scanner.num_rings - 1


def _ring_pairs(sums: np.ndarray, d: int, num_rings: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, ring1, ring2): where ring difference ``d`` gives a ring pair with these sums."""
    r1 = (sums - d) // 2
    r2 = (sums + d) // 2
    ok = ((sums - d) % 2 == 0) & (r1 >= 0) & (r2 >= 0) & (r1 < num_rings) & (r2 < num_rings)
    where = np.nonzero(ok)[0]
    return where, r1[where], r2[where]


def siemens_sinogram_index(norm_pdi: ProjDataInfo) -> np.ndarray:
    """``[ring1, ring2]`` -> the Siemens sinogram (segments 0, -1, +1, ...; axial positions
    within) holding that ring pair; -1 where none does (STIR's ``construct_sino_lookup_table``)."""
    n = norm_pdi.scanner.num_rings
    index = np.full((n, n), -1, dtype=np.int64)
    first = 0
    order = [0] + [s for k in range(1, norm_pdi.get_max_segment_num() + 1) for s in (-k, k)]
    for segment in order:
        axial = np.arange(norm_pdi.get_min_axial_pos_num(segment), norm_pdi.get_max_axial_pos_num(segment) + 1)
        sums = _ring_sums(norm_pdi, segment, axial)
        for d in range(norm_pdi.get_min_ring_difference(segment), norm_pdi.get_max_ring_difference(segment) + 1):
            where, r1, r2 = _ring_pairs(sums, d, n)
            index[r1, r2] = first + where
        first += len(axial)
    return index


class Ecat8Efficiencies:
    """The efficiencies of bins of ``proj_data_info`` (non-arc-corrected data of the norm file's
    scanner), computed on request for a box of one segment."""

    def __init__(self, norm: Ecat8Norm, proj_data_info: ProjDataInfo, components: Ecat8Components | None = None):
        pdi = proj_data_info
        where = f"ECAT8 normalisation {norm.path}"
        if pdi.is_arc_corrected():
            raise GeometryError(f"{where} applies to non-arc-corrected data only (STIR refuses arc-corrected data)")
        if pdi.scanner != norm.scanner:
            raise GeometryError(
                f"{where} is for the scanner {norm.scanner.name!r}; the data's scanner {pdi.scanner.name!r} differs"
            )
        half = norm.scanner.num_detectors_per_ring // 2
        if half % pdi.get_num_views():
            raise GeometryError(f"{where}: {pdi.get_num_views()} views do not divide the scanner's {half} views")
        lo = norm.min_tangential_pos_num
        hi = lo + norm.scanner.max_num_non_arccorrected_bins - 1
        if pdi.get_min_tangential_pos_num() < lo or pdi.get_max_tangential_pos_num() > hi:
            raise GeometryError(
                f"{where} has tangential positions {lo}..{hi}; the data have "
                f"{pdi.get_min_tangential_pos_num()}..{pdi.get_max_tangential_pos_num()}"
            )
        self.norm = norm
        self.proj_data_info = pdi
        self.components = Ecat8Components() if components is None else components
        self.mash = half // pdi.get_num_views()
        self._tangential = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)
        self._sino = siemens_sinogram_index(norm.norm_proj_data_info)
        # axial effects by ring pair (1 where the norm file has none, as STIR)
        axial = np.asarray(norm.axial_effects, dtype=np.float64)
        self._axial = np.where(self._sino >= 0, axial[np.maximum(self._sino, 0)], 1.0)
        self._eff = norm.efficiencies.astype(np.float64)

    def box(self, segment: int, views: tuple[int, int], axial: tuple[int, int]) -> np.ndarray:
        """Efficiencies of views ``views[0]..views[1]-1`` and axial positions ``axial[0]..axial[1]-1``
        of ``segment`` (float32, shape ``(views, axial, tangential)``)."""
        v0, v1 = views
        out = np.empty((v1 - v0, axial[1] - axial[0], len(self._tangential)), dtype=np.float32)
        sums = _ring_sums(self.proj_data_info, segment, np.arange(*axial))
        for start in range(v0, v1, _VIEWS_PER_STEP):
            stop = min(start + _VIEWS_PER_STEP, v1)
            out[start - v0 : stop - v0] = self._views(segment, np.arange(start, stop), sums)
        return out

    def _views(self, segment: int, views: np.ndarray, sums: np.ndarray) -> np.ndarray:
        total = np.zeros((len(sums), len(views), len(self._tangential)), dtype=np.float64)
        for k in range(self.mash):
            # STIR's running total over the unmashed views: view k counts mash - k times
            total += (self.mash - k) * self._unmashed_view(segment, views * self.mash + k, sums)
        return total.transpose(1, 0, 2)

    def _unmashed_view(self, segment: int, u: np.ndarray, sums: np.ndarray) -> np.ndarray:
        """Axial position by unmashed view ``u`` by tangential position."""
        norm, use, pdi = self.norm, self.components, self.proj_data_info
        n_det = norm.scanner.num_detectors_per_ring
        t = self._tangential
        t_col = t - norm.min_tangential_pos_num
        det1 = (u[:, None] + (t[None, :] >> 1) + n_det) % n_det
        det2 = (u[:, None] - ((t[None, :] + 1) >> 1) + n_det // 2) % n_det
        # every ring's efficiency at the two detectors: [ring, view, tangential], read by ring below
        eff1, eff2 = self._eff[:, det1], self._eff[:, det2]
        lor = np.zeros((len(sums), len(u), len(t)), dtype=np.float64)
        for d in range(pdi.get_min_ring_difference(segment), pdi.get_max_ring_difference(segment) + 1):
            where, r1, r2 = _ring_pairs(sums, d, norm.scanner.num_rings)
            if not len(where):
                continue
            term = eff1[r1] * eff2[r2] if use.detector_efficiencies else np.ones((len(where), len(u), len(t)))
            if use.axial_effects_factors:
                term /= self._axial[r1, r2][:, None, None]
            lor[where] += term
        if use.geometric_factors:
            # the same plane ring1 + ring2 for every pair of an axial position
            lor *= norm.geometric[sums[:, None], t_col[None, :]][:, None, :]
        if use.crystal_interference_factors:
            crystal = u % norm.scanner.num_transaxial_crystals_per_block
            lor *= norm.interference[t_col[None, :], crystal[:, None]][None]
        return lor


class Ecat8NormalisationFactors(ProjData):
    """STIR's normalisation factors ``f = 1 / max(efficiency, 1e-20)`` of an ECAT8 norm file for
    data of ``proj_data_info`` (what ``BinNormalisation::apply`` multiplies by), computed on every
    read (nothing stored; readable in parallel).  ``efficiencies=True``: the efficiencies
    themselves (what ``undo`` multiplies by).  Every timing position of TOF data reads the same."""

    def __init__(
        self,
        norm: Ecat8Norm,
        proj_data_info: ProjDataInfo,
        components: Ecat8Components | None = None,
        efficiencies: bool = False,
    ):
        self._model = Ecat8Efficiencies(norm, proj_data_info, components)
        self._efficiencies = efficiencies

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._model.proj_data_info

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW

    @property
    def abilities(self) -> StoreAbilities:
        return StoreAbilities.computed_from()

    @property
    def source_file(self) -> str | None:
        return str(self._model.norm.path)

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        eff = self._model.box(segment, view_range, axial_range)
        if self._efficiencies:
            out[...] = eff
        else:
            np.divide(np.float32(1), np.maximum(eff, MIN_EFFICIENCY), out=out)

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        raise self._refusal("writable")
