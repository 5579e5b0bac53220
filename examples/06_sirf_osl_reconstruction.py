"""OSL (OSMAPOSL with a quadratic prior), as a SIRF user writes it (SIRF's
``osl_reconstruction.py``), with ``import stirgpu.sirf as pet`` in place of
``import sirf.STIR as pet``.

stirgpu has no prior implementation yet: until it has, ``recon.set_up`` refuses the prior with a
stirgpu error naming what is missing, and this script prints that message (SIRF's
``except error as err: print(err.value)``) instead of reconstructing.  With a penalisation factor
of 0 it is OSEM.  Run: ``python examples/06_sirf_osl_reconstruction.py [--backend cpu|cuda]
[--penalisation-factor 0.5]``.
"""

import argparse

from sirf_simulation import report_contrast, simulate

import stirgpu
import stirgpu.sirf as pet

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
parser.add_argument("--penalisation-factor", type=float, default=0.5)
args = parser.parse_args()


def main():
    measured, acq_model, truth, cylinder, spheres = simulate(pet)
    image = truth.get_uniform_copy(1.0)

    prior = pet.QuadraticPrior()
    print("using Quadratic prior...")
    prior.set_up(image)
    prior.set_penalisation_factor(args.penalisation_factor)

    obj_fun = pet.make_Poisson_loglikelihood(measured)
    obj_fun.set_acquisition_model(acq_model)
    obj_fun.set_prior(prior)

    recon = pet.OSMAPOSLReconstructor()
    recon.set_objective_function(obj_fun)
    recon.set_num_subsets(6)
    recon.set_num_subiterations(18)
    recon.set_input(measured)
    print("setting up, please wait...")
    recon.set_up(image)
    print("reconstructing...")
    recon.reconstruct(image)
    report_contrast(image, cylinder, spheres)


with stirgpu.config(backend=args.backend):
    try:
        main()
    except pet.error as err:
        print(err.value)
