"""``python crashing_rank.py RANK SUBITERATION stirgpu-arguments...``: the command line, in which
rank RANK runs out of memory (a MemoryError) when OSEM divides its update in subiteration
SUBITERATION -- outside any step the ranks take together, as an allocation between two
projections would.  For tests/test_mpi.py, under mpiexec."""

import os
import sys

from stirgpu.cli.main import main
from stirgpu.distributed import world
from stirgpu.recon.osem import OSEM

rank, subiteration = int(sys.argv[1]), int(sys.argv[2])
if world().rank == rank:
    update = OSEM.update

    def failing_update(self, image, subiteration_num):
        if subiteration_num == subiteration:
            raise MemoryError(f"cannot allocate the update image (rank {rank}, pid {os.getpid()})")
        return update(self, image, subiteration_num)

    OSEM.update = failing_update  # type: ignore[method-assign]

sys.exit(main(sys.argv[3:]))
