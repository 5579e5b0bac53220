"""Print the environment (``NAME=value`` words for ``env``) under which STIR's Python module and
executables of the reference STIR the tests use (tests/reference_stir.py) run; exit 1 where
there is none."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import reference_stir  # noqa: E402  (the tests' one way of finding STIR)


def main() -> int:
    found = reference_stir.find()
    if isinstance(found, str):
        print(found, file=sys.stderr)
        return 1
    env = {k: v for k, v in found.env().items() if os.environ.get(k) != v}
    if found.python_dir is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(found.python_dir), os.environ.get("PYTHONPATH")) if p)
    print(" ".join(shlex.quote(f"{k}={v}") for k, v in env.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
