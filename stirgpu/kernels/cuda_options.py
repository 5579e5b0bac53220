"""How the CUDA Joseph kernels are compiled and launched: :class:`KernelOptions` and the tuned
defaults (:data:`DEFAULT_OPTIONS`).  What each option gave when it was measured is in
``docs/kernel-tuning.md``, not here.  Plain data: nothing is imported or compiled.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..errors import StirGpuError

if TYPE_CHECKING:
    from .cuda_tables import DeviceTables

__all__ = ["KernelOptions", "DEFAULT_OPTIONS"]


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """How the kernels are compiled and launched; what each choice measured is in
    ``docs/kernel-tuning.md``.

    The defaults are the configuration tuned on an H200.  ``variant``: ``"auto"``,
    ``"tiled"`` or ``"simple"``.  ``warps_per_block`` / ``back_warps_per_block``: axial
    positions per block of the tiled forward / back chunk kernels (each warp takes 32
    tangential bins).  ``threads_per_block``: 1-D kernels.  ``lerp``: bilinear
    interpolation as two lerps (fewer operations, different float32 rounding).
    ``fwd_ilp``: branch-free forward steps unrolled this many times (0: off).
    ``back_merge``: neighbouring lanes merge back-projection atomics that hit the same
    voxel.  ``back_segsum`` (on by default): lanes hitting the same voxels sum their
    footprints exactly with register shuffles (a segmented scan over runs of equal offsets),
    then one lane adds each sum -- one global atomic per touched voxel and warp step;
    supersedes ``back_merge``.  ``fmad``: let NVRTC contract multiply-adds in the inner loop.
    ``maxrregcount`` / ``back_maxrregcount``: register cap of the forward / back kernels
    (they are compiled as two modules; None: the compiler's choice).
    ``auto_min_lors_per_voxel``: ``auto`` uses ``tiled`` when LORs >= this fraction of
    the image's voxels.  ``index64``: 64-bit voxel offsets even where 32 bits suffice
    (they are used automatically for images of 2^31 voxels or more; the option exists to
    test that path).  ``block_order`` / ``back_block_order``: the order of a chunk part's
    blocks in the tiled forward / back chunk kernels (a launch argument, not compiled in)
    -- ``"view"`` (each view's planes in turn), ``"axial"`` (each slab of planes across all
    the part's views in turn: the blocks in flight touch a thinner slab of the image) or
    ``"auto"`` (axial when a part's views are spread out -- a subset's --, view when they
    are consecutive); the defaults are axial forward, auto back.
    """

    def axial_blocks(self, tables: DeviceTables, back: bool) -> int:
        """1 when a launch over ``tables`` orders its blocks axial-major (see ``block_order``)."""
        order = self.back_block_order if back else self.block_order
        return int(order == "axial" or (order == "auto" and tables.spread))

    variant: str = "auto"
    warps_per_block: int = 4
    back_warps_per_block: int = 8
    threads_per_block: int = 256
    lerp: bool = False
    fwd_ilp: int = 2
    back_merge: bool = True
    back_segsum: bool = True
    fmad: bool = True
    maxrregcount: int | None = 64
    back_maxrregcount: int | None = None
    auto_min_lors_per_voxel: float = 1.0 / 16.0
    index64: bool = False
    block_order: str = "axial"
    back_block_order: str = "auto"

    def __post_init__(self) -> None:
        if self.variant not in ("auto", "tiled", "simple"):
            raise StirGpuError(f"KernelOptions: variant must be 'auto', 'tiled' or 'simple', not {self.variant!r}")
        for name in ("warps_per_block", "back_warps_per_block"):
            if not 1 <= int(getattr(self, name)) <= 32:
                raise StirGpuError(f"KernelOptions: {name} must be in 1..32, not {getattr(self, name)}")
        if int(self.threads_per_block) % 32 or not 32 <= int(self.threads_per_block) <= 1024:
            raise StirGpuError(
                f"KernelOptions: threads_per_block must be a multiple of 32 in 32..1024, not {self.threads_per_block}"
            )
        if not 0 <= int(self.fwd_ilp) <= 16:
            raise StirGpuError(f"KernelOptions: fwd_ilp must be in 0..16, not {self.fwd_ilp}")
        for name in ("maxrregcount", "back_maxrregcount"):
            v = getattr(self, name)
            if v is not None and not 16 <= int(v) <= 255:
                raise StirGpuError(f"KernelOptions: {name} must be in 16..255, not {v}")
        for name in ("block_order", "back_block_order"):
            if getattr(self, name) not in ("view", "axial", "auto"):
                raise StirGpuError(
                    f"KernelOptions: {name} must be 'view', 'axial' or 'auto', not {getattr(self, name)!r}"
                )

    def compile_options(self, back: bool = False) -> tuple[str, ...]:
        """NVRTC options of the forward (and layout) module, or of the back module."""
        opts = ["--std=c++17", f"--fmad={'true' if self.fmad else 'false'}"]
        if self.lerp:
            opts.append("-DSG_LERP")
        if self.fwd_ilp:
            opts.append(f"-DSG_FWD_ILP={int(self.fwd_ilp)}")
        if self.back_merge:
            opts.append("-DSG_BACK_MERGE")
        if self.back_segsum:
            opts.append("-DSG_BACK_SEGSUM")
        cap = self.back_maxrregcount if back else self.maxrregcount
        if cap is not None:
            opts.append(f"--maxrregcount={int(cap)}")
        return tuple(opts)


#: the configuration chosen on an H200 (docs/kernel-tuning.md)
DEFAULT_OPTIONS = KernelOptions()
