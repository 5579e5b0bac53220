"""``Truncate To Cylindrical FOV`` and ``Chained Data Processor`` in a ``.par``: STIR's keys and
defaults, nesting, and the refusal of a processor stirgpu lacks inside a chain (at its line)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.filters import ChainedProcessor, SeparableGaussianFilter, TruncateToCylindricalFOV
from stirgpu.geometry import ImageInfo
from stirgpu.parfile import read_osmaposl_par

HEAD = """OSMAPOSLParameters :=
objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData
PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
input file := data.hs
projector pair type := Parallelproj
Projector Pair Using Parallelproj Parameters :=
End Projector Pair Using Parallelproj Parameters :=
End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
output filename prefix := out
number of subsets := 1
number of subiterations := 1
inter-iteration filter subiteration interval := 1
"""


def _read(tmp_path, filt: str):
    p = tmp_path / "f.par"
    p.write_text(HEAD + filt + "END :=\n")
    return read_osmaposl_par(p, base_dir=tmp_path, env={})


def test_truncation_defaults_to_strictly_less_than_radius(tmp_path):
    s = _read(
        tmp_path,
        "inter-iteration filter type := Truncate To Cylindrical FOV\n"
        "Truncate To Cylindrical FOV Parameters :=\nEnd Truncate To Cylindrical FOV Parameters :=\n",
    )
    assert s.inter_iteration_filter == TruncateToCylindricalFOV(True)


def test_chains_nest_and_write_back(tmp_path):
    text = (
        "inter-iteration filter type := Chained Data Processor\nChained Data Processor Parameters :=\n"
        "Data Processor to apply first := Chained Data Processor\nChained Data Processor Parameters :=\n"
        "Data Processor to apply second := Separable Gaussian\nSeparable Gaussian Filter Parameters :=\n"
        "x-dir filter FWHM (in mm) := 5\nEND Separable Gaussian Filter Parameters :=\n"
        "END Chained Data Processor Parameters :=\n"
        "Data Processor to apply second := Truncate To Cylindrical FOV\n"
        "Truncate To Cylindrical FOV Parameters :=\nstrictly_less_than_radius := 0\n"
        "End Truncate To Cylindrical FOV Parameters :=\nEND Chained Data Processor Parameters :=\n"
    )
    s = _read(tmp_path, text)
    inner = ChainedProcessor(None, SeparableGaussianFilter(fwhm=(0.0, 0.0, 5.0)))
    assert s.inter_iteration_filter == ChainedProcessor(inner, TruncateToCylindricalFOV(False))
    (tmp_path / "again.par").write_text(s.to_par())
    assert read_osmaposl_par(tmp_path / "again.par", base_dir=tmp_path, env={}).inter_iteration_filter == (
        s.inter_iteration_filter
    )


def test_an_unsupported_processor_inside_a_chain_is_refused_at_its_line(tmp_path):
    text = (
        "inter-iteration filter type := Chained Data Processor\nChained Data Processor Parameters :=\n"
        "Data Processor to apply first := Median\nMedian Filter Parameters :=\nEnd Median Filter Parameters :=\n"
        "END Chained Data Processor Parameters :=\n"
    )
    with pytest.raises(ParFileProblems) as exc:
        _read(tmp_path, text)
    (problem,) = exc.value.problems
    assert problem.line == HEAD.count("\n") + 3 and "Truncate To Cylindrical FOV" in problem.reason


def test_a_chain_applies_its_steps_in_order():
    info = ImageInfo(shape=(1, 8, 8), voxel_size=(2.0, 2.0, 2.0), min_indices=(0, -4, -4))
    image = np.ones((1, 8, 8), np.float32)
    chain = ChainedProcessor(TruncateToCylindricalFOV(True), SeparableGaussianFilter(fwhm=(0.0, 0.0, 4.0)))
    out = chain.prepare_for(info).apply_in_place(image.copy())
    truncated = TruncateToCylindricalFOV(True).prepare_for(info).apply_in_place(image.copy())
    expected = SeparableGaussianFilter(fwhm=(0.0, 0.0, 4.0)).prepare(info.voxel_size).apply_in_place(truncated)
    assert np.array_equal(out, expected) and out[0, 0, 0] == 0 and 0 < out[0, 4, 0] < 1  # spread into the rim
