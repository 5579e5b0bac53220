"""The communicator: which processes take part in a call, and the collective steps they take.

:class:`Communicator` wraps an mpi4py communicator (or none: one process, no MPI) and offers
the few collective steps stirgpu needs, each one a step every rank takes in the same order:

* :meth:`~Communicator.together` -- a block every rank runs; at its end the ranks agree that
  each got through, or every rank raises the same :class:`~stirgpu.errors.RankFailure`,
  naming the failing rank(s) and the first one's cause (no rank is left waiting);
* :meth:`~Communicator.sum_image` -- the element-wise sum of an image over the ranks, in
  place: a GPU image on the device where the MPI is CUDA-aware (:mod:`.cuda_aware`), else
  through float64 host buffers of at most :attr:`~Communicator.staging_bytes`;
* :meth:`~Communicator.sum_scalars` -- float64 sums of a few named numbers;
* :meth:`~Communicator.broadcast` -- a buffer (in place) or a small picklable object.

Every wait on the other ranks polls a non-blocking request (sleeping between polls), so a
signal -- Ctrl-C -- reaches Python in every rank even while it waits.

:func:`world` is the default: ``COMM_WORLD`` when this process was started by an MPI launcher
(``mpirun``, ``mpiexec``, ``srun``: it sets ``PMI_RANK`` / ``PMIX_RANK`` /
``OMPI_COMM_WORLD_RANK``), else one process.  mpi4py is imported only then, or when a
communicator is passed; without it (and with one rank) nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..arrays import array_module, on_cuda
from ..errors import RankFailure, StirGpuError
from .cuda_aware import is_cuda_aware

__all__ = ["Communicator", "world", "as_communicator", "launched_by_mpi", "describe_failure", "STAGING_BYTES"]

#: what MPI launchers set in each process they start: its rank, and the number of ranks
RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK")
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
#: ... and the number of ranks on this node (MPICH's hydra, Open MPI, Slurm)
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
#: default bytes of one host staging buffer of :meth:`Communicator.sum_image` (two are used)
STAGING_BYTES = 16 << 20
#: polling a pending request: how long polls follow each other at once, then the first and
#: longest sleep between polls (seconds); see :meth:`Communicator._wait`
_POLL_AT_ONCE, _POLL_FIRST, _POLL_LONGEST = 2e-3, 5e-5, 1e-3


def launched_by_mpi(environ: Mapping[str, str] | None = None) -> tuple[bool, int | None]:
    """(whether an MPI launcher started this process, the number of ranks it says or None)."""
    env = os.environ if environ is None else environ
    launched = any(v in env for v in RANK_VARIABLES)
    size = next((int(env[v]) for v in SIZE_VARIABLES if env.get(v, "").isdigit()), None)
    return launched, size


def describe_failure(error: BaseException) -> str:
    """A failure in one line: stirgpu's own errors by their message, others with their type
    (``MemoryError: ...``, ``out of memory`` for a bare MemoryError)."""
    if isinstance(error, MemoryError):
        return f"out of memory ({type(error).__name__}{': ' + str(error) if str(error) else ''})"
    text = str(error).strip() or type(error).__name__
    return text if isinstance(error, StirGpuError) else f"{type(error).__name__}: {text}"


class Communicator:
    """The processes taking part (an mpi4py ``Intracomm``, or None: this process alone).

    ``staging_bytes``: the size of each of the two float64 host buffers an image sum goes
    through (None: :data:`STAGING_BYTES`; the projectors pass a share of their host memory
    budget).  GPU images are summed on the device where the MPI is CUDA-aware, else through
    the same host buffers (:meth:`sum_image`).
    """

    def __init__(self, mpi_comm=None, *, staging_bytes: int | None = None):
        self.mpi = mpi_comm
        self.rank = 0 if mpi_comm is None else int(mpi_comm.Get_rank())
        self.size = 1 if mpi_comm is None else int(mpi_comm.Get_size())
        self.staging_bytes = max(int(staging_bytes or STAGING_BYTES), 1 << 16)
        #: how the last image was summed over the ranks, in words ("" before the first sum)
        self.last_image_sum = ""
        self._cuda_aware: tuple[bool, str] | None = None  # (this rank's MPI's answer, why)

    @property
    def is_root(self) -> bool:
        """Whether this is rank 0: the one that writes the files every rank computed alike."""
        return self.rank == 0

    @property
    def ranks_on_this_node(self) -> int:
        """The ranks sharing this node's memory, as the launcher says (1 where it says nothing,
        and without MPI): they split the node's default host memory budget."""
        if not self.parallel:
            return 1
        found = next((os.environ[v] for v in LOCAL_SIZE_VARIABLES if os.environ.get(v, "").isdigit()), "1")
        return max(min(int(found), self.size), 1)

    @property
    def parallel(self) -> bool:
        """More than one rank."""
        return self.size > 1

    def describe(self) -> str:
        """``"on 3 MPI ranks"`` (``""`` for one process), for a run's summary."""
        return f"on {self.size} MPI rank{'s' if self.size != 1 else ''}" if self.mpi is not None else ""

    def __repr__(self) -> str:
        return f"Communicator(rank {self.rank} of {self.size}{', MPI' if self.mpi is not None else ''})"

    # -- agreeing ------------------------------------------------------------------------
    @contextlib.contextmanager
    def together(self, what: str) -> Iterator[None]:
        """A block every rank runs.  At its end the ranks compare notes: if any rank's block
        raised an Exception, every rank raises one :class:`RankFailure` (chaining its own
        exception where it had one).  A RankFailure raised inside (an inner agreement) passes
        unchanged: every rank has it already.  Other BaseExceptions (KeyboardInterrupt) pass
        unchanged too: the command line then ends every rank (``MPI_Abort``)."""
        if not self.parallel:
            yield
            return
        try:
            yield
        except RankFailure:
            raise
        except Exception as exc:
            self.agree(exc, what)
            raise  # (not reached: agree raises)
        self.agree(None, what)

    def agree(self, error: BaseException | None, what: str) -> None:
        """Every rank says whether it failed (``error``); returns when none did, else raises
        one RankFailure on every rank, naming the ranks that failed and the first one's cause
        (when every rank failed, rank 0's cause alone: the same error everywhere, as a bad
        input file gives)."""
        if not self.parallel:
            if error is not None:
                raise error
            return
        flag = np.array([0 if error is None else 1], dtype=np.int32)
        flags = np.zeros(self.size, dtype=np.int32)
        self._wait(self.mpi.Iallgather(flag, flags))
        failed = tuple(int(r) for r in np.flatnonzero(flags))
        if not failed:
            return
        cause = describe_failure(error) if (self.rank == failed[0] and error is not None) else None
        cause = self.broadcast(cause, root=failed[0])
        failure = RankFailure(failed, self.size, str(cause), what)
        if error is not None:
            raise failure from error
        raise failure

    # -- reductions ----------------------------------------------------------------------
    def sum_image(self, image) -> int:
        """Replace ``image`` (C-contiguous float32, numpy or cupy) by its sum over the ranks, in
        place; returns this rank's bytes sent.  :attr:`last_image_sum` says how:

        * a GPU image where every rank's MPI is CUDA-aware (:func:`.cuda_aware.is_cuda_aware`, asked
          once) and every rank's image is on a GPU: the device buffer itself, all-reduced in
          float32 (:meth:`_sum_on_device`);
        * otherwise through float64 host buffers, piece by piece (:meth:`_sum_through_host`):
          float32 partial images added in float64 and rounded once.

        The ranks agree on the path first (one small all-reduce), so that every rank makes the
        same MPI calls.  A GPU image is a cupy array (or one with cupy's ``get``,
        ``device.synchronize()`` and ``__cuda_array_interface__``).  A bad
        ``STIRGPU_MPI_CUDA_AWARE`` is raised after the sum (through the host), so that a rank
        refusing it still makes the calls the others make."""
        if not self.parallel:
            return 0
        if not image.flags.c_contiguous:
            raise StirGpuError("sum_image: the image must be C-contiguous")
        refusal = None
        try:
            mine, why = self._may_sum_on_device(image)
        except StirGpuError as exc:
            refusal, mine, why = exc, False, str(exc)
        on_device, why = self._agree_on_path(mine, why)
        if on_device:
            self.last_image_sum = f"on the GPUs (CUDA-aware MPI: {why})"
            return self._sum_on_device(image)
        self.last_image_sum = "in host memory" if not on_cuda(image) else f"through host staging ({why})"
        sent = self._sum_through_host(image)
        if refusal is not None:
            raise refusal
        return sent

    def _may_sum_on_device(self, image) -> tuple[bool, str]:
        """(whether this rank could sum ``image`` on the device, why or why not): a GPU image
        and a CUDA-aware MPI (asked once)."""
        if not on_cuda(image):
            return False, "a host image"
        if self._cuda_aware is None:
            self._cuda_aware = is_cuda_aware(self.mpi)
        return self._cuda_aware

    def _agree_on_path(self, mine: bool, why: str) -> tuple[bool, str]:
        """(whether every rank sums on the device, why or why not): each rank says whether it
        can; any rank that cannot takes every rank through the host."""
        from mpi4py import MPI

        flag = np.array([1 if mine else 0], dtype=np.int32)
        every = np.empty_like(flag)
        self._wait(self.mpi.Iallreduce(flag, every, op=MPI.MIN))
        if mine and not every[0]:
            return False, "another rank's image is in host memory or its MPI is not CUDA-aware"
        return bool(every[0]), why

    def _sum_on_device(self, image) -> int:
        """All-reduce the device buffer in place (float32; the sum's order is the MPI's, the same
        on every rank).  The GPU's pending work is waited for first (the buffer must hold the
        image when MPI reads it; mpi4py does not synchronise).  The all-reduce is a blocking
        call, because CUDA-aware MPIs take device buffers in blocking collectives (Open MPI: not
        in the non-blocking ones); every rank is already here (the polled agreement on the path
        waited for them, Ctrl-C reaching Python meanwhile), so it blocks only while it moves data."""
        from mpi4py import MPI

        image.device.synchronize()
        self.mpi.Allreduce(MPI.IN_PLACE, image, op=MPI.SUM)
        return 4 * int(image.size)

    def _sum_through_host(self, image) -> int:
        """Piece by piece through two float64 host buffers of at most :attr:`staging_bytes`
        (each piece copied from the GPU for a cupy image, all-reduced, copied back)."""
        from mpi4py import MPI

        xp = array_module(image)
        flat = image.reshape(-1)
        piece = min(self.staging_bytes // 8, flat.size)
        send = np.empty(piece, dtype=np.float64)
        recv = np.empty(piece, dtype=np.float64)
        for start in range(0, flat.size, piece):
            stop = min(start + piece, flat.size)
            k = stop - start
            part = flat[start:stop]
            send[:k] = part if isinstance(part, np.ndarray) else part.get()
            self._wait(self.mpi.Iallreduce(send[:k], recv[:k], op=MPI.SUM))
            flat[start:stop] = xp.asarray(recv[:k], dtype=np.float32)
        return 8 * int(flat.size)

    def sum_scalars(self, values: Mapping[str, float]) -> dict[str, float]:
        """Float64 sums over the ranks of ``values`` (the same names, in the same order, on
        every rank)."""
        if not self.parallel or not values:
            return dict(values)
        from mpi4py import MPI

        send = np.array([float(v) for v in values.values()], dtype=np.float64)
        recv = np.empty_like(send)
        self._wait(self.mpi.Iallreduce(send, recv, op=MPI.SUM))
        return {name: float(recv[i]) for i, name in enumerate(values)}

    # -- broadcasting --------------------------------------------------------------------
    def broadcast(self, obj: Any, root: int = 0) -> Any:
        """``obj`` of rank ``root`` on every rank: a numpy buffer is filled in place (every rank
        passes one of the same size) and returned; anything else is pickled (small objects)."""
        if not self.parallel:
            return obj
        if isinstance(obj, np.ndarray):
            self._wait(self.mpi.Ibcast(obj, root=root))
            return obj
        size = np.zeros(1, dtype=np.int64)
        payload = b""
        if self.rank == root:
            import pickle

            payload = pickle.dumps(obj)
            size[0] = len(payload)
        self._wait(self.mpi.Ibcast(size, root=root))
        buffer = np.frombuffer(payload, dtype=np.uint8).copy() if self.rank == root else np.empty(size[0], np.uint8)
        self._wait(self.mpi.Ibcast(buffer, root=root))
        if self.rank == root:
            return obj
        import pickle

        return pickle.loads(buffer.tobytes())

    def barrier(self) -> None:
        """Wait until every rank is here."""
        if self.parallel:
            self._wait(self.mpi.Ibarrier())

    def abort(self, code: int) -> None:
        """End every rank now (``MPI_Abort``; the launcher stops the others): for a failure
        outside an agreed step, or Ctrl-C.  This process ends here, even where the MPI returns
        from ``MPI_Abort`` before the launcher has stopped it (MPICH may)."""
        if self.mpi is not None:
            import sys

            sys.stdout.flush()
            sys.stderr.flush()
            self.mpi.Abort(int(code))
            os._exit(int(code))

    # -- waiting ---------------------------------------------------------------------------
    @staticmethod
    def _wait(request) -> None:
        """Poll ``request`` until it completes, so that signals reach Python (a blocking MPI call
        would hold off Ctrl-C until the other ranks arrive).  The MPI moves a non-blocking
        collective's data only inside MPI calls (MPICH and Open MPI run no progress thread by
        default), one step of its schedule at a time: so the polls first follow each other at
        once, then sleep ever longer but at most a millisecond, which keeps a large sum moving
        and a rank waiting for a slower one off the CPU (measured: docs/distributed.md, "Image
        sums")."""
        at_once_until = time.perf_counter() + _POLL_AT_ONCE
        delay = _POLL_FIRST
        while not request.Test():
            if time.perf_counter() < at_once_until:
                continue
            time.sleep(delay)
            delay = min(2 * delay, _POLL_LONGEST)


def world(staging_bytes: int | None = None) -> Communicator:
    """``COMM_WORLD`` when an MPI launcher started this process (imports mpi4py, which starts
    MPI), else this process alone (mpi4py not imported).  Started by a launcher of several
    ranks without mpi4py installed: a StirGpuError saying what to install (the ranks would
    otherwise each do the whole work and write the same files)."""
    launched, size = launched_by_mpi()
    if not launched:
        return Communicator(None, staging_bytes=staging_bytes)
    try:
        from mpi4py import MPI
    except ImportError:
        if size == 1:
            return Communicator(None, staging_bytes=staging_bytes)
        raise StirGpuError(
            "this process was started by an MPI launcher (mpirun, mpiexec or srun"
            + (f", {size} ranks" if size else "")
            + ") but mpi4py is not installed: install it with \"pip install 'stirgpu[mpi]'\" "
            "(or the cluster's own mpi4py), or run without the launcher"
        ) from None
    return Communicator(MPI.COMM_WORLD, staging_bytes=staging_bytes)


def as_communicator(comm, staging_bytes: int | None = None) -> Communicator:
    """``comm`` as a :class:`Communicator`: one already (returned as it is), an mpi4py
    communicator (wrapped), or None (:func:`world`)."""
    if comm is None:
        return world(staging_bytes)
    if isinstance(comm, Communicator):
        return comm
    if not all(hasattr(comm, m) for m in ("Get_rank", "Get_size", "Iallreduce")):
        raise StirGpuError(f"comm must be an mpi4py communicator or a stirgpu Communicator, not {type(comm).__name__}")
    return Communicator(comm, staging_bytes=staging_bytes)
