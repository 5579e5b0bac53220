"""The CPU kernels' machine code is kept in stirgpu's user cache folder, never in the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import stirgpu
from stirgpu.caches import cache_dir, numba_cache_dir

PACKAGE = Path(stirgpu.__file__).parent
ROOT = PACKAGE.parent

#: every module of numba kernels (each decorated with ``cached_njit`` at import)
NUMBA_MODULES = (
    "joseph.cpu",
    "joseph.workers",
    "joseph.lors",
    "tof.cpu",
    "poisson.cpu",
    "priors.cpu",
    "convolution.cpu",
)

# compiles one small kernel and reports numba's cache hits for it
COMPILE = """
import numpy as np, sys
from stirgpu.kernels.joseph import lors
assert lors.rsqrt_newton(np.float32(4.0)) == np.float32(0.5)
print(sum(lors.rsqrt_newton.stats.cache_hits.values()))
"""


def _python(code: str, cache: Path, **env) -> subprocess.CompletedProcess:
    environ = {
        **os.environ,
        "STIRGPU_CACHE_DIR": str(cache),
        **env,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code], env=environ, capture_output=True, text=True, timeout=300
    )


def _package_cache_files() -> set[Path]:
    return {p for pattern in ("*.nbi", "*.nbc") for p in PACKAGE.rglob(pattern)}


def test_cache_dir_follows_the_override_and_the_platform(monkeypatch, tmp_path):
    """``STIRGPU_CACHE_DIR`` wins; else the platform's user cache folder (XDG on Linux); asking
    creates nothing."""
    monkeypatch.setenv("STIRGPU_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    assert numba_cache_dir() == tmp_path / "mine" / "numba"
    monkeypatch.delenv("STIRGPU_CACHE_DIR")
    import platformdirs

    assert cache_dir() == Path(platformdirs.user_cache_dir("stirgpu", appauthor=False))
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache_dir() == tmp_path / "xdg" / "stirgpu"
    assert not (tmp_path / "mine").exists() and not (tmp_path / "xdg").exists()  # nothing created


def test_importing_the_kernels_creates_no_cache_folder(tmp_path):
    """Importing every module of numba kernels opens no cache (it is opened on the first
    compilation).  Guards against I/O at import time."""
    modules = ", ".join(f"stirgpu.kernels.{m}" for m in NUMBA_MODULES)
    done = _python(f"import {modules}", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "cache").exists()


def test_machine_code_goes_to_the_cache_folder_and_is_reused(tmp_path):
    """A kernel compiled in one process is written under the cache folder, not into the package,
    and a second process loads it instead of compiling (numba's cache hits: 0, then 1)."""
    before = _package_cache_files()
    first = _python(COMPILE, tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["0"]  # compiled
    kept = list((tmp_path / "cache" / "numba").rglob("lors.rsqrt_newton-*.nbi"))
    assert len(kept) == 1
    assert _package_cache_files() == before  # nothing written into the package
    second = _python(COMPILE, tmp_path / "cache")
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["1"]  # loaded from the cache, not compiled


def test_an_unwritable_cache_folder_warns_and_the_kernels_still_run(tmp_path):
    """Where the cache folder cannot be made, the kernel still compiles and runs, and a
    KernelCacheWarning names the folder and ``STIRGPU_CACHE_DIR``."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _python(
        COMPILE.replace("import numpy", "import warnings; warnings.simplefilter('default')\nimport numpy"),
        blocker / "cache",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]
    assert "KernelCacheWarning" in done.stderr and "STIRGPU_CACHE_DIR" in done.stderr
    assert str(blocker / "cache" / "numba") in done.stderr


def test_cached_njit_refuses_a_cache_option():
    """``cached_njit(cache=...)`` is a TypeError: the cache is always stirgpu's."""
    from stirgpu.kernels.jit import cached_njit

    with pytest.raises(TypeError, match="cache"):
        cached_njit(cache=True)
