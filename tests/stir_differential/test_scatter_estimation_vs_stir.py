"""``stirgpu.sirf.ScatterEstimator`` against STIR's own ``estimate_scatter`` (the reference build's
executable) on the same files, every scatter estimate written (``prefix_<n>.hs``).

STIR is configured as SIRF's ``ScatterEstimator`` configures it (OSEM with a 15 mm Gaussian
post-filter, 2D, the downsampled scanner, STIR's mask defaults, scale factors 0.05..100, half
filter width 3), except for two settings stirgpu cannot share: the projectors are STIR's
Parallelproj pair (reconstruction and mask; SIRF's default is STIR's ray-tracing matrix) and the
scatter points sit at voxel centres (STIR's random placement is seeded with the time).

The case: a 4-ring, 64-detector scanner, span 1 with ring differences -1..1 (three segments
rebinned into one); prompts = attenuated forward projection of a cylinder with a hot rod, plus
1.5 times stirgpu's own single scatter simulation, plus flat randoms; normalisation factors
uniform or varying bin by bin; with and without randoms given.  Equal to 1e-5 of the maximum
(measured: 4.9e-7 after two iterations).

Guards against: SSRB of data, randoms and factors (sums against means), the 2D normalisation
``1 / SSRB(1 / f)``, the tail mask (STIR's Gaussian, threshold, projection plus 1), the
reconstruction's model (sensitivity, additive terms, post-filter, the restart from the previous
image, the average at iteration 2), the fit's settings, and the 3D estimate (threshold, 2D
normalisation applied, inverse SSRB from the 2D geometry, 3D normalisation undone).
"""

from __future__ import annotations

import numpy as np
import pytest
from scatter_templates import scatter_scanner, write_scatter_template

import stirgpu.sirf as pet
from stirgpu.formats import VoxelsOnCartesianGrid, write_image
from stirgpu.geometry import ImageInfo, ProjDataInfo
from stirgpu.scatter import ScatterSettings, SingleScatterSimulation, energy_model_from_header

pytestmark = pytest.mark.stir

TOL = 1e-5
ITERATIONS = 2

_ENERGY = "number of energy windows := 1\nenergy window lower level[1] := 425\nenergy window upper level[1] := 650\n"

_RECON = """Reconstruction Parameters :=
reconstruction type := OSMAPOSL
OSMAPOSLParameters :=
objective function type:= PoissonLogLikelihoodWithLinearModelForMeanAndProjData
PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters:=
projector pair type := Parallelproj
  Projector Pair Using Parallelproj Parameters :=
  End Projector Pair Using Parallelproj Parameters :=
end PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters:=
number of subsets:= 4
number of subiterations:= 4
post-filter type :=  Separable Gaussian
Separable Gaussian Filter Parameters :=
  x-dir filter FWHM (in mm):= 15
  y-dir filter FWHM (in mm):= 15
  z-dir filter FWHM (in mm):= 15
END Separable Gaussian Filter Parameters :=
disable output := 1
output filename prefix := recon
End OSMAPOSLParameters:=
End reconstruction Parameters:=
"""

_ESTIMATE = """Scatter Estimation Parameters :=
input file := prompts.hs
attenuation image filename := mu.hv
Normalisation type := from ProjData
   Bin Normalisation From ProjData :=
            normalisation projdata filename:= norm.hs
   End Bin Normalisation From ProjData:=
attenuation correction factors filename := acf.hs
{background}recompute mask projdata := 1
recompute mask image := 1
forward projector for mask type := Parallelproj
  Forward Projector Using Parallelproj Parameters :=
  End Forward Projector Using Parallelproj Parameters :=
run in 2d projdata := 1
Scatter Simulation type := PET Single Scatter Simulation
  PET Single Scatter Simulation Parameters :=
    randomly place scatter points := 0
  End PET Single Scatter Simulation Parameters:=
use scanner downsampling in scatter simulation := 1
reconstruction parameter filename := recon.par
number of scatter iterations := {iterations}
export scatter estimates of each iteration := 1
output scatter estimate name prefix := stir_scatter
End Scatter Estimation Parameters :=
"""


def _with_energy_window(path) -> None:
    text = path.read_text()
    end = text.lower().rindex("!end of interfile")
    path.write_text(text[:end] + _ENERGY + text[end:])


def _write(ad, folder, name: str) -> None:
    ad.write(str(folder / f"{name}.hs"))
    _with_energy_window(folder / f"{name}.hs")


def _make_case(folder, varying_norm: bool):
    pdi = ProjDataInfo.construct(scatter_scanner(4, 64), 1, 1)
    write_scatter_template(folder, pdi)
    info = ImageInfo((7, 31, 31), (8.0, 8.0, 8.0))
    nz, ny, nx = info.shape
    (_, my, mx), (_, vy, vx) = info.get_min_indices(), info.voxel_size
    y = (np.arange(ny) + my)[None, :, None] * vy
    x = (np.arange(nx) + mx)[None, None, :] * vx
    r = np.hypot(y, x) * np.ones((nz, 1, 1))
    mu = np.where(r < 90, 0.096, 0.0).astype(np.float32)
    act = (np.where(r < 90, 1.0, 0.0) + np.where(np.hypot(y - 20, x + 15) < 35, 3.0, 0.0)).astype(np.float32)
    write_image(folder / "mu.hv", mu, info)
    template = pet.AcquisitionData(str(folder / "template.hs"))
    mu_image, activity = pet.ImageData(str(folder / "mu.hv")), pet.ImageData.from_array(act, info)
    af, acf = pet.AcquisitionSensitivityModel.compute_attenuation_factors(template, mu_image)
    model = pet.AcquisitionModelUsingParallelproj()
    model.set_up(template, activity)
    trues = model.forward(activity) * af
    energy = energy_model_from_header(folder / "template.hs", pdi.get_scanner())
    settings = ScatterSettings(randomly_place_scatter_points=False)
    simulation = SingleScatterSimulation(pdi, energy, VoxelsOnCartesianGrid.from_array(mu, info), settings)
    scatter = template.get_uniform_copy(0.0)
    for seg, values in simulation.simulate(VoxelsOnCartesianGrid.from_array(act, info)).items():
        scatter.proj_data.set_segment_by_view(values, seg)
    randoms = template.get_uniform_copy(0.02 * float(trues.as_array().max()))
    norm = template.get_uniform_copy(1.0)
    if varying_norm:  # STIR's normalisation factors (1 / efficiency)
        norm.fill(np.random.default_rng(7).uniform(0.8, 1.25, norm.dimensions()).astype(np.float32))
    efficiencies = 1 / norm
    _write(efficiencies * (trues + scatter * 1.5) + randoms, folder, "prompts")
    _write(randoms, folder, "randoms")
    _write(norm, folder, "norm")
    _write(acf, folder, "acf")
    (folder / "recon.par").write_text(_RECON)


@pytest.mark.parametrize(("varying_norm", "with_randoms"), [(False, True), (True, False)])
def test_scatter_estimate_equals_stir(reference_stir, tmp_path, varying_norm, with_randoms):
    _make_case(tmp_path, varying_norm)
    background = "background projdata filename := randoms.hs\n" if with_randoms else ""
    (tmp_path / "est.par").write_text(_ESTIMATE.format(background=background, iterations=ITERATIONS))
    reference_stir.run("estimate_scatter", "est.par", cwd=tmp_path)

    se = pet.ScatterEstimator()
    se.set_input(pet.AcquisitionData(str(tmp_path / "prompts.hs")))
    if with_randoms:
        se.set_randoms(pet.AcquisitionData(str(tmp_path / "randoms.hs")))
    se.set_attenuation_image(pet.ImageData(str(tmp_path / "mu.hv")))
    se.set_attenuation_correction_factors(pet.AcquisitionData(str(tmp_path / "acf.hs")))
    se.set_asm(pet.AcquisitionSensitivityModel(1 / pet.AcquisitionData(str(tmp_path / "norm.hs"))))
    se.set_num_iterations(ITERATIONS)
    se.set_OSEM_num_subsets(4)
    se.set_OSEM_num_subiterations(4)
    se.set_randomly_place_scatter_points(False)
    se.set_output_prefix(str(tmp_path / "ours"))
    se.set_up()
    se.process()
    for n in range(1, ITERATIONS + 1):
        theirs = pet.AcquisitionData(str(tmp_path / f"stir_scatter_{n}.hs")).as_array()
        ours = pet.AcquisitionData(str(tmp_path / f"ours_{n}.hs")).as_array()
        top = float(theirs.max())
        assert top > 0
        assert np.abs(ours - theirs).max() <= TOL * top, f"iteration {n}"
    np.testing.assert_array_equal(se.get_output().as_array(), ours)
