"""Backends and lanes: where chunks are computed.

A *lane* is one worker that computes chunks: one GPU (with its own copy-in, compute
and copy-out CUDA streams), or one CPU worker thread running the numba kernels.  A call
(:mod:`stirgpu.execution.call`, :mod:`stirgpu.execution.strategies`) drives every lane the
same way; only the four primitives below differ:

* ``alloc_host`` / ``alloc_device``: chunk buffers (pinned host memory on GPUs; on
  the CPU the "device" buffers are the host buffers themselves);
* ``to_device`` / ``to_host``: asynchronous copies on the lane's copy streams (no-ops
  on the CPU); ``copy_views`` moves a part's viewgrams straight between the GPU and a
  page-locked store (GPUs only, see :mod:`stirgpu.execution.pinning`);
* ``compute``: runs a chunk program's device step on the compute stream (CPU: under a
  lock shared by the CPU lanes -- numba's parallel kernels already use every core, and
  numba's ``workqueue`` threading layer must not be entered by two threads at once; by
  default there is one CPU lane, whose reader and writer threads overlap reading and writing
  with its computing);
* ``fence``: a marker recorded after the queued work, that another thread waits on;
* ``out_of_memory(exc)``: whether an exception is an allocation failure, and of which memory
  (:mod:`stirgpu.execution.retry` then retries the call with smaller chunks).

**Test hook**: ``allocation_hook`` (None, or set through ``Engine.allocation_hook``) is called
as ``hook(lane_name, what, nbytes)`` before every buffer a lane allocates for a call (``what``:
"host buffer", "device buffer", "device array") and before every chunk's device step, for its
temporaries ("chunk temporaries": ``ChunkProgram.workspace`` chunk buffers, 0 bytes for a program
that plans none, so a test can fail any chunk); raising ``MemoryError`` (or cupy's
``OutOfMemoryError``) there is an allocation failing at that point.

cupy is imported only when a CUDA lane is made.  Nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays import import_cupy as _cupy
from ..errors import DeviceError
from ..kernels.backends import CpuLaneKernels, CudaLaneKernels
from ..kernels.threads import numba_threads

__all__ = [
    "resolve_backend",
    "resolve_devices",
    "cuda_device_count",
    "gpu_memory",
    "CpuLane",
    "CudaLane",
    "make_lanes",
    "DEFAULT_CPU_LANES",
    "AllocationHook",
]

#: the test hook's signature: (lane name, what is allocated, bytes) -> None, raising to fail it
AllocationHook = Callable[[str, str, int], None]

#: cudaErrorMemoryAllocation (runtime) and CUDA_ERROR_OUT_OF_MEMORY (driver): both 2
_CUDA_OUT_OF_MEMORY = 2

#: CPU lanes by default: one, whose numba kernels run every chunk on all cores (its reader
#: and writer threads overlap reading and writing with computing; docs/kernel-tuning.md, "CPU
#: backend", has what a second lane and lanes with one core each measured)
DEFAULT_CPU_LANES = 1


def cuda_device_count() -> int:
    """Visible CUDA devices through cupy; 0 where cupy, the driver or a GPU is missing."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime

        return int(runtime.getDeviceCount())
    except Exception:  # any failure here means "no usable GPU"
        return 0


def resolve_backend(backend: str) -> str:
    """``"auto"`` -> ``"cuda"`` when cupy sees a GPU, else ``"cpu"``; checks ``"cuda"``."""
    if backend not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
    if backend == "cpu":
        return "cpu"
    n = cuda_device_count()
    if backend == "cuda" and n == 0:
        _cupy()  # a clear message when cupy itself is missing
        raise DeviceError("backend 'cuda' was asked for but cupy sees no usable CUDA device")
    return "cuda" if n > 0 else "cpu"


def resolve_devices(backend: str, devices: Sequence[int] | None) -> tuple[int, ...]:
    """The lane ids: GPU ordinals (default all visible GPUs), or CPU worker numbers
    (default ``range(DEFAULT_CPU_LANES)``)."""
    if backend == "cuda":
        n = cuda_device_count()
        if devices is None:
            return tuple(range(n))
        ids = tuple(int(d) for d in devices)
        bad = [d for d in ids if not 0 <= d < n]
        if bad or not ids:
            raise DeviceError(f"devices {list(ids)}: valid CUDA device ids are 0..{n - 1}")
        if len(set(ids)) != len(ids):
            raise DeviceError(f"devices {list(ids)} lists a device twice")
        return ids
    if devices is None:
        return tuple(range(DEFAULT_CPU_LANES))
    ids = tuple(int(d) for d in devices)
    if not ids or len(set(ids)) != len(ids):
        raise DeviceError(f"devices {list(ids)}: the CPU backend needs distinct worker numbers")
    return ids


def gpu_memory(device: int) -> tuple[int, int]:
    """(free, total) bytes of a GPU, counting memory cached in cupy's pool as free."""
    cp = _cupy()
    with cp.cuda.Device(device):
        free, total = cp.cuda.runtime.memGetInfo()
        pool = cp.get_default_memory_pool()
        return int(free) + int(pool.free_bytes()), int(total)


class _Fence:
    """Something another thread can wait for."""

    def __init__(self, event=None):
        self._event = event

    def wait(self) -> None:
        if self._event is not None:
            self._event.synchronize()


class CpuLane:
    """A CPU worker: buffers are numpy arrays and copies are no-ops."""

    kind = "cpu"
    xp = np

    def __init__(self, index: int, compute_lock: threading.Lock):
        self.index = int(index)
        self.device_id = int(index)
        self.name = f"cpu{index}"
        self._lock = compute_lock
        #: the test hook (see the module docstring)
        self.allocation_hook: AllocationHook | None = None
        #: the chunk programs' kernel backend (stirgpu.kernels.backends)
        self.kernels = CpuLaneKernels()
        #: numba threads of this lane's kernels (config's cpu_threads at the call; None: numba's maximum)
        self.cpu_threads: int | None = None

    # resources
    def activate(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def before_allocation(self, what: str, nbytes: int) -> None:
        """The test hook's call (see the module docstring); nothing without one."""
        if self.allocation_hook is not None:
            self.allocation_hook(self.name, what, int(nbytes))

    def out_of_memory(self, exc: BaseException) -> str | None:
        """``"host"`` when ``exc`` is an allocation failure (numpy's MemoryError), else None."""
        return "host" if isinstance(exc, MemoryError) else None

    def alloc_host(self, n: int, dtype=np.float32) -> np.ndarray:
        self.before_allocation("host buffer", int(n) * np.dtype(dtype).itemsize)
        return np.empty(int(n), dtype=dtype)

    def alloc_device(self, n: int, dtype=np.float32) -> np.ndarray:
        self.before_allocation("device buffer", int(n) * np.dtype(dtype).itemsize)
        return np.empty(int(n), dtype=dtype)

    def zeros_device(self, shape, dtype=np.float32, out=None) -> np.ndarray:
        if out is None:
            self.before_allocation("device array", int(np.prod(shape)) * np.dtype(dtype).itemsize)
            return np.zeros(shape, dtype=dtype)
        out.fill(0)
        return out

    @property
    def shares_host_buffers(self) -> bool:
        """True: the device buffers of a slot are its host buffers."""
        return True

    # stages
    def to_device(self, dst, src, nbytes: int) -> None:  # pragma: no cover - never called on CPU
        raise AssertionError("CPU lanes compute in their host buffers")

    def to_host(self, dst, src, nbytes: int) -> None:  # pragma: no cover
        raise AssertionError("CPU lanes compute in their host buffers")

    def compute(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """Run ``fn`` now; returns (start, end) perf_counter seconds of the kernel work."""
        with self._lock, numba_threads(self.cpu_threads):
            t0 = time.perf_counter()
            fn()
            return t0, time.perf_counter()

    def fence_after_compute(self) -> _Fence:
        return _Fence()

    def free_cached_memory(self) -> None:
        """Nothing: numpy returns freed memory to the system itself."""

    def synchronize(self) -> None:
        pass

    def to_numpy(self, a) -> np.ndarray:
        return a

    def upload_image(self, host: np.ndarray, dst: np.ndarray | None, pinned: bool = False) -> np.ndarray:
        if dst is None or dst.shape != host.shape:
            return np.array(host, dtype=np.float32, copy=True)
        np.copyto(dst, host)
        return dst


class CudaLane:
    """One GPU with streams for copies in, compute and copies out, and CUDA events between
    them.  ``compute_streams`` (default 2) compute streams take the chunks in turn: a chunk's
    kernels can then fill the SMs that the previous chunk's launch tail leaves idle (its last
    blocks), which a single stream would keep waiting.  ``s_compute`` is the first one."""

    kind = "cuda"
    shares_host_buffers = False

    def __init__(self, index: int, device_id: int, compute_streams: int = 2):
        self.index = int(index)
        self.device_id = int(device_id)
        self.name = f"cuda{device_id}"
        #: the chunk programs' kernel backend (stirgpu.kernels.backends), and what it keeps
        self.kernels = CudaLaneKernels(self.device_id)
        cp = _cupy()
        self.cp = cp
        self.xp = cp
        self.device = cp.cuda.Device(self.device_id)
        with self.device:
            self.s_in = cp.cuda.Stream(non_blocking=True)
            self.computes = tuple(cp.cuda.Stream(non_blocking=True) for _ in range(max(int(compute_streams), 1)))
            self.s_out = cp.cuda.Stream(non_blocking=True)
            # kept events (creating one costs tens of microseconds; an event belongs to the
            # device current when it is made): the call's time reference, the hand-offs
            # between the compute streams (fork / join), the caller's stream
            self._ref = self._event()
            self._ref_at: tuple[float, float] | None = None  # (monotonic, perf_counter) of _ref
            self._fork = self._event()
            self._joins = tuple(self._event() for _ in self.computes[1:])
            self._caller = self._event()
        self.s_compute = self.computes[0]
        #: the test hook (see the module docstring)
        self.allocation_hook: AllocationHook | None = None

    def activate(self):
        """Make this GPU current in the calling thread (cupy's current device is per thread)."""
        return self.device

    def before_allocation(self, what: str, nbytes: int) -> None:
        """The test hook's call (see the module docstring); nothing without one."""
        if self.allocation_hook is not None:
            self.allocation_hook(self.name, what, int(nbytes))

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Which memory an allocation failure ``exc`` is of: ``"GPU"`` for cupy's pool
        (``cupy.cuda.memory.OutOfMemoryError``) or a CUDA call out of device memory, ``"host"``
        for a plain MemoryError or a failed page-locked allocation (``cudaHostAlloc``'s
        ``cudaErrorMemoryAllocation``); None for anything else."""
        cp = self.cp
        if isinstance(exc, cp.cuda.memory.OutOfMemoryError):
            return "GPU"
        if isinstance(exc, MemoryError):
            return "host"
        if isinstance(exc, cp.cuda.runtime.CUDARuntimeError) and exc.status == _CUDA_OUT_OF_MEMORY:
            # device memory comes from cupy's pool (OutOfMemoryError, above): this is pinned memory
            return "host"
        if isinstance(exc, cp.cuda.driver.CUDADriverError) and exc.status == _CUDA_OUT_OF_MEMORY:
            return "GPU"
        return None

    def free_cached_memory(self) -> None:
        """Give the blocks cupy's pool holds free on this GPU back to the device."""
        with self.device:
            self.cp.get_default_memory_pool().free_all_blocks()

    def alloc_host(self, n: int, dtype=np.float32) -> np.ndarray:
        import cupyx

        self.before_allocation("host buffer", int(n) * np.dtype(dtype).itemsize)
        return cupyx.empty_pinned((int(n),), dtype=dtype)

    def alloc_device(self, n: int, dtype=np.float32):
        self.before_allocation("device buffer", int(n) * np.dtype(dtype).itemsize)
        with self.device:
            return self.cp.empty(int(n), dtype=dtype)

    def zeros_device(self, shape, dtype=np.float32, out=None):
        """Zeros on this GPU (``out``, a contiguous array of it, or a new array), set on the
        compute stream (ordered before the kernels queued there after it, with no wait here)."""
        a = self.empty_device(shape, dtype, out)
        with self.device:
            a.data.memset_async(0, a.nbytes, self.s_compute)
        return a

    def empty_device(self, shape, dtype=np.float32, out=None):
        """``out`` as it is, or a new uninitialised array of this GPU."""
        if out is not None:
            return out
        self.before_allocation("device array", int(np.prod(shape)) * np.dtype(dtype).itemsize)
        with self.device:
            return self.cp.empty(shape, dtype=dtype)

    def _event(self):
        return self.cp.cuda.Event(block=False, disable_timing=False, interprocess=False)

    def to_device(self, dst, src: np.ndarray, nbytes: int) -> None:
        """Queue a host->device copy of ``nbytes`` on the copy-in stream."""
        if nbytes:
            rt = self.cp.cuda.runtime
            rt.memcpyAsync(dst.data.ptr, src.ctypes.data, int(nbytes), rt.memcpyHostToDevice, self.s_in.ptr)

    def to_host(self, dst: np.ndarray, src, nbytes: int) -> None:
        """Queue a device->host copy of ``nbytes`` on the copy-out stream."""
        if nbytes:
            rt = self.cp.cuda.runtime
            rt.memcpyAsync(dst.ctypes.data, src.data.ptr, int(nbytes), rt.memcpyDeviceToHost, self.s_out.ptr)

    #: the largest row pitch cudaMemcpy2D accepts on current GPUs (cudaDevAttrMaxPitch)
    _MAX_PITCH = 2**31 - 1

    def copy_views(self, to_device: bool, dev_ptr: int, host: np.ndarray, views, stream) -> None:
        """Queue, on ``stream``, the copy between ``host[views]`` -- page-locked store memory,
        (views, axial, tangential), C-contiguous -- and ``len(views)`` consecutive viewgrams at
        device address ``dev_ptr`` (``to_device``: host to device).  Consecutive views are one
        copy, evenly spaced ones (a subset's) one 2-D copy, others one copy per run."""
        rt = self.cp.cuda.runtime
        vb = int(host.strides[0])
        base = int(host.ctypes.data)
        kind = rt.memcpyHostToDevice if to_device else rt.memcpyDeviceToHost
        n = len(views)
        if n == 0:
            return
        step = int(views[1]) - int(views[0]) if n > 1 else 1
        even = step > 0 and all(int(views[i + 1]) - int(views[i]) == step for i in range(n - 1))
        if even and (step == 1 or step * vb <= self._MAX_PITCH):
            h = base + int(views[0]) * vb
            if step == 1:
                dst, src = (dev_ptr, h) if to_device else (h, dev_ptr)
                rt.memcpyAsync(dst, src, n * vb, kind, stream.ptr)
            elif to_device:
                rt.memcpy2DAsync(dev_ptr, vb, h, step * vb, vb, n, kind, stream.ptr)
            else:
                rt.memcpy2DAsync(h, step * vb, dev_ptr, vb, vb, n, kind, stream.ptr)
            return
        i = 0
        while i < n:  # runs of consecutive views
            j = i + 1
            while j < n and int(views[j]) == int(views[j - 1]) + 1:
                j += 1
            h, d = base + int(views[i]) * vb, dev_ptr + i * vb
            dst, src = (d, h) if to_device else (h, d)
            rt.memcpyAsync(dst, src, (j - i) * vb, kind, stream.ptr)
            i = j

    def compute_stream(self, turn: int, count: int | None = None):
        """The compute stream of a lane's ``turn``-th chunk of a call: the first ``count``
        (default all) compute streams take turns."""
        n = len(self.computes) if count is None else max(min(int(count), len(self.computes)), 1)
        return self.computes[turn % n]

    def fork(self) -> None:
        """Everything queued on ``s_compute`` so far precedes whatever is queued next on the
        other compute streams (a call's set-up: zeroed accumulators, prepared images)."""
        if len(self.computes) > 1:
            self._fork.record(self.s_compute)
            for s in self.computes[1:]:
                s.wait_event(self._fork)

    def join(self) -> None:
        """Everything queued on the other compute streams so far precedes whatever is queued
        next on ``s_compute`` (a call's last step: folding accumulators)."""
        for ev, s in zip(self._joins, self.computes[1:], strict=True):
            ev.record(s)
            self.s_compute.wait_event(ev)

    def after_current_stream(self) -> None:
        """Work queued so far on the calling thread's current stream of this GPU (the caller's
        own work on an array it hands over) precedes whatever is queued next on ``s_compute``."""
        with self.device:
            self._caller.record(self.cp.cuda.get_current_stream())
        self.s_compute.wait_event(self._caller)

    #: a time reference is recorded again when older than this (seconds): event times are
    #: float32 milliseconds from it, 0.06 us apart at 1 s; recording one costs a wait for
    #: the GPU, ~10 us per call (as much as a subset's kernel launch)
    _REF_SECONDS = 1.0

    def time_reference(self):
        """(event, host time): an event on ``s_compute`` that has fired, and when; puts the GPU
        stage times of a call on the host clock.  The same one for a second, then a new one."""
        now = time.monotonic()
        if self._ref_at is None or now - self._ref_at[0] >= self._REF_SECONDS:
            self._ref.record(self.s_compute)
            self._ref.synchronize()
            self._ref_at = (now, time.perf_counter())
        return self._ref, self._ref_at[1]

    def new_event(self):
        """A timing CUDA event (creating one costs tens of microseconds of Python and driver
        time: the pipeline keeps a set per slot and records them again for every chunk)."""
        return self._event()

    def record(self, stream, event=None):
        """Record ``event`` (a new one when None) on ``stream``; returns it."""
        ev = self._event() if event is None else event
        ev.record(stream)
        return ev

    def synchronize(self) -> None:
        with self.device:
            for s in (self.s_in, *self.computes, self.s_out):
                s.synchronize()

    def to_numpy(self, a) -> np.ndarray:
        with self.device:
            self.s_compute.synchronize()
            return self.cp.asnumpy(a)

    def upload_image(self, host, dst, pinned: bool = False):
        """Copy an image (numpy -- already in pinned memory when ``pinned`` -- or a cupy array on
        any GPU) into this GPU's ``dst`` (made when missing); synchronous, because it happens
        once per call before any chunk."""
        cp = self.cp
        with self.device:
            if dst is None or tuple(dst.shape) != tuple(host.shape):
                dst = cp.empty(host.shape, dtype=cp.float32)
            if isinstance(host, np.ndarray):
                if not pinned:
                    import cupyx

                    staged = cupyx.empty_pinned(host.shape, dtype=np.float32)
                    np.copyto(staged, host)
                    host = staged
                self.to_device(dst, np.ascontiguousarray(host), host.nbytes)
                self.s_in.synchronize()
            else:
                src = cp.ascontiguousarray(host, dtype=cp.float32)
                if src.device.id == self.device_id:
                    cp.copyto(dst, src)
                else:
                    cp.cuda.runtime.memcpyPeer(dst.data.ptr, self.device_id, src.data.ptr, src.device.id, src.nbytes)
                cp.cuda.Device(self.device_id).synchronize()
        return dst


def make_lanes(backend: str, devices: Sequence[int], compute_streams: int = 2) -> list:
    """One lane per entry of ``devices`` (GPU ordinals, or CPU worker numbers); GPU lanes
    with ``compute_streams`` compute streams each."""
    if backend == "cuda":
        return [CudaLane(i, d, compute_streams) for i, d in enumerate(devices)]
    lock = threading.Lock()
    return [CpuLane(i, lock) for i, _ in enumerate(devices)]
