"""stirgpu: fast, memory-bounded (GPU) projection for STIR PET data.

Importing stirgpu does no work: no GPU probing, no kernel compilation, no
printing.  Subpackages:

* :mod:`stirgpu.geometry` -- what is measured (scanner, projection-data and image geometry)
* :mod:`stirgpu.formats`  -- where data lives (Interfile on disk, in memory)
* :mod:`stirgpu.kernels`  -- how one chunk is projected (numba CPU, CUDA)
* :mod:`stirgpu.execution` -- when and on which device (chunk plan, pipeline)
* :mod:`stirgpu.projectors` -- STIR-shaped forward/back projectors
* :mod:`stirgpu.recon`    -- OSEM (OSMAPOSL equivalent)
"""

from .config import config, get_config
from .errors import DeviceError, FormatError, GeometryError, ParFileError, PipelineError, PlanError, StirGpuError

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "config",
    "get_config",
    "StirGpuError",
    "FormatError",
    "GeometryError",
    "PlanError",
    "DeviceError",
    "PipelineError",
    "ParFileError",
]
