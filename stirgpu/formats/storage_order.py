"""The two orders STIR stores projection data in (inside one segment and TOF position)."""

from __future__ import annotations

import enum

__all__ = ["StorageOrder"]


class StorageOrder(enum.Enum):
    """How the bins of one segment are laid out (tangential position always fastest).

    Across segments and TOF positions the layout is the same for both: TOF position
    outermost, then segments in the order of the header's ring-difference lists.
    The value is STIR's name of the order (``ProjDataFromStream::StorageOrder``).
    """

    def __new__(cls, stir_name: str, doc: str):
        member = object.__new__(cls)
        member._value_ = stir_name
        member.__doc__ = doc
        return member

    VIEW = (
        "Segment_View_AxialPos_TangPos",
        "[view][axial][tangential]: STIR's default.  A viewgram, or a run of views, is one "
        "contiguous block: the fast order for projectors and subsets.",
    )
    SINOGRAM = (
        "Segment_AxialPos_View_TangPos",
        "[axial][view][tangential].  A sinogram is contiguous; reading a set of views touches every axial position.",
    )

    def __str__(self) -> str:
        return self.name.lower()
