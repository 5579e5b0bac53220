"""STIR's tail mask (``create_tail_mask_from_ACFs``, STIR's ``CreateTailMaskFromACFs``): the
bins outside the object, where only scatter and randoms are measured, which scatter estimation
fits its scale factors on.

Along each tangential line of each sinogram STIR searches from the left edge for the first
attenuation correction factor at or above the threshold, and from the right edge (not past the
left part of the mask) for the last one; each part, less ``safety_margin`` bins, is 1 in the
mask, all else 0.  Where a line has no factor at or above the threshold, STIR's right-hand search
stops at the left part and finds exactly the margin: the left part covers all but the last
``safety_margin`` bins, the right part is empty (kept as STIR has it)."""

from __future__ import annotations

import numpy as np

from ..errors import GeometryError
from ..formats import ProjData, ProjDataInMemory

__all__ = ["DEFAULT_ACF_THRESHOLD", "DEFAULT_SAFETY_MARGIN", "tail_mask_from_acfs", "tail_mask_lines"]

#: STIR's defaults (``CreateTailMaskFromACFs::set_defaults``)
DEFAULT_ACF_THRESHOLD = 1.1
DEFAULT_SAFETY_MARGIN = 4


def tail_mask_lines(acfs: np.ndarray, acf_threshold: float, safety_margin: int) -> np.ndarray:
    """The mask (float32 0/1) of any array whose last axis is the tangential position."""
    n = acfs.shape[-1]
    # STIR compares a float with a float: the threshold is rounded to float32 first
    inside = np.asarray(acfs, dtype=np.float32) >= np.float32(acf_threshold)
    found = inside.any(axis=-1)
    first = np.where(found, inside.argmax(axis=-1), n)
    left = np.maximum(0, first - safety_margin)
    last_from_right = inside[..., ::-1].argmax(axis=-1)  # bins right of the last factor inside
    outside_right = np.where(found, last_from_right, n - left)
    right = np.maximum(0, outside_right - safety_margin)
    pos = np.arange(n)
    mask = (pos < left[..., None]) | (pos >= (n - right)[..., None])
    return mask.astype(np.float32)


def tail_mask_from_acfs(
    acfs: ProjData, acf_threshold: float = DEFAULT_ACF_THRESHOLD, safety_margin: int = DEFAULT_SAFETY_MARGIN
) -> ProjDataInMemory:
    """The tail mask of the attenuation correction factors ``acfs``, in their geometry."""
    if not acf_threshold > 1:
        raise ValueError(f"tail mask: ACF-threshold should be larger than 1, not {acf_threshold}")
    if safety_margin != int(safety_margin):
        raise ValueError(f"tail mask: safety-margin must be a whole number of bins, not {safety_margin}")
    pdi = acfs.get_proj_data_info()
    if acfs.get_num_tof_poss() != 1:
        # STIR's utility reads and writes only timing position 0 of TOF data
        raise GeometryError("tail mask: the attenuation correction factors must be non-TOF data")
    mask = ProjDataInMemory(pdi)
    for seg in pdi.segment_nums:
        mask.set_segment_by_view(tail_mask_lines(acfs.get_segment_by_view(seg), acf_threshold, int(safety_margin)), seg)
    return mask
