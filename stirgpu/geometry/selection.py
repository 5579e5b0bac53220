"""Selections of projection data: some segments and some views of a :class:`ProjDataInfo`, with
all their axial and tangential positions (and TOF positions).  An OSEM subset is a selection
(``ProjDataInfo.subset``), so choosing one copies nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError
from .lors import read_only

if TYPE_CHECKING:  # pragma: no cover
    from .proj_data_info import ProjDataInfo

__all__ = ["Selection"]


@dataclasses.dataclass(frozen=True, eq=False)
class Selection:
    """Some segments and some views of a :class:`ProjDataInfo` (all axial and tangential
    positions).  Subsets are selections; nothing is copied."""

    proj_data_info: ProjDataInfo
    segments: tuple[int, ...]
    views: np.ndarray

    @classmethod
    def of(cls, pdi: ProjDataInfo, segments=None, views=None) -> Selection:
        segs = pdi.segment_nums if segments is None else tuple(int(s) for s in segments)
        for s in segs:
            pdi.segment(s)  # validates
        if len(set(segs)) != len(segs):
            raise GeometryError(f"selection: repeated segments in {segs}")
        v = np.arange(pdi.get_num_views(), dtype=np.int64) if views is None else np.asarray(list(views), dtype=np.int64)
        if v.size and (v.min() < 0 or v.max() >= pdi.get_num_views()):
            raise GeometryError(f"selection: views must be in [0, {pdi.get_num_views() - 1}]")
        if len(np.unique(v)) != len(v):
            raise GeometryError("selection: repeated views")
        return cls(pdi, segs, read_only(np.sort(v)))

    @property
    def num_bins(self) -> int:
        p = self.proj_data_info
        per_view = sum(p.get_num_axial_poss(s) for s in self.segments) * p.get_num_tangential_poss()
        return per_view * len(self.views) * p.get_num_tof_poss()  # TOF data: all timing positions

    def is_everything(self) -> bool:
        p = self.proj_data_info
        return len(self.views) == p.get_num_views() and len(self.segments) == p.get_num_segments()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selection):
            return NotImplemented
        return (
            self.proj_data_info == other.proj_data_info
            and self.segments == other.segments
            and np.array_equal(self.views, other.views)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Selection(segments={list(self.segments)}, views={self.views.tolist()})"
