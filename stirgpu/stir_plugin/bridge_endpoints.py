"""The plugin's projector for geometries stirgpu's LOR tables cannot describe (block and generic
scanners): :class:`EndpointSession`, what the C++ session calls instead of
:class:`~.bridge.PairSession` there (``swig/src/lor_endpoints.h`` says when).

STIR's Parallelproj projector projects these scanners along the LOR endpoints STIR computes
for each bin; the C++ side hands the same endpoints over once per set-up (``lor_endpoints``:
per segment, (views, axial, tangential, 3), in units of the image's x voxel size), and this
session projects along them with libparallelproj's own ``joseph3d_fwd`` / ``joseph3d_back``
(:func:`stirgpu.kernels.joseph_forward` / :func:`~stirgpu.kernels.joseph_back`), on the CPU
or on the first GPU of ``devices``.  ``restrict to cylindrical FOV`` zeroes the image outside
STIR's cylinder before a forward projection and the back projection after it, as
Parallelproj does.  Non-TOF data only (the C++ side refuses TOF data of these scanners).

The calls and the trace (``STIRGPU_STIR_PLUGIN_TRACE``) are those of ``PairSession``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ..errors import GeometryError, StirGpuError
from ..execution.devices import resolve_backend, resolve_devices
from ..interop import image_info_from_stir
from ..kernels import apply_cylindrical_fov, cylindrical_fov_mask, joseph_back, joseph_forward, stir_rim
from .bridge import SessionOutput

__all__ = ["EndpointSession"]

#: host bytes the C++ side may keep in its caches when the block gives no host budget
_DEFAULT_CACHE_BYTES = 1 << 30


class EndpointSession(SessionOutput):
    """stirgpu's Joseph projector along STIR's own LOR endpoints, for one STIR set-up."""

    def __init__(self, endpoints: dict, image, options: dict):
        self._info = image_info_from_stir(image, "STIR's image")
        self._backend = resolve_backend(str(options["backend"]))
        given = tuple(int(d) for d in options["devices"]) or None
        self._device = resolve_devices(self._backend, given)[0] if self._backend == "cuda" else None
        self._xp: Any = np
        if self._device is not None:
            import cupy

            self._xp = cupy
        self._min_view = int(endpoints["min_view"])
        self._min_axial = {int(s): int(a) for s, a in endpoints["min_axial"].items()}
        with self._on_device():
            self._xstart = {int(s): self._xp.asarray(a) for s, a in endpoints["xstart"].items()}
            self._xend = {int(s): self._xp.asarray(a) for s, a in endpoints["xend"].items()}
        self._origin = tuple(float(v) for v in endpoints["origin"])
        self._voxel_size = tuple(float(v) for v in endpoints["voxel_size"])
        self._fov = (
            cylindrical_fov_mask(self._info, stir_rim(self._info.shape[2], float(endpoints["inner_ring_radius"])))
            if bool(options["restrict_to_cylindrical_fov"])
            else None
        )
        self.description = str(endpoints["description"])
        host = int(options["host_memory_budget_mb"])
        #: bytes the C++ side may keep in its forward cache and back-projection buffers
        self.cache_bytes = host * 2**20 if host > 0 else _DEFAULT_CACHE_BYTES
        #: the projections run on a GPU (the C++ side then gives STIR's loops one thread)
        self.gpus_project = self._device is not None
        self._verbosity = int(options["verbosity"])
        self._image = None
        self._accum = None
        self._closed = False
        self._trace_lock = threading.Lock()

    # -- the image in ------------------------------------------------------------------------
    def set_input(self, image: np.ndarray) -> None:
        self._require_open()
        with self._on_device():
            arr = self._xp.array(image, dtype=np.float32, copy=True)
            if self._fov is not None:
                apply_cylindrical_fov(arr, self._fov, out=arr)
            self._image = arr

    # -- per-viewgram calls ------------------------------------------------------------------
    def forward(self, views, outputs: dict) -> None:
        """Forward project into ``outputs`` ({(segment, view, timing_pos): (axial, tangential)
        array}); ``views`` are the views asked for (for the trace)."""
        t0 = time.perf_counter()
        image = self._require_input()
        with self._on_device():
            for (segment, view, _), out in outputs.items():
                xs, xe = self._lors(segment, view)
                values = joseph_forward(xs, xe, image, self._origin, self._voxel_size)
                out[...] = self._host(values).reshape(out.shape)
        self._log("forward", views, {s for s, _, _ in outputs}, t0)

    def start_accumulating(self) -> None:
        self._require_open()
        with self._on_device():
            self._accum = self._xp.zeros(self._info.shape, dtype=np.float32)

    def back(self, views, inputs: dict) -> None:
        """Add the back projection of ``inputs`` (as :meth:`forward`'s outputs) to the image."""
        t0 = time.perf_counter()
        accum = self._require_accumulating()
        with self._on_device():
            for (segment, view, _), values in inputs.items():
                xs, xe = self._lors(segment, view)
                flat = self._xp.asarray(np.ascontiguousarray(values, dtype=np.float32).reshape(-1))
                joseph_back(xs, xe, flat, accum, self._origin, self._voxel_size)
        self._log("back", views, {s for s, _, _ in inputs}, t0)

    def get_output(self, out: np.ndarray) -> None:
        accum = self._require_accumulating()
        with self._on_device():
            result = accum if self._fov is None else apply_cylindrical_fov(accum, self._fov)
            np.copyto(out, self._host(result))

    # -- whole-ProjData calls ----------------------------------------------------------------
    def forward_proj_data(self, access, subset_num: int, num_subsets: int) -> None:
        for view in self._subset_views(subset_num, num_subsets):
            outputs = {key: np.empty(shape, np.float32) for key, shape in self._viewgram_shapes(view)}
            self.forward([view], outputs)
            for (segment, v, timing_pos), values in outputs.items():
                access.write_viewgram(segment, v, values, timing_pos)

    def back_proj_data(self, access, subset_num: int, num_subsets: int) -> None:
        for view in self._subset_views(subset_num, num_subsets):
            inputs = {}
            for key, shape in self._viewgram_shapes(view):
                inputs[key] = np.empty(shape, np.float32)
                access.read_viewgram(key[0], key[1], inputs[key], key[2])
            self.back([view], inputs)

    def report_calls(self, call: str, calls: int, waiting: float, copying: float, python: float) -> None:
        """One period of STIR's per-viewgram calls (the C++ counters), as ``PairSession``'s."""
        self._say(f"{call}: {calls} calls, {1e3 * python:.1f} ms projecting (summed over threads)")
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

    def close(self) -> None:
        self._image = self._accum = None
        self._xstart, self._xend = {}, {}
        self._closed = True

    # -- helpers -----------------------------------------------------------------------------
    def _on_device(self):
        if self._device is None:
            return _NoDevice()
        import cupy

        return cupy.cuda.Device(self._device)

    def _host(self, a) -> np.ndarray:
        return a if isinstance(a, np.ndarray) else a.get()

    def _lors(self, segment: int, view: int):
        if segment not in self._xstart:
            raise GeometryError(f"segment {segment} is not in the projector's set-up")
        i = int(view) - self._min_view
        return self._xstart[segment][i].reshape(-1, 3), self._xend[segment][i].reshape(-1, 3)

    def _subset_views(self, subset_num: int, num_subsets: int) -> range:
        num_views = next(iter(self._xstart.values())).shape[0]
        return range(self._min_view + subset_num, self._min_view + num_views, num_subsets)

    def _viewgram_shapes(self, view: int):
        for segment, xs in self._xstart.items():
            yield (segment, view, 0), xs.shape[1:3]

    def _require_open(self) -> None:
        if self._closed:
            raise StirGpuError("the stirgpu projector was used after STIR destroyed it")

    def _require_input(self):
        self._require_open()
        if self._image is None:
            raise StirGpuError("forward projection before set_input")
        return self._image

    def _require_accumulating(self):
        self._require_open()
        if self._accum is None:
            raise StirGpuError("back projection before start_accumulating_in_new_target")
        return self._accum

    def _log(self, call: str, views, segments, t0: float) -> None:
        views = [int(v) for v in views]
        segments = sorted(int(s) for s in segments)
        bins = len(views) * sum(int(np.prod(self._xstart[s].shape[1:3])) for s in segments)
        self._log_projection(call, views, segments, 1, bins, t0, tof=False)


class _NoDevice:
    """The CPU backend's stand-in for ``cupy.cuda.Device``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
