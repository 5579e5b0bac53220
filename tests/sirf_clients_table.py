"""The table of docs/sirf.md: every SIRF PET example and test file run on stirgpu.sirf (as
tests/test_sirf_clients.py runs them), one JSON object a line, then the Markdown rows.

    PYTHONPATH=$PWD python3 tests/sirf_clients_table.py [--json-only]

Needs ../shared/sirf beside the checkout (or STIRGPU_SIRF); the OSEM example's figure is compared
with the reference STIR where tests/reference_stir.py finds one.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference_stir  # noqa: E402
import sirf_clients as sc  # noqa: E402
from conftest import shared_dir  # noqa: E402


def _last_error(tail: str) -> str:
    """The last line of a traceback or of a SIRF error the script printed."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[\w.]+(Error|error|Exception|NotSupported)\b", ln) or "not found" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else ""


def _osem_figure(ws: sc.Workspace, tail: str, scratch: Path) -> str:
    found = re.search(r"relative residual norm: (\S+)", tail)
    if found is None:
        return ""
    printed = float(found.group(1))
    stir = reference_stir.find()
    if isinstance(stir, str):
        return f"relative residual {printed:.6e} (no reference STIR: {stir})"
    theirs = sc.stir_osem_residual(stir, ws.pet_data / "my_forward_projection.hs", scratch / "stir")
    return (
        f"relative residual {printed:.6e}; STIR OSMAPOSL (Parallelproj) {theirs:.6e}; "
        f"ratio - 1 = {printed / theirs - 1:.1e}"
    )


def _steepest_ascent_figure(ws: sc.Workspace, tail: str) -> str:
    found = re.search(r"objective function value: (\S+)", tail)
    if found is None:
        return ""
    printed = float(found.group(1))
    stir = reference_stir.find()
    if isinstance(stir, str):
        return f"start objective {printed:.6e} (no reference STIR: {stir})"
    import stirgpu.sirf as pet

    start = pet.ImageData()
    start.initialise((31, 111, 111), (3.375, 3, 3))
    theirs = sc.stir_objective_value(stir.module(), ws.pet_data / "my_forward_projection.hs", start.image_info, 12)
    return f"start objective {printed:.6e}; STIR's objective function (Parallelproj) {theirs:.6e}"


_FIGURES = {
    "osem_reconstruction.py": lambda ws, tail, cwd: _osem_figure(ws, tail, cwd),
    "steepest_ascent.py": lambda ws, tail, cwd: _steepest_ascent_figure(ws, tail),
}


def run_all(ws: sc.Workspace, scratch: Path):
    for script, case in sc.EXAMPLES.items():
        cwd = scratch / script
        cwd.mkdir()
        t = time.perf_counter()
        outcome = sc.run_example(ws, script, sc.example_args(ws, case), cwd)
        ran = sc.example_ran(ws, script, outcome)
        row = {"kind": "example", "file": script, "ran": ran, "expected": case.needs is None, "needs": case.needs}
        row["seconds"] = round(time.perf_counter() - t, 1)
        row["error"] = "" if ran else _last_error(outcome.tail)
        row["figure"] = _FIGURES[script](ws, outcome.tail, cwd) if script in _FIGURES and ran else ""
        yield row
    for name, case in sc.TEST_FILES.items():
        t = time.perf_counter()
        outcome = sc.run_test_file(ws, name)
        ok = outcome.returncode == 0 and outcome.failed == 0 and outcome.total > 0
        row = {"kind": "test file", "file": name, "ran": ok, "expected": case.needs is None, "needs": case.needs}
        row.update(passed=outcome.passed, failed=outcome.failed, skipped=outcome.skipped, total=outcome.total)
        row["seconds"] = round(time.perf_counter() - t, 1)
        row["error"] = "" if ok else _last_error(outcome.tail)
        row["figure"] = ""
        yield row


def markdown(row: dict) -> str:
    if row["kind"] == "example":
        result = "runs" if row["ran"] else f"needs {row['needs']}" if row["needs"] else "FAILS"
    else:
        counts = f"{row['passed']} of {row['total']} items pass"
        result = f"passes ({counts})" if row["ran"] else f"{counts}; needs {row['needs']}" if row["needs"] else "FAILS"
    surprise = "" if row["ran"] == row["expected"] else " (differs from the harness's expectation)"
    return f"| `{row['file']}` | {result}{surprise} | {row['figure']} |"


def main(argv: list[str]) -> int:
    sirf = shared_dir("sirf", "STIRGPU_SIRF", "examples/Python/PET")
    if sirf is None:
        print("SIRF's PET files not found (expected ../shared/sirf beside the checkout, or set STIRGPU_SIRF)")
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ws = sc.make_workspace(sirf, Path(tmp) / "sirf")
        scratch = Path(tmp) / "runs"
        scratch.mkdir()
        for row in run_all(ws, scratch):
            print(json.dumps(row), flush=True)
            rows.append(row)
    if "--json-only" not in argv:
        print("\n| file | result on stirgpu.sirf | figure |\n| --- | --- | --- |")
        for row in rows:
            print(markdown(row))
        examples = [r for r in rows if r["kind"] == "example"]
        tests = [r for r in rows if r["kind"] == "test file"]
        print(
            f"\n{sum(r['ran'] for r in examples)} of {len(examples)} examples run; "
            f"{sum(r['ran'] for r in tests)} of {len(tests)} test files pass "
            f"({sum(r['passed'] for r in tests)} of {sum(r['total'] for r in tests)} items)"
        )
    return 0 if all(r["ran"] == r["expected"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
