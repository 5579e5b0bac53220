"""Where stirgpu keeps what it can rebuild: one user cache folder, never the installed package.

The folder follows the platform's conventions (``platformdirs.user_cache_dir``:
``$XDG_CACHE_HOME/stirgpu`` or ``~/.cache/stirgpu`` on Linux, ``~/Library/Caches/stirgpu``
on macOS, ``%LOCALAPPDATA%\\stirgpu\\Cache`` on Windows); the environment variable
``STIRGPU_CACHE_DIR`` overrides it.  It is read on every call, so a process can point it
elsewhere at any time, and nothing is created until something is written.

Caches writing into the package folder are not harmless: ``pip`` does not remove files it
did not install, and the folder they leave behind shadows a later editable install of
stirgpu as a namespace package.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "cache_dir", "numba_cache_dir"]

#: the environment variable that overrides the cache folder
CACHE_DIR_ENV = "STIRGPU_CACHE_DIR"


def cache_dir() -> Path:
    """stirgpu's cache folder: ``$STIRGPU_CACHE_DIR`` if set, else the platform's user cache
    folder for ``stirgpu``.  Not created here."""
    override = os.environ.get(CACHE_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("stirgpu", appauthor=False))


def numba_cache_dir() -> Path:
    """Where the CPU kernels' machine code (numba's ``.nbi``/``.nbc`` files) is kept."""
    return cache_dir() / "numba"
