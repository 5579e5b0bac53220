"""The project's code checks, run on the tree: ``ruff check``, ``ruff format --check``,
``lint-imports`` (the import layering of the package READMEs) and ``mypy`` (settings in
pyproject.toml).  Each test fails with the tool's own output.  Then the size limits of the
package's modules and functions, and the names ``docs/architecture.md`` points a reader to.

The tools come with the ``test`` extra (pinned there).  Where one is not installed the test
skips, saying so -- but never in CI (the ``CI`` environment variable set), where a missing
tool is a failure.  Nothing is written into the checkout: ruff and import-linter run without
their caches, and mypy keeps its cache in the tests' cache folder (``STIRGPU_TEST_CACHE``,
else ``$XDG_CACHE_HOME/stirgpu-tests``, as for the reference STIR).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
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


# -- sizes: modules a reader can hold in their head, functions that fit on a screen -------------

PACKAGE = REPO / "stirgpu"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100

#: Known exceptions, each to be split along the lines its code shows; the list only shrinks.  An
#: entry that no longer exceeds its limit fails the test below, so that it is taken off the list.
#: Keys: a module ("parfile/osmaposl.py") or a function ("parfile/osmaposl.py:name"), as
#: :func:`_oversized` reports them.
KNOWN_OVERSIZED: set[str] = set()  # none now


def _function_lines(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines from ``def`` to the last line) of every function, nested ones too."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _oversized() -> dict[str, str]:
    """Every module over :data:`MAX_MODULE_LINES` and function over :data:`MAX_FUNCTION_LINES`
    of the package, keyed as in :data:`KNOWN_OVERSIZED`, with what was counted."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found[module] = f"{lines} lines"
        for name, lines in _function_lines(ast.parse(text, filename=str(path))):
            if lines > MAX_FUNCTION_LINES:
                found[f"{module}:{name}"] = f"{lines} lines"
    return found


def test_function_lines_counts_nested_functions_and_methods():
    """The counter sees methods and nested functions (a long closure inside a short-looking
    method is as hard to read), from ``def`` to the last line."""
    tree = ast.parse("class A:\n    def f(self):\n        def g():\n            return 1\n        return g\n")
    assert _function_lines(tree) == [("A.f", 4), ("A.f.g", 2)]


def test_modules_and_functions_stay_small():
    """No module of the package over 600 lines, no function over 100, but the known exceptions;
    guards against the next 800-line module, and against a known exception that has been split
    but stays on the list (so the list keeps shrinking)."""
    found = _oversized()
    new = sorted(f"{key} ({found[key]})" for key in found.keys() - KNOWN_OVERSIZED)
    assert not new, (
        f"over the limits ({MAX_MODULE_LINES} lines a module, {MAX_FUNCTION_LINES} a function): "
        + "; ".join(new)
        + ". Split along the lines the code shows (see the package README)."
    )
    stale = sorted(KNOWN_OVERSIZED - found.keys())
    assert not stale, f"within the limits now, take off KNOWN_OVERSIZED in tests/test_code_checks.py: {stale}"


# -- words: the repository names behaviours, not the internal work that made them ---------------

#: where the project's own words are: documentation, code and its comments, tests, benchmarks
WORDED = ("README.md", "docs", "stirgpu", "tests", "benchmarks", "swig", "examples", ".ci")
WORDED_SUFFIXES = {".md", ".py", ".cu", ".cuh", ".cxx", ".h", ".cpp", ".txt", ".toml", ".i", ".par"}

#: an internal issue or a work session by number ("issue 20", "issues 16 and 20", "session 5's");
#: STIR's issues are public and stay ("STIR issue #1567", "STIR #1354")
INTERNAL_REFERENCE = re.compile(r"(?<!STIR )(?<!STIR's )\b(issues?\s+#?\d+|sessions?\s+#?\d+)", re.IGNORECASE)


def _worded_files() -> list[Path]:
    files = []
    for top in WORDED:
        path = REPO / top
        candidates = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        files += [p for p in candidates if p.is_file() and (p.suffix in WORDED_SUFFIXES or p.name == "CMakeLists.txt")]
    return files


def test_internal_reference_pattern():
    """The pattern catches internal numbers and leaves STIR's public issues alone."""
    found = [
        bool(INTERNAL_REFERENCE.search(s)) for s in ("issue 20, part 3", "Session 5 (trimmed)", "issues 16 and 20")
    ]
    kept = [
        bool(INTERNAL_REFERENCE.search(s)) for s in ("STIR issue #1567", "STIR's issue 1354", "issued 6", "a session")
    ]
    assert found == [True, True, True] and kept == [False, False, False, False]


def test_no_internal_issue_or_session_numbers():
    """Nothing in the repository names an internal issue or a work session by number: a reader
    cannot look them up (name the behaviour, a date, or STIR's public issue instead; the history
    of measurements is ``docs/history.md``)."""
    hits = []
    for path in _worded_files():
        if path.resolve() == Path(__file__).resolve():
            continue  # this file's own examples
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if INTERNAL_REFERENCE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert not hits, "internal issue or session numbers:\n" + "\n".join(hits)


# -- the newcomer's tour names what exists ----------------------------------------------------

TOUR = REPO / "docs" / "architecture.md"
_DOTTED = re.compile(r"^stirgpu(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_PATH = re.compile(r"^(stirgpu|docs|tests|benchmarks|swig|examples)(/[A-Za-z0-9_.-]+)+/?$")


def _resolve(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute (class, function, method) of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_resolve_tells_names_that_exist():
    assert _resolve("stirgpu.execution.engine.Engine.run")
    assert not _resolve("stirgpu.execution.engine.Engine.fly")
    assert not _resolve("stirgpu.execution.no_such_module.run")


def test_architecture_tour_names_exist():
    """Every ``stirgpu.module.function`` and every repository path in backticks in
    docs/architecture.md exists, so the tour cannot drift from the code unnoticed."""
    names = re.findall(r"`([^`\s]+)`", TOUR.read_text(encoding="utf-8"))
    dotted = [n for n in names if _DOTTED.match(n)]
    paths = [n for n in names if _PATH.match(n)]
    assert len(dotted) > 40, "the tour names its steps as stirgpu.module.function"
    missing = [n for n in dotted if not _resolve(n)] + [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"docs/architecture.md names what does not exist: {missing}"
