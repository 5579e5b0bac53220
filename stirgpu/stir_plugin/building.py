"""Building the STIR plugin (the CMake project in ``swig/``) against a STIR, into stirgpu's
user cache folder, and finding what was built.

A build is for one STIR (its prefix, found on ``PATH`` / ``CMAKE_PREFIX_PATH`` or given) and
one Python (this one): it goes to ``cache_dir()/stir-plugin/<STIR version>-<cpXY>-<hash>/``
(the hash covers the STIR prefix and version, the interpreter's ABI, libpython and
environment, pybind11's version and the plugin's sources), with ``plugin.json`` saying what
is there.  What the build needs is checked first, each missing piece named with the package
that provides it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from ..caches import cache_dir
from ..errors import StirGpuError

__all__ = [
    "PluginBuildError",
    "PluginBuild",
    "PLUGIN_FILE",
    "sources_dir",
    "find_stir_prefix",
    "stir_version",
    "build_folder",
    "build",
    "find_build",
    "check_build_requirements",
]

PLUGIN_FILE = "libstirgpu_stir.so"
_MANIFEST = "plugin.json"
#: STIR versions the plugin builds against: 6.5 and later 6.x (it derives from STIR's classes)
_MIN_STIR, _MAX_STIR_MAJOR = (6, 5), 6


class PluginBuildError(StirGpuError):
    """The plugin cannot be built (something missing) or is not built yet."""


@dataclasses.dataclass(frozen=True)
class PluginBuild:
    """A built plugin: the library, and what it was built for."""

    folder: Path
    plugin: Path
    stir_prefix: Path
    stir_version: str
    python: str
    #: the shared libpython to preload into STIR's executables (None: this Python has none)
    libpython: Path | None

    def preload(self) -> list[str]:
        """``LD_PRELOAD`` entries for STIR's executables: libpython, then the plugin."""
        if self.libpython is None:
            raise PluginBuildError(
                f"{self.python} has no shared libpython (it was built without --enable-shared): "
                "STIR's executables cannot embed it; the plugin works from STIR's Python module only"
            )
        return [str(self.libpython), str(self.plugin)]


def sources_dir() -> Path:
    """The plugin's CMake project: ``swig/`` of the checkout stirgpu runs from (an editable
    install, or ``PYTHONPATH`` on the clone)."""
    d = Path(__file__).resolve().parent.parent.parent / "swig"
    if not (d / "CMakeLists.txt").is_file():
        raise PluginBuildError(
            f"the plugin's sources are not here ({d / 'CMakeLists.txt'}): this stirgpu is not run "
            "from a clone; install it from one with `pip install -e '.[plugin]'`"
        )
    return d


def _has_stir_config(prefix: Path) -> bool:
    return any(prefix.glob("lib*/cmake/STIR-*/STIRConfig.cmake"))


def find_stir_prefix(stir: str | os.PathLike | None = None) -> Path:
    """The prefix of a STIR installation (holding ``lib/cmake/STIR-*/STIRConfig.cmake``):
    ``stir`` (a prefix, or its ``bin/``), else the first ``CMAKE_PREFIX_PATH`` entry that has
    one, else the installation of the ``OSMAPOSL`` found on ``PATH``."""
    if stir is not None:
        p = Path(stir).expanduser().resolve()
        for cand in (p, p.parent):
            if _has_stir_config(cand):
                return cand
        raise PluginBuildError(f"--stir {stir}: no STIR installation there (no lib/cmake/STIR-*/STIRConfig.cmake)")
    for entry in os.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep):
        if entry and _has_stir_config(Path(entry)):
            return Path(entry).resolve()
    exe = shutil.which("OSMAPOSL")
    if exe is not None:
        prefix = Path(exe).resolve().parent.parent
        if _has_stir_config(prefix):
            return prefix
        raise PluginBuildError(
            f"STIR's OSMAPOSL is at {exe}, but {prefix} has no lib/cmake/STIR-*/STIRConfig.cmake "
            "(STIR installed without its CMake files?); give the prefix with --stir"
        )
    raise PluginBuildError(
        "no STIR found: put STIR's bin/ on PATH, its prefix on CMAKE_PREFIX_PATH, or give --stir PREFIX"
    )


def stir_version(prefix: Path) -> str:
    """The version STIR's CMake files declare (``STIRConfigVersion.cmake``)."""
    for f in sorted(prefix.glob("lib*/cmake/STIR-*/STIRConfigVersion.cmake")):
        m = re.search(r'set\(PACKAGE_VERSION "([0-9.]+)"\)', f.read_text())
        if m:
            return m.group(1)
    raise PluginBuildError(f"{prefix}: STIR's version file (lib/cmake/STIR-*/STIRConfigVersion.cmake) is missing")


def _check_stir_version(version: str, prefix: Path) -> None:
    parts = tuple(int(x) for x in version.split(".")[:2])
    if parts < _MIN_STIR or parts[0] > _MAX_STIR_MAJOR:
        raise PluginBuildError(
            f"STIR {version} at {prefix}: the stirgpu plugin needs STIR {_MIN_STIR[0]}.{_MIN_STIR[1]} "
            f"or a later {_MAX_STIR_MAJOR}.x"
        )


def _libpython() -> Path | None:
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    for d in (sysconfig.get_config_var("LIBDIR"), Path(sys.base_prefix) / "lib"):
        if d and name and (Path(d) / name).is_file():
            return Path(d) / name
    return None


def _boost_found(prefix: Path) -> bool:
    roots = [Path("/usr/include"), Path("/usr/local/include"), prefix / "include"]
    for var in ("BOOST_ROOT", "Boost_ROOT", "BOOST_INCLUDEDIR"):
        if os.environ.get(var):
            roots += [Path(os.environ[var]), Path(os.environ[var]) / "include"]
    for var in ("CPATH", "CPLUS_INCLUDE_PATH", "CMAKE_PREFIX_PATH"):
        for e in os.environ.get(var, "").split(os.pathsep):
            if e:
                roots += [Path(e), Path(e) / "include"]
    return any((r / "boost" / "version.hpp").is_file() for r in roots)


def check_build_requirements(prefix: Path) -> dict:
    """What the build needs, or a PluginBuildError naming the first missing piece (and the
    package that has it).  Returns the tools found."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise PluginBuildError(
            "no cmake on PATH: install it (Debian/Ubuntu: apt-get install cmake; or pip install cmake)"
        )
    cxx = os.environ.get("CXX") or next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None or shutil.which(cxx) is None:
        raise PluginBuildError(
            "no C++ compiler (c++, g++ or clang++ on PATH, or CXX): install one (Debian/Ubuntu: apt-get install g++)"
        )
    try:
        import pybind11
    except ImportError:
        raise PluginBuildError(
            "pybind11 is not installed for this Python: pip install pybind11 (or pip install 'stirgpu[plugin]')"
        ) from None
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise PluginBuildError(
            f"Python's headers are missing ({include / 'Python.h'}): install them "
            f"(Debian/Ubuntu: apt-get install python3-dev)"
        )
    if not _boost_found(prefix):
        raise PluginBuildError(
            "no boost headers (boost/version.hpp) found; STIR's headers need them: install them "
            "(Debian/Ubuntu: apt-get install libboost-dev) or set BOOST_ROOT"
        )
    return {
        "cmake": cmake,
        "cxx": shutil.which(cxx),
        "pybind11_dir": pybind11.get_cmake_dir(),
        "pybind11_version": pybind11.__version__,
    }


def _sources_hash(src: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in (".txt", ".h", ".cxx", ".inc")):
        h.update(f.relative_to(src).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _python_identity() -> list[str]:
    """What a build depends on of this Python: its ABI (version and ABI tag), the libpython it
    takes its symbols from, and its environment (``sys.prefix``: a virtual environment's
    site-packages are what the embedded interpreter imports).  Not ``sys.executable``:
    ``python`` and ``python3`` of one environment are the same interpreter (symlinks)."""
    libpython = _libpython()
    return [
        sys.implementation.cache_tag,
        str(sysconfig.get_config_var("SOABI")),
        str(libpython.resolve()) if libpython is not None else "static libpython",
        str(Path(sys.prefix).resolve()),
    ]


def build_folder(prefix: Path) -> Path:
    """Where the plugin for this STIR and this Python is (or would be) built."""
    try:
        import pybind11

        pyb = pybind11.__version__
    except ImportError:
        pyb = "none"
    version = stir_version(prefix)
    key = "\n".join([str(prefix.resolve()), version, *_python_identity(), pyb, _sources_hash(sources_dir())])
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return cache_dir() / "stir-plugin" / f"{version}-{tag}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _read_manifest(folder: Path) -> PluginBuild | None:
    try:
        m = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    b = PluginBuild(
        folder=folder,
        plugin=folder / m["plugin"],
        stir_prefix=Path(m["stir_prefix"]),
        stir_version=m["stir_version"],
        python=m["python"],
        libpython=None if m["libpython"] is None else Path(m["libpython"]),
    )
    return b if b.plugin.is_file() else None


def find_build(stir: str | os.PathLike | None = None) -> PluginBuild:
    """The plugin built for this STIR (see :func:`find_stir_prefix`) and this Python."""
    prefix = find_stir_prefix(stir)
    found = _read_manifest(build_folder(prefix))
    if found is None:
        raise PluginBuildError(
            f"the stirgpu STIR plugin is not built for STIR at {prefix} and {sys.executable}: run "
            f"`stirgpu stir-plugin build --stir {prefix}`"
        )
    return found


def check_stir_targets(prefix: Path) -> None:
    """STIR's exported CMake targets must name include folders that exist here: CMake refuses
    an imported target with a missing one ("includes non-existent path"), deep in its log.  A
    STIR built on another machine can carry the build machine's folders (its boost headers',
    say); say which, and in which file, before configuring."""
    import re

    for targets in sorted(prefix.glob("lib/cmake/STIR-*/STIRTargets.cmake")):
        text = targets.read_text()
        missing = sorted(
            {
                d
                for block in re.findall(r'INTERFACE_INCLUDE_DIRECTORIES "([^"]*)"', text)
                for d in block.split(";")
                if d and "${" not in d and not Path(d).is_dir()
            }
        )
        if missing:
            raise PluginBuildError(
                f"{targets}: STIR's CMake targets name include folders that do not exist on this "
                f"machine: {', '.join(missing)} (folders of the machine STIR was built on); "
                "CMake refuses such targets. Create them (e.g. mkdir -p "
                f"{' '.join(missing)}) or edit that file to point at this machine's boost headers"
            )


def build(stir: str | os.PathLike | None = None, *, jobs: int | None = None, rebuild: bool = False) -> PluginBuild:
    """Build the plugin for this STIR and this Python (once: an existing build is returned
    unless ``rebuild``).  Raises PluginBuildError with the reason and the build log's tail."""
    prefix = find_stir_prefix(stir)
    version = stir_version(prefix)
    _check_stir_version(version, prefix)
    tools = check_build_requirements(prefix)
    check_stir_targets(prefix)
    folder = build_folder(prefix)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = _read_manifest(folder)
        if done is not None and not rebuild:
            return done
        work = folder.parent / f".{folder.name}.partial"
        shutil.rmtree(work, ignore_errors=True)
        (work / "build").mkdir(parents=True)
        log = work / "build.log"
        env = dict(os.environ, CXX=tools["cxx"])
        configure = [
            tools["cmake"],
            "-S",
            str(sources_dir()),
            "-B",
            str(work / "build"),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={prefix}",
            f"-DSTIRGPU_PYTHON_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={tools['pybind11_dir']}",
        ]
        compile_ = [tools["cmake"], "--build", str(work / "build"), "--parallel", str(jobs or os.cpu_count() or 1)]
        with open(log, "w") as out:
            for cmd in (configure, compile_):
                out.write("$ " + " ".join(cmd) + "\n")
                out.flush()
                if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode != 0:
                    raise PluginBuildError(
                        f"building the plugin failed ({' '.join(cmd[:2])} ...); the log is {log}:\n"
                        + "\n".join(log.read_text().splitlines()[-25:])
                    )
        shutil.copy2(work / "build" / PLUGIN_FILE, work / PLUGIN_FILE)
        shutil.rmtree(work / "build")
        libpython = _libpython()
        (work / _MANIFEST).write_text(
            json.dumps(
                {
                    "plugin": PLUGIN_FILE,
                    "stir_prefix": str(prefix),
                    "stir_version": version,
                    "python": sys.executable,
                    "libpython": None if libpython is None else str(libpython),
                    "pybind11": tools["pybind11_version"],
                },
                indent=1,
            )
            + "\n"
        )
        shutil.rmtree(folder, ignore_errors=True)
        work.rename(folder)
    built = _read_manifest(folder)
    if built is None:
        raise PluginBuildError(f"{folder}: the build finished, but its {_MANIFEST} or its plugin library is missing")
    return built
