"""Back projections of data whose NaN and ±Inf lie only in bins whose LORs miss the image.

SIRF's own scripts make such data: ``acq_data / acq_model.forward(x)`` is 0/0 in the bins whose
LORs pass beside the image (SIRF's ``hkem_reconstruction.py``).  Every projector, STIR's and
SIRF's, walks no voxel for those bins, so what they hold adds nothing to a back projection.
stirgpu refuses non-finite projection data (they would otherwise spread into the image); here,
where every non-finite bin is such a bin, a copy with those bins 0 is back projected instead,
which gives SIRF's image.  Non-finite values in any bin that reaches the image are still refused.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ImageReach"]


class ImageReach:
    """Which bins of an acquisition model's data reach its image: those whose forward projection
    of a uniform image (of ones) is not 0, computed once with the model's projector."""

    def __init__(self, projector, acq_templ, img_templ):
        self._projector, self._acq_templ, self._img_templ = projector, acq_templ, img_templ
        self._reaches: np.ndarray | None = None

    def reaches(self) -> np.ndarray:
        """Per bin (the data's ``as_array`` shape), whether its LOR reaches the image."""
        if self._reaches is None:
            from .acquisition_data import AcquisitionData

            ones = self._img_templ.get_uniform_copy(1.0)
            made = AcquisitionData(self._acq_templ)
            self._projector.forward_project(made.proj_data, ones.array)
            self._reaches = made.as_array() != 0
        return self._reaches

    def zeroed_outside(self, ad):
        """``ad`` with its non-finite values set to 0 (a copy), where all of them lie in bins that
        miss the image; None where some bin that reaches the image holds one (or none is there)."""
        values = ad.as_array()
        bad = ~np.isfinite(values)
        if not bad.any() or (bad & self.reaches()).any():
            return None
        values[bad] = 0.0
        copy = ad._new_like()
        copy.fill(values)
        return copy
