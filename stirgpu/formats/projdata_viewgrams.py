"""Projection data held as separate viewgrams, each in an array the caller owns."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import GeometryError, StoreAbilityError
from ..geometry import ProjDataInfo
from .abilities import Residence, StoreAbilities
from .projdata import ProjData
from .storage_order import StorageOrder

__all__ = ["ProjDataViewgrams"]


class ProjDataViewgrams(ProjData):
    """Some viewgrams of a geometry, each its own (axial, tangential) float32 array, given by
    the caller and read or written in place: the STIR plugin's host buffers (one batch of a
    subset), which the engine fills or reads without any copy of the rest of the data.

    ``ProjDataViewgrams(proj_data_info, {(segment, view, timing_pos): array})``, one array per
    timing position of TOF data (STIR's timing position numbers); for non-TOF data the key may
    also be ``(segment, view)`` (timing position 0).  Reading a viewgram that is not held gives
    zeros when ``missing_as_zeros`` (a back projection of the viewgrams given: the others
    contribute nothing), else a GeometryError; writing one is always an error.  Writable when
    every array given is (numpy's ``writeable`` flag).
    """

    def __init__(
        self,
        proj_data_info: ProjDataInfo,
        viewgrams: Mapping[tuple[int, ...], np.ndarray],
        missing_as_zeros: bool = False,
    ):
        self._pdi = proj_data_info
        self._missing_as_zeros = bool(missing_as_zeros)
        self._viewgrams: dict[tuple[int, int, int], np.ndarray] = {}
        nt = proj_data_info.get_num_tangential_poss()
        for key, arr in viewgrams.items():
            seg, view, timing_pos = self._key(key)
            shape = (proj_data_info.get_num_axial_poss(seg), nt)
            if (
                not isinstance(arr, np.ndarray)
                or arr.dtype != np.float32
                or arr.shape != shape
                or not arr.flags.c_contiguous
            ):
                raise GeometryError(
                    f"ProjDataViewgrams: viewgram {self._name(seg, view, timing_pos)} must be a C-contiguous "
                    f"float32 array of shape {shape}, got "
                    f"{getattr(arr, 'dtype', type(arr).__name__)} {getattr(arr, 'shape', '')}"
                )
            self._viewgrams[(seg, view, timing_pos)] = arr
        # separate arrays: any number of threads read (or write disjoint views) at once
        writable = all(a.flags.writeable for a in self._viewgrams.values())
        self._abilities = StoreAbilities(
            readable=True,
            writable=writable,
            parallel_reads=True,
            parallel_writes=writable,
            write_behind=False,
            abortable=False,
            template=False,
            host_memory=False,
            residence=Residence.MEMORY,
        )

    def _key(self, key) -> tuple[int, int, int]:
        """(segment, view, timing position) of a caller's key, checked against the geometry."""
        pdi = self._pdi
        if len(key) == 2 and pdi.get_num_tof_poss() == 1:
            key = (*key, 0)
        if len(key) != 3:
            raise GeometryError(
                f"ProjDataViewgrams: key {key!r} must be (segment, view, timing_pos)"
                + ("" if pdi.get_num_tof_poss() > 1 else " or (segment, view)")
            )
        seg, view, timing_pos = (int(k) for k in key)
        self._segment(seg)
        if not 0 <= view < pdi.get_num_views():
            raise GeometryError(f"ProjDataViewgrams: view {view} out of range [0, {pdi.get_num_views() - 1}]")
        self._tof_index(timing_pos)
        return seg, view, timing_pos

    def _name(self, segment: int, view: int, timing_pos: int) -> str:
        tof = f", timing position {timing_pos}" if self._pdi.get_num_tof_poss() > 1 else ""
        return f"(segment {segment}, view {view}{tof})"

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._pdi

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW

    @property
    def abilities(self) -> StoreAbilities:
        return self._abilities

    def _refusal(self, ability: str) -> StoreAbilityError:
        if ability == "writable":
            return StoreAbilityError(f"{self!r} cannot be written: the caller gave some of its viewgrams read-only")
        return super()._refusal(ability)

    def holds(self, segment: int, view: int, timing_pos: int = 0) -> bool:
        return (int(segment), int(view), int(timing_pos)) in self._viewgrams

    def _viewgram(self, segment: int, view: int, tof_index: int, writing: bool) -> np.ndarray | None:
        timing_pos = self.get_min_tof_pos_num() + int(tof_index)
        arr = self._viewgrams.get((segment, view, timing_pos))
        if arr is None and (writing or not self._missing_as_zeros):
            raise GeometryError(f"ProjDataViewgrams: viewgram {self._name(segment, view, timing_pos)} is not held here")
        return arr

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        (v0, v1), (a0, a1) = view_range, axial_range
        for i, v in enumerate(range(v0, v1)):
            arr = self._viewgram(segment, v, tof_index, writing=False)
            if arr is None:
                out[i] = 0.0
            else:
                out[i] = arr[a0:a1]

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        if not self._abilities.writable:
            raise self._refusal("writable")
        na = data.shape[1]
        for i in range(data.shape[0]):
            arr = self._viewgram(segment, v0 + i, tof_index, writing=True)
            assert arr is not None  # (writing: a viewgram not held raises)
            arr[a0 : a0 + na] = data[i]
