"""Launches for a sweep over many chunks: :class:`ChunkLauncher` does the per-sweep Python work
(argument checks, kernel look-up, geometry arguments) once and launches each chunk's tiled kernel
through a kept driver argument block (:class:`.cuda_driver.DriverLaunch`).
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np

from ..arrays import import_cupy
from ..errors import StirGpuError
from .cuda_compile import get_kernel
from .cuda_driver import DriverLaunch
from .cuda_launch import back_chunk, forward_chunk, grid_args, index_type, launch_tiled
from .cuda_options import DEFAULT_OPTIONS, KernelOptions
from .cuda_tables import DeviceTables
from .cuda_workspaces import BackAccumulator, ImageWithWorkspace, PreparedImage
from .frames import checked_triple

__all__ = ["ChunkLauncher", "LaunchSetUp"]


def _same_args(a, b) -> bool:
    """Equal geometry arguments (numbers, tuples or arrays of them), without raising; the
    very same objects (a projector's geometry, call after call) are equal at once."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        try:
            if np.shape(x) != np.shape(y) or not bool(
                np.all(np.asarray(x, dtype=np.float64) == np.asarray(y, dtype=np.float64))
            ):
                return False
        except (TypeError, ValueError):
            return False
    return True


class LaunchSetUp(NamedTuple):
    """What a :class:`ChunkLauncher` launches with, shared by the twins :meth:`~ChunkLauncher.for_target`
    makes: the compiled tiled kernel, its geometry arguments (origin and voxel size, image shape),
    and the argument block it launches from straight through the driver (None where this cupy
    has no driver launch).  All None where the tiled kernels do not apply."""

    kernel: Any
    grid_args: tuple | None
    argument_block: Any


class ChunkLauncher:
    """Launches the chunk kernels of one device for a sweep over many chunks, with the
    per-sweep Python work done once: argument checks, kernel look-up, geometry arguments.

    ``target`` is a :class:`PreparedImage` (forward projections of it) or a
    :class:`BackAccumulator` (back projections into it).  Each call takes the chunk's
    :class:`DeviceTables` (on the target's device) and its values: flat (N,) float32 on that
    device, written by a forward launch, read by a back one.  :func:`forward_chunk` and
    :func:`back_chunk` check every argument of every call (as much Python as a subset chunk's
    launch gap: docs/kernel-tuning.md); a projector's engine, whose buffers and tables are made
    to fit, uses this instead.  Where the tiled kernels do not apply (the ``simple``
    variant, no accumulators, tables of another device) it calls those functions.
    """

    def __init__(self, target, origin, voxel_size, scale=1.0, *, options: KernelOptions | None = None):
        cp = import_cupy()
        if not isinstance(target, (PreparedImage, BackAccumulator)):
            raise StirGpuError(
                f"ChunkLauncher: target must be a PreparedImage or a BackAccumulator, not {type(target).__name__}"
            )
        self.options = options = options or DEFAULT_OPTIONS
        #: None between calls (:meth:`without_target`)
        self.target: PreparedImage | BackAccumulator | None = target
        self.back = isinstance(target, BackAccumulator)
        self.origin = checked_triple("origin", origin, positive=False)
        self.voxel_size = checked_triple("voxel_size", voxel_size, positive=True)
        self.scale = np.float32(scale)
        self._given = (origin, voxel_size, scale)
        self._device = cp.cuda.Device(target.device_id)
        self.device_id = target.device_id
        self.shape = shape = tuple(target.image.shape)
        self.tiled = target.a is not None and options.variant != "simple"
        self.setup_id = object()  # shared by the twins of for_target / without_target
        self._kernel = self._grid = self._raw = None
        if self.tiled:
            idx = index_type(shape, options)
            self._kernel = get_kernel(
                target.device_id, options, f"back_chunk_tiled<{idx}>" if self.back else f"fwd_chunk_tiled<{idx}>"
            )
            self._warps = int(options.back_warps_per_block if self.back else options.warps_per_block)
            self._grid = grid_args(self.origin, self.voxel_size, shape)
            with self._device:
                self._raw = DriverLaunch.make(cp, self._kernel, self.scale, self._grid)

    @property
    def kernel_set_up(self) -> LaunchSetUp:
        """The kernel set-up this launcher launches with (read-only; for tests and diagnostics)."""
        return LaunchSetUp(self._kernel, self._grid, self._raw)

    def for_target(self, target, origin, voxel_size, scale=1.0) -> ChunkLauncher:
        """A launcher for another ``target`` with these arguments: this one's kernel set-up
        shared when it fits (same kind of target, device, image shape, geometry and tiling),
        else a new one.  (A projector keeps one, with no target, from call to call.)"""
        same = (
            isinstance(target, BackAccumulator) == self.back
            and isinstance(target, ImageWithWorkspace)
            and target.device_id == self.device_id
            and tuple(target.image.shape) == self.shape
            and (target.a is not None and self.options.variant != "simple") == self.tiled
            and _same_args((origin, voxel_size, scale), self._given)
        )
        if not same:
            return ChunkLauncher(target, origin, voxel_size, scale, options=self.options)
        twin = copy.copy(self)
        twin.target = target
        return twin

    def without_target(self) -> ChunkLauncher:
        """This launcher's set-up, holding no device array (to be kept between calls)."""
        twin = copy.copy(self)
        twin.target = None
        return twin

    def __call__(self, tables, values) -> None:
        t = self.target
        if t is None:
            raise StirGpuError("ChunkLauncher: no target (a launcher kept between calls needs one set)")
        if not (self.tiled and isinstance(tables, DeviceTables) and tables.device_id == t.device_id):
            if self.back:
                back_chunk(tables, values, t, self.origin, self.voxel_size, self.scale, options=self.options)
            else:
                forward_chunk(
                    tables, t, self.origin, self.voxel_size, out=values, scale=self.scale, options=self.options
                )
            return
        # the one check kept: a wrong size would make the kernel read or write out of bounds
        if (
            values.dtype != np.float32
            or values.size != tables.num_lors
            or values.data.device_id != t.device_id
            or not values.flags.c_contiguous
        ):
            raise StirGpuError(
                f"ChunkLauncher: values must be {tables.num_lors} contiguous float32 on device "
                f"{t.device_id}, not {values.size} {values.dtype} on device {values.data.device_id}"
            )
        axial = self.options.axial_blocks(tables, self.back)
        with self._device:
            if self._raw is None:
                launch_tiled(
                    self._kernel,
                    self.back,
                    self._warps,
                    tables,
                    axial,
                    values,
                    t.image,
                    t.a,
                    t.b,
                    self.scale,
                    self._grid,
                )
                return
            # the kernels' argument order (joseph.cu): forward (image, A, B, out), back (values, image, A, B)
            arrays = (values, t.image, t.a, t.b) if self.back else (t.image, t.a, t.b, values)
            self._raw(tables, self._warps, axial, arrays)
