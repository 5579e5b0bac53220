"""``python tof_and_priors.py OUTDIR``: TOF projections and OSEM, and OSMAPOSL with priors (One-Step-
Late), each rank's results saved as ``OUTDIR/rank<R>.npz``; the prior's gradient files go to
``OUTDIR/grad_<n>.hv``, and each rank records which of them it wrote itself.  Run with mpiexec
(any number of ranks) and without (the reference) by tests/test_mpi.py: every rank must hold the
same results as the run without MPI, and rank 0 alone writes files.

TOF: GE Discovery MI (4 rings), 3 segments, 6 views, 13 TOF bins, a 71 x 31 x 31 image.  Priors:
the non-TOF test geometry (tests/helpers.py), a Relative Difference Prior (additive MAP model,
gradient files) and a Quadratic prior on TOF data (multiplicative)."""

import sys
from pathlib import Path

import numpy as np
from helpers import phantom, projection_results, random_proj_data, small_geometry

import stirgpu.priors.base
from stirgpu.distributed import world
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.priors import QuadraticPrior, RelativeDifferencePrior
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood

out_dir = Path(sys.argv[1])
comm = world()
results = {}

# the files this rank's priors write (rank 0 alone must write them)
written: list[str] = []
_write_image = stirgpu.priors.base.write_image


def _recording_write_image(path, *args, **kwargs):
    written.append(Path(path).name)
    return _write_image(path, *args, **kwargs)


stirgpu.priors.base.write_image = _recording_write_image

# -- TOF ------------------------------------------------------------------------------------------
pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 6, 31, tof_mash_factor=29)
info = stir_default_image_info(pdi)
rng = np.random.default_rng(7)
x = rng.uniform(0.5, 1.5, info.shape).astype(np.float32)
y = ProjDataInMemory(pdi)
y.fill(rng.uniform(0.5, 1.5, y.shape).astype(np.float32))

pair = ProjectorPair(backend="cpu", max_views_per_chunk=2)  # (comm: COMM_WORLD under mpiexec)
pair.set_up(pdi, info)
results.update(projection_results(pair, x, y, forward_subset=(1, 3), ratio_subset=(2, 3), prefix="tof_"))
results["tof_share_bins"] = np.array(pair.last_plan.num_bins)  # (this rank's share of the ratio)

measured = ProjDataInMemory(pdi)
pair.forward_project(measured, x)
measured.fill(measured.as_array() + 0.1)
tof_objective = PoissonLogLikelihood(measured)
osem = OSEM(tof_objective, ProjectorPair(backend="cpu", comm=comm.mpi), info, num_subsets=3, num_subiterations=3)
results["tof_osem"] = np.asarray(osem.reconstruct().image)
osl = OSEM(
    tof_objective,
    ProjectorPair(backend="cpu"),
    info,
    num_subsets=3,
    num_subiterations=3,
    prior=QuadraticPrior(0.05),
    map_model="multiplicative",
    report_objective_interval=3,
)
result = osl.reconstruct()
results["tof_osl"] = np.asarray(result.image)
results["tof_osl_penalty"] = np.array(result.records[-1].penalty)

# -- a prior, non-TOF -----------------------------------------------------------------------------
pdi2, info2 = small_geometry()
measured2 = random_proj_data(pdi2, seed=3, low=0.5)
prior = RelativeDifferencePrior(0.5, epsilon=1e-3, gradient_filename_prefix=out_dir / "grad_")
osl = OSEM(
    PoissonLogLikelihood(measured2),
    ProjectorPair(backend="cpu"),
    info2,
    num_subsets=3,
    num_subiterations=4,
    save_interval=2,
    output_filename_prefix=out_dir / "osl",
    prior=prior,
    report_objective_interval=2,
)
result = osl.reconstruct()
results["osl"] = np.asarray(result.image)
results["osl_objective"] = np.array([r.objective_function_value for r in result.records if r.penalty is not None])
results["osl_penalty"] = np.array([r.penalty for r in result.records if r.penalty is not None])
prior.set_gradient_filename_prefix(None)  # (a call of the prior's own writes on every rank that makes it)
results["prior_gradient"] = np.asarray(prior.get_gradient(phantom(info2)))

results["ranks"] = np.array(comm.size)
results["gradient_files"] = np.array(sorted(written))
np.savez(out_dir / f"rank{comm.rank}.npz", **results)
