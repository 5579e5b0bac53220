"""The kernel backends of a lane: what a chunk program asks of the kernels, one protocol for the
CPU and the GPU, so that the programs carry no backend code.

A lane (one CPU worker, one GPU; :mod:`stirgpu.execution.devices`) owns one
:class:`LaneKernels` -- :class:`CpuLaneKernels` or :class:`CudaLaneKernels` -- and with it the
device memory the kernels keep from call to call (typed: :class:`CudaKept`).  Per call a
program asks it for:

* :meth:`LaneKernels.prepare_image` -- the input image in the kernels' layouts (made once per
  image by the engine's residency);
* :meth:`LaneKernels.start` -- a :class:`ChunkKernels` for this call's geometry, image and
  accumulation image (made before the lane's first chunk);

and of that, per chunk and once at the end:

* :meth:`ChunkKernels.tables` -- the chunk's tables as the kernels take them (made once for a
  forward and back projection of one chunk);
* :meth:`ChunkKernels.forward` -- launch the chunk's forward projection into ``out``;
* :meth:`ChunkKernels.accumulate` -- add the chunk's back projection of ``values`` into the
  accumulation image;
* :meth:`ChunkKernels.finish` -- complete the accumulation image (the GPU's tiled kernels add
  into two padded accumulators, folded into it here) and let go of the call's arrays.

STIR's numerics (``KernelGeometry.numerics == "stir"``) take the same calls on either backend
(:func:`stirgpu.kernels.forward_chunk_stir` dispatches by array kind).  cupy and the CUDA
modules are imported only by a GPU lane's first call.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from ..arrays import on_cuda
from .api import back_chunk, forward_chunk
from .stir_api import StirChunk, back_chunk_stir, forward_chunk_stir
from .stir_tof_api import back_chunk_stir_tof, forward_chunk_stir_tof

if TYPE_CHECKING:
    from .cuda_launcher import ChunkLauncher
    from .cuda_workspaces import BackAccumulator
    from .frames import KernelGeometry
    from .stir_lors import TransaxialTables

__all__ = ["ChunkKernels", "LaneKernels", "CpuLaneKernels", "CudaLaneKernels", "CudaKept"]


class ChunkKernels(Protocol):
    """One lane's kernels for one call (see the module docstring)."""

    def tables(self, tables: Any) -> Any: ...

    def forward(self, tables: Any, out: Any, cancel: threading.Event | None = None) -> None: ...

    def accumulate(self, tables: Any, values: Any, cancel: threading.Event | None = None) -> None: ...

    def finish(self) -> None: ...


class LaneKernels(Protocol):
    """A lane's kernel backend and the memory it keeps between calls (see the module docstring)."""

    #: what the kernels keep between calls (:class:`CudaKept` on a GPU lane; None on the CPU)
    kept: CudaKept | None

    def prepare_image(self, image: Any) -> Any: ...

    def start(self, geometry: KernelGeometry, image: Any, accum: Any) -> ChunkKernels: ...

    def kept_bytes(self) -> int: ...

    def release(self) -> None: ...


class _CallWorkers:
    """A CPU lane's per-worker back-projection images for one call (made at its first chunk,
    added into the accumulation image once, at the end): :class:`stirgpu.kernels.cpu.WorkerImages`
    instead of a set made and reduced for every part of every chunk.  On a GPU lane: nothing."""

    def __init__(self):
        self._images = None

    def get(self, accum):
        if on_cuda(accum):
            return None
        if self._images is None:
            from .cpu import WorkerImages

            self._images = WorkerImages(accum.reshape(-1))
        return self._images

    def reduce(self) -> None:
        if self._images is not None:
            self._images.reduce()
            self._images = None


class _StirChunks:
    """STIR's numerics on either backend: one thread per LOR on the plain image, adding into the
    accumulation image itself (zeroed by :meth:`CudaLaneKernels.start` on a GPU) and, on a GPU,
    for walks along x into a transposed accumulator ``along_x`` kept for the call and folded
    into the accumulation image by :meth:`finish` (``cuda_stir.transposed_accumulator``).
    ``kept`` (a GPU lane's :class:`CudaKept`): where the views' transaxial tables and each
    chunk's :class:`StirChunk` are kept from call to call; without it (the CPU), per call."""

    def __init__(self, geometry: KernelGeometry, image, accum, along_x=None, kept: CudaKept | None = None):
        from .stir_lors import TransaxialTables

        self.geometry, self.image, self.accum, self.along_x = geometry, image, accum, along_x
        pdi = geometry.proj_data_info
        self.kept = kept
        self.transaxial: TransaxialTables | None
        if kept is not None and pdi is not None:
            self.transaxial = kept.stir_transaxial_of(pdi)
        else:
            # the views' transaxial tables, made once for the chunks of every segment of the call
            self.transaxial = TransaxialTables(pdi) if pdi is not None else None
        self.workers = _CallWorkers()

    def tables(self, tables):
        if isinstance(tables, StirChunk):
            return tables
        pdi = self.geometry.proj_data_info
        if self.kept is None or self.transaxial is None:
            return StirChunk(tables, pdi, self.transaxial)
        return self.kept.stir_chunk_of(tables, pdi, self.transaxial)

    def _tof(self) -> bool:
        # TOF data: every timing position of the chunk's LORs in one walk per LOR, the part
        # layout the chunk buffer's
        pdi = self.geometry.proj_data_info
        return pdi is not None and pdi.is_tof_data()

    def forward(self, tables, out, cancel=None) -> None:
        g = self.geometry
        fwd = forward_chunk_stir_tof if self._tof() else forward_chunk_stir
        fwd(self.tables(tables), g.proj_data_info, self.image, g.stir_frame, out=out, cancel=cancel)

    def accumulate(self, tables, values, cancel=None) -> None:
        g = self.geometry
        tables = self.tables(tables)
        kept = {} if self.along_x is None else {"along_x": self.along_x}
        if self._tof():
            back_chunk_stir_tof(tables, g.proj_data_info, values, self.accum, g.stir_frame, cancel=cancel, **kept)
            return
        workers = self.workers.get(self.accum)
        back_chunk_stir(
            tables, g.proj_data_info, values, self.accum, g.stir_frame, cancel=cancel, workers=workers, **kept
        )

    def finish(self) -> None:
        if self.along_x is not None:
            from ..arrays import import_cupy
            from .cuda_stir import fold

            fold(import_cupy().asarray(self.accum), self.along_x)  # queued on the current stream
        self.workers.reduce()
        self.image = self.accum = self.along_x = None


class _CpuChunks:
    """The numba kernels (validated front end: the kernels take numpy arrays as they are)."""

    def __init__(self, geometry: KernelGeometry, image, accum):
        self.geometry, self.image, self.accum = geometry, image, accum
        self.workers = _CallWorkers()

    def tables(self, tables):
        return tables

    def forward(self, tables, out, cancel=None) -> None:
        g = self.geometry
        forward_chunk(tables, self.image, g.origin, g.voxel_size, out=out, scale=g.scale, cancel=cancel)

    def accumulate(self, tables, values, cancel=None) -> None:
        g = self.geometry
        workers = self.workers.get(self.accum)
        back_chunk(tables, values, self.accum, g.origin, g.voxel_size, scale=g.scale, cancel=cancel, workers=workers)

    def finish(self) -> None:
        self.workers.reduce()
        self.image = self.accum = None


class CpuLaneKernels:
    """A CPU lane's kernels: nothing to prepare and nothing kept between calls."""

    kept = None

    def prepare_image(self, image):
        return image

    def start(self, geometry: KernelGeometry, image, accum) -> ChunkKernels:
        if geometry.numerics == "stir":
            return _StirChunks(geometry, image, accum)
        return _CpuChunks(geometry, image, accum)

    def kept_bytes(self) -> int:
        return 0

    def release(self) -> None:
        pass


@dataclasses.dataclass
class CudaKept:
    """What a GPU lane's kernels keep from call to call: the back projection's two padded
    accumulators, the :class:`~stirgpu.kernels.cuda_backend.BackAccumulator` that used them
    (holding neither an image nor them between calls) and the image shape they fit; and the
    launchers' set-ups (making one is Python on every call's critical path): per kind
    (``"forward"``, ``"back"``), one without a target to make twins from, and the last call's
    launcher with the (weakly held) target it was made for."""

    back_accumulators: tuple[Any, Any] | None = None
    back_target: BackAccumulator | None = None
    back_shape: tuple[int, ...] | None = None
    launcher_set_ups: dict[str, ChunkLauncher] = dataclasses.field(default_factory=dict)
    target_launchers: dict[str, tuple[weakref.ref, ChunkLauncher]] = dataclasses.field(default_factory=dict)
    #: STIR's numerics: the last geometry's transaxial tables (packed on the device once), and
    #: each chunk's :class:`StirChunk` by the engine's kept tables of the chunk (held weakly: a
    #: chunk's goes when the engine lets go of its tables)
    stir_transaxial: TransaxialTables | None = None
    stir_chunks: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)

    def is_empty(self) -> bool:
        """Nothing kept (a new lane's, or one after ``release``)."""
        return (
            self.back_accumulators is None
            and self.back_target is None
            and not self.launcher_set_ups
            and not self.target_launchers
            and self.stir_transaxial is None
            and not self.stir_chunks
        )

    def device_bytes(self) -> int:
        """Device memory held: the accumulators and STIR's transaxial tables."""
        pair = self.back_accumulators
        held = sum(int(x.nbytes) for x in pair) if pair is not None else 0
        if self.stir_transaxial is not None:
            held += sum(int(p.X.nbytes) + int(p.H.nbytes) for p in self.stir_transaxial.device_packings.values())
        return held

    def stir_transaxial_of(self, pdi) -> TransaxialTables:
        """The transaxial tables of ``pdi``: the kept ones when they are this very geometry's."""
        from .stir_lors import TransaxialTables

        if self.stir_transaxial is None or self.stir_transaxial.proj_data_info is not pdi:
            self.stir_transaxial = TransaxialTables(pdi)
            self.stir_chunks = weakref.WeakKeyDictionary()
        return self.stir_transaxial

    def stir_chunk_of(self, tables, pdi, transaxial: TransaxialTables) -> StirChunk:
        """The :class:`StirChunk` of ``tables`` (the engine's kept tables of a chunk), kept while
        they are; made with ``transaxial`` (:meth:`stir_transaxial_of` ``pdi``)."""
        try:
            chunk = self.stir_chunks.get(tables)
        except TypeError:  # tables that cannot be held weakly (a list of ChunkTables): not kept
            return StirChunk(tables, pdi, transaxial)
        if chunk is None or chunk.transaxial is not transaxial:
            chunk = self.stir_chunks[tables] = StirChunk(tables, pdi, transaxial)
        return chunk


class _CudaChunks:
    """The tiled CUDA kernels through :class:`~stirgpu.kernels.cuda_backend.ChunkLauncher`s made
    by :meth:`CudaLaneKernels.start` (the pipeline made the tables from the geometry: nothing to
    validate per chunk)."""

    def __init__(self, forward: ChunkLauncher | None, back: ChunkLauncher | None):
        self.forward_launcher, self.back_launcher = forward, back

    def tables(self, tables):
        from .cuda_tables import upload_tables

        return upload_tables(tables)

    def forward(self, tables, out, cancel=None) -> None:
        assert self.forward_launcher is not None, "ChunkKernels.forward: the call was started without an image"
        self.forward_launcher(tables, out)

    def accumulate(self, tables, values, cancel=None) -> None:
        assert self.back_launcher is not None, "ChunkKernels.accumulate: the call was started without an image"
        self.back_launcher(tables, values)

    def finish(self) -> None:
        if self.back_launcher is not None:
            # no re-zeroing here: the lane keeps the accumulators and the next call's start
            # zeroes them (on its compute stream, while its first upload runs)
            from .cuda_workspaces import BackAccumulator

            acc = self.back_launcher.target
            assert isinstance(acc, BackAccumulator)  # (what start made the back launcher for)
            acc.finish(reuse=False, overwrite=True)  # the image's values are replaced
            acc.image = None  # the kept accumulator holds no image between calls (the fold is queued)
        for launcher in (self.forward_launcher, self.back_launcher):
            if launcher is not None:
                launcher.target = None  # nor do the kept launchers


class CudaLaneKernels:
    """One GPU lane's kernels, and what they keep between calls (:attr:`kept`).  Calls run on the
    lane's compute stream, current when :meth:`start` and the chunk kernels are called."""

    def __init__(self, device_id: int):
        self.device_id = int(device_id)
        self.kept: CudaKept = CudaKept()

    def prepare_image(self, image):
        from .cuda_workspaces import prepare_image

        return prepare_image(image)

    def start(self, geometry: KernelGeometry, image, accum) -> ChunkKernels:
        """The call's kernels.  The accumulation image ``accum`` is overwritten by the call's
        :meth:`ChunkKernels.finish` (the accumulators' fold), or zeroed here where the kernels add
        into it directly (STIR's numerics; no accumulators)."""
        if geometry.numerics == "stir":
            along_x = None
            if accum is not None:
                from ..arrays import import_cupy
                from .cuda_stir import transposed_accumulator

                _zero(accum)
                along_x = transposed_accumulator(import_cupy(), accum)  # zeroed on the current stream
            return _StirChunks(geometry, image, accum, along_x, self.kept)
        from .cuda_workspaces import prepare_image

        forward = self._target_launcher("forward", prepare_image(image), geometry) if image is not None else None
        back = self._target_launcher("back", self._back_accumulator(accum), geometry) if accum is not None else None
        return _CudaChunks(forward, back)

    def _back_accumulator(self, accum) -> BackAccumulator:
        """A BackAccumulator of ``accum`` ((nz, ny, nx) float32, C-contiguous, on this GPU): the
        kept one when its accumulators fit (zeroed on the current stream; no argument checks), else
        a new one, kept when it has accumulators (else ``accum`` is zeroed: the kernels add into it)."""
        from .cuda_workspaces import prepare_back_accumulator

        kept = self.kept
        acc, pair = kept.back_target, kept.back_accumulators
        if acc is not None and pair is not None and kept.back_shape == tuple(accum.shape):
            for x in pair:
                _zero(x)
            acc.image, (acc.a, acc.b) = accum, pair
            return acc
        acc = prepare_back_accumulator(accum, scratch=pair)
        if acc.a is not None:
            kept.back_accumulators, kept.back_target, kept.back_shape = (acc.a, acc.b), acc, tuple(accum.shape)
        else:  # the kernels add into the image itself
            _zero(accum)
        return acc

    def _target_launcher(self, kind: str, target, geometry: KernelGeometry) -> ChunkLauncher:
        """The launcher for ``target``: the last call's when it had this very target (the
        prepared input image, or the kept accumulator), else a twin of the kept set-up of this
        kind when it fits, else a new one."""
        from .cuda_launcher import ChunkLauncher

        kept = self.kept
        last = kept.target_launchers.get(kind)
        if last is not None and last[0]() is target:
            launcher = last[1]
            launcher.target = target
            return launcher
        g = geometry
        set_up = kept.launcher_set_ups.get(kind)
        if set_up is not None:
            launcher = set_up.for_target(target, g.origin, g.voxel_size, g.scale)
        else:
            launcher = ChunkLauncher(target, g.origin, g.voxel_size, g.scale)
        if set_up is None or launcher.setup_id is not set_up.setup_id:
            kept.launcher_set_ups[kind] = launcher.without_target()  # holds no array between calls
        kept.target_launchers[kind] = (weakref.ref(target), launcher)
        return launcher

    def kept_bytes(self) -> int:
        return self.kept.device_bytes()

    def release(self) -> None:
        self.kept = CudaKept()


def _zero(a) -> None:
    """Zero the device array ``a`` on the current stream (queued, not waited for)."""
    from ..arrays import import_cupy

    a.data.memset_async(0, a.nbytes, import_cupy().cuda.get_current_stream())
