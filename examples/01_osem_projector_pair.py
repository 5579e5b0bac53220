"""OSEM written out with the STIR-style projector pair.

The loop STIR's OSMAPOSL runs, with stirgpu's streaming ``ProjectorPair``:

    sens_k = B_k(1/f)                                   (subset sensitivity)
    x     *= B_k( y / ((A_k x)/f + b) / f ) / sens_k    (one subiteration)

``forward_back_ratio`` does the bracket chunk by chunk (forward project, divide with
STIR's rule, back project) without a full-size intermediate.  ``b`` (its argument
``background``) is the background in measured units; STIR's ``additive sinogram`` a is in
normalised units (mean = (A x + a) / f), so b = a / f.

The data are simulated here (a water cylinder with hot and cold spheres on a small
ECAT 953 geometry).  Runs in seconds on a CPU; on a GPU when there is one.
Run: ``python examples/01_osem_projector_pair.py [--backend cpu|cuda]``.
"""

import argparse

import numpy as np

import stirgpu
from stirgpu.formats import ProjDataInMemory
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
args = parser.parse_args()

with stirgpu.config(backend=args.backend):
    # 1. geometry, phantom and simulated data (prompts y, STIR additive sinogram a, factors f)
    pdi, image_info = demo_geometry(num_views=48, num_tangential_poss=96)
    phantom = demo_phantom(image_info)
    projector = ProjectorPair()
    sim = simulate(
        projector, pdi, image_info, phantom.activity(image_info), phantom.mu_map(image_info), counts=5e6, seed=1
    )
    print(
        f"simulated {sim.total_counts:.3g} counts, {pdi.total_num_bins} bins, image {image_info.shape}, "
        f"backend {projector.backend}"
    )

    # 2. the background in measured units: b = a / f
    background = ProjDataInMemory(pdi, fill=sim.additive.as_array() / sim.normalisation.as_array())

    # 3. OSEM: 6 subsets, 3 full iterations
    num_subsets, num_iterations = 6, 3
    projector.set_up(pdi, image_info)
    sens = [projector.sensitivity(None, k, num_subsets, multiplicative=sim.normalisation) for k in range(num_subsets)]
    x = np.ones(image_info.shape, dtype=np.float32)
    for iteration in range(num_iterations):
        for k in range(num_subsets):
            ratio, loglik = projector.forward_back_ratio(
                x,
                sim.prompts,
                k,
                num_subsets,
                background=background,
                multiplicative=sim.normalisation,
                return_loglik=True,
            )
            x *= np.divide(ratio, sens[k], out=np.zeros_like(ratio), where=sens[k] > 0)
        print(
            f"iteration {iteration + 1}: subset log-likelihood {loglik:.6g}, "
            f"last call {projector.last_stats.wall_seconds:.3f} s ({projector.last_stats.chunks} chunks)"
        )

# 4. how well did it do?  mean activity in the spheres relative to the background
x = np.asarray(x)
bg = phantom.cylinder_mask(image_info) & ~np.any(
    [phantom.sphere_mask(image_info, i) for i in range(len(phantom.spheres))], axis=0
)
for i, s in enumerate(phantom.spheres):
    m = phantom.sphere_mask(image_info, i)
    print(f"sphere {i}: true contrast {s.value:.1f}, reconstructed {x[m].mean() / x[bg].mean():.2f}")
