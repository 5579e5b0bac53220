"""OSEM with SIRF's ``OSMAPOSLReconstructor``, as a SIRF user writes it (SIRF's
``osem_reconstruction.py``), with ``import stirgpu.sirf as pet`` in place of
``import sirf.STIR as pet``.

The objective function is ``make_Poisson_loglikelihood`` of the measured data with the
acquisition model ``S (G x + a) + b`` (attenuation and a background term here, simulated by
``sirf_simulation.py``); the reconstructor runs STIR's OSMAPOSL subiterations on stirgpu's
streaming projector, one ``update_current_estimate()`` at a time.  Engine messages (each
subiteration) go to ``info.txt``, as in SIRF's examples.  Runs in seconds on a CPU; on a GPU when
there is one.  Run: ``python examples/05_sirf_osem_reconstruction.py [--backend cpu|cuda]``.
"""

import argparse

from sirf_simulation import report_contrast, simulate

import stirgpu
import stirgpu.sirf as pet

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
args = parser.parse_args()


def main():
    _ = pet.MessageRedirector("info.txt", "warn.txt")
    measured, acq_model, truth, cylinder, spheres = simulate(pet)

    obj_fun = pet.make_Poisson_loglikelihood(measured)
    obj_fun.set_acquisition_model(acq_model)

    num_subsets, num_subiterations = 6, 18
    recon = pet.OSMAPOSLReconstructor()
    recon.set_objective_function(obj_fun)
    recon.set_num_subsets(num_subsets)
    recon.set_num_subiterations(num_subiterations)
    recon.set_input(measured)

    image = truth.get_uniform_copy(1.0)
    print("setting up, please wait...")
    recon.set_up(image)
    recon.set_current_estimate(image)
    for subiteration in range(num_subiterations):
        recon.update_current_estimate()
        if (subiteration + 1) % num_subsets == 0:
            estimate = recon.get_current_estimate()
            print(f"iteration {(subiteration + 1) // num_subsets}: objective function {obj_fun.value(estimate):.8g}")
    report_contrast(recon.get_current_estimate(), cylinder, spheres)


with stirgpu.config(backend=args.backend):
    try:
        main()
    except pet.error as err:
        print(err.value)
