"""STIR's ``ProjData`` (``ProjDataInterfile``, ``ProjDataInMemory``, ...) as a chunk store
(duck-typed; ``stir`` is never imported here).

:class:`StirProjDataAdapter` gives any object with STIR's ``ProjData`` API
(``get_viewgram(view, segment)``, ``get_empty_viewgram``, ``set_viewgram``,
``get_proj_data_info``) the two chunk calls the execution engine uses, ``read_views`` and
``write_views``.  A chunk moves one viewgram per STIR call -- the largest unit STIR's API
reads without touching other views (a segment or a sinogram holds every view, and a subset
needs only some): ``get_viewgram(v, s).as_array()`` is one positioned read of a view-order
file plus one copy into numpy, and ``fill(numpy array)`` + ``set_viewgram`` one copy and one
write.  So only the chunk's views are read or written, never a full copy of the data; the
calls are serialised (a file-backed STIR ProjData shares one stream).

The geometry is the STIR object's own, converted exactly
(:func:`~stirgpu.interop.stir_geometry.proj_data_info_from_stir`); the projectors compare it
with their set-up.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import GeometryError, StirGpuError
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
    """True for objects with STIR's ProjData API but not stirgpu's chunk calls."""
    return hasattr(obj, "get_viewgram") and hasattr(obj, "get_proj_data_info") and not hasattr(obj, "read_views")


def as_proj_data(obj: Any, proj_data_info=None, name: str = "proj_data"):
    """A store with ``read_views``/``write_views``: stirgpu stores (and adapters) as they are,
    STIR-like objects wrapped in :class:`StirProjDataAdapter` (``proj_data_info``, when given,
    is taken as the object's geometry instead of converting STIR's)."""
    if hasattr(obj, "read_views") and hasattr(obj, "write_views") and hasattr(obj, "get_proj_data_info"):
        return obj
    if is_stir_proj_data(obj):
        return StirProjDataAdapter(obj, proj_data_info, name=name)
    raise StirGpuError(
        f"{name}: expected projection data (a stirgpu store or an object with STIR's "
        f"ProjData API), not {type(obj).__name__}"
    )


class StirProjDataAdapter:
    """``read_views`` / ``write_views`` on top of STIR's viewgram API (see the module docstring)."""

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

    def get_proj_data_info(self):
        return self._pdi

    def _check(self, segment: int, views, timing_pos: int) -> tuple[list[int], int, int]:
        if int(timing_pos) != 0:
            raise GeometryError(f"{self.name}: only non-TOF data (timing_pos 0) are supported")
        seg = self._pdi.segment(segment).segment_num  # validates the segment
        return [int(v) for v in views], self._pdi.get_num_axial_poss(seg), self._pdi.get_num_tangential_poss()

    def read_views(self, segment: int, views, out: np.ndarray | None = None, timing_pos: int = 0) -> np.ndarray:
        views, na, nt = self._check(segment, views, timing_pos)
        if out is None:
            out = np.empty((len(views), na, nt), dtype=np.float32)
        elif out.shape != (len(views), na, nt):
            raise GeometryError(f"read_views: out has shape {out.shape}, expected {(len(views), na, nt)}")
        get = self.stir_proj_data.get_viewgram
        seg = int(segment)
        with self._lock:
            for i, v in enumerate(views):
                vg = get(v, seg).as_array()
                if vg.shape != (na, nt):
                    raise GeometryError(
                        f"{self.name}: STIR viewgram (view {v}, segment {segment}) has shape "
                        f"{vg.shape}, expected {(na, nt)}"
                    )
                out[i] = vg
        return out

    def write_views(self, array, segment: int, views, timing_pos: int = 0) -> None:
        views, na, nt = self._check(segment, views, timing_pos)
        a = np.asarray(array, dtype=np.float32)
        if a.shape != (len(views), na, nt):
            raise GeometryError(f"write_views: array has shape {a.shape}, expected {(len(views), na, nt)}")
        pd = self.stir_proj_data
        seg = int(segment)
        with self._lock:
            for i, v in enumerate(views):
                vg = pd.get_empty_viewgram(v, seg)
                vg.fill(np.ascontiguousarray(a[i]))  # a numpy array: one copy in C++ (not .flat's iterator)
                try:
                    ok = pd.set_viewgram(vg)
                except RuntimeError as e:  # STIR's error(): e.g. a file opened read-only
                    raise StirGpuError(
                        f"{self.name}: STIR's set_viewgram(view {v}, segment {seg}) failed: {e} ({_WRITABLE})"
                    ) from None
                if hasattr(ok, "succeeded") and not ok.succeeded():
                    raise StirGpuError(
                        f"{self.name}: STIR's set_viewgram(view {v}, segment {seg}) failed ({_WRITABLE})"
                    )

    def __repr__(self) -> str:
        return f"StirProjDataAdapter({type(self.stir_proj_data).__name__}, {self.name})"
