"""The command line under MPI (``mpirun -n N stirgpu COMMAND ...``): who prints, and how a
failure or Ctrl-C ends every rank.

Every rank runs the command; rank 0 alone prints to standard output (the others' is
discarded).  Failures:

* a failure in a step the ranks take together (a projection, a file written by rank 0, the
  checks of the inputs) is a :class:`~stirgpu.errors.RankFailure` on every rank: rank 0 prints
  its one message, naming the failing rank and the cause, and every rank exits with code 2;
* a failure on one rank anywhere else (its own exception, e.g. out of memory between two
  steps) cannot be waited for by the others: that rank prints one line naming itself and the
  cause, and ends every rank (``MPI_Abort``) -- the launcher stops the others within seconds;
* Ctrl-C reaches every rank (the launcher forwards it); each stops its work and cleans up
  its own outputs, rank 0 prints what was kept, and the ranks end with ``MPI_Abort``, rank 0
  first: the others wait a moment so that rank 0 can remove what it had not committed.

Without a launcher (or with one rank) nothing of this applies: one process, as always.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Iterator

from ..distributed import Communicator, describe_failure, world
from ..errors import RankFailure

__all__ = ["Ranks"]

#: how long ranks other than 0 wait before ending every rank after Ctrl-C (rank 0 cleans up)
INTERRUPT_GRACE_SECONDS = 1.0


class Ranks:
    """The ranks of this run of a command (one process without MPI)."""

    def __init__(self, command: str, comm: Communicator):
        self.command = command
        self.comm = comm

    @classmethod
    def of_this_run(cls, command: str) -> Ranks:
        """COMM_WORLD under an MPI launcher, else this process (a StirGpuError: launched by
        mpirun without mpi4py)."""
        return cls(command, world())

    @property
    def is_root(self) -> bool:
        return self.comm.is_root

    @contextlib.contextmanager
    def printing(self) -> Iterator[None]:
        """Rank 0 prints; the others' standard output is discarded while the command runs."""
        if self.comm.is_root:
            yield
            return
        with open(os.devnull, "w", encoding="utf-8") as devnull, contextlib.redirect_stdout(devnull):
            yield

    def _rank_line(self, line: str) -> str:
        prefix = f"stirgpu {self.command}: "
        rest = line[len(prefix) :] if line.startswith(prefix) else line
        return f"{prefix}rank {self.comm.rank} of {self.comm.size} MPI ranks: {rest}"

    def failed(self, exc: BaseException, lines: list[str], code: int) -> None:
        """Print a failure.  An agreed one (RankFailure): rank 0 prints it, every rank returns;
        one of this rank alone under MPI: it prints it, naming itself, and ends every rank."""
        if not self.comm.parallel:
            _print(lines)
        elif isinstance(exc, RankFailure):
            if self.comm.is_root:
                _print(lines)
        else:
            _print([self._rank_line(line) for line in lines])
            self.comm.abort(code)

    def crashed(self, exc: BaseException, code: int) -> None:
        """An unexpected exception: without MPI it propagates (a traceback); under MPI this rank
        prints the traceback (not for running out of memory) and one line naming itself and the
        cause, and ends every rank."""
        if not self.comm.parallel:
            return
        if not isinstance(exc, MemoryError):  # (a bug: where it happened, for its report)
            traceback.print_exception(exc, file=sys.stderr)
        _print([self._rank_line(f"error: {describe_failure(exc)}")])
        self.comm.abort(code)

    def interrupted(self, message: str, code: int) -> None:
        """Ctrl-C: rank 0 prints ``message``; under MPI every rank is ended (rank 0 at once, the
        others after a moment, should rank 0 not have been interrupted)."""
        if self.comm.is_root:
            _print([message])
        if self.comm.parallel:
            if not self.comm.is_root:
                time.sleep(INTERRUPT_GRACE_SECONDS)
            self.comm.abort(code)


def _print(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)
    sys.stderr.flush()
