"""``python image_sums.py OUTDIR``: ``Communicator.sum_image`` on each path, each rank's results in
``OUTDIR/rank<R>.json``.  For tests/test_mpi.py, under mpiexec.

There is no GPU here: a "device" image is :class:`HostMemoryAsDevice`, host memory offered to
mpi4py through ``__cuda_array_interface__`` (as a cupy array offers its device memory), with the
few cupy methods ``sum_image`` uses (``get``, slices, ``device.synchronize``).  A CUDA-aware MPI
takes such a buffer as a device pointer; this MPI (not CUDA-aware) reads it as the host memory it
is, so the device path runs to the end: its MPI calls, its agreement between the ranks, its numbers.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from stirgpu.distributed import Communicator
from stirgpu.distributed.cuda_aware import CUDA_AWARE_VARIABLE
from stirgpu.distributed.cuda_aware import mpix_query_cuda_support as query
from stirgpu.errors import StirGpuError


class _Device:
    def __init__(self):
        self.synchronized = 0

    def synchronize(self):
        self.synchronized += 1


class HostMemoryAsDevice:
    """A float32 array whose memory mpi4py is told is a device buffer (see the module docstring)."""

    def __init__(self, array: np.ndarray, device: _Device | None = None):
        self.array = array
        self.device = device or _Device()

    @property
    def __cuda_array_interface__(self):
        face = self.array.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"], "version": 3,
                "strides": None, "stream": None}  # fmt: skip

    flags = property(lambda self: self.array.flags)
    size = property(lambda self: self.array.size)
    dtype = property(lambda self: self.array.dtype)

    def reshape(self, *shape):
        return HostMemoryAsDevice(self.array.reshape(*shape), self.device)

    def __getitem__(self, key):
        return HostMemoryAsDevice(self.array[key], self.device)

    def __setitem__(self, key, values):
        self.array[key] = values

    def get(self) -> np.ndarray:
        return self.array.copy()


out_dir = Path(sys.argv[1])
mpi = MPI.COMM_WORLD
rank, size = mpi.Get_rank(), mpi.Get_size()
shape = (3, 50, 137)  # 20,550 voxels: three pieces of the smallest staging buffers (8,192 float64)
mine = (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) % 97) * np.float32(rank + 1) + np.float32(0.25)
want = sum((np.arange(np.prod(shape), dtype=np.float64).reshape(shape) % 97) * (r + 1) + 0.25 for r in range(size))
results = {"mpix_query_cuda_support": query(), "cases": {}}


def case(name, image, staging=None, aware=None):
    """Sum ``image`` over the ranks with STIRGPU_MPI_CUDA_AWARE = ``aware`` (None: unset)."""
    if aware is None:
        os.environ.pop(CUDA_AWARE_VARIABLE, None)
    else:
        os.environ[CUDA_AWARE_VARIABLE] = aware
    comm = Communicator(mpi, staging_bytes=staging)
    try:
        sent, refused = comm.sum_image(image), None
    except StirGpuError as exc:  # (raised after the sum: the image is summed all the same)
        sent, refused = None, str(exc)
    values = image.array if isinstance(image, HostMemoryAsDevice) else image
    synchronized = image.device.synchronized if isinstance(image, HostMemoryAsDevice) else None
    results["cases"][name] = {
        "path": comm.last_image_sum,
        "sent": sent,
        "error": float(np.max(np.abs(values - want)) / np.max(want)),
        "equal_on_every_rank": bool(mpi.allreduce(values.tobytes() == mpi.bcast(values.tobytes()), op=MPI.LAND)),
        "synchronized": synchronized,
        "refused": refused,
    }


case("host", mine.copy(), staging=1 << 16)
case("device, MPI not CUDA-aware", HostMemoryAsDevice(mine.copy()), staging=1 << 16)
case("device, told it is not", HostMemoryAsDevice(mine.copy()), aware="0")
case("device, told it is", HostMemoryAsDevice(mine.copy()), aware="1")
case("device, told it is on rank 0 alone", HostMemoryAsDevice(mine.copy()), aware="1" if rank == 0 else "0")
case("device on rank 0 alone, told it is", HostMemoryAsDevice(mine.copy()) if rank == 0 else mine.copy(), aware="1")
case("device, a bad word on rank 1", HostMemoryAsDevice(mine.copy()), aware="yes" if rank == 1 else "1")

(out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
