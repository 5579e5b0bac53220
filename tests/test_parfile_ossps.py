"""OSSPS parameter files -> OsspsSettings (stirgpu.parfile.ossps).

Each test writes a small ``OSSPSParameters`` file.  The defaults asserted are STIR's
(``OSSPSReconstruction::set_defaults``: relaxation parameter 1, gamma 0.1, upper bound the
largest float32, no initial positivity, the denominator computed); the refusals name the file
and line, all problems at once, as for OSMAPOSL.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.parfile.ossps import read_ossps_par

OBJECTIVE = (
    "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
    "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
    "input file := prompts.hs\n"
    "projector pair type := Parallelproj\n"
    "Projector Pair Using Parallelproj Parameters :=\n"
    "End Projector Pair Using Parallelproj Parameters :=\n"
    "{objective}"
    "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
)


def write(tmp_path: Path, top: str = "", objective: str = "", root: str = "OSSPSParameters") -> Path:
    path = tmp_path / "ossps.par"
    text = f"{root} :=\n" + OBJECTIVE.format(objective=objective) + "output filename prefix := out\n" + top + "END :=\n"
    path.write_text(text)
    return path


def test_defaults_are_stirs_ossps_defaults(tmp_path):
    """Without OSSPS's keys: STIR's defaults, and OSSPS's own default of no initial positivity
    (OSMAPOSL's is on): a file that relies on them gets STIR's run."""
    s = read_ossps_par(write(tmp_path), base_dir=tmp_path)
    assert s.relaxation_parameter == 1.0 and s.relaxation_gamma == 0.1
    assert s.upper_bound == float(np.finfo(np.float32).max)
    assert s.precomputed_denominator is None
    assert s.common.enforce_initial_positivity is False
    assert s.common.input_file == tmp_path / "prompts.hs"
    assert s.common.output_filename_prefix == tmp_path / "out"


def test_ossps_keys_are_read_with_their_lines(tmp_path):
    top = (
        "relaxation parameter := 2.5\n"
        "relaxation gamma := 0\n"
        "upper bound := 40\n"
        "precomputed denominator := denom.hv\n"
        "enforce initial positivity condition := 1\n"
        "number of subsets := 4\n"
    )
    s = read_ossps_par(write(tmp_path, top), base_dir=tmp_path)
    assert (s.relaxation_parameter, s.relaxation_gamma, s.upper_bound) == (2.5, 0.0, 40.0)
    assert s.precomputed_denominator == tmp_path / "denom.hv"
    assert s.common.enforce_initial_positivity is True and s.common.num_subsets == 4
    assert s.line("relaxation_parameter") == 10 and s.line("num_subsets") == 15
    assert s.error("precomputed_denominator", "x").line == 13


def test_denominator_of_ones(tmp_path):
    """``precomputed denominator := 1`` is STIR's all-ones denominator, not a file named 1."""
    s = read_ossps_par(write(tmp_path, "precomputed denominator := 1\n"), base_dir=tmp_path)
    assert s.precomputed_denominator == 1.0


def test_refusals_name_every_line_at_once(tmp_path):
    """A relaxation parameter <= 0 and a negative gamma (STIR refuses both at set-up), update
    images (not written by stirgpu) and OSMAPOSL's own keys: one error, every line."""
    top = (
        "relaxation parameter := 0\n"
        "relaxation gamma := -1\n"
        "write update image := 1\n"
        "MAP model := additive\n"
        "maximum relative change := 2\n"
    )
    with pytest.raises(ParFileProblems) as info:
        read_ossps_par(write(tmp_path, top), base_dir=tmp_path)
    lines = [p.line for p in info.value.problems]
    assert lines == [10, 11, 12, 13, 14], str(info.value)
    text = str(info.value)
    assert "must be positive" in text and "must be >= 0" in text and "update images" in text
    assert text.count("an OSMAPOSL key") == 2


def test_an_osmaposl_file_is_not_an_ossps_file(tmp_path):
    with pytest.raises(ParFileProblems, match="not an OSSPS parameter file.*OSMAPOSLParameters.*'stirgpu osmaposl'"):
        read_ossps_par(write(tmp_path, root="OSMAPOSLParameters"), base_dir=tmp_path)


def test_missing_denominator_file_is_named(tmp_path):
    """``check_files`` names the missing denominator with the objective's missing input file."""
    with pytest.raises(ParFileProblems) as info:
        read_ossps_par(write(tmp_path, "precomputed denominator := nothere.hv\n"), base_dir=tmp_path, check_files=True)
    text = str(info.value)
    assert "nothere.hv" in text and "prompts.hs" in text


def test_stirgpu_osmaposl_names_the_ossps_command(tmp_path):
    """An OSSPS file given to ``stirgpu osmaposl`` is refused with the command that runs it."""
    from stirgpu.parfile import read_osmaposl_par

    with pytest.raises(ParFileProblems, match="not an OSMAPOSL parameter file.*'stirgpu ossps'"):
        read_osmaposl_par(write(tmp_path), base_dir=tmp_path)
