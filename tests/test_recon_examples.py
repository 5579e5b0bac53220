"""The numbered examples run as documented (``python examples/NN_*.py --backend cpu``) and reach
sensible images: the 4:1 sphere's printed contrast is above 3 after their few iterations
(measured ~3.65; 3.71 for the STIR-objects example, 3.67 for the SIRF-style ones, 3.44 for the
OSL one), so an example whose loop silently stopped updating fails.  The example written with STIR's own Python
objects needs a real STIR: it runs with the reference STIR's environment and skips cleanly where
there is none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("[0-9][0-9]_*.py"))


def test_there_are_examples_for_each_api():
    names = [p.name for p in EXAMPLES]
    assert any("projector_pair" in n for n in names) and any("sirf" in n for n in names)
    assert any("sirf_osem" in n for n in names) and any("sirf_osl" in n for n in names)
    assert any("par_file" in n for n in names) and any("stir_python" in n for n in names)


def _needs_stir(script: Path) -> bool:
    return "stir_python" in script.name


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", [pytest.param(p, marks=pytest.mark.stir) if _needs_stir(p) else p for p in EXAMPLES], ids=lambda p: p.name
)
def test_example_runs(script, tmp_path, request):
    args = [sys.executable, str(script), "--backend", "cpu"]
    if "par_file" in script.name:
        args += ["--output", str(tmp_path / "out")]
    env = None
    if _needs_stir(script):
        ref = request.getfixturevalue("reference_stir")  # skips where there is no STIR
        env = ref.env()
        if ref.python_dir is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ref.python_dir), env.get("PYTHONPATH")) if p)
    run = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    if "par_file" in script.name:
        assert (tmp_path / "out" / "osem_18.hv").is_file()
        return
    m = re.search(r"sphere 0: true contrast 4\.0, reconstructed ([0-9.]+)", run.stdout)
    assert m and float(m.group(1)) > 3.0, run.stdout
