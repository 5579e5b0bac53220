"""Where and when OSMAPOSL filters its estimate: STIR's inter-update, inter-iteration and
post-filters (facts from ``OSMAPOSLReconstruction.cxx`` and ``IterativeReconstruction.cxx``).

In subiteration ``n`` (STIR's global number, so a restart keeps the schedule):

1. the multiplicative update is computed from the current estimate and divided by the
   sensitivity;
2. **inter-update filter**, when ``n`` is a multiple of its interval: the *estimate* is filtered
   (the update, already computed from the unfiltered one, is not), then raised to at least
   1e-6 of its smallest positive value (STIR chains every inter-update filter with
   ``ThresholdMinToSmallPositiveValueDataProcessor``);
3. the update is clipped (from subiteration 2 on) and multiplies the estimate;
4. the objective function is reported (STIR: "before any additional filtering");
5. **inter-iteration filter**, when ``n`` is a multiple of its interval, followed by the same
   positivity threshold;
6. **post-filter**, after the last subiteration only (no threshold): it changes the final
   estimate itself, not just the file;
7. the estimate is written at the save points -- so saved estimates carry the filters of their
   own subiteration, and only the last one the post-filter.

An interval of 0 means never.  The kernels are built once for the image's voxel size
(:meth:`FilterSchedule.prepare`, as STIR's ``set_up`` builds them), and the estimate is
filtered where it lives (numpy, or cupy on the projector's GPU).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import StirGpuError
from ..filters import SeparableImageFilter
from .arrays import threshold_min_to_small_positive

__all__ = ["FilterSchedule", "PreparedSchedule"]


@dataclasses.dataclass(frozen=True)
class FilterSchedule:
    """OSMAPOSL's filters and their intervals (STIR's keys; intervals 0: never)."""

    inter_update: SeparableImageFilter | None = None
    inter_update_interval: int = 0
    inter_iteration: SeparableImageFilter | None = None
    inter_iteration_interval: int = 0
    post: SeparableImageFilter | None = None

    def __post_init__(self) -> None:
        for name in ("inter_update", "inter_iteration", "post"):
            f = getattr(self, name)
            if f is not None and not isinstance(f, SeparableImageFilter):
                raise StirGpuError(f"FilterSchedule: {name} must be a stirgpu.filters filter or None, not {f!r}")
        for name in ("inter_update_interval", "inter_iteration_interval"):
            if int(getattr(self, name)) < 0:
                raise StirGpuError(f"FilterSchedule: {name} must be >= 0, got {getattr(self, name)}")

    @classmethod
    def from_settings(cls, s) -> FilterSchedule:
        """The schedule of :class:`~stirgpu.parfile.OsmaposlSettings`."""
        return cls(
            s.inter_update_filter,
            s.inter_update_filter_interval,
            s.inter_iteration_filter,
            s.inter_iteration_filter_interval,
            s.post_filter,
        )

    def prepare(self, image_info) -> PreparedSchedule:
        """Build the kernels (and masks) that will be used, for images of ``image_info``
        (a :class:`stirgpu.geometry.ImageInfo`)."""

        def built(f, interval=1):
            return f.prepare_for(image_info) if f is not None and interval > 0 else None

        return PreparedSchedule(
            built(self.inter_update, self.inter_update_interval),
            self.inter_update_interval,
            built(self.inter_iteration, self.inter_iteration_interval),
            self.inter_iteration_interval,
            built(self.post),
        )


@dataclasses.dataclass(frozen=True)
class PreparedSchedule:
    """A :class:`FilterSchedule` with its kernels built; filters an estimate in place."""

    inter_update: Any
    inter_update_interval: int
    inter_iteration: Any
    inter_iteration_interval: int
    post: Any

    def before_multiplying(self, image, subiteration_num: int) -> bool:
        """Step 2 of the module docstring; True where the estimate was filtered."""
        return _due(self.inter_update, self.inter_update_interval, subiteration_num, image)

    def end_of_subiteration(self, image, subiteration_num: int, last: bool) -> None:
        """Steps 5 and 6 of the module docstring (``last``: the run's last subiteration)."""
        _due(self.inter_iteration, self.inter_iteration_interval, subiteration_num, image)
        if last and self.post is not None:
            self.post.apply_in_place(image)


def _due(prepared: Any, interval: int, subiteration_num: int, image) -> bool:
    if prepared is None or subiteration_num % interval:
        return False
    prepared.apply_in_place(image)
    threshold_min_to_small_positive(image)
    return True
