"""Files ``stirgpu osmaposl`` does not reconstruct (the kinetic-model objective function, list mode,
the PLS prior; KOSMAPOSL, which ``stirgpu kosmaposl`` runs) are refused with one line; where STIR
runs them with stirgpu's plugin the line names that command (``stirgpu stir PROGRAM FILE.par``),
which ``stirgpu stir`` takes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stirgpu.cli.main import build_parser
from stirgpu.errors import ParFileProblems
from stirgpu.parfile import read_osmaposl_par
from stirgpu.parfile.ossps import read_ossps_par

OBJECTIVE = (
    "objective function type := {objective}\n"
    "{objective} Parameters :=\n"
    "input file := data.hs\n"
    "End {objective} Parameters :=\n"
)


def _refusal(tmp_path, text: str, read=read_osmaposl_par) -> tuple[int, str]:
    p = tmp_path / "file.par"
    p.write_text(text)
    with pytest.raises(ParFileProblems) as exc:
        read(p, env={})
    assert len(exc.value.problems) == 1, str(exc.value)  # one line, whatever else the file holds
    (problem,) = exc.value.problems
    return problem.line, problem.reason


def test_kosmaposl_names_stirgpu_kosmaposl_and_the_plugin_command(tmp_path):
    line, reason = _refusal(tmp_path, "KOSMAPOSLParameters :=\nhybrid := 1\nnumber of subsets := 2\nEnd :=\n")
    assert line == 1 and "a KOSMAPOSL one (kernelised EM): run it with 'stirgpu kosmaposl'" in reason
    assert f"stirgpu stir KOSMAPOSL {tmp_path / 'file.par'} " in reason


def test_the_kinetic_model_names_posmaposl(tmp_path):
    objective = "PoissonLogLikelihoodWithLinearKineticModelAndDynamicProjectionData"
    text = "OSMAPOSLParameters :=\n" + OBJECTIVE.format(objective=objective) + "unknown key := 1\nEnd :=\n"
    line, reason = _refusal(tmp_path, text)
    assert line == 2 and "kinetic-model objective function" in reason
    assert f"stirgpu stir POSMAPOSL {tmp_path / 'file.par'} " in reason


@pytest.mark.parametrize("read", [read_ossps_par, read_osmaposl_par], ids=["ossps", "osmaposl"])
def test_possps_names_the_plugin_command(tmp_path, read):
    """STIR's POSSPS file (the kinetic model under 'OSSPSParameters :='), read by 'stirgpu ossps' or
    'stirgpu osmaposl': one line naming 'stirgpu stir POSSPS FILE.par'."""
    objective = "PoissonLogLikelihoodWithLinearKineticModelAndDynamicProjectionData"
    text = "OSSPSParameters :=\n" + OBJECTIVE.format(objective=objective) + "unknown key := 1\nEnd :=\n"
    line, reason = _refusal(tmp_path, text, read)
    assert line == (2 if read is read_ossps_par else 1)
    assert f"stirgpu stir POSSPS {tmp_path / 'file.par'} " in reason and "stirgpu ossps" not in reason


def test_list_mode_says_why_no_plugin_command_serves_it(tmp_path):
    """STIR's list-mode objective function takes a projection matrix ('Matrix type'), not a
    projector pair, so the plugin cannot project for it: the line says so and names STIR's OSMAPOSL."""
    objective = "PoissonLogLikelihoodWithLinearModelForMeanAndListModeDataWithProjMatrixByBin"
    line, reason = _refusal(tmp_path, "OSMAPOSLParameters :=\n" + OBJECTIVE.format(objective=objective) + "End :=\n")
    assert line == 2 and "list-mode reconstruction is not implemented by stirgpu" in reason
    assert "'Matrix type'" in reason and "STIR's own OSMAPOSL" in reason and "stirgpu stir" not in reason


def test_the_named_command_is_one_stirgpu_stir_takes():
    """``stirgpu stir PROGRAM FILE.par`` parses as the plugin command (program, then its arguments)."""
    args = build_parser().parse_args(["stir", "KOSMAPOSL", "file.par"])
    assert (args.command, args.program, args.args) == ("stir", "KOSMAPOSL", ["file.par"])


def test_the_cli_prints_the_one_line(tmp_path):
    p = tmp_path / "k.par"
    p.write_text("KOSMAPOSLParameters :=\nEnd :=\n")
    proc = subprocess.run([sys.executable, "-m", "stirgpu", "osmaposl", str(p)], capture_output=True, text=True)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"stirgpu osmaposl: error: {p}:1: not an OSMAPOSL parameter file but a KOSMAPOSL")
        and "stirgpu stir KOSMAPOSL" in lines[0]
    )
