"""HOW one chunk of LORs is projected: the Joseph projector of STIR's Parallelproj.

Importing this package does no work: the CPU backend (numba) is imported and
compiled on the first projection, the CUDA backend only when CUDA arrays are seen.
"""

from .api import back_chunk, forward_chunk, joseph_back, joseph_forward
from .fov import apply_cylindrical_fov, cylindrical_fov_mask, stir_rim
from .frames import NUMERICS, KernelGeometry, stir_scaled_geometry
from .stir_api import back_chunk_stir, forward_chunk_stir
from .stir_tof_api import back_chunk_stir_tof, forward_chunk_stir_tof

__all__ = [
    "joseph_forward",
    "joseph_back",
    "forward_chunk",
    "back_chunk",
    "forward_chunk_stir",
    "back_chunk_stir",
    "forward_chunk_stir_tof",
    "back_chunk_stir_tof",
    "NUMERICS",
    "KernelGeometry",
    "stir_scaled_geometry",
    "cylindrical_fov_mask",
    "apply_cylindrical_fov",
    "stir_rim",
]
