"""A tiled chunk kernel launched straight through the CUDA driver from a kept argument block
(:class:`DriverLaunch`), for :class:`.cuda_launcher.ChunkLauncher`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DriverLaunch"]


class DriverLaunch:
    """One tiled chunk kernel launched straight through the driver (``cuLaunchKernel``) from
    a kept argument block: cupy's generic launch converts every one of the 18 arguments on
    every call, Python on the critical path before a subset's first kernel
    (docs/kernel-tuning.md, "Python overheads of a launch").  The block holds one 8-byte slot
    per argument in the kernel's order (joseph.cu: tables, nparts, nt, axial, four arrays,
    scale, origin and voxel size (double), image shape (int)); the driver copies the values at
    the launch, so the block is rewritten for the next one.  A launcher and the twins sharing
    its block (``for_target``) are used by one thread at a time (one GPU lane's)."""

    _N_ARGS = 18

    def __init__(self, function, launch, stream_ptr, scale, grid):
        self._function = function  # keeps the module loaded
        self._ptr = int(function.ptr)
        self._launch = launch
        self._stream_ptr = stream_ptr
        self._slots = np.zeros(self._N_ARGS, dtype=np.uint64)
        self._i32 = self._slots.view(np.int32)
        self._f32 = self._slots.view(np.float32)
        self._f64 = self._slots.view(np.float64)
        base = self._slots.ctypes.data
        self._params = np.array([base + 8 * i for i in range(self._N_ARGS)], dtype=np.uint64)
        self._params_ptr = self._params.ctypes.data
        self._f32[2 * 8] = scale
        for i, v in enumerate(grid[:6]):
            self._f64[9 + i] = float(v)
        for i, v in enumerate(grid[6:]):
            self._i32[2 * (15 + i)] = int(v)

    @classmethod
    def make(cls, cp, kernel, scale, grid) -> DriverLaunch | None:
        """The raw launch of ``kernel`` (a cupy RawKernel, on the current device), or None where
        this cupy offers no driver launch (cupy's own launch is then used)."""
        launch = getattr(getattr(cp.cuda, "driver", None), "launchKernel", None)
        function = getattr(kernel, "kernel", None)
        if launch is None or function is None or not hasattr(function, "ptr"):
            return None
        return cls(function, launch, lambda: cp.cuda.get_current_stream().ptr, scale, grid)

    def __call__(self, tables, warps: int, axial: int, arrays) -> None:
        blocks = tables.blocks(warps)
        slots, i32 = self._slots, self._i32
        slots[0] = tables.data.data.ptr
        i32[2] = len(tables.shapes)
        i32[4] = tables.shapes[0][2]
        i32[6] = axial
        slots[4] = arrays[0].data.ptr
        slots[5] = arrays[1].data.ptr
        slots[6] = arrays[2].data.ptr
        slots[7] = arrays[3].data.ptr
        self._launch(self._ptr, blocks, 1, 1, 32, warps, 1, 0, self._stream_ptr(), self._params_ptr, 0)
