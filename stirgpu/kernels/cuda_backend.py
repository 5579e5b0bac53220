"""CUDA backend of the Joseph projector (cupy + NVRTC).

Same four entry points and semantics as :mod:`stirgpu.kernels.api` (which dispatches
CUDA arrays here): :func:`joseph_forward`, :func:`joseph_back` (explicit endpoints) and
:func:`forward_chunk`, :func:`back_chunk` (endpoints computed inside the kernel from the
:class:`stirgpu.geometry.ChunkTables` of a chunk's parts, all parts in one launch).
``docs/joseph.md`` is the specification, ``cpu.py`` the reference; ``docs/kernel-tuning.md``
says how the kernels were tuned.  This module gathers the backend's public names; each concern
has its module:

* :mod:`.cuda_options` -- :class:`KernelOptions`, the tuned :data:`DEFAULT_OPTIONS`;
* :mod:`.cuda_compile` -- NVRTC compilation and kernel look-up, :func:`device_arch`;
* :mod:`.cuda_arrays` -- CUDA array arguments (cupy, torch, ``__cuda_array_interface__``, DLPack);
* :mod:`.cuda_tables` -- :class:`DeviceTables`, :func:`upload_tables`;
* :mod:`.cuda_workspaces` -- :class:`PreparedImage`, :class:`BackAccumulator` and the padded layouts;
* :mod:`.cuda_launch` -- :func:`forward_chunk`, :func:`back_chunk` and their launch arguments;
* :mod:`.cuda_explicit` -- :func:`joseph_forward`, :func:`joseph_back`;
* :mod:`.cuda_launcher` -- :class:`ChunkLauncher` (a sweep's checks and look-ups once);
* :mod:`.cuda_driver` -- :class:`~.cuda_driver.DriverLaunch` (tiled kernels through ``cuLaunchKernel``).

* The kernels are ``cuda/joseph.cu`` + ``cuda/joseph_common.cuh`` (package data),
  compiled on first use (:mod:`.cuda_compile`).  Nothing happens at import; cupy is
  imported on the first call.
* Arrays: cupy arrays, torch CUDA tensors, or anything with
  ``__cuda_array_interface__`` / CUDA DLPack, used in place (no copy).  Results live on
  the inputs' device; a torch input gives a torch output.  Kernels run on cupy's
  current stream of that device.
* Forward results overwrite ``out``; back projections accumulate into ``out_image``.

Two kernel families (:class:`KernelOptions`, ``variant``): ``"simple"`` (one thread
per LOR in libparallelproj's manner, no extra memory) and ``"tiled"`` (warp-coherent
stepping through zero-framed copies of the image, two extra padded images of scratch);
``"auto"`` takes ``tiled`` when there are enough LORs to amortise the copies, or always
when the caller keeps them across chunks (:func:`prepare_image` for forward,
:func:`prepare_back_accumulator` for back projection), as the streaming projectors do.
"""

from __future__ import annotations

from .cuda_compile import device_arch
from .cuda_explicit import joseph_back, joseph_forward
from .cuda_launch import back_chunk, forward_chunk
from .cuda_launcher import ChunkLauncher, LaunchSetUp
from .cuda_options import DEFAULT_OPTIONS, KernelOptions
from .cuda_tables import DeviceTables, upload_tables
from .cuda_workspaces import BackAccumulator, PreparedImage, prepare_back_accumulator, prepare_image

__all__ = [
    "BackAccumulator",
    "ChunkLauncher",
    "LaunchSetUp",
    "prepare_back_accumulator",
    "joseph_forward",
    "joseph_back",
    "forward_chunk",
    "back_chunk",
    "upload_tables",
    "DeviceTables",
    "prepare_image",
    "PreparedImage",
    "KernelOptions",
    "DEFAULT_OPTIONS",
    "device_arch",
]
