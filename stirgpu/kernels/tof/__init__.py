"""TOF projection (``docs/tof.md``): libparallelproj 2.0.7's TOF sinogram Joseph projector on
STIR's endpoints, one walk per LOR for all its TOF bins (:mod:`.api`; :mod:`.cpu`: numba;
:mod:`.cuda`: ``cuda/joseph_tof.cu``).  Importing it compiles nothing."""

from .api import N_SIGMAS, back_chunk_tof, forward_chunk_tof, stir_tof_tables, window_size

__all__ = ["forward_chunk_tof", "back_chunk_tof", "stir_tof_tables", "window_size", "N_SIGMAS"]
