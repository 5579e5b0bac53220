"""WHERE data lives: Interfile headers, projection-data stores (disk, memory), images.

* :mod:`.interfile` -- the keyword layer (parse/write ``key := value`` with STIR's rules)
* :mod:`.projdata_header` -- ``.hs`` headers <-> :class:`~stirgpu.geometry.ProjDataInfo`
* :mod:`.projdata` -- the :class:`ProjData` protocol (STIR's names + chunk access)
* :mod:`.abilities` -- :class:`StoreAbilities`: what a store declares it can do
* :mod:`.projdata_disk`, :mod:`.projdata_memory`, :mod:`.projdata_viewgrams` -- the stores
* :mod:`.image` -- :class:`VoxelsOnCartesianGrid`, ``.hv`` read/write
* :mod:`.testing` -- the contract every store passes
"""

from .abilities import Residence, StoreAbilities
from .image import VoxelsOnCartesianGrid, read_image, write_image
from .interfile import InterfileHeader, parse_header, read_header
from .projdata import ProjData, read_from_file
from .projdata_disk import ProjDataFromFile, ProjDataOnDisk
from .projdata_header import ProjDataHeader, format_projdata_header, read_projdata_header
from .projdata_memory import ProjDataInMemory, ProjDataInOneArray
from .projdata_viewgrams import ProjDataViewgrams
from .rawfile import stale_temporaries
from .storage_order import StorageOrder

__all__ = [
    "ProjData",
    "ProjDataFromFile",
    "ProjDataOnDisk",
    "ProjDataInMemory",
    "ProjDataInOneArray",
    "ProjDataViewgrams",
    "StoreAbilities",
    "Residence",
    "StorageOrder",
    "read_from_file",
    "ProjDataHeader",
    "read_projdata_header",
    "format_projdata_header",
    "VoxelsOnCartesianGrid",
    "read_image",
    "write_image",
    "InterfileHeader",
    "parse_header",
    "read_header",
    "stale_temporaries",
]
