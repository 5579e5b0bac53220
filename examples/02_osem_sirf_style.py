"""OSEM written out as a SIRF user writes it, with ``import stirgpu.sirf as pet`` in place of
``import sirf.STIR as pet`` (the one line that changes).

The loop of SIRF's notebooks, with SIRF's containers and acquisition model
``forward(x) = S (G x + a) + b``, ``backward(y) = G' S y``::

    sensitivity_k = backward(1, k)
    x *= backward(y / forward(x, k), k) / sensitivity_k        (subset k)

``forward(x, k)`` holds ``S (G x + a) + b`` on subset k's views (and the constant term
elsewhere, which ``backward(., k)`` never reads).  The data are simulated by
``sirf_simulation.py`` with the same API.  Runs in seconds on a CPU; on a GPU when there is one.
Run: ``python examples/02_osem_sirf_style.py [--backend cpu|cuda]``.
"""

import argparse

from sirf_simulation import report_contrast, simulate

import stirgpu
import stirgpu.sirf as pet

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
args = parser.parse_args()


def main():
    pet.AcquisitionData.set_storage_scheme("memory")
    measured, acq_model, truth, cylinder, spheres = simulate(pet)

    num_subsets = 6
    acq_model.num_subsets = num_subsets
    ones = measured.get_uniform_copy(1.0)
    sensitivities = []
    for k in range(num_subsets):
        s = acq_model.backward(ones, subset_num=k)
        sensitivities.append(s.maximum(s.max() * 1e-6))  # no division by 0 outside the field of view

    image = truth.get_uniform_copy(1.0)
    for iteration in range(3):
        for k in range(num_subsets):
            acq_model.subset_num = k
            ratio = measured / acq_model.forward(image)
            image *= acq_model.backward(ratio) / sensitivities[k]
        print(f"iteration {iteration + 1}: image max {image.max():.4g}")
    report_contrast(image, cylinder, spheres)


with stirgpu.config(backend=args.backend):
    try:
        main()
    except pet.error as err:
        print(err.value)
