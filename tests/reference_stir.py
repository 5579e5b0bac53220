"""The one way tests reach a real STIR (the reference stirgpu must agree with).

Where it comes from, first found wins:

1. ``STIRGPU_REFERENCE_STIR``: the prefix of an extracted STIR build (holding ``bin/``,
   ``python/`` and ``share/STIR-*/config``), or a ``stir*.tar.xz`` of one;
2. the shared reference build ``../shared/stir/stir-lpp2.0.7.tar.xz`` beside the checkout (STIR
   linked with libparallelproj 2.0.7: what a STIR installed today computes), extracted once
   into a cache folder outside the checkout (``STIRGPU_TEST_CACHE``, else
   ``$XDG_CACHE_HOME/stirgpu-tests``, else ``~/.cache/stirgpu-tests``), keyed by the tarball's
   size and modification time so a new tarball is extracted afresh;
3. a user's own STIR: ``stir`` importable and STIR's executables (``OSMAPOSL``) on ``PATH``,
   with ``STIR_CONFIG_DIR`` taken from the environment.

Tests ask for the ``reference_stir`` fixture (``conftest.py``) and carry the ``stir`` marker;
they skip with the reason :func:`find` gives where no STIR is found.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_TARBALL = REPO_ROOT.parent / "shared" / "stir" / "stir-lpp2.0.7.tar.xz"


@dataclasses.dataclass(frozen=True)
class ReferenceStir:
    """A STIR build: its executables, its Python module and the environment both need."""

    #: folder holding the executables (None: found on PATH)
    bin_dir: Path | None
    #: folder to put on sys.path for ``import stir`` (None: already importable)
    python_dir: Path | None
    #: STIR's configuration folder (None: whatever the environment says)
    config_dir: Path | None
    #: where it came from, for messages
    origin: str
    #: OpenMP threads for STIR's executables and module
    num_threads: int = 1

    def env(self) -> dict[str, str]:
        """The environment for STIR's executables."""
        env = dict(os.environ)
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        if self.config_dir is not None:
            env["STIR_CONFIG_DIR"] = str(self.config_dir)
        env["OMP_NUM_THREADS"] = str(self.num_threads)
        return env

    def executable(self, name: str) -> str:
        exe = shutil.which(name, path=self.env()["PATH"])
        if exe is None:
            raise FileNotFoundError(f"STIR executable {name!r} not found ({self.origin})")
        return exe

    def run(self, name: str, *args, cwd=None, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run STIR's executable ``name``; on failure the error shows STIR's own output."""
        cmd = [self.executable(name), *map(str, args)]
        proc = subprocess.run(cmd, cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed with exit code {proc.returncode} in {cwd}:\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def library(self, name: str):
        """One of the build's shared libraries (e.g. ``libparallelproj.so``) through ctypes."""
        import ctypes

        if self.bin_dir is None:
            raise FileNotFoundError(f"{name}: the STIR found ({self.origin}) has no known library folder")
        path = self.bin_dir.parent / "lib" / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found ({self.origin})")
        return ctypes.CDLL(str(path))

    def module(self):
        """STIR's Python module, imported into this process (once; idempotent)."""
        if self.config_dir is not None:
            os.environ["STIR_CONFIG_DIR"] = str(self.config_dir)
        if self.python_dir is not None and str(self.python_dir) not in sys.path:
            sys.path.insert(0, str(self.python_dir))
        stir = importlib.import_module("stir")
        stir.set_num_threads(self.num_threads)
        return stir


def cache_root() -> Path:
    env = os.environ.get("STIRGPU_TEST_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "stirgpu-tests"


def _extracted(tarball: Path) -> Path:
    """The STIR prefix inside the cache, extracting ``tarball`` there once (under a file lock,
    into a temporary folder renamed into place, so an interrupted extraction never counts)."""
    st = tarball.stat()
    target = cache_root() / f"reference-stir-{st.st_size}-{int(st.st_mtime)}"
    prefix = target / "stir"
    if (prefix / "bin").is_dir():
        return prefix
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / "bin").is_dir():
            tmp = target.parent / f".{target.name}.partial"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            with tarfile.open(tarball) as tf:
                tf.extractall(tmp, filter="tar")
            if not (tmp / "stir" / "bin").is_dir():
                raise RuntimeError(f"{tarball} does not hold a folder stir/bin")
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
    return prefix


def _from_prefix(prefix: Path, origin: str) -> ReferenceStir:
    configs = sorted(prefix.glob("share/STIR-*/config"))
    python_dir = prefix / "python"
    return ReferenceStir(
        bin_dir=prefix / "bin",
        python_dir=python_dir if python_dir.is_dir() else None,
        config_dir=configs[-1] if configs else None,
        origin=origin,
        num_threads=_num_threads(),
    )


def _num_threads() -> int:
    return max(1, min(2, os.cpu_count() or 1))


@functools.cache
def find() -> ReferenceStir | str:
    """The reference STIR, or a sentence saying why there is none (the skip reason)."""
    env = os.environ.get("STIRGPU_REFERENCE_STIR")
    if env:
        p = Path(env)
        if p.is_file():
            return _from_prefix(_extracted(p), f"STIRGPU_REFERENCE_STIR={env}")
        if (p / "bin").is_dir():
            return _from_prefix(p, f"STIRGPU_REFERENCE_STIR={env}")
        return f"STIRGPU_REFERENCE_STIR={env} is neither a STIR tarball nor a folder with bin/"
    if SHARED_TARBALL.is_file():
        return _from_prefix(_extracted(SHARED_TARBALL), f"{SHARED_TARBALL} (extracted into {cache_root()})")
    has_exe = shutil.which("OSMAPOSL") is not None
    try:
        has_module = importlib.util.find_spec("stir") is not None
    except (ImportError, ValueError):
        has_module = False
    if has_exe and has_module:
        return ReferenceStir(
            bin_dir=None,
            python_dir=None,
            config_dir=None,
            origin="STIR on PATH and sys.path",
            num_threads=_num_threads(),
        )
    return (
        "no reference STIR: expected ../shared/stir/stir-lpp2.0.7.tar.xz beside the checkout, "
        "STIRGPU_REFERENCE_STIR, or STIR's OSMAPOSL on PATH with its Python module importable"
    )
