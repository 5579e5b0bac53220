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
* :meth:`ChunkKernels.finish` -- complete the accumulation image (on a GPU, walks along x add
  into a transposed accumulator, folded into it here; on the CPU, the workers' images are added
  in) and let go of the call's arrays.

Both backends take the same calls (:func:`stirgpu.kernels.forward_chunk` dispatches by array
kind).  cupy and the CUDA modules are imported only by a GPU lane's first call.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import TYPE_CHECKING, Any, Protocol

from ..arrays import on_cuda
from .joseph import JosephChunk, back_chunk, forward_chunk
from .tof import back_chunk_tof, forward_chunk_tof

if TYPE_CHECKING:
    from .frames import KernelGeometry
    from .joseph.lors import TransaxialTables

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
    added into the accumulation image once, at the end): :class:`stirgpu.kernels.joseph.workers.WorkerImages`
    instead of a set made and reduced for every part of every chunk.  On a GPU lane: nothing."""

    def __init__(self):
        self._images = None

    def get(self, accum):
        if on_cuda(accum):
            return None
        if self._images is None:
            from .joseph.workers import WorkerImages

            self._images = WorkerImages(accum.reshape(-1))
        return self._images

    def reduce(self) -> None:
        if self._images is not None:
            self._images.reduce()
            self._images = None


class _Chunks:
    """The kernels of one call on either backend: one thread per LOR, reading the prepared image,
    adding into the accumulation image itself (zeroed by :meth:`CudaLaneKernels.start` on a GPU)
    and, on a GPU, for walks along x into a transposed accumulator ``along_x`` kept for the call
    and folded into the accumulation image by :meth:`finish`
    (:func:`stirgpu.kernels.joseph.cuda.transposed_accumulator`).  ``kept`` (a GPU lane's
    :class:`CudaKept`): where the views' transaxial tables and each chunk's
    :class:`~stirgpu.kernels.joseph.JosephChunk` are kept from call to call; without it (the
    CPU), per call."""

    def __init__(self, geometry: KernelGeometry, image, accum, along_x=None, kept: CudaKept | None = None):
        from .joseph.lors import TransaxialTables

        self.geometry, self.image, self.accum, self.along_x = geometry, image, accum, along_x
        pdi = geometry.proj_data_info
        self.kept = kept
        # the views' transaxial tables, which the chunks of every segment share: the lane's kept
        # ones on a GPU, made once for the call on the CPU
        self.transaxial: TransaxialTables = kept.transaxial_of(pdi) if kept is not None else TransaxialTables(pdi)
        # TOF data: every timing position of the chunk's LORs in one walk per LOR, the part
        # layout the chunk buffer's
        self.tof = pdi.is_tof_data()
        self.workers = _CallWorkers()

    def tables(self, tables):
        if isinstance(tables, JosephChunk):
            return tables
        pdi = self.geometry.proj_data_info
        if self.kept is None:
            return JosephChunk(tables, pdi, self.transaxial)
        return self.kept.chunk_of(tables, pdi, self.transaxial)

    def forward(self, tables, out, cancel=None) -> None:
        g = self.geometry
        fwd = forward_chunk_tof if self.tof else forward_chunk
        fwd(self.tables(tables), g.proj_data_info, self.image, g.frame, out=out, cancel=cancel)

    def accumulate(self, tables, values, cancel=None) -> None:
        g = self.geometry
        tables = self.tables(tables)
        kept = {} if self.along_x is None else {"along_x": self.along_x}
        if self.tof:
            back_chunk_tof(tables, g.proj_data_info, values, self.accum, g.frame, cancel=cancel, **kept)
            return
        workers = self.workers.get(self.accum)
        back_chunk(tables, g.proj_data_info, values, self.accum, g.frame, cancel=cancel, workers=workers, **kept)

    def finish(self) -> None:
        if self.along_x is not None:
            from ..arrays import import_cupy
            from .joseph.cuda import fold

            fold(import_cupy().asarray(self.accum), self.along_x)  # queued on the current stream
        self.workers.reduce()
        self.image = self.accum = self.along_x = None


class CpuLaneKernels:
    """A CPU lane's kernels: nothing to prepare and nothing kept between calls."""

    kept = None

    def prepare_image(self, image):
        return image

    def start(self, geometry: KernelGeometry, image, accum) -> ChunkKernels:
        return _Chunks(geometry, image, accum)

    def kept_bytes(self) -> int:
        return 0

    def release(self) -> None:
        pass


@dataclasses.dataclass
class CudaKept:
    """What a GPU lane's kernels keep from call to call: the last geometry's transaxial tables
    (packed on the device once) and each chunk's :class:`~stirgpu.kernels.joseph.JosephChunk` by
    the engine's kept tables of the chunk (held weakly: a chunk's goes when the engine lets go of
    its tables)."""

    transaxial: TransaxialTables | None = None
    chunks: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)

    def is_empty(self) -> bool:
        """Nothing kept (a new lane's, or one after ``release``)."""
        return self.transaxial is None and not self.chunks

    def device_bytes(self) -> int:
        """Device memory held: the transaxial tables (a chunk's own tables are a few KiB)."""
        if self.transaxial is None:
            return 0
        return sum(int(p.X.nbytes) + int(p.H.nbytes) for p in self.transaxial.device_packings.values())

    def transaxial_of(self, pdi) -> TransaxialTables:
        """The transaxial tables of ``pdi``: the kept ones when they are this very geometry's."""
        from .joseph.lors import TransaxialTables

        if self.transaxial is None or self.transaxial.proj_data_info is not pdi:
            self.transaxial = TransaxialTables(pdi)
            self.chunks = weakref.WeakKeyDictionary()
        return self.transaxial

    def chunk_of(self, tables, pdi, transaxial: TransaxialTables) -> JosephChunk:
        """The :class:`~stirgpu.kernels.joseph.JosephChunk` of ``tables`` (the engine's kept tables
        of a chunk), kept while they are; made with ``transaxial`` (:meth:`transaxial_of` ``pdi``)."""
        try:
            chunk = self.chunks.get(tables)
        except TypeError:  # tables that cannot be held weakly (a tuple of ChunkTables): not kept
            return JosephChunk(tables, pdi, transaxial)
        if chunk is None or chunk.transaxial is not transaxial:
            chunk = self.chunks[tables] = JosephChunk(tables, pdi, transaxial)
        return chunk


class CudaLaneKernels:
    """One GPU lane's kernels, and what they keep between calls (:attr:`kept`).  Calls run on the
    lane's compute stream, current when :meth:`start` and the chunk kernels are called."""

    def __init__(self, device_id: int):
        self.device_id = int(device_id)
        self.kept: CudaKept = CudaKept()

    def prepare_image(self, image):
        from .cuda.images import prepare_image

        return prepare_image(image)

    def start(self, geometry: KernelGeometry, image, accum) -> ChunkKernels:
        """The call's kernels.  The accumulation image ``accum`` is zeroed here (on the current
        stream): the kernels add into it, and walks along x into a transposed accumulator that
        :meth:`ChunkKernels.finish` folds into it."""
        along_x = None
        if accum is not None:
            from ..arrays import import_cupy
            from .joseph.cuda import transposed_accumulator

            _zero(accum)
            along_x = transposed_accumulator(import_cupy(), accum)  # zeroed on the current stream
        return _Chunks(geometry, image, accum, along_x, self.kept)

    def kept_bytes(self) -> int:
        return self.kept.device_bytes()

    def release(self) -> None:
        self.kept = CudaKept()


def _zero(a) -> None:
    """Zero the device array ``a`` on the current stream (queued, not waited for)."""
    from ..arrays import import_cupy

    a.data.memset_async(0, a.nbytes, import_cupy().cuda.get_current_stream())
