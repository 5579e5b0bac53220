"""HOW one chunk of LORs is projected: the Joseph projector of STIR's Parallelproj
(libparallelproj 2.0.7's arithmetic on STIR's float32 LOR endpoints), TOF included, and the other
per-chunk kernels (the OSEM quotient, priors, convolutions).

Importing this package does no work: the CPU kernels (numba) compile on the first projection, the
CUDA ones only when CUDA arrays are seen.
"""

from .fov import apply_cylindrical_fov, cylindrical_fov_mask, stir_rim
from .frames import UNITS, KernelGeometry, kernel_geometry
from .joseph import JosephChunk, back_chunk, forward_chunk, joseph_back, joseph_forward
from .tof import back_chunk_tof, forward_chunk_tof

__all__ = [
    "joseph_forward",
    "joseph_back",
    "forward_chunk",
    "back_chunk",
    "forward_chunk_tof",
    "back_chunk_tof",
    "JosephChunk",
    "UNITS",
    "KernelGeometry",
    "kernel_geometry",
    "cylindrical_fov_mask",
    "apply_cylindrical_fov",
    "stir_rim",
]
