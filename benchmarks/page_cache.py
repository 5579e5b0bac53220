"""Dropping a file's pages from the page cache, so that the next read comes from the disk (a
helper of the benchmark scripts: no ``__main__``)."""

from __future__ import annotations

import os
from pathlib import Path


def drop_cache(path: Path) -> None:
    """Write the file's dirty pages out (the kernel drops only clean ones), then drop them all
    (``posix_fadvise(DONTNEED)``: no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
