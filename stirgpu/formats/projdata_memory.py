"""Projection data held in memory (STIR's ``ProjDataInMemory``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..geometry import ProjDataInfo
from .abilities import Residence, StoreAbilities
from .projdata import ProjData, view_runs
from .storage_order import StorageOrder

__all__ = ["ProjDataInMemory", "ProjDataInOneArray"]


#: a view set with at most this many runs of consecutive views is copied run by run
_RUNS_AS_SLICES = 2

#: numpy arrays: read and written from any number of threads at once; host_array is the data
_ABILITIES = StoreAbilities(
    readable=True,
    writable=True,
    parallel_reads=True,
    parallel_writes=True,
    write_behind=False,
    abortable=False,
    template=False,
    host_memory=True,
    residence=Residence.MEMORY,
)


class ProjDataInMemory(ProjData):
    """All bins in RAM as float32, one array per segment laid out [TOF][view][axial][tangential]
    (view order, so a set of views is a cheap slice).

    ``ProjDataInMemory(proj_data_info, fill=0)``: ``fill`` is a number, an array in
    ``as_array()`` order, or another :class:`ProjData`.
    """

    def __init__(self, proj_data_info: ProjDataInfo, fill=0.0):
        if not isinstance(proj_data_info, ProjDataInfo):
            raise GeometryError(
                f"{type(self).__name__}: proj_data_info must be a stirgpu ProjDataInfo, "
                f"not {type(proj_data_info).__name__}"
            )
        self._pdi = proj_data_info
        zero = np.ndim(fill) == 0 and not isinstance(fill, ProjData) and float(fill) == 0.0
        self._segments = self._allocate(zeroed=zero)
        if not zero:
            self.fill(fill)

    def _allocate(self, zeroed: bool) -> dict[int, np.ndarray]:
        """Each segment's array, [TOF][view][axial][tangential] (uninitialised unless ``zeroed``:
        ``fill`` writes every bin then)."""
        pdi = self._pdi
        ntof, nv, nt = pdi.get_num_tof_poss(), pdi.get_num_views(), pdi.get_num_tangential_poss()
        init = np.zeros if zeroed else np.empty
        return {s: init((ntof, nv, pdi.get_num_axial_poss(s), nt), dtype=np.float32) for s in pdi.segment_nums}

    @classmethod
    def from_proj_data(cls, other: ProjData) -> ProjDataInMemory:
        """A copy of any store (STIR's ``ProjDataInMemory(other)``)."""
        return cls(other.get_proj_data_info(), fill=other)

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._pdi

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW

    @property
    def abilities(self) -> StoreAbilities:
        """Readable, writable, in parallel, in host memory (:meth:`host_array`)."""
        return _ABILITIES

    def host_array(self, segment: int, timing_pos: int = 0) -> np.ndarray | None:
        """The segment's bins at one timing position themselves, (views, axial, tangential)
        float32: a slab of the segment's [TOF][view][axial][tangential] array (see
        :meth:`ProjData.host_array`)."""
        return self._segments[self._segment(segment)][self._tof_index(timing_pos)]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._segments.values())

    # Scattered views (a subset's are all isolated) are one numpy gather/scatter rather than
    # one copy per view; runs of consecutive views stay plain slice copies, which measured
    # faster for large blocks (full-data chunks).
    def read_views(self, segment: int, views, out: np.ndarray | None = None, timing_pos: int = 0) -> np.ndarray:
        seg, t, v, out = self._read_args(segment, views, out, timing_pos)
        runs = view_runs(v)
        if len(runs) <= _RUNS_AS_SLICES:
            for pos, v0, v1 in runs:
                out[pos : pos + v1 - v0] = self._segments[seg][t, v0:v1]
        else:
            np.take(self._segments[seg][t], v, axis=0, out=out)
        return out

    def write_views(self, array, segment: int, views, timing_pos: int = 0) -> None:
        seg, t, v, a = self._write_args(array, segment, views, timing_pos)
        runs = view_runs(v)
        if len(runs) <= _RUNS_AS_SLICES:
            for pos, v0, v1 in runs:
                self._segments[seg][t, v0:v1] = a[pos : pos + v1 - v0]
        else:
            self._segments[seg][t][v] = a

    read_views.__doc__ = ProjData.read_views.__doc__
    write_views.__doc__ = ProjData.write_views.__doc__

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        (v0, v1), (a0, a1) = view_range, axial_range
        out[...] = self._segments[segment][tof_index, v0:v1, a0:a1]

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        nv, na = data.shape[:2]
        self._segments[segment][tof_index, v0 : v0 + nv, a0 : a0 + na] = data


#: one array in as_array order: a segment is a strided view of it, so no host_array slabs
_ONE_ARRAY_ABILITIES = dataclasses.replace(_ABILITIES, host_memory=False)


class ProjDataInOneArray(ProjDataInMemory):
    """All bins in RAM as ONE float32 array in :meth:`as_array` order, [TOF][sinograms of
    segments 0, +1, -1, ...][view][tangential] (STIR's ``ProjDataInMemory`` buffer, which SIRF's
    memory ``AcquisitionData`` lends to numpy): :attr:`array` *is* the data, so numpy may view
    it.  A segment is a strided view of that array, so there is no :meth:`host_array` (the
    engine copies chunks in and out)."""

    def _allocate(self, zeroed: bool) -> dict[int, np.ndarray]:
        """The one array (always zeroed), and each segment as a [TOF][view][axial][tangential]
        view of its sinograms."""
        pdi = self._pdi
        ntof, nv, nt = pdi.get_num_tof_poss(), pdi.get_num_views(), pdi.get_num_tangential_poss()
        self._array = np.zeros((ntof, pdi.get_num_axial_poss_total(), nv, nt), dtype=np.float32)
        segments = {}
        start = 0
        for seg in pdi.segment_nums_stir_order:
            n = pdi.get_num_axial_poss(seg)
            segments[seg] = self._array[:, start : start + n].transpose(0, 2, 1, 3)
            start += n
        return segments

    @property
    def array(self) -> np.ndarray:
        """The data themselves: (TOF bins, sinograms, views, tangential positions) float32,
        C-contiguous; writes to it change the store."""
        return self._array

    @property
    def abilities(self) -> StoreAbilities:
        """Readable, writable, in parallel, in memory; no host_array (see the class docstring)."""
        return _ONE_ARRAY_ABILITIES

    def host_array(self, segment: int, timing_pos: int = 0) -> None:
        return None

    def as_array(self) -> np.ndarray:
        """All data in STIR's Python order; a copy."""
        return self._array.copy() if self.get_num_tof_poss() > 1 else self._array[0].copy()
