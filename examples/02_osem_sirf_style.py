"""OSEM written with the SIRF-style acquisition model.

SIRF models data as ``y = S (G x + a) + b`` (``AcquisitionModel.forward``) with the
backward projection ``G' S y``; the EM update for subset k is

    x *= backward(y / forward(x, k), k) / backward(1, k)

This is the loop of SIRF's notebooks, on stirgpu's streaming projector: the
``AcquisitionModelUsingParallelproj`` (alias ``AcquisitionModel``) of ``stirgpu.sirf``.
STIR's files map onto it as S = 1 / f (correction factors) and a = STIR's additive sinogram.

Runs in seconds on a CPU.  Run: ``python examples/02_osem_sirf_style.py [--backend cpu|cuda]``.
"""

import argparse

import numpy as np

import stirgpu
from stirgpu.formats import ProjDataInMemory, VoxelsOnCartesianGrid
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate
from stirgpu.sirf import AcquisitionModel, AcquisitionSensitivityModel

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
args = parser.parse_args()

with stirgpu.config(backend=args.backend):
    pdi, image_info = demo_geometry(num_views=48, num_tangential_poss=96)
    phantom = demo_phantom(image_info)
    sim = simulate(
        ProjectorPair(), pdi, image_info, phantom.activity(image_info), phantom.mu_map(image_info), counts=5e6, seed=2
    )
    y = sim.prompts

    # the acquisition model: S = bin efficiencies = 1 / f, a = STIR's additive sinogram
    efficiencies = ProjDataInMemory(pdi, fill=1 / sim.normalisation.as_array())
    am = AcquisitionModel()
    am.set_acquisition_sensitivity(AcquisitionSensitivityModel(efficiencies))
    am.set_additive_term(sim.additive)
    image = VoxelsOnCartesianGrid(image_info, fill=1.0)
    am.set_up(y, image)
    am.num_subsets = 6

    ones = ProjDataInMemory(pdi, fill=1.0)
    sens = [am.backward(ones, subset_num=k).as_array() for k in range(am.num_subsets)]
    y_arr = y.as_array()
    for iteration in range(3):
        for k in range(am.num_subsets):
            views = pdi.subset_views(k, am.num_subsets)
            ybar = am.forward(image, subset_num=k).as_array()
            ratio = np.zeros_like(y_arr)  # y / ybar on the subset's views (as_array order: sinogram, view, tang)
            yk, bk = y_arr[:, views], ybar[:, views]
            ratio[:, views] = np.divide(yk, bk, out=np.zeros_like(yk), where=bk > 0)
            update = am.backward(ProjDataInMemory(pdi, fill=ratio), subset_num=k).as_array()
            image.array[...] *= np.divide(update, sens[k], out=np.zeros_like(update), where=sens[k] > 0)
        print(f"iteration {iteration + 1}: image max {image.array.max():.4g}")

x = image.array
bg = phantom.cylinder_mask(image_info) & ~np.any(
    [phantom.sphere_mask(image_info, i) for i in range(len(phantom.spheres))], axis=0
)
for i, s in enumerate(phantom.spheres):
    m = phantom.sphere_mask(image_info, i)
    print(f"sphere {i}: true contrast {s.value:.1f}, reconstructed {x[m].mean() / x[bg].mean():.2f}")
