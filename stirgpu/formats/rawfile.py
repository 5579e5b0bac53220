"""Raw binary data files: number formats, positioned I/O and safe (atomic) writing.

* :func:`dtype_from_keys` / :func:`keys_from_dtype` map Interfile's
  ``!number format`` + ``!number of bytes per pixel`` + ``imagedata byte order``
  to numpy dtypes and back.
* :func:`pread_into` / :func:`pwrite_from` do positioned I/O on a file descriptor
  (``os.preadv``/``os.pwrite``): no shared file position, so concurrent reads and
  disjoint concurrent writes from several threads are safe, and nothing but the
  requested bytes is ever read (a 100 GB file needs no more memory than a chunk).
* :class:`PendingFiles` writes new files under temporary names and renames them
  into place only on :meth:`~PendingFiles.commit` (data first, header last), so
  a file whose writer died is never mistaken for a complete one.  An interrupted or
  failed writer removes its temporaries (:meth:`~PendingFiles.abort`); one killed outright
  (SIGKILL, a crash, a power cut) cannot, and :func:`stale_temporaries` finds what it left:
  temporaries named after a process that no longer runs.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Literal

import numpy as np

from ..errors import FormatError
from .interfile import InterfileHeader

__all__ = [
    "dtype_from_keys",
    "keys_from_dtype",
    "pread_into",
    "pwrite_from",
    "data_file_is_a_folder",
    "PendingFiles",
    "stale_temporaries",
    "SUPPORTED_DTYPES",
]

# Interfile number format (standardised) + bytes per pixel -> numpy kind/size
_FORMATS = {
    ("float", 4): "f4",
    ("float", 8): "f8",
    ("signed integer", 2): "i2",
    ("signed integer", 4): "i4",
    ("unsigned integer", 2): "u2",
}
_BYTE_ORDERS: dict[str, Literal["<", ">"]] = {"littleendian": "<", "bigendian": ">"}
SUPPORTED_DTYPES = tuple(np.dtype(v) for v in _FORMATS.values())


def dtype_from_keys(hdr: InterfileHeader) -> np.dtype:
    """The numpy dtype (with byte order) that a header's number-format keys describe.

    STIR's defaults apply: no ``!number format`` means ``unsigned integer``, no
    ``imagedata byte order`` means big endian; ``!number of bytes per pixel`` is required.
    """
    fmt = " ".join(hdr.get_str("number format", default="unsigned integer").lower().split())
    nbytes = hdr.get_int("number of bytes per pixel")
    if (fmt, nbytes) not in _FORMATS:
        known = ", ".join(f"{f!r} with {b} bytes" for f, b in _FORMATS)
        key = "number of bytes per pixel" if fmt in {f for f, _ in _FORMATS} else "number format"
        raise hdr.error(f"unsupported number format {fmt!r} with {nbytes} bytes per pixel (supported: {known})", key)
    order_text = hdr.get_str("imagedata byte order", default="BIGENDIAN")
    order = _BYTE_ORDERS.get(order_text.replace(" ", "").replace("_", "").lower())
    if order is None:
        raise hdr.error(f"unknown byte order {order_text!r} (LITTLEENDIAN or BIGENDIAN)", "imagedata byte order")
    return np.dtype(_FORMATS[(fmt, nbytes)]).newbyteorder(order)


def keys_from_dtype(dtype) -> tuple[str, int, str]:
    """(number format, bytes per pixel, byte order) for writing a header."""
    dt = np.dtype(dtype)
    base = dt.newbyteorder("=")
    for (fmt, nbytes), code in _FORMATS.items():
        if np.dtype(code) == base:
            little = dt.byteorder == "<" or (dt.byteorder in "=|" and np.little_endian)
            return fmt, nbytes, "LITTLEENDIAN" if little else "BIGENDIAN"
    raise FormatError(
        f"cannot write number format {dt} (supported: " + ", ".join(str(d) for d in SUPPORTED_DTYPES) + ")"
    )


def data_file_is_a_folder(data_path: Path, header_path: Path | None) -> FormatError:
    """The error for a header whose ``name of data file`` names a folder (its size would
    otherwise read as a truncated file)."""
    return FormatError(
        f"is a folder, not a data file (the header {header_path} names it as its data file)", path=data_path
    )


def pread_into(fd: int, buf: np.ndarray, offset: int, path=None) -> None:
    """Fill the C-contiguous array ``buf`` with bytes from ``offset`` of ``fd``."""
    mv = buf.reshape(-1).view(np.uint8).data
    done = 0
    while done < len(mv):
        n = os.preadv(fd, [mv[done:]], offset + done)
        if n == 0:
            raise FormatError(
                f"unexpected end of file at byte {offset + done} (needed {len(mv) - done} more bytes)", path=path
            )
        done += n


def pwrite_from(fd: int, buf: np.ndarray, offset: int) -> None:
    """Write the C-contiguous array ``buf`` at ``offset`` of ``fd``."""
    mv = buf.reshape(-1).view(np.uint8).data
    done = 0
    while done < len(mv):
        done += os.pwrite(fd, mv[done:], offset + done)


class PendingFiles:
    """New files written under temporary names, renamed into place on commit.

    ``PendingFiles({"data": final_data, "header": final_header}, overwrite)``; write to
    ``temp(name)``; :meth:`commit` renames every file (the header last: whoever finds
    the header finds complete data); :meth:`abort` removes the temporary files.
    With ``overwrite=False`` an existing final file is a FormatError, checked at creation
    and again at commit.
    """

    def __init__(self, finals: dict[str, Path], overwrite: bool = False):
        self.finals = {k: Path(v) for k, v in finals.items()}
        self.overwrite = bool(overwrite)
        self._check_targets()
        tag = _TEMP_TAG.format(pid=os.getpid(), token=secrets.token_hex(4))
        self.temps = {k: v.with_name(v.name + tag) for k, v in self.finals.items()}
        self.done = False

    def _check_targets(self) -> None:
        for p in self.finals.values():
            if not p.parent.is_dir():
                raise FormatError("folder does not exist", path=p.parent)
            if not self.overwrite and (p.exists() or p.is_symlink()):
                raise FormatError("already exists (pass overwrite=True to replace it)", path=p)

    def temp(self, name: str) -> Path:
        return self.temps[name]

    def commit(self, order: tuple[str, ...]) -> None:
        """Rename the temporaries into place in ``order`` (put the header last)."""
        if self.done:
            return
        self._check_targets()
        # An old header must not end up describing the new data half-way through: drop it first.
        last = self.finals[order[-1]]
        if self.overwrite and last.exists():
            last.unlink()
        for name in order:
            os.replace(self.temps[name], self.finals[name])
        _fsync_dir(self.finals[order[-1]].parent)
        self.done = True

    def abort(self) -> None:
        if self.done:
            return
        for p in self.temps.values():
            try:
                p.unlink()
            except FileNotFoundError:
                pass
        self.done = True


#: what PendingFiles appends to a final name for its temporary: the writing process and a token
_TEMP_TAG = ".tmp-{pid}-{token}"
_TEMP_NAME = re.compile(r".+\.tmp-(?P<pid>[1-9][0-9]*)-[0-9a-f]{8}")


def stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """The temporaries of :class:`PendingFiles` in ``folder`` whose writing process no longer
    runs (``name.tmp-<pid>-<token>``), sorted: left by a writer killed before it could commit
    or abort.  Never removes anything.  A process id reused by another process hides its
    temporaries (they are reported once that one ends); on a folder shared between machines a
    writer on another machine is not known here, so its live temporaries can be listed."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    stale = []
    for e in entries:
        m = _TEMP_NAME.fullmatch(e.name)
        if m is not None and e.is_file(follow_symlinks=False) and not _process_runs(int(m["pid"])):
            stale.append(Path(folder) / e.name)
    return sorted(stale)


def _process_runs(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 checks without sending anything; elsewhere than
    POSIX every process counts as running: nothing is reported)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OverflowError, OSError):  # not a process id at all
        return False
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited but not been reaped yet (Linux's /proc; False elsewhere):
    a killed writer whose parent has not collected it still answers signal 0."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z"  # the field after "(command)"


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the renames are still atomic
    finally:
        os.close(fd)
