"""STIR's median root prior, Gibbs priors, inter-iteration processors and OSSPS on the GPU: ``stirgpu osmaposl`` and
``stirgpu ossps`` with ``--backend cuda`` give the CPU backend's estimates (which the tests under
``tests/stir_differential/`` compare with STIR's own executables) to float32 summation order.

The same small simulated data as ``tests/test_cli_recon.py`` (ECAT 953, span 3, 24 views), 3
subsets, 4 subiterations; one parameter file per case, run once per backend in its own folder.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from stirgpu.cli.main import main
from stirgpu.formats import ProjDataOnDisk, read_image
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

pytestmark = pytest.mark.gpu

PRIORS = {
    "gibbs-quadratic": (
        "prior type := Gibbs Quadratic\nGibbs Quadratic Penalty Parameters :=\n"
        "penalisation factor := 0.5\nEND Gibbs Quadratic Penalty Parameters :=\n"
    ),
    "gibbs-rdp": (
        "prior type := Gibbs Relative Difference\nGibbs Relative Difference Penalty Parameters :=\n"
        "penalisation factor := 0.5\ngamma value := 2\nepsilon value := 1e-3\n"
        "END Gibbs Relative Difference Penalty Parameters :=\n"
    ),
    "median-root": (
        "prior type := FilterRootPrior\nFilterRootPrior Parameters :=\npenalisation factor := 0.2\n"
        "Filter type := Median\nMedian Filter Parameters :=\nmask radius x := 1\nmask radius y := 1\n"
        "mask radius z := 1\nEnd Median Filter Parameters :=\nEND FilterRootPrior Parameters :=\n"
    ),
}


#: STIR's inter-iteration processors of the test pack's MRP file: a chain of a Gaussian and the
#: truncation to the cylindrical FOV, every second subiteration
CHAINED_FILTER = (
    "inter-iteration filter subiteration interval := 2\n"
    "inter-iteration filter type := Chained Data Processor\nChained Data Processor Parameters :=\n"
    "Data Processor to apply first := Separable Gaussian\nSeparable Gaussian Filter Parameters :=\n"
    "x-dir filter FWHM (in mm) := 5\ny-dir filter FWHM (in mm) := 5\nz-dir filter FWHM (in mm) := 4\n"
    "END Separable Gaussian Filter Parameters :=\n"
    "Data Processor to apply second := Truncate To Cylindrical FOV\n"
    "Truncate To Cylindrical FOV Parameters :=\nEnd Truncate To Cylindrical FOV Parameters :=\n"
    "END Chained Data Processor Parameters :=\n"
)


def _par(prior: str = "", root: str = "OSMAPOSLParameters", top: str = "") -> str:
    text = osmaposl_par(
        "prompts.hs",
        normalisation="acf.hs",
        additive_sinogram="additive.hs",
        output_filename_prefix="out",
        num_subsets=3,
        num_subiterations=4,
        save_interval=4,
    )
    marker = "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters"
    head, sep, tail = text.partition(marker)
    assert sep, "osmaposl_par() no longer writes the objective's end line"
    text = head + prior + sep + tail
    assert text.endswith("END :=\n")
    text = text[: -len("END :=\n")] + top + "END :=\n"
    return text.replace("OSMAPOSLParameters :=", f"{root} :=", 1)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpudata")
    pdi, info = demo_geometry(num_views=24, num_tangential_poss=64)
    ph = demo_phantom(info)
    sim = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=1e6, seed=5)
    for name, pd in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        ProjDataOnDisk.create(d / f"{name}.hs", pdi, fill=pd).close()
    return d


def _run(data_dir, folder, command: str, text: str, backend: str) -> np.ndarray:
    folder.mkdir()
    for f in data_dir.iterdir():
        os.symlink(f, folder / f.name)
    (folder / "run.par").write_text(text)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert main([command, "run.par", "--backend", backend, "--quiet"]) == 0
    finally:
        os.chdir(cwd)
    return np.asarray(read_image(folder / "out_4.hv").array)


def _same(cpu: np.ndarray, gpu: np.ndarray, tol: float) -> None:
    scale = float(np.abs(cpu).max())
    assert scale > 0 and np.isfinite(gpu).all()
    assert float(np.abs(gpu - cpu).max()) <= tol * scale


@pytest.mark.parametrize("filtered", [False, True], ids=["plain", "chained-inter-iteration-filter"])
@pytest.mark.parametrize("name", sorted(PRIORS))
def test_osmaposl_prior_on_gpu_equals_cpu(name, filtered, data_dir, tmp_path):
    text = _par(PRIORS[name], top=CHAINED_FILTER if filtered else "")
    cpu = _run(data_dir, tmp_path / "cpu", "osmaposl", text, "cpu")
    gpu = _run(data_dir, tmp_path / "cuda", "osmaposl", text, "cuda")
    _same(cpu, gpu, 1e-4)


@pytest.mark.parametrize("prior", ["", "quadratic"])
def test_ossps_on_gpu_equals_cpu(prior, data_dir, tmp_path):
    block = (
        "prior type := Quadratic\nQuadratic Prior Parameters :=\npenalisation factor := 0.5\n"
        "END Quadratic Prior Parameters :=\n"
        if prior
        else ""
    )
    text = _par(block, root="OSSPSParameters")
    cpu = _run(data_dir, tmp_path / "cpu", "ossps", text, "cpu")
    gpu = _run(data_dir, tmp_path / "cuda", "ossps", text, "cuda")
    _same(cpu, gpu, 1e-4)
