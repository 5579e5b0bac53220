"""The Joseph projector: libparallelproj 2.0.7's float32 ``joseph3d_fwd`` / ``joseph3d_back`` along
STIR's float32 LOR endpoints (computed in the kernels from a chunk's tables) or along given ones,
on the CPU (numba) and the GPU (CUDA).  ``docs/joseph.md`` is the specification.

* :mod:`.api` -- the entry points: :func:`forward_chunk`, :func:`back_chunk` (chunks of
  projection data), :func:`joseph_forward`, :func:`joseph_back` (explicit endpoints);
* :mod:`.chunk` -- :class:`JosephChunk`, a chunk's tables made once;
* :mod:`.lors` -- STIR's float32 geometry to the last bit (endpoints, the image frame, default
  images);
* :mod:`.cpu`, :mod:`.workers` -- the numba kernels and how they share LORs among threads;
* :mod:`.cuda` -- the CUDA kernels' launches (``cuda/joseph.cu``).

Importing it compiles nothing and imports no GPU library.
"""

from .api import back_chunk, forward_chunk, joseph_back, joseph_forward
from .chunk import JosephChunk

__all__ = ["forward_chunk", "back_chunk", "joseph_forward", "joseph_back", "JosephChunk"]
