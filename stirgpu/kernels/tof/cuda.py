"""The TOF Joseph projector on the GPU (``cuda/joseph_tof.cu``, compiled after ``cuda/joseph.cu``;
the CPU reference is :mod:`.cpu`).

One thread per LOR walks it once and keeps its window of TOF bins in registers (the kernel
template's ``NW`` slots, the smallest of :data:`SLOTS` that holds :func:`plane_window` bins);
wider windows, up to :data:`WIDE_MAX` bins (libparallelproj 2.0.7 clamps wider ones to that many
around the plane's TOF coordinate, and so do the kernels), take the ``*_wide`` kernels.  The
source is package data compiled by :class:`cupy.RawModule` (NVRTC, ``--fmad=false``) on first use, one module per
register size, memoised per device; nothing happens at import.  The chunk tables are
:func:`stirgpu.kernels.joseph.cuda.upload_parts`, shared with the non-TOF kernels: a chunk is one
launch.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...arrays import import_cupy
from ...errors import DeviceError
from ..cuda.compile import compiled_module
from ..joseph.cuda import (
    compile_options,
    fold,
    frame_args,
    launch,
    lor_order,
    transposed_accumulator,
)
from .api import MAX_NUM_TOF_WEIGHTS

__all__ = [
    "forward",
    "back",
    "kernel_name",
    "plane_window",
    "kernel_arguments",
    "tof_arguments",
    "SLOTS",
    "WIDE_MAX",
]

#: register-window sizes the kernels are instantiated for (each slot costs an erff per plane)
SLOTS = (4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 32)
#: the widest window (TOF bins one plane touches): libparallelproj's ``MAX_NUM_TOF_WEIGHTS``, to
#: which 2.0.7 clamps wider ones (``STIR_TOF_WIDE_MAX`` in ``joseph_tof.cu``)
WIDE_MAX = MAX_NUM_TOF_WEIGHTS


def _module(device_id: int, slots: int | None, axial_major: bool = False):
    """The module of one register size (None: the wide kernels only) and LOR order."""
    names = () if slots is None else tuple(f"{kind}_stir_tof<{slots}>" for kind in ("fwd", "back"))
    return compiled_module(device_id, ("joseph.cu", "joseph_tof.cu"), compile_options(axial_major), names)


def plane_window(tof) -> int:
    """The most TOF bins one image plane's window holds: ``floor(it_f - d) .. ceil(it_f + d)``
    with ``d = n_sigmas * sigma / width`` in float32, as the kernels compute it, spans at most
    ``ceil(2 d) + 2`` bins (float32 rounding of ``it_f -+ d`` only narrows it), and at most
    :data:`WIDE_MAX` (the clamp)."""
    width, sigma, n_sigmas = (np.float32(v) for v in tof[:3])
    d = np.float32(np.float32(n_sigmas * sigma) / width)
    return min(int(math.ceil(2 * float(d))) + 2, WIDE_MAX)


def kernel_name(kind: str, window: int) -> str:
    """The kernel of ``kind`` (``"fwd"`` or ``"back"``) for windows of up to ``window`` TOF bins."""
    if not 0 < window <= WIDE_MAX:
        raise DeviceError(f"TOF projection on the GPU: a window of {window} TOF bins (1 to {WIDE_MAX})")
    slots = _slots(window)
    return f"{kind}_stir_tof<{slots}>" if slots is not None else f"{kind}_stir_tof_wide"


def _slots(window: int) -> int | None:
    return next((n for n in SLOTS if n >= window), None)


@functools.lru_cache(maxsize=64)
def _kernel(device_id: int, kind: str, window: int, axial_major: bool = False):
    return _module(device_id, _slots(window), axial_major).get_function(kernel_name(kind, window))


def _launched(kind: str, image, window: int):
    """The kernel of ``kind`` for ``window`` bins, in the LOR order of a TOF projection of
    ``image`` (:func:`stirgpu.kernels.joseph.cuda.lor_order`)."""
    return _kernel(image.device.id, kind, window, lor_order(kind, image, tof=True))


def tof_arguments(tof, first: int, nb: int) -> tuple:
    """The kernels' TOF arguments after the frame's: width, sigma, n_sigmas, c0, first, nb."""
    width, sigma, n_sigmas, c0 = (np.float32(v) for v in tof)
    return width, sigma, n_sigmas, c0, np.int32(first), np.int32(nb)


def kernel_arguments(parts, frame: tuple, tof: tuple, *arrays) -> tuple:
    """A chunk's launch arguments: its parts' (``joseph.cuda.PackedParts.args``), the image frame
    (:func:`stirgpu.kernels.joseph.cuda.frame_args`), :func:`tof_arguments`, then image and output (forward) or
    values, image and the transposed accumulator (back, :func:`stirgpu.kernels.joseph.cuda.transposed_accumulator`)."""
    return (*parts.args, *frame, *tof, *arrays)


def forward(parts, image, origin, voxel_size, rescale, tof, first: int, nb: int, out) -> None:
    """``out`` (flat; per part ``nb`` x its LORs, TOF outermost, the parts one after the other) =
    STIR's TOF forward projection of the device image ``image`` (float32, C order) over the
    data's TOF bins ``first .. first + nb - 1``; ``parts``: :func:`stirgpu.kernels.joseph.cuda.upload_parts` of the
    chunk; ``tof``: :func:`stirgpu.kernels.tof.api.stir_tof_tables`'s table."""
    kernel = _launched("fwd", image, plane_window(tof))
    frame, extra = frame_args(image, origin, voxel_size, rescale), tof_arguments(tof, first, nb)
    launch(kernel, parts, kernel_arguments(parts, frame, extra, image, out))


def back(parts, values, image, origin, voxel_size, rescale, tof, first: int, nb: int, along_x=None) -> None:
    """Add STIR's TOF back projection of flat ``values`` (laid out as :func:`forward`'s ``out``)
    into the device image ``image``; ``along_x`` as for :func:`stirgpu.kernels.joseph.cuda.back`."""
    cp = import_cupy()
    kernel = _launched("back", image, plane_window(tof))
    frame, extra = frame_args(image, origin, voxel_size, rescale), tof_arguments(tof, first, nb)
    own = along_x is None
    if own:
        along_x = transposed_accumulator(cp, image)
    launch(kernel, parts, kernel_arguments(parts, frame, extra, values, image, along_x))
    if own:
        fold(image, along_x)
