"""``python projections.py OUTDIR``: the library's projections, OSEM and SIRF-style model on the
streaming projectors' small problem, each rank's results saved as ``OUTDIR/rank<R>.npz`` (OSEM's
estimate files go to ``OUTDIR/osem_<n>.hv``).  Run with mpiexec (any number of ranks) and
without (the reference) by tests/test_mpi.py: every rank must hold the same results as the run
without MPI."""

import sys
from pathlib import Path

import numpy as np
from helpers import phantom, projection_results, random_proj_data, small_geometry

import stirgpu.sirf as pet
from stirgpu.distributed import world
from stirgpu.formats import ProjDataInMemory
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood

out_dir = Path(sys.argv[1])
comm = world()
pdi, info = small_geometry()
x = phantom(info)
y = random_proj_data(pdi, seed=3, low=0.5)

pair = ProjectorPair(backend="cpu")  # (comm: COMM_WORLD under mpiexec, by default)
pair.set_up(pdi, info)
results = projection_results(pair, x, y, forward_subset=(2, 3), back_subset=(1, 4), ratio_subset=(0, 3))
results["ranks"] = np.array(pair.last_stats.ranks)
results["ranks_on_this_node"] = np.array(pair.comm.ranks_on_this_node)
results["host_budget_set"] = np.array(pair.host_memory_budget is not None)

osem = OSEM(
    PoissonLogLikelihood(y),
    ProjectorPair(backend="cpu", comm=comm.mpi),  # (an mpi4py communicator passed explicitly)
    info,
    num_subsets=3,
    num_subiterations=4,
    save_interval=2,
    output_filename_prefix=out_dir / "osem",
)
results["osem"] = np.asarray(osem.reconstruct().image)

model = pet.AcquisitionModelUsingParallelproj(backend="cpu")
template = pet.AcquisitionData(ProjDataInMemory(pdi))
image = pet.ImageData.from_array(x, info)
model.set_up(template, image)
results["sirf_forward"] = model.forward(image).as_array()
results["sirf_backward"] = model.backward(pet.AcquisitionData(y)).as_array()

np.savez(out_dir / f"rank{comm.rank}.npz", **results)
