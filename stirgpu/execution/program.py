"""Chunk programs: what the pipeline does to each chunk, declared, not hard-wired.

A program says which projection-data *inputs* are read per chunk, which *outputs* are
written per chunk, how many chunk-sized *scratch* arrays its device step needs, whether
it reads the lane's input image and/or accumulates into the lane's image, and which
float64 *scalars* it sums.  The pipeline reads the inputs, moves them to the device,
calls :meth:`ChunkProgram.compute` on a compute stream, moves the outputs back and
writes them; accumulated images are reduced over lanes once at the end.  A GPU has
several compute streams taking the chunks in turn, so two chunks' device steps may
run at once: they must not read-modify-write the same memory except by atomics (the
accumulation image) -- each compute stream gets its own ``scalars`` row.

Forward projection is ``inputs=(), outputs=("out",), uses_image=True``; back
projection ``inputs=("data",), accumulates_image=True``; OSEM's fused
ratio-back-projection reads ``measured`` (+ ``background``, ``multiplicative``), writes
nothing and accumulates an image and the log-likelihood.  See
:mod:`stirgpu.projectors.programs`.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..array_types import Array
    from ..kernels.cuda.images import PreparedImage
    from .devices import CpuLane, CudaLane
    from .plan import Chunk

__all__ = ["ChunkProgram", "ChunkData"]


@dataclasses.dataclass
class ChunkData:
    """Everything a program's device step sees for one chunk.

    Arrays are flat (N,) float32 on the lane's device (numpy on CPU lanes), the chunk's
    parts one after the other (``chunk.parts[k]`` occupies ``[offset, stop)``, shaped
    (nv, na, nt)): ``inputs`` / ``outputs`` by name, ``scratch`` a list.  ``tables`` are
    the parts' geometry tables, a list of ChunkTables (on a GPU lane the one kept for the lane:
    ``chunk_tables.ChunkParts``), so ``forward_chunk(d.tables, ...)`` projects every part in
    one call.  ``image`` is the
    lane's input image, ``accum`` its accumulation image ((nz, ny, nx) float32),
    ``scalars`` a float64 vector (one entry per name in ``program.scalars``), ``xp`` numpy
    or cupy.  ``cancel`` is the call's stop flag (a :class:`threading.Event`): programs pass
    it to the CPU kernels (``cancel=``), which then stop within a fraction of a second when
    the call is cancelled instead of finishing the chunk.
    """

    chunk: Chunk
    tables: Sequence[Any]
    inputs: dict[str, Array]
    outputs: dict[str, Array]
    scratch: list[Array]
    #: None when the program uses no image; on a GPU lane prepared (with its framed copies)
    image: Array | PreparedImage | None
    #: None when the program accumulates no image
    accum: Array | None
    #: None when the program sums no scalars
    scalars: Array | None
    xp: ModuleType
    lane: CpuLane | CudaLane
    cancel: threading.Event | None = None


class ChunkProgram(abc.ABC):
    """Base class of chunk programs (see the module docstring)."""

    #: short name for statistics and progress bars
    name: str = "program"
    #: projection-data inputs read per chunk
    inputs: tuple[str, ...] = ()
    #: projection-data outputs written per chunk
    outputs: tuple[str, ...] = ()
    #: chunk-sized device arrays the device step may use freely (allocated once per slot)
    scratch: int = 0
    #: chunk-sized temporaries the device step allocates itself (only planned for)
    workspace: int = 0
    #: image-sized device arrays (with a one-voxel frame, at most) the kernels keep during a call
    #: on a GPU (the input image's framed copies, the back projection's transposed accumulator)
    image_workspace: int = 0
    #: whether the device step reads the lane's input image
    uses_image: bool = False
    #: whether the device step adds into the lane's accumulation image
    accumulates_image: bool = False
    #: on GPU lanes, the program (through the lane's kernels) sets every value of the
    #: accumulation image itself (start_lane zeroes it, or finish_lane overwrites it): the
    #: engine hands it over uninitialised instead of zeroing it first
    fills_accumulation: bool = False
    #: names of float64 sums accumulated over chunks (and lanes)
    scalars: tuple[str, ...] = ()

    def start_lane(self, lane, image, accum) -> None:  # noqa: B027 (optional hook; default: nothing)
        """Called once per lane before its first chunk, on its first compute stream (CPU: under
        the compute lock; the other compute streams wait for what it queues): may make the
        per-lane state the device step keeps across chunks from ``image`` (the lane's input
        image, None when the program uses none) and ``accum`` (the accumulation image, or
        None: zeroed, or on GPU lanes of a ``fills_accumulation`` program uninitialised).
        Device memory kept from call to call belongs to the lane's kernel backend
        (``lane.kernels``, :class:`stirgpu.kernels.backends.LaneKernels`: typed, counted as the
        engine's memory, dropped by its ``release``).  Default: nothing to do."""

    def finish_lane(self, lane, accum) -> None:  # noqa: B027 (optional hook; default: nothing)
        """Called once per lane after its last chunk, on its compute stream (CPU: under the
        compute lock), before the lanes' images are reduced: completes ``accum`` from any
        per-lane state the program kept across chunks.  Default: nothing to do."""

    @abc.abstractmethod
    def compute(self, d: ChunkData) -> None:
        """The device step for one chunk.  Runs on the lane's compute stream (or under the
        CPU compute lock); must only queue device work, never wait for it."""
