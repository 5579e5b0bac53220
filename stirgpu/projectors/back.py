"""STIR-shaped streaming back projector."""

from __future__ import annotations

from .base import StreamingProjector
from .forward import _pdi_source
from .programs import BackProgram

__all__ = ["BackProjector"]


class BackProjector(StreamingProjector):
    """The exact adjoint of :class:`~stirgpu.projectors.ForwardProjector`, streamed.

    Each lane accumulates its own image; they are added once at the end (so results on
    1 or N lanes differ only by float32 summation order).
    """

    def back_project(
        self, image_out, proj_data, subset_num: int = 0, num_subsets: int = 1, accumulate: bool = False, *, views=None
    ):
        """Back project the views of subset ``subset_num`` of ``num_subsets`` of ``proj_data``.

        The result replaces the values of ``image_out`` (added to them with ``accumulate``), as
        STIR's back projectors do -- except STIR 6.5's Parallelproj one, which adds to them
        inside the FOV and zeroes them outside.  ``image_out`` may be a numpy/cupy/torch array,
        a stirgpu image, a ``stir.FloatVoxelsOnCartesianGrid`` of the set-up's geometry (filled
        in place), or None (a new numpy array is returned).  ``proj_data``: a stirgpu store or a
        STIR ProjData (only the subset's viewgrams are read).  Returns the image.  A cupy
        ``image_out`` of the image's layout on one of the projector's GPUs receives the result
        in place, with no copy (if the call fails, its values are then undefined; not so with
        ``accumulate``).  ``views`` (instead of a subset): exactly these views (distinct,
        ascending).
        """
        self._auto_set_up(_pdi_source(proj_data), image_out)
        src = self._store(proj_data, "proj_data")
        self._check_image(image_out, "image_out")
        views = self._views(subset_num, num_subsets, views)
        self._pending_upload = (0, 0.0)
        result = self._run(
            BackProgram(self._geometry),
            views,
            {"data": src},
            {},
            "back projection",
            subset=(subset_num, num_subsets),
            **self._result_target(image_out, accumulate),
        )
        return self._output_image(image_out, self._finish_image(result.image), accumulate)
