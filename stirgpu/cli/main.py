"""``stirgpu`` entry point: argparse with one subcommand per module.

Adding a subcommand is one line: its module name in :data:`SUBCOMMANDS`.  A module
provides ``register(subparsers)``, which adds its parser and sets ``run=`` (a
function taking the parsed arguments and returning an exit code or None).

Errors that stirgpu raises on purpose (bad files, bad arguments) and OS errors
are printed as one line on stderr, naming the file, with exit code 2; no traceback.
Ctrl-C (KeyboardInterrupt) stops the work within about a second (the pipeline cancels
its queued chunks, see stirgpu/execution/README.md) and prints one line saying what was
kept (:mod:`.leftovers`), with exit code 130 (128 + SIGINT, what shells report).  Before a
command runs, temporary files that killed runs left in its output folder are named in one
warning line, with the command that removes them.  A command that compiles CPU kernels (a
machine's first run) says so in one line (:mod:`.compiling`).

File names are printed as they are (UTF-8 on a UTF-8 terminal); a character the console's
encoding cannot show (``LANG=C``, ``PYTHONIOENCODING=ascii``, a name whose bytes are not UTF-8)
is printed escaped (``\\xfc``) rather than failing after the work is done.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys

from ..errors import StirGpuError

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: modules that each add one subcommand (order = order in ``stirgpu --help``)
SUBCOMMANDS: tuple[str, ...] = (
    "stirgpu.cli.info",
    "stirgpu.cli.project",
    "stirgpu.cli.osmaposl",
    "stirgpu.cli.ossps",
    "stirgpu.cli.simulate_scatter",
    "stirgpu.cli.kosmaposl",
    "stirgpu.cli.plan",
    "stirgpu.cli.demo",
    "stirgpu.cli.stir_plugin",
)

EXIT_ERROR = 2
#: 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C
EXIT_INTERRUPTED = 130
#: commands whose ``output`` argument is one Interfile output (``demo``'s is a folder)
FILE_OUTPUT_COMMANDS = ("forward-project", "back-project")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stirgpu",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Fast, memory-bounded (GPU) projection and OSEM for STIR PET data: STIR's files,\n"
        "STIR's parameter files, STIR's numbers.",
        epilog="start with:\n  stirgpu demo                 # simulate a scan, reconstruct it, draw it\n"
        "  stirgpu COMMAND --help       # what a command does, its options and examples",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"stirgpu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 success, 2 error, 130 interrupted).

    Under an MPI launcher (``mpirun -n N stirgpu ...``) every rank runs the command; rank 0
    alone prints, and a failure on one rank or Ctrl-C ends every rank (:mod:`.ranks`)."""
    with _console_escapes_what_it_cannot_show():
        return _run(argv)


@contextlib.contextmanager
def _console_escapes_what_it_cannot_show():
    """Standard output and error print characters their encoding lacks as backslash escapes
    while the command runs (the streams as they were afterwards: a caller's own printing is
    unchanged)."""
    streams = [s for s in (sys.stdout, sys.stderr) if isinstance(s, io.TextIOWrapper)]
    before = [s.errors for s in streams]
    for s in streams:
        s.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        for s, errors in zip(streams, before, strict=True):
            if not s.closed:
                s.reconfigure(errors=errors)


def _run(argv: list[str] | None) -> int:
    from .compiling import compilation_notice
    from .leftovers import OutputState, interrupted_message, warn_about_leftovers
    from .ranks import Ranks

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        ranks = Ranks.of_this_run(args.command)
    except StirGpuError as exc:  # started by mpirun without mpi4py
        print(f"stirgpu {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    target = getattr(args, "output", None)
    header = _output_header(args.command, target)
    output = OutputState(header)
    if target is not None and ranks.is_root:  # (osmaposl looks in the folders of its parameter file itself)
        warn_about_leftovers(args.command, [header.parent if header is not None else target])
    try:
        quiet = getattr(args, "quiet", False)
        with ranks.printing(), compilation_notice(args.command, quiet, prints=ranks.is_root):
            code = args.run(args)
    except KeyboardInterrupt as exc:
        ranks.interrupted(f"stirgpu {args.command}: interrupted: {interrupted_message(exc, output)}", EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our output went away (e.g. ``| head``): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except StirGpuError as exc:
        # one line per problem (a parameter file's problems come all at once, with a count line)
        ranks.failed(exc, [f"stirgpu {args.command}: error: {line}" for line in _lines(exc)], EXIT_ERROR)
        return EXIT_ERROR
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        ranks.failed(exc, [f"stirgpu {args.command}: error: {where}{exc.strerror or exc}"], EXIT_ERROR)
        return EXIT_ERROR
    except Exception as exc:  # under MPI, a bug or an out-of-memory error on one rank ends every rank
        ranks.crashed(exc, EXIT_ERROR)
        raise
    return int(code or 0)


def _lines(exc: BaseException) -> list[str]:
    return str(exc).splitlines() or [type(exc).__name__]


def _output_header(command: str, target):
    """The header file (a Path; STIR's name: ``out`` -> ``out.hs``) of a command's one output;
    None for other commands and for names the command itself will refuse."""
    if command not in FILE_OUTPUT_COMMANDS or target is None:
        return None
    from ..formats.naming import IMAGE, PROJDATA, output_names

    try:
        return output_names(target, PROJDATA if command == "forward-project" else IMAGE).header
    except StirGpuError:
        return None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
