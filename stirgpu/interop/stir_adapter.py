"""STIR's ``ProjData`` (``ProjDataInterfile``, ``ProjDataInMemory``, ...) as a stirgpu store
(duck-typed; ``stir`` is never imported here).

:class:`StirProjDataAdapter` gives any object with STIR's ``ProjData`` API
(``get_viewgram(view, segment)``, ``get_empty_viewgram``, ``set_viewgram``,
``get_proj_data_info``) the two chunk calls the execution engine uses, ``read_views`` and
``write_views``.  A chunk moves one viewgram per STIR call -- the largest unit STIR's API
reads without touching other views (a segment or a sinogram holds every view, and a subset
needs only some): ``get_viewgram(v, s).as_array()`` is one positioned read of a view-order
file plus one copy into numpy, and ``fill(numpy array)`` + ``set_viewgram`` one copy and one
write.  So only the chunk's views are read or written, never a full copy of the data; the
calls are serialised (a file-backed STIR ProjData shares one stream).  The adapter is a
:class:`~stirgpu.formats.ProjData`: STIR's Python names, and ``abilities`` saying what it can
do (readable; writable, as far as anyone can tell before STIR refuses; one call at a time).

The geometry is the STIR object's own, converted exactly
(:func:`~stirgpu.interop.stir_geometry.proj_data_info_from_stir`); the projectors compare it
with their set-up.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import GeometryError, StirGpuError
from ..formats import ProjData, Residence, StorageOrder, StoreAbilities
from .stir_geometry import (
    image_info_from_stir,
    is_stir_image,
    is_stir_proj_data_info,
    proj_data_info_from_stir,
    scanner_from_stir,
)

__all__ = [
    "StirProjDataAdapter",
    "proj_data_info_from_stir",
    "scanner_from_stir",
    "as_proj_data",
    "is_stir_proj_data",
    "is_stir_proj_data_info",
    "is_stir_image",
    "image_info_from_stir",
]


_WRITABLE = (
    "is it open for writing? stir.ProjData.read_from_file opens read-only; write into a "
    "stir.ProjDataInterfile opened with ios.in | ios.out, or a stir.ProjDataInMemory"
)


def is_stir_proj_data(obj: Any) -> bool:
    """True for objects with STIR's ProjData API that are not stirgpu stores."""
    return not isinstance(obj, ProjData) and hasattr(obj, "get_viewgram") and hasattr(obj, "get_proj_data_info")


def as_proj_data(obj: Any, proj_data_info=None, name: str = "proj_data") -> ProjData:
    """A stirgpu store: stirgpu stores (:class:`~stirgpu.formats.ProjData`, adapters included)
    as they are, STIR-like objects wrapped in :class:`StirProjDataAdapter` (``proj_data_info``,
    when given, is taken as the object's geometry instead of converting STIR's)."""
    if isinstance(obj, ProjData):
        return obj
    if is_stir_proj_data(obj):
        return StirProjDataAdapter(obj, proj_data_info, name=name)
    raise StirGpuError(
        f"{name}: expected projection data (a stirgpu store or an object with STIR's "
        f"ProjData API), not {type(obj).__name__}"
    )


#: what a STIR ProjData can do, as far as its Python API tells
_ABILITIES = StoreAbilities(
    readable=True,
    # STIR does not say whether a file's stream was opened for writing: the adapter tries, and a
    # refused set_viewgram is a StirGpuError before any value changes (never lost data)
    writable=True,
    # one STIR call at a time (a file-backed ProjData shares one stream)
    parallel_reads=False,
    parallel_writes=False,
    write_behind=False,
    abortable=False,
    template=False,
    host_memory=False,
    residence=Residence.FOREIGN,
)


class StirProjDataAdapter(ProjData):
    """A STIR ProjData as a stirgpu store, one viewgram per STIR call (see the module
    docstring).  Its abilities: readable and writable (see :data:`_ABILITIES`), one call at a
    time, held by STIR.  Non-TOF only."""

    def __init__(self, stir_proj_data: Any, proj_data_info=None, name: str = "proj_data"):
        if not is_stir_proj_data(stir_proj_data):
            raise StirGpuError(
                f"{name}: expected an object with STIR's ProjData API, not {type(stir_proj_data).__name__}"
            )
        self.stir_proj_data = stir_proj_data
        self.name = name
        self._pdi = (
            proj_data_info
            if proj_data_info is not None
            else proj_data_info_from_stir(stir_proj_data.get_proj_data_info(), name)
        )
        self._lock = threading.Lock()

    @property
    def proj_data_info(self):
        return self._pdi

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW  # (its unit: STIR's own layout is not visible through its API)

    @property
    def abilities(self) -> StoreAbilities:
        return _ABILITIES

    def _check_non_tof(self) -> None:
        if self._pdi.get_num_tof_poss() != 1:
            raise GeometryError(f"{self.name}: only non-TOF STIR projection data are supported")

    def _viewgram(self, view: int, segment: int) -> np.ndarray:
        """STIR's viewgram (axial, tangential) as numpy (a copy); the caller holds the lock."""
        vg = self.stir_proj_data.get_viewgram(view, segment).as_array()
        shape = (self._pdi.get_num_axial_poss(segment), self._pdi.get_num_tangential_poss())
        if vg.shape != shape:
            raise GeometryError(
                f"{self.name}: STIR viewgram (view {view}, segment {segment}) has shape {vg.shape}, expected {shape}"
            )
        return vg

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        self._check_non_tof()
        (v0, v1), (a0, a1) = view_range, axial_range
        with self._lock:
            for i, v in enumerate(range(v0, v1)):
                out[i] = self._viewgram(v, segment)[a0:a1]

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        self._check_non_tof()
        nv, na = data.shape[:2]
        whole = a0 == 0 and na == self._pdi.get_num_axial_poss(segment)
        with self._lock:
            for i, v in enumerate(range(v0, v0 + nv)):
                if whole:
                    values = data[i]
                else:  # part of a viewgram (a sinogram): STIR writes whole viewgrams only
                    values = self._viewgram(v, segment)
                    values[a0 : a0 + na] = data[i]
                self._set_viewgram(v, segment, values)

    def _set_viewgram(self, view: int, segment: int, values: np.ndarray) -> None:
        pd = self.stir_proj_data
        vg = pd.get_empty_viewgram(view, segment)
        vg.fill(np.ascontiguousarray(values, dtype=np.float32))  # a numpy array: one copy in C++ (not .flat's iterator)
        try:
            ok = pd.set_viewgram(vg)
        except RuntimeError as e:  # STIR's error(): e.g. a file opened read-only
            raise StirGpuError(
                f"{self.name}: STIR's set_viewgram(view {view}, segment {segment}) failed: {e} ({_WRITABLE})"
            ) from None
        if hasattr(ok, "succeeded") and not ok.succeeded():
            raise StirGpuError(f"{self.name}: STIR's set_viewgram(view {view}, segment {segment}) failed ({_WRITABLE})")

    def __repr__(self) -> str:
        return f"StirProjDataAdapter({type(self.stir_proj_data).__name__}, {self.name})"
