"""OSEM as a STIR Python user writes it -- STIR's objects throughout -- with stirgpu's projector pair.

A STIR user's loop takes ``stir.ProjectorByBinPairUsingParallelproj``; stirgpu's
``ProjectorPair`` takes its place and nothing else changes: the same ``set_up(proj_data_info,
image)``, ``get_forward_projector().forward_project(proj_data, image, subset, num_subsets)``
and ``get_back_projector().back_project(image, proj_data, subset, num_subsets)`` on the same
``stir.ProjData`` (here read from disk with ``stir.ProjData.read_from_file``) and
``stir.FloatVoxelsOnCartesianGrid`` objects.  Only the subset's viewgrams are read and written.

    x_k+1 = x_k * B_k( y / A_k x_k ) / B_k(1)          (one subiteration, subset k)

The data are made here first: a small ECAT 953 geometry (span 3, 48 views, 96 tangential
positions), a water cylinder with hot and cold spheres, Poisson prompts written as Interfile.
Needs STIR's Python module (``import stir``).  Runs in seconds on a CPU.
Run: ``python examples/04_stir_python_osem.py [--backend cpu|cuda] [--projector stir]``
(``--projector stir`` runs the very same loop with STIR's own Parallelproj pair).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

try:
    import stir
except ImportError:
    sys.exit("this example needs STIR's Python module: put STIR's python/ folder on PYTHONPATH and set STIR_CONFIG_DIR")

from stirgpu.interop import image_info_from_stir
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_phantom

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
parser.add_argument("--projector", default="stirgpu", choices=("stirgpu", "stir"))
args = parser.parse_args()


def make_prompts(folder: Path) -> str:
    """Simulated prompts (Interfile, written through STIR) of the demo phantom; returns the header."""
    scanner = stir.Scanner.get_scanner_from_name("ECAT 953")
    proj_data_info = stir.ProjDataInfo.construct_proj_data_info(scanner, 3, 4, 48, 96, False)
    exam_info = stir.ExamInfo()
    image = stir.FloatVoxelsOnCartesianGrid(exam_info, proj_data_info, 1.0)
    info = image_info_from_stir(image)
    image.fill(demo_phantom(info).activity(info))
    mean = stir.ProjDataInMemory(exam_info, proj_data_info)
    simulator = ProjectorPair(backend=args.backend)
    simulator.set_up(proj_data_info, image)
    simulator.get_forward_projector().forward_project(mean, image)
    values = mean.as_array()  # a small data set; the OSEM loop below never does this
    counts = np.random.default_rng(1).poisson(values * (5e6 / values.sum())).astype(np.float32)
    mode = stir.ios.trunc | stir.ios.ios_base_in | stir.ios.out
    prompts = stir.ProjDataInterfile(exam_info, proj_data_info, str(folder / "prompts.hs"), mode)
    prompts.fill(counts)
    del prompts  # closes the file
    return str(folder / "prompts.hs")


def divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


with tempfile.TemporaryDirectory(prefix="stirgpu-example-04-") as tmp:
    # 1. STIR's objects: measured data from disk, an image of STIR's default geometry for it
    prompts = stir.ProjData.read_from_file(make_prompts(Path(tmp)))
    proj_data_info = prompts.get_proj_data_info()
    exam_info = prompts.get_exam_info()
    estimate = stir.FloatVoxelsOnCartesianGrid(exam_info, proj_data_info, 1.0)

    # 2. the projector pair: STIR's, or stirgpu's in its place (the one line that changes)
    if args.projector == "stir":
        projector = stir.ProjectorByBinPairUsingParallelproj()
    else:
        projector = ProjectorPair(backend=args.backend)
    projector.set_up(proj_data_info, estimate)
    forward, back = projector.get_forward_projector(), projector.get_back_projector()

    # 3. subset sensitivities B_k(1)
    num_subsets, num_iterations = 6, 3
    ones = stir.ProjDataInMemory(exam_info, proj_data_info)
    ones.fill(1.0)
    sensitivity = []
    for k in range(num_subsets):
        sens_k = estimate.get_empty_copy()
        back.back_project(sens_k, ones, k, num_subsets)
        sensitivity.append(sens_k.as_array())

    # 4. OSEM, subset by subset, viewgram by viewgram
    estimate.fill(1.0)
    estimated = stir.ProjDataInMemory(exam_info, proj_data_info)  # A_k x, the subset's views
    ratio = stir.ProjDataInMemory(exam_info, proj_data_info)  # y / A_k x
    update = estimate.get_empty_copy()
    views = np.arange(proj_data_info.get_num_views())
    for iteration in range(num_iterations):
        for k in range(num_subsets):
            forward.forward_project(estimated, estimate, k, num_subsets)
            for segment in range(proj_data_info.get_min_segment_num(), proj_data_info.get_max_segment_num() + 1):
                for view in views[k::num_subsets]:
                    q = divide(
                        prompts.get_viewgram(int(view), segment).as_array(),
                        estimated.get_viewgram(int(view), segment).as_array(),
                    )
                    viewgram = ratio.get_empty_viewgram(int(view), segment)
                    viewgram.fill(q)
                    ratio.set_viewgram(viewgram)
            update.fill(0.0)  # STIR 6.5's Parallelproj back projector adds to its output (stirgpu's replaces it)
            back.back_project(update, ratio, k, num_subsets)
            estimate.fill(estimate.as_array() * divide(update.as_array(), sensitivity[k]))
        print(f"iteration {iteration + 1}: {num_subsets} subsets, estimate max {estimate.find_max():.4g}")

# 5. how well did it do?  mean activity in the spheres relative to the background
info = image_info_from_stir(estimate)
phantom = demo_phantom(info)
x = estimate.as_array()
bg = phantom.cylinder_mask(info) & ~np.any([phantom.sphere_mask(info, i) for i in range(len(phantom.spheres))], axis=0)
for i, s in enumerate(phantom.spheres):
    m = phantom.sphere_mask(info, i)
    print(f"sphere {i}: true contrast {s.value:.1f}, reconstructed {x[m].mean() / x[bg].mean():.2f}")
