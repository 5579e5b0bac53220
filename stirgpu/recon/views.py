"""Read-only projection-data *views* that reproduce what OSMAPOSL does to its inputs.

STIR changes its inputs on the fly, viewgram by viewgram, never on disk; these
:class:`~stirgpu.formats.ProjData` adapters do the same, chunk by chunk, so the
streaming projector sees exactly the numbers STIR's objective function sees:

* :class:`SegmentRange` -- ``maximum absolute segment number to process``: only
  segments ``-m..m`` exist (STIR loops over them; the rest is never read);
* :class:`EndPlanes` -- ``zero end planes of segment 0``: the first and last axial
  position of segment 0 replaced by a value (STIR zeroes the measured data, the
  additive term and the multiplicative factors there);
* :class:`Quotient` -- ``a / f`` bin by bin (0 where ``f`` is 0): STIR's additive
  sinogram is in *normalised* units (mean = (A x + a) / f), while the projector's
  fused OSEM call takes a background in measured units (mean = A x / f + b); b = a / f;
* :class:`Constant` -- every bin the same value, without storing it;
* :class:`TofBroadcast` -- non-TOF data seen as TOF data, every timing position of a bin
  reading the non-TOF bin (STIR's ``BinNormalisationFromProjData`` with a non-TOF
  normalisation on TOF data);
* :class:`Product`, :class:`Sum`, :class:`Reciprocal` -- bin-wise arithmetic (the
  SIRF layer builds its objective function's terms from them).

Views never write (``write_views`` raises StoreAbilityError) and never copy whole data sets.
Their ``abilities`` are their sources': readable (in parallel) when every source is, never
writable, computed.
"""

from __future__ import annotations

from typing import overload

import numpy as np

from ..errors import GeometryError, StoreAbilityError
from ..formats import ProjData, StorageOrder, StoreAbilities
from ..geometry import ProjDataInfo

__all__ = [
    "SegmentRange",
    "EndPlanes",
    "Quotient",
    "Constant",
    "TofBroadcast",
    "Product",
    "Sum",
    "Reciprocal",
    "restrict_segments",
]


class _ReadOnly(ProjData):
    """Shared parts of the adapters: read-only, storage order of the source, abilities computed
    from the sources'."""

    _source: ProjData

    @property
    def storage_order(self) -> StorageOrder:
        return self._source.storage_order

    def _sources(self) -> tuple[ProjData, ...]:
        return (self._source,)

    @property
    def source_file(self) -> str | None:
        """The file of a view of one store (a segment range, end planes, ...); None for a
        view computed from several."""
        sources = self._sources()
        return sources[0].source_file if len(sources) == 1 else None

    @property
    def abilities(self) -> StoreAbilities:
        return StoreAbilities.computed_from(*(s.abilities for s in self._sources()))

    def _refusal(self, ability: str) -> StoreAbilityError:
        if ability == "writable":
            return StoreAbilityError(f"{type(self).__name__} is a read-only view of projection data (not writable)")
        unreadable = [s for s in self._sources() if not s.abilities.readable]
        if ability == "readable" and unreadable:
            return unreadable[0]._refusal("readable")  # the source says why (and names its file)
        return super()._refusal(ability)

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        raise self._refusal("writable")

    def close(self) -> None:
        """Views own nothing; closing the source is its owner's job."""


class SegmentRange(_ReadOnly):
    """``source`` restricted to segments ``-max_abs_segment .. +max_abs_segment``."""

    def __init__(self, source: ProjData, max_abs_segment: int):
        m = int(max_abs_segment)
        pdi = source.get_proj_data_info()
        if m < 0 or m > min(-pdi.get_min_segment_num(), pdi.get_max_segment_num()):
            raise GeometryError(
                f"maximum absolute segment number {m} is out of range: the data have "
                f"segments {pdi.get_min_segment_num()}..{pdi.get_max_segment_num()}"
            )
        self._source = source
        self._pdi = pdi.reduce_segment_range(-m, m)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._pdi

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, tof_index, view_range, axial_range, out)


@overload
def restrict_segments(source: ProjData, max_abs_segment: int | None) -> ProjData: ...
@overload
def restrict_segments(source: None, max_abs_segment: int | None) -> None: ...
def restrict_segments(source: ProjData | None, max_abs_segment: int | None) -> ProjData | None:
    """``source`` itself when nothing is removed, else a :class:`SegmentRange` (None stays None)."""
    if source is None or max_abs_segment is None:
        return source
    pdi = source.get_proj_data_info()
    if -pdi.get_min_segment_num() == pdi.get_max_segment_num() == int(max_abs_segment):
        return source
    return SegmentRange(source, max_abs_segment)


class EndPlanes(_ReadOnly):
    """``source`` with the first and last axial position of segment 0 set to ``value``
    (STIR's ``zero end planes of segment 0``: 0 for data; :mod:`.objective` also uses 0
    for correction factors, which the projector reads as "bin left out")."""

    def __init__(self, source: ProjData, value: float = 0.0):
        self._source = source
        self._value = np.float32(value)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._source.get_proj_data_info()

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, tof_index, view_range, axial_range, out)
        if segment != 0:
            return
        a0, a1 = axial_range
        last = self.proj_data_info.get_num_axial_poss(0) - 1
        for ax in {0, last}:
            if a0 <= ax < a1:
                out[:, ax - a0, :] = self._value


class Quotient(_ReadOnly):
    """``numerator / denominator`` bin by bin, 0 where the denominator is 0 (float32)."""

    def __init__(self, numerator: ProjData, denominator: ProjData):
        if numerator.get_proj_data_info() != denominator.get_proj_data_info():
            raise GeometryError("Quotient: numerator and denominator have different geometries")
        self._source = numerator
        self._den = denominator

    def _sources(self) -> tuple[ProjData, ...]:
        return (self._source, self._den)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._source.get_proj_data_info()

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, tof_index, view_range, axial_range, out)
        den = np.empty(out.shape, dtype=np.float32)
        self._den._read_box(segment, tof_index, view_range, axial_range, den)
        nz = den != 0
        np.divide(out, den, out=out, where=nz)
        out[~nz] = 0


class Constant(_ReadOnly):
    """Every bin equal to ``value`` (nothing stored; no sources: readable in parallel)."""

    def __init__(self, proj_data_info: ProjDataInfo, value: float):
        self._pdi = proj_data_info
        self._value = np.float32(value)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._pdi

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW

    def _sources(self) -> tuple[ProjData, ...]:
        return ()

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        out[...] = self._value


class TofBroadcast(_ReadOnly):
    """Non-TOF ``source`` seen with the TOF geometry ``proj_data_info`` (its non-TOF clone must
    be the source's geometry): every timing position of a bin holds the source's value there.
    STIR's ``BinNormalisationFromProjData::apply`` / ``undo`` read timing position 0 of a
    non-TOF normalisation for every timing position of TOF data."""

    def __init__(self, source: ProjData, proj_data_info: ProjDataInfo):
        own = source.get_proj_data_info()
        if own.is_tof_data() or not proj_data_info.is_tof_data() or proj_data_info.create_non_tof_clone() != own:
            raise GeometryError(
                f"TofBroadcast: the source must be the non-TOF geometry of {proj_data_info!r}, not {own!r}"
            )
        self._source = source
        self._pdi = proj_data_info

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._pdi

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, 0, view_range, axial_range, out)


class _Binary(_ReadOnly):
    def __init__(self, left: ProjData, right: ProjData):
        if left.get_proj_data_info() != right.get_proj_data_info():
            raise GeometryError(f"{type(self).__name__}: the two operands have different geometries")
        self._source = left
        self._right = right

    def _sources(self) -> tuple[ProjData, ...]:
        return (self._source, self._right)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._source.get_proj_data_info()

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, tof_index, view_range, axial_range, out)
        other = np.empty(out.shape, dtype=np.float32)
        self._right._read_box(segment, tof_index, view_range, axial_range, other)
        self._combine(out, other)

    def _combine(self, out: np.ndarray, other: np.ndarray) -> None:
        raise NotImplementedError


class Product(_Binary):
    """``left * right`` bin by bin."""

    def _combine(self, out, other) -> None:
        np.multiply(out, other, out=out)


class Sum(_Binary):
    """``left + right`` bin by bin."""

    def _combine(self, out, other) -> None:
        np.add(out, other, out=out)


class Reciprocal(_ReadOnly):
    """``1 / source`` bin by bin, ``+inf`` where the source is 0 (a bin with zero efficiency
    has an infinite correction factor: it contributes nothing)."""

    def __init__(self, source: ProjData):
        self._source = source

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._source.get_proj_data_info()

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._source._read_box(segment, tof_index, view_range, axial_range, out)
        with np.errstate(divide="ignore"):
            np.reciprocal(out, out=out)
