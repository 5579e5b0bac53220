"""Interoperability: the real ``stir`` module (duck-typed, never imported here) and
array libraries (cupy, torch through DLPack), each imported only when such an object
is seen.

* :mod:`.stir_adapter` -- :class:`StirProjDataAdapter` (a ``stir.ProjData`` as a
  chunk store);
* :mod:`.stir_geometry` -- STIR's ProjDataInfo and images -> stirgpu geometry, exactly;
* :mod:`.images` -- image arrays in and out of the projectors.
"""

from .images import as_image_array, image_info_of, is_cuda_array, store_image, version_stamp
from .stir_adapter import StirProjDataAdapter, as_proj_data, is_stir_proj_data
from .stir_geometry import (
    image_info_from_stir,
    is_stir_image,
    is_stir_proj_data_info,
    proj_data_info_from_stir,
    scanner_from_stir,
)

__all__ = [
    "StirProjDataAdapter",
    "as_proj_data",
    "is_stir_proj_data",
    "proj_data_info_from_stir",
    "scanner_from_stir",
    "is_stir_proj_data_info",
    "is_stir_image",
    "image_info_from_stir",
    "as_image_array",
    "image_info_of",
    "is_cuda_array",
    "store_image",
    "version_stamp",
]
