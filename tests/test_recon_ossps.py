"""stirgpu.recon.OSSPS from Python: what it refuses, what it writes, and the GPU against the CPU.

The numbers against STIR's own OSSPS are in ``tests/stir_differential/test_ossps_vs_stir.py``;
here a simulated scan (``stirgpu.recon.simulate``) checks the class's own contract.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.priors as sp
from stirgpu.errors import ParFileProblems, StirGpuError
from stirgpu.formats import read_image
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSSPS, PoissonLogLikelihood, prepare_ossps
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate


@pytest.fixture(scope="module")
def scan():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    data = simulate(ProjectorPair(backend="cpu"), pdi, info, demo_phantom(info).activity(info), counts=5e5, seed=5)
    return pdi, info, data


def _objective(data) -> PoissonLogLikelihood:
    return PoissonLogLikelihood(data.prompts, additive=data.additive, normalisation=data.normalisation)


def _ossps(data, info, backend="cpu", **kw) -> OSSPS:
    return OSSPS(_objective(data), ProjectorPair(backend=backend), info, num_subsets=3, num_subiterations=6, **kw)


def test_refuses_what_stirs_ossps_refuses(scan):
    """A prior without a parabolic surrogate (STIR: not a PriorWithParabolicSurrogate; the Gibbs
    Quadratic penalty although stirgpu's derives from the Quadratic prior), a
    relaxation parameter <= 0, a negative gamma, and OSMAPOSL's own settings."""
    _, info, data = scan
    with pytest.raises(StirGpuError, match="parabolic surrogate"):
        _ossps(data, info, prior=sp.RelativeDifferencePrior(1.0))
    with pytest.raises(StirGpuError, match="'Gibbs Quadratic' has no parabolic surrogate"):
        _ossps(data, info, prior=sp.make_prior("Gibbs Quadratic", penalisation_factor=1.0))
    with pytest.raises(StirGpuError, match="relaxation parameter 0: must be positive"):
        _ossps(data, info, relaxation_parameter=0)
    with pytest.raises(StirGpuError, match="relaxation gamma -1: must be >= 0"):
        _ossps(data, info, relaxation_gamma=-1)
    with pytest.raises(StirGpuError, match="map_model is an OSMAPOSL setting"):
        _ossps(data, info, map_model="multiplicative")


def test_writes_the_denominator_beside_the_estimates(scan, tmp_path):
    """With a prefix the computed denominator is written as ``<prefix>_precomputed_denominator.hv``
    (STIR's name) and equals what the class holds; given back as ``precomputed_denominator`` it
    gives the same estimate; estimates stay within [0, upper bound]."""
    _, info, data = scan
    first = _ossps(data, info, output_filename_prefix=tmp_path / "a", upper_bound=0.5).reconstruct()
    written = read_image(tmp_path / "a_precomputed_denominator.hv")
    assert written.info == info and written.array.max() > 0
    assert [p.name for p in first.saved] == ["a_6.hv"]
    again = _ossps(data, info, precomputed_denominator=written, upper_bound=0.5).reconstruct()
    np.testing.assert_array_equal(again.image, first.image)
    assert first.image.min() >= 0 and first.image.max() == np.float32(0.5)


def test_prepare_refuses_the_ossps_keys_problems_with_the_others(tmp_path):
    """A prior without a parabolic surrogate and a missing denominator file are named at their
    lines, in one error with the objective function's missing input."""
    par = tmp_path / "ossps.par"
    par.write_text(
        "OSSPSParameters :=\n"
        "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
        "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        "input file := prompts.hs\n"
        "projector pair type := Parallelproj\n"
        "Projector Pair Using Parallelproj Parameters :=\n"
        "End Projector Pair Using Parallelproj Parameters :=\n"
        "prior type := Relative Difference Prior\n"
        "Relative Difference Prior Parameters :=\n"
        "penalisation factor := 1\n"
        "END Relative Difference Prior Parameters :=\n"
        "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        "output filename prefix := out\n"
        "precomputed denominator := nothere.hv\n"
        "END :=\n"
    )
    with pytest.raises(ParFileProblems) as info:
        prepare_ossps(par, base_dir=tmp_path)
    by_line = {p.line: p.reason for p in info.value.problems}
    assert "prompts.hs" in by_line[4]
    assert "parabolic surrogate" in by_line[8]
    assert "nothere.hv" in by_line[14]


@pytest.mark.gpu
def test_cuda_equals_cpu(scan):
    """The same OSSPS run (a Quadratic prior, subsets, relaxation with gamma) on the GPU and the
    CPU: within 1e-5 of the maximum (the back projections add in another order; measured 4.5e-7 on
    one H200)."""
    _, info, data = scan
    results = [
        _ossps(data, info, backend=b, prior=sp.QuadraticPrior(0.5), relaxation_gamma=0.5).reconstruct().image
        for b in ("cpu", "cuda")
    ]
    cpu, gpu = results[0], results[1].get()
    assert np.abs(gpu - cpu).max() <= 1e-5 * np.abs(cpu).max()
