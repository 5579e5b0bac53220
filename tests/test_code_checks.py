"""The project's code checks, run on the tree: ``ruff check``, ``ruff format --check``,
``lint-imports`` (the import layering of the package READMEs) and ``mypy`` (settings in
pyproject.toml).  Each test fails with the tool's own output.

The tools come with the ``test`` extra (pinned there).  Where one is not installed the test
skips, saying so -- but never in CI (the ``CI`` environment variable set), where a missing
tool is a failure.  Nothing is written into the checkout: ruff and import-linter run without
their caches, and mypy keeps its cache in the tests' cache folder (``STIRGPU_TEST_CACHE``,
else ``$XDG_CACHE_HOME/stirgpu-tests``, as for the reference STIR).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reference_stir import cache_root

REPO = Path(__file__).resolve().parents[1]


def _run(module: str, args: list[str], distribution: str) -> None:
    """Run a tool with this interpreter, in the repository root."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{distribution} is not installed (CI needs it: pip install -e '.[test]')")
        pytest.skip(f"{distribution} is not installed (pip install -e '.[test]' installs it)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, *_COMMAND[module], *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{distribution} {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"


_COMMAND = {
    "ruff": ["-m", "ruff"],
    "mypy": ["-m", "mypy"],
    # import-linter has no ``python -m`` form: its console entry point, from this interpreter
    "importlinter": [
        "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
    ],
}


def test_ruff_check():
    _run("ruff", ["check", "--no-cache", "."], "ruff")


def test_ruff_format():
    _run("ruff", ["format", "--check", "--no-cache", "."], "ruff")


def test_import_layering():
    _run("importlinter", ["--no-cache", "--config", "pyproject.toml"], "import-linter")


def test_mypy():
    _run("mypy", ["--cache-dir", str(cache_root() / "mypy")], "mypy")
