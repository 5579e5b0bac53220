"""Where new acquisition data live: SIRF's storage scheme, scratch files, chunk sizes.

SIRF keeps acquisition data it makes (copies, results of arithmetic, projections) either in
scratch files (storage scheme ``"file"``, SIRF's default) or in memory (``"memory"``), set by
``AcquisitionData.set_storage_scheme``.  Here the scheme is held like stirgpu's configuration, in
a :class:`contextvars.ContextVar` (per thread / task): ``set_storage_scheme`` changes it for the
rest of the current context, :func:`storage_scheme` for a ``with`` block.

A scratch file is an ordinary :class:`~stirgpu.formats.ProjDataFromFile` under a temporary
name in a folder of its own (``tempfile.mkdtemp``, ``STIRGPU_SCRATCH_DIR`` or the platform's
temporary folder); it never appears under a final name, and the folder goes when the data are
garbage-collected or the interpreter exits (``weakref.finalize``).

Element-wise work on projection data goes chunk by chunk (:func:`chunk_bytes`): an eighth of
``stirgpu.config(host_memory_budget=...)`` per float32 chunk array, else 32 MiB, so that an
operation on data on disk -- its operands, result and float64 temporaries -- stays within the
budget, whatever the data's size.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator

from ..config import get_config
from ..formats import ProjData, ProjDataFromFile, ProjDataInOneArray, Residence
from ..geometry import ProjDataInfo
from .errors import InputError

__all__ = [
    "SCHEMES",
    "get_storage_scheme",
    "set_storage_scheme",
    "storage_scheme",
    "new_store",
    "is_on_disk",
    "chunk_bytes",
]

#: SIRF's storage schemes
SCHEMES = ("file", "memory")
_DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024

_SCHEME: contextvars.ContextVar[str] = contextvars.ContextVar("stirgpu_sirf_storage_scheme", default="file")


def _checked(scheme) -> str:
    s = str(scheme).lower()
    if s == "default":  # SIRF's other name of "file"
        s = "file"
    if s not in SCHEMES:
        raise InputError(f"storage scheme must be 'file' or 'memory' (SIRF's), not {scheme!r}")
    return s


def get_storage_scheme() -> str:
    """``"file"`` or ``"memory"``: where new acquisition data go in this context."""
    return _SCHEME.get()


def set_storage_scheme(scheme: str) -> None:
    """SIRF's ``AcquisitionData.set_storage_scheme``: for the rest of this context (thread)."""
    _SCHEME.set(_checked(scheme))


@contextlib.contextmanager
def storage_scheme(scheme: str) -> Iterator[str]:
    """The storage scheme inside a ``with`` block only."""
    token = _SCHEME.set(_checked(scheme))
    try:
        yield _SCHEME.get()
    finally:
        _SCHEME.reset(token)


def _scratch_root() -> str | None:
    return os.environ.get("STIRGPU_SCRATCH_DIR") or None


def new_store(proj_data_info: ProjDataInfo, on_disk: bool | None = None) -> ProjData:
    """New zero-filled data of ``proj_data_info``: a scratch file (``on_disk``, default: the
    storage scheme is ``"file"``) or memory, one array in SIRF's order (numpy may view it, as
    SIRF's memory data)."""
    if on_disk is None:
        on_disk = get_storage_scheme() == "file"
    if not on_disk:
        return ProjDataInOneArray(proj_data_info)
    folder = tempfile.mkdtemp(prefix="stirgpu-sirf-", dir=_scratch_root())
    try:
        store = ProjDataFromFile.create(os.path.join(folder, "scratch.hs"), proj_data_info)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    # the store's own finalizer closes its file and removes its uncommitted data; this one (which
    # must not hold the store) removes the folder
    weakref.finalize(store, shutil.rmtree, folder, ignore_errors=True)
    return store


def is_on_disk(store: ProjData) -> bool:
    """True for stores whose values are in a file (read or scratch), as the store declares."""
    return store.abilities.residence is Residence.DISK


def chunk_bytes(num_arrays: int = 8) -> int:
    """Bytes of float32 per array for element-wise work holding ``num_arrays`` chunk arrays."""
    budget = get_config().host_memory_budget
    if budget is None:
        return _DEFAULT_CHUNK_BYTES
    return max(1, int(budget) // max(1, int(num_arrays)))
