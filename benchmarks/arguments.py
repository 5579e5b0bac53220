"""What every benchmark script does with a bad argument: one line on stderr, exit code 2.

Like the ``stirgpu`` command (``stirgpu/cli/main.py``), a benchmark given an argument it cannot
use says so in one line naming the argument, never with a usage block or a traceback::

    ap = arguments.ArgumentParser(description=...)      # argparse's errors: one line, exit 2
    ap.add_argument("--repeat", type=arguments.positive_int, default=3)
    ...
    if __name__ == "__main__":
        raise SystemExit(arguments.run(main))           # BadArgument, stirgpu's errors, OSError: one line, exit 2

``BadArgument`` is for values that only the script can judge after parsing (an unknown case
name, a missing STIR).  Any other exception is a bug and keeps its traceback.

Every script's result is one JSON document, printed and, with ``--json FILE``, written there
(:func:`emit_json`), before its readable lines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

__all__ = [
    "EXIT_BAD_ARGUMENT",
    "ArgumentParser",
    "BadArgument",
    "positive_int",
    "positive_float",
    "non_negative_int",
    "int_list",
    "name_list",
    "one_line",
    "run",
]

#: the exit code of a refused argument (argparse's, and the stirgpu command's)
EXIT_BAD_ARGUMENT = 2


class BadArgument(Exception):
    """An argument value the benchmark refuses after parsing; the message names the argument."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (``prog: error: message``) instead of the usage
    block followed by the message (``--help`` still shows the usage)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_ARGUMENT, f"{self.prog}: error: {one_line(message)}\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (0 usually means "skip")."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated integers >= 0 (GPU ids), e.g. ``0,1``."""
    return tuple(non_negative_int(part.strip()) for part in text.split(","))


def name_list(known: tuple[str, ...]):
    """argparse type: comma-separated names, each one of ``known`` (e.g. ``--cases dmi,mmr``)."""

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in known]
        if bad or not names:
            shown = ", ".join(map(repr, bad)) or repr(text)
            raise argparse.ArgumentTypeError(f"unknown name {shown} (known: {', '.join(known)})")
        return names

    return parse


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def one_line(text) -> str:
    """``text`` on one line: its non-empty lines joined with '; '."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def run(main, argv=None) -> int:
    """``main(argv)``'s exit code; a :class:`BadArgument`, an error stirgpu raises on purpose
    (:class:`stirgpu.errors.StirGpuError`: a scanner name, a geometry, a device it refuses) or an
    OS error (a folder that is not there) becomes one line on stderr and exit code 2."""
    if str(REPO) not in sys.path:  # run from a checkout without installing
        sys.path.insert(0, str(REPO))
    from stirgpu.errors import StirGpuError  # imports nothing heavy (io.py's parent stays small)

    prog = os.path.basename(sys.argv[0])
    try:
        return main(argv)
    except (BadArgument, StirGpuError) as exc:
        message = one_line(exc)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        message = one_line(f"{where}{exc.strerror or exc}")
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_BAD_ARGUMENT


def emit_json(doc, path: str | None) -> None:
    """Print the result document ``doc`` as JSON and, where ``path`` (the script's ``--json``) is
    given, write it there too (values JSON has no form for, such as paths, as their text)."""
    text = json.dumps(doc, indent=1, default=str)
    print(text)
    if path:
        Path(path).write_text(text + "\n", encoding="utf-8")


def emit_cases(doc, path: str | None, readable) -> None:
    """:func:`emit_json` of ``doc``, then ``readable(name, case)`` of each of its ``"cases"``."""
    emit_json(doc, path)
    for name, case in doc["cases"].items():
        print(readable(name, case))
