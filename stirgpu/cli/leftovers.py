"""What the command line says about files: leftovers of killed runs, and what an interrupted
run kept.

* :func:`warn_about_leftovers` -- one warning line on stderr naming the temporary files that
  killed runs left in the folders a command writes into (``stirgpu.formats.stale_temporaries``:
  only those whose process no longer runs), with the ``rm`` command that removes them.  It
  never removes anything itself: the user decides.
* :class:`OutputState` / :func:`interrupted_message` -- after a KeyboardInterrupt, one line
  saying what was kept: the notes the library added to the exception (OSEM: which estimates
  are complete), else what became of the command's output file.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = ["warn_about_leftovers", "OutputState", "interrupted_message"]


def warn_about_leftovers(command: str, folders) -> list[Path]:
    """Print one warning line for the stale temporaries in ``folders`` (each looked at once);
    returns them."""
    from ..formats import stale_temporaries

    seen, found = set(), []
    for folder in folders:
        key = os.path.realpath(folder)
        if key not in seen:
            seen.add(key)
            found.extend(stale_temporaries(folder))
    if found:
        what = "a temporary file" if len(found) == 1 else f"{len(found)} temporary files"
        print(
            f"stirgpu {command}: warning: {what} left by a killed run (its process no longer runs); "
            f"remove with: rm -- {' '.join(shlex.quote(os.fspath(p)) for p in found)}",
            file=sys.stderr,
        )
    return found


class OutputState:
    """Whether a command's output file exists, and which file it is (inode, size, time), taken
    before the command runs and compared after it was interrupted."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)
        self.before = self._stamp()

    def _stamp(self):
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def describe(self) -> str | None:
        """What happened to the file (None without one).  Outputs are committed by an atomic
        rename once complete, so the file is either the old one, or new and complete."""
        if self.path is None:
            return None
        now = self._stamp()
        if now == self.before:
            return (
                f"nothing written; the existing {self.path} is unchanged"
                if now is not None
                else f"nothing written ({self.path} was not created)"
            )
        if now is None:
            return f"{self.path} was being replaced and is gone"
        return f"{self.path} had been written completely"


def interrupted_message(exc: BaseException, output: OutputState) -> str:
    """The one line after ``interrupted:``: the exception's notes, else the output's fate."""
    notes = [str(n) for n in getattr(exc, "__notes__", ())]
    if notes:
        return "; ".join(notes)
    return output.describe() or "stopped; files already written are complete (each is renamed into place when done)"
