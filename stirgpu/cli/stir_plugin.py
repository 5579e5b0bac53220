"""``stirgpu stir-plugin build|path`` and ``stirgpu stir PROGRAM [ARGS...]``: stirgpu as the
projector type ``stirgpu`` of STIR's own executables.

* ``stir-plugin build [--stir PREFIX]`` compiles the plugin against a STIR (found on ``PATH`` /
  ``CMAKE_PREFIX_PATH``, or given) into stirgpu's user cache and prints where it is;
* ``stir-plugin path [--stir PREFIX]`` prints that location (an error if it is not built);
* ``stir PROGRAM ARGS...`` runs STIR's PROGRAM (``OSMAPOSL``, ``forward_project``, ...) with the
  plugin preloaded, so that ``projector pair type := stirgpu`` works; its exit code is the
  program's.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

__all__ = ["register", "run_build", "run_path", "run_stir", "stir_command"]


PLUGIN_DESCRIPTION = """\
Compile stirgpu's STIR plugin against a STIR installation, or show where it is.

The plugin registers the projector types 'stirgpu' (a projector pair, a forward and a back
projector) with STIR, so that STIR's own programs and Python classes project with stirgpu:
in a .par file, 'projector pair type := stirgpu'.  It is built once per STIR and Python into
stirgpu's cache folder.  The STIR is the one given with --stir, else the first one on
CMAKE_PREFIX_PATH, else the one whose OSMAPOSL is on PATH.  Building needs cmake, a C++
compiler, the boost headers and pybind11; each missing one is named."""

PLUGIN_EPILOG = """\
examples:
  stirgpu stir-plugin build
  stirgpu stir-plugin build --stir /opt/stir
  stirgpu stir-plugin path --stir /opt/stir"""

STIR_DESCRIPTION = """\
Run one of STIR's programs (OSMAPOSL, OSSPS, forward_project, back_project, ...) with
stirgpu's STIR plugin loaded, so that its .par files can use the projector types 'stirgpu'.
The program replaces this command: its output, exit code and signals are its own.  The
plugin must be built first (stirgpu stir-plugin build)."""

STIR_EPILOG = """\
examples:
  stirgpu stir OSMAPOSL recon.par
  stirgpu stir forward_project fwd.hs image.hv template.hs forward.par
  stirgpu stir --stir /opt/stir back_project back.hv data.hs template.hv back.par"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "stir-plugin",
        help="build the STIR plugin (STIR's projector type 'stirgpu') or show it",
        description=PLUGIN_DESCRIPTION,
        epilog=PLUGIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    b = actions.add_parser(
        "build",
        help="compile the plugin against a STIR into stirgpu's cache",
        description="Compile the plugin against a STIR into stirgpu's cache and print where it is.",
        epilog=PLUGIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument(
        "--stir",
        metavar="PREFIX",
        default=None,
        help="STIR's installation prefix (default: from CMAKE_PREFIX_PATH, or the OSMAPOSL on PATH)",
    )
    b.add_argument("--jobs", type=int, default=None, metavar="N", help="parallel compile jobs (default: all cores)")
    b.add_argument("--rebuild", action="store_true", help="build again even if a build exists")
    b.set_defaults(run=run_build)
    q = actions.add_parser(
        "path",
        help="print where the plugin for a STIR is",
        description="Print where the plugin built for a STIR and this Python is.",
        epilog=PLUGIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument("--stir", metavar="PREFIX", default=None, help="STIR's installation prefix (default: as for build)")
    q.set_defaults(run=run_path)

    s = subparsers.add_parser(
        "stir",
        help="run one of STIR's programs with the plugin loaded",
        description=STIR_DESCRIPTION,
        epilog=STIR_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "--stir",
        metavar="PREFIX",
        default=None,
        help="STIR's installation prefix (default: the one PROGRAM is found in on PATH)",
    )
    s.add_argument("program", metavar="PROGRAM", help="a STIR program (a name on PATH, or a path)")
    s.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments")
    s.set_defaults(run=run_stir)


def run_build(args) -> int:
    from ..stir_plugin import build

    found = build(args.stir, jobs=args.jobs, rebuild=args.rebuild)
    print(f"built the stirgpu STIR plugin for STIR {found.stir_version} at {found.stir_prefix}:")
    print(found.plugin)
    return 0


def run_path(args) -> int:
    from ..stir_plugin import find_build

    print(find_build(args.stir).plugin)
    return 0


def stir_command(program: str, args: list[str], stir: str | None = None) -> tuple[list[str], dict]:
    """(argv, environment) that run STIR's ``program`` with the plugin preloaded."""
    from ..errors import StirGpuError
    from ..stir_plugin import find_build

    if stir is not None and os.sep not in program:
        exe = shutil.which(program, path=str(Path(stir).expanduser() / "bin"))
    else:
        exe = shutil.which(program)
    if exe is None:
        where = f"{stir}/bin" if stir is not None else "PATH"
        raise StirGpuError(f"STIR program {program!r} not found on {where}")
    found = find_build(stir if stir is not None else Path(exe).resolve().parent.parent)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(found.preload() + env.get("LD_PRELOAD", "").split())
    return [exe, *args], env


def run_stir(args) -> int:
    argv, env = stir_command(args.program, args.args, args.stir)
    os.execve(argv[0], argv, env)  # the program's exit code and signals are the command's
    return 0  # pragma: no cover (execve does not return)
