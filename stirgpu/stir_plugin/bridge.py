"""What the STIR plugin's C++ calls in Python: one :class:`PairSession` per stirgpu projector
pair (or lone forward / back projector) that STIR sets up.

The C++ side (``swig/src/session.cxx``) owns the host buffers and decides what to project
(one batch of a subset at a time); this module only drives stirgpu's
:class:`~stirgpu.projectors.ProjectorPair` on them:

* geometry: STIR's ``ProjDataInfo`` and image, as the plugin's look-alikes of STIR's Python
  objects, converted by :mod:`stirgpu.interop` exactly as STIR's own Python objects are
  (and checked against STIR's own ``get_phi`` / ``get_s`` / ``get_m`` / ``get_tantheta``);
* arrays: numpy views of the C++ buffers and of STIR's image memory (no copies); a call
  never keeps them;
* back projections accumulate in one image on the first GPU (numpy for the CPU backend)
  from ``start_accumulating`` until ``get_output`` copies it into STIR's image.

``STIRGPU_STIR_PLUGIN_TRACE=FILE`` appends JSON lines to FILE, read at every line:

* ``"kind": "projection"``, one per projection (the call, the views and segments projected,
  the number of timing positions (1 without TOF; a projection covers all of them), the number
  of bins, seconds): what the tests and users check to see that a subset costs a
  subset;
* ``"kind": "viewgram calls"``, one per period of STIR's per-viewgram calls (``set_input`` to
  the next, ``start_accumulating_in_new_target`` to ``get_output``): the number of calls and
  their seconds waiting for the plugin's lock, copying, and in the projections above, summed
  over STIR's threads: the plugin's share of STIR's loop.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError, StirGpuError, StoreAbilityError
from ..formats import ProjData, ProjDataViewgrams, Residence, StorageOrder, StoreAbilities
from ..interop import image_info_from_stir, proj_data_info_from_stir

if TYPE_CHECKING:
    from ..array_types import Array
    from ..projectors import ProjectorPair

__all__ = ["PairSession", "TRACE_ENV"]

#: the environment variable naming the trace file
TRACE_ENV = "STIRGPU_STIR_PLUGIN_TRACE"

_MIB = 2**20


def _projector_options(options: dict) -> dict:
    """The plugin's parsed block (C++ Options; -1 / [] = not given) as ProjectorPair keywords."""

    def given(key):
        v = int(options[key])
        return None if v < 0 else v

    gpu, host, views = given("gpu_memory_budget_mb"), given("host_memory_budget_mb"), given("max_views_per_chunk")
    return {
        "backend": str(options["backend"]),
        "devices": tuple(int(d) for d in options["devices"]) or None,
        "gpu_memory_budget": None if gpu is None else gpu * _MIB,
        "host_memory_budget": None if host is None else host * _MIB,
        "max_views_per_chunk": views,
        "restrict_to_cylindrical_fov": bool(options["restrict_to_cylindrical_fov"]),
    }


class SessionOutput:
    """What both sessions (this module's and :mod:`.bridge_endpoints`') say and trace: lines at
    the projector's ``verbosity`` 2 and JSON records in ``STIRGPU_STIR_PLUGIN_TRACE``.  A
    session sets ``_verbosity`` and ``_trace_lock`` in its ``__init__``."""

    _verbosity: int
    _trace_lock: threading.Lock

    def _say(self, text: str) -> None:
        """One line on stderr where the projector's ``verbosity`` key in STIR's parameter file
        asks for it (2 or more).  The library prints nothing else: this is the plugin's own
        output inside STIR's programs, which have no stirgpu CLI to print it."""
        if self._verbosity >= 2:
            print(f"stirgpu: {text}", file=sys.stderr, flush=True)  # noqa: T201 (asked for by STIR's verbosity key)

    def _log_projection(
        self, call: str, views: list[int], segments: list[int], timing_positions: int, bins: int, t0: float, tof: bool
    ) -> None:
        """The line and the trace record of one projection started at ``t0`` (perf_counter)."""
        seconds = time.perf_counter() - t0
        shown = f" x {timing_positions} timing positions" if tof else ""
        self._say(
            f"{call}: {len(views)} views x {len(segments)} segments{shown} ({bins} bins) in {1e3 * seconds:.1f} ms"
        )
        self._trace(
            {
                "kind": "projection",
                "call": call,
                "views": views,
                "segments": segments,
                "timing_positions": timing_positions,
                "bins": bins,
                "seconds": round(seconds, 6),
            }
        )

    def _trace(self, record: dict) -> None:
        trace = os.environ.get(TRACE_ENV)
        if trace:
            line = json.dumps({**record, "pid": os.getpid()})
            with self._trace_lock, open(trace, "a") as f:
                f.write(line + "\n")


class PairSession(SessionOutput):
    """stirgpu's projector pair for one STIR set-up (``set_up(proj_data_info, image)``)."""

    def __init__(self, proj_data_info, image, options: dict):
        from ..distributed import Communicator
        from ..execution import default_host_budget
        from ..projectors import ProjectorPair

        kwargs = _projector_options(options)
        self._pdi = proj_data_info_from_stir(proj_data_info, "STIR's projection data geometry")
        self._image_info = image_info_from_stir(image, "STIR's image")
        # this process alone, even under mpirun: STIR's own MPI build deals the work to its
        # processes, each projecting its own views (a shared call would wait for the others)
        self._pair: ProjectorPair | None = ProjectorPair(comm=Communicator(None), **kwargs)  # None once closed
        self._pair.set_up(self._pdi, self._image_info)
        #: bytes the C++ side may keep in its forward cache and back-projection buffers
        self.cache_bytes = int(kwargs["host_memory_budget"] or default_host_budget())
        #: the projections run on GPUs (the C++ side then gives STIR's loops one thread)
        self.gpus_project = self._pair.backend == "cuda"
        self._verbosity = int(options["verbosity"])
        self._accum: Array | None = None
        self._trace_lock = threading.Lock()

    # -- the image in -------------------------------------------------------------------
    def set_input(self, image: np.ndarray) -> None:
        """Upload STIR's image (a read-only view of its memory) to every GPU."""
        self._live_pair().set_input(image)

    # -- per-viewgram calls, batched by the C++ side -------------------------------------
    def forward(self, views, outputs: dict) -> None:
        """Forward project ``views`` of every segment (and every timing position) into
        ``outputs`` ({(segment, view, timing_pos): array}): one projection for all timing
        positions of TOF data, whose chunks carry every timing position of their views."""
        t0 = time.perf_counter()
        store = ProjDataViewgrams(self._pdi, outputs)
        self._live_pair().forward_project(store, None, views=np.asarray(views, dtype=np.int64))
        self._log("forward", views, t0)

    def start_accumulating(self) -> None:
        if self._accum is None:
            if self._live_pair().backend == "cuda":
                import cupy

                devices = self._live_pair().devices
                assert devices is not None  # (set up: the engine and its devices exist)
                with cupy.cuda.Device(devices[0]):
                    self._accum = cupy.zeros(self._image_info.shape, dtype=cupy.float32)
            else:
                self._accum = np.zeros(self._image_info.shape, dtype=np.float32)
        else:
            self._accum.fill(0)

    def back(self, views, inputs: dict) -> None:
        """Back project the viewgrams ``inputs`` ({(segment, view, timing_pos): array}) of
        ``views`` and add them to the accumulated image (viewgrams not given, of any timing
        position, count as zeros)."""
        t0 = time.perf_counter()
        store = ProjDataViewgrams(self._pdi, inputs, missing_as_zeros=True)
        self._live_pair().back_project(
            self._require_accumulating(), store, views=np.asarray(views, dtype=np.int64), accumulate=True
        )
        self._log("back", views, t0)

    def get_output(self, out: np.ndarray) -> None:
        """Copy the accumulated back projection into ``out`` (a view of STIR's image)."""
        accum = self._require_accumulating()
        if isinstance(accum, np.ndarray):
            np.copyto(out, accum)
        else:
            accum.get(out=out)

    # -- whole-ProjData calls -------------------------------------------------------------
    def forward_proj_data(self, access, subset_num: int, num_subsets: int) -> None:
        t0 = time.perf_counter()
        out = self._lent(access, "output projection data", writable=True)
        self._live_pair().forward_project(out, None, subset_num, num_subsets)
        self._log("forward ProjData", self._pdi.subset_views(subset_num, num_subsets), t0)

    def back_proj_data(self, access, subset_num: int, num_subsets: int) -> None:
        t0 = time.perf_counter()
        self._live_pair().back_project(
            self._require_accumulating(),
            self._lent(access, "projection data", writable=False),
            subset_num,
            num_subsets,
            accumulate=True,
        )
        self._log("back ProjData", self._pdi.subset_views(subset_num, num_subsets), t0)

    def close(self) -> None:
        """Give back the GPU memory (the STIR projector is being destroyed)."""
        self._accum = None
        self._pair = None

    # -- helpers ----------------------------------------------------------------------------
    def _live_pair(self) -> ProjectorPair:
        if self._pair is None:
            raise StirGpuError("the stirgpu projector was used after STIR destroyed it")
        return self._pair

    def _require_accumulating(self):
        if self._accum is None:
            raise StirGpuError("back projection before start_accumulating_in_new_target")
        return self._accum

    def _lent(self, access, name: str, writable: bool) -> _LentProjData:
        pdi = proj_data_info_from_stir(access.get_proj_data_info(), f"STIR's {name}")
        if pdi != self._pdi:
            raise GeometryError(
                f"STIR's {name} has another geometry than the projector's set-up ({pdi!r} vs {self._pdi!r})"
            )
        return _LentProjData(access, self._pdi, writable)

    def report_calls(self, call: str, calls: int, waiting: float, copying: float, python: float) -> None:
        """One period of STIR's per-viewgram calls (C++ counters; see the module docstring)."""
        self._say(
            f"{call}: {calls} calls, {1e3 * waiting:.1f} ms waiting for the lock, {1e3 * copying:.1f} ms "
            f"copying, {1e3 * python:.1f} ms projecting (summed over threads)"
        )
        self._trace(
            {
                "kind": "viewgram calls",
                "call": call,
                "calls": int(calls),
                "seconds_waiting": round(waiting, 6),
                "seconds_copying": round(copying, 6),
                "seconds_projecting": round(python, 6),
            }
        )

    def _log(self, call: str, views, t0: float) -> None:
        views = [int(v) for v in views]
        segments = list(self._live_pair().segments_to_process())
        ntof = self._pdi.get_num_tof_poss()
        per_view = self._pdi.get_num_tangential_poss() * sum(self._pdi.get_num_axial_poss(s) for s in segments)
        bins = len(views) * ntof * per_view
        self._log_projection(call, views, segments, ntof, bins, t0, tof=self._pdi.is_tof_data())


#: a STIR ProjData lent for one call: one call at a time, held by STIR; writable when lent as output
_LENT_ABILITIES = {
    writable: StoreAbilities(
        readable=True,
        writable=writable,
        parallel_reads=False,
        parallel_writes=False,
        write_behind=False,
        abortable=False,
        template=False,
        host_memory=False,
        residence=Residence.FOREIGN,
    )
    for writable in (False, True)
}


class _LentProjData(ProjData):
    """A STIR ProjData lent by the plugin for one call, as a store: each viewgram goes through
    STIR's own get_viewgram / set_viewgram (memory, disk, any ProjData type) straight into or
    out of the engine's buffers; one call at a time (a file-backed ProjData shares one stream).
    Writable only when lent as an output (``writable``: the C++ side lends inputs read-only)."""

    def __init__(self, access, pdi, writable: bool):
        self._access = access
        self._pdi = pdi
        self._abilities = _LENT_ABILITIES[bool(writable)]
        self._lock = threading.Lock()

    @property
    def proj_data_info(self):
        return self._pdi

    @property
    def storage_order(self) -> StorageOrder:
        return StorageOrder.VIEW  # (its unit: viewgrams)

    @property
    def abilities(self) -> StoreAbilities:
        return self._abilities

    def _refusal(self, ability: str) -> StoreAbilityError:
        if ability == "writable":
            return StoreAbilityError("STIR's projection data were lent as input: they cannot be written")
        return super()._refusal(ability)

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        (v0, v1), (a0, a1) = view_range, axial_range
        whole = a0 == 0 and a1 == self._pdi.get_num_axial_poss(segment)
        timing_pos = self.get_min_tof_pos_num() + int(tof_index)
        with self._lock:
            for i, v in enumerate(range(v0, v1)):
                row = out[i]
                if whole and row.flags.c_contiguous:  # STIR's viewgram copied straight into the engine's buffer
                    self._access.read_viewgram(int(segment), v, row, timing_pos)
                else:
                    row[...] = self._viewgram(segment, v, timing_pos)[a0:a1]

    def _viewgram(self, segment: int, view: int, timing_pos: int) -> np.ndarray:
        vg = np.empty((self._pdi.get_num_axial_poss(segment), self._pdi.get_num_tangential_poss()), np.float32)
        self._access.read_viewgram(int(segment), int(view), vg, int(timing_pos))
        return vg

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        if not self._abilities.writable:
            raise self._refusal("writable")
        nv, na = data.shape[:2]
        whole = a0 == 0 and na == self._pdi.get_num_axial_poss(segment)
        timing_pos = self.get_min_tof_pos_num() + int(tof_index)
        with self._lock:
            for i, v in enumerate(range(v0, v0 + nv)):
                if whole:
                    values = np.ascontiguousarray(data[i])
                else:  # part of a viewgram (a sinogram): STIR writes whole viewgrams only
                    values = self._viewgram(segment, v, timing_pos)
                    values[a0 : a0 + na] = data[i]
                self._access.write_viewgram(int(segment), v, values, timing_pos)
