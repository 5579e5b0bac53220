"""Adapters for the real ``stir`` Python module (duck-typed; ``stir`` is never imported here).

:class:`StirProjDataAdapter` gives any object with STIR's ``ProjData`` API
(``get_viewgram(view, segment)``, ``get_empty_viewgram``, ``set_viewgram``,
``get_proj_data_info``) the two chunk calls the execution engine uses,
``read_views`` and ``write_views``.  It moves one viewgram at a time through STIR's
numpy bridge (``as_array()`` / ``fill(array.flat)``), so it is as fast as STIR's own
Python access, and it serialises calls (STIR's file-backed ProjData share one stream).

:func:`proj_data_info_from_stir` converts a STIR ``ProjDataInfo`` (cylindrical, arc-corrected
or not) to :class:`stirgpu.geometry.ProjDataInfo` from its accessors; pass
``proj_data_info=`` to the adapter where that is not possible.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import GeometryError, StirGpuError

__all__ = ["StirProjDataAdapter", "proj_data_info_from_stir", "scanner_from_stir", "as_proj_data",
           "is_stir_proj_data"]


def is_stir_proj_data(obj: Any) -> bool:
    """True for objects with STIR's ProjData API but not stirgpu's chunk calls."""
    return hasattr(obj, "get_viewgram") and hasattr(obj, "get_proj_data_info") and not hasattr(obj, "read_views")


def as_proj_data(obj: Any, proj_data_info=None, name: str = "proj_data"):
    """A store with ``read_views``/``write_views``: stirgpu stores as they are, STIR-like
    objects wrapped in :class:`StirProjDataAdapter`."""
    if hasattr(obj, "read_views") and hasattr(obj, "write_views") and hasattr(obj, "get_proj_data_info"):
        return obj
    if is_stir_proj_data(obj):
        return StirProjDataAdapter(obj, proj_data_info)
    raise StirGpuError(f"{name}: expected projection data (a stirgpu store or an object with STIR's "
                       f"ProjData API), not {type(obj).__name__}")


def _call(obj: Any, *names: str, default: Any = None):
    for n in names:
        f = getattr(obj, n, None)
        if f is not None:
            return f()
    return default


def scanner_from_stir(stir_scanner: Any):
    """A :class:`stirgpu.geometry.Scanner` with the parameters of a STIR ``Scanner``.

    A scanner STIR knows by name starts from stirgpu's copy of it; every parameter the STIR
    object has a ``get_<name>()`` for is then taken from the object (STIR's getters are named
    after its parameters), so user-defined scanners come through too.
    """
    import dataclasses

    from ..geometry import Scanner
    try:
        name = str(stir_scanner.get_name())
    except AttributeError as e:
        raise StirGpuError(f"cannot read the scanner from a STIR object: {e}") from None
    kw: dict = {}
    for f in dataclasses.fields(Scanner):
        if f.name in ("name", "all_names", "scanner_geometry"):
            continue
        getter = getattr(stir_scanner, f"get_{f.name}", None)
        if getter is not None:
            kw[f.name] = getter()
    if Scanner.is_known(name):
        return Scanner.from_name(name).replace(**kw)
    needed = ("num_rings", "num_detectors_per_ring", "inner_ring_radius", "average_depth_of_interaction",
              "ring_spacing")
    missing = [n for n in needed if n not in kw]
    if missing:
        raise StirGpuError(f"cannot read scanner {name!r} from a STIR object: no get_{missing[0]}()")
    return Scanner(name=name, **kw)


def proj_data_info_from_stir(stir_pdi: Any):
    """A :class:`stirgpu.geometry.ProjDataInfo` equal to a STIR ``ProjDataInfoCylindrical``."""
    from ..geometry import ProjDataInfo
    try:
        scanner = scanner_from_stir(stir_pdi.get_scanner())
        segs = range(int(stir_pdi.get_min_segment_num()), int(stir_pdi.get_max_segment_num()) + 1)
        lo = [int(stir_pdi.get_min_ring_difference(s)) for s in segs]
        hi = [int(stir_pdi.get_max_ring_difference(s)) for s in segs]
        num_views = int(stir_pdi.get_num_views())
        num_tang = int(stir_pdi.get_num_tangential_poss())
        min_tang = int(stir_pdi.get_min_tangential_pos_num())
    except AttributeError as e:
        raise StirGpuError(f"cannot read the projection-data geometry from a STIR object ({e}); pass "
                           "proj_data_info= explicitly") from None
    cls = type(stir_pdi).__name__
    if "NoArcCorr" in cls or hasattr(stir_pdi, "get_angular_increment"):
        arc, sampling = False, None
    elif "ArcCorr" in cls or hasattr(stir_pdi, "get_tangential_sampling"):
        arc, sampling = True, float(stir_pdi.get_tangential_sampling())
    else:
        raise StirGpuError(f"cannot tell whether STIR projection data ({cls}) are arc-corrected; pass "
                           "proj_data_info= explicitly")
    ntof = _call(stir_pdi, "get_num_tof_poss", default=1)
    return ProjDataInfo(scanner, lo, hi, num_views, num_tang, arc, tangential_sampling=sampling,
                        min_tangential_pos_num=min_tang, num_tof_poss=int(ntof))


class StirProjDataAdapter:
    """``read_views`` / ``write_views`` on top of STIR's viewgram API (see the module docstring)."""

    def __init__(self, stir_proj_data: Any, proj_data_info=None):
        self.stir_proj_data = stir_proj_data
        self._pdi = (proj_data_info if proj_data_info is not None
                     else proj_data_info_from_stir(stir_proj_data.get_proj_data_info()))
        self._lock = threading.Lock()

    @property
    def proj_data_info(self):
        return self._pdi

    def get_proj_data_info(self):
        return self._pdi

    def _shape(self, segment: int) -> tuple[int, int]:
        return self._pdi.get_num_axial_poss(segment), self._pdi.get_num_tangential_poss()

    def read_views(self, segment: int, views, out: np.ndarray | None = None, timing_pos: int = 0) -> np.ndarray:
        if int(timing_pos) != 0:
            raise GeometryError("StirProjDataAdapter: only non-TOF data (timing_pos 0) are supported")
        views = [int(v) for v in views]
        na, nt = self._shape(segment)
        if out is None:
            out = np.empty((len(views), na, nt), dtype=np.float32)
        elif out.shape != (len(views), na, nt):
            raise GeometryError(f"read_views: out has shape {out.shape}, expected {(len(views), na, nt)}")
        with self._lock:
            for i, v in enumerate(views):
                vg = np.asarray(self.stir_proj_data.get_viewgram(v, int(segment)).as_array(), dtype=np.float32)
                if vg.shape != (na, nt):
                    raise GeometryError(f"STIR viewgram (view {v}, segment {segment}) has shape {vg.shape}, "
                                        f"expected {(na, nt)}")
                out[i] = vg
        return out

    def write_views(self, array, segment: int, views, timing_pos: int = 0) -> None:
        if int(timing_pos) != 0:
            raise GeometryError("StirProjDataAdapter: only non-TOF data (timing_pos 0) are supported")
        views = [int(v) for v in views]
        a = np.asarray(array, dtype=np.float32)
        na, nt = self._shape(segment)
        if a.shape != (len(views), na, nt):
            raise GeometryError(f"write_views: array has shape {a.shape}, expected {(len(views), na, nt)}")
        with self._lock:
            for i, v in enumerate(views):
                vg = self.stir_proj_data.get_empty_viewgram(v, int(segment))
                vg.fill(np.ascontiguousarray(a[i]).flat)
                self.stir_proj_data.set_viewgram(vg)

    def __repr__(self) -> str:
        return f"StirProjDataAdapter({type(self.stir_proj_data).__name__})"
