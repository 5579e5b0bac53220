"""The array type of stirgpu's chunk and image data, for annotations: numpy or cupy.

:class:`Array` is a Protocol of what numpy and cupy arrays share and stirgpu relies on:
shape, dtype, sizes, indexing, a few in-place and element-wise operations.  numpy arrays
check against it, and cupy need not be imported for it: cupy is imported only where a GPU
is used, and has no type information anyway.  Code that needs one kind's own attributes
(cupy's ``.get()`` or ``.data.ptr``) is that kind's code path.  Any package may import this
module (it imports only numpy).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

__all__ = ["Array"]


class Array(Protocol):
    """A numpy or a cupy array (structurally: anything with these members)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    @property
    def size(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    @property
    def ndim(self) -> int: ...

    def __getitem__(self, key: Any, /) -> Any: ...

    def __setitem__(self, key: Any, value: Any, /) -> None: ...

    def fill(self, value: Any, /) -> None: ...

    def copy(self) -> Any: ...

    def __iadd__(self, other: Any, /) -> Any: ...

    def __truediv__(self, other: Any, /) -> Any: ...
