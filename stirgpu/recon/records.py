"""What an OSEM run records: :class:`SubiterationRecord` per subiteration and the
:class:`OSEMResult` it returns."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..formats import VoxelsOnCartesianGrid
from ..geometry import ImageInfo
from .arrays import to_numpy

__all__ = ["SubiterationRecord", "OSEMResult"]


@dataclasses.dataclass(frozen=True)
class SubiterationRecord:
    """What happened in one subiteration."""

    subiteration: int
    subset: int
    seconds: float
    #: the log-likelihood of this subset's data at the estimate *before* the update
    #: (only when asked for; STIR's truncation-free value sum(y log ybar - ybar))
    log_likelihood: float | None = None
    saved: Path | None = None
    #: the ``RunStats`` of the subiteration's update (its fused forward-back call for the
    #: subset), None where the projector keeps none
    stats: object = None
    #: STIR's report (``report objective function values interval``): the objective function
    #: (log-likelihood of all data, no prior) at the estimate *after* this subiteration
    objective_function_value: float | None = None
    #: with a prior, STIR's "Penalty" of the same report (the prior's value there; the
    #: objective function is ``objective_function_value - penalty``)
    penalty: float | None = None


@dataclasses.dataclass
class OSEMResult:
    """The final estimate (on the device), the per-subiteration records and the files written."""

    image: object
    image_info: ImageInfo
    records: list
    saved: list
    sensitivity_files: list
    setup_seconds: float = 0.0

    def as_voxels(self) -> VoxelsOnCartesianGrid:
        return VoxelsOnCartesianGrid(self.image_info, fill=to_numpy(self.image))
