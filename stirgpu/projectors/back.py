"""STIR-shaped streaming back projector."""

from __future__ import annotations

from .base import StreamingProjector, _pdi_source
from .forward import ForwardProjector
from .programs import BackProgram

__all__ = ["BackProjector"]


class BackProjector(StreamingProjector):
    """The exact adjoint of :class:`~stirgpu.projectors.ForwardProjector`, streamed.

    Each lane accumulates its own image; they are added once at the end (so results on
    1 or N lanes differ only by float32 summation order).  Options: see
    :mod:`stirgpu.projectors.session`; ``session=`` projects on an existing session (a
    :class:`~stirgpu.projectors.ProjectorPair`'s ``.back`` is one).
    """

    def back_project(
        self,
        image_out,
        proj_data,
        subset_num: int = 0,
        num_subsets: int = 1,
        accumulate: bool = False,
        *,
        views=None,
        multiplicative=None,
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
        ascending).  ``multiplicative`` (projection data like ``proj_data``: factors f) back
        projects ``proj_data / f`` instead (0 where f == 0), divided chunk by chunk on the device:
        SIRF's backward ``G' S y`` with ``S = 1 / f``.
        """
        return back_project(self, image_out, proj_data, subset_num, num_subsets, accumulate, views, multiplicative)

    def _forward_and_back(self) -> tuple[ForwardProjector, BackProjector]:
        return ForwardProjector(session=self.session), self


def back_project(
    projector: StreamingProjector,
    image_out,
    proj_data,
    subset_num: int,
    num_subsets: int,
    accumulate: bool,
    views,
    multiplicative=None,
):
    """:meth:`BackProjector.back_project` by ``projector`` (on its session, in its
    statistics): what a BackProjector and a ProjectorPair run."""
    projector._auto_set_up(_pdi_source(proj_data), image_out)
    sources = {"data": projector._store(proj_data, "proj_data")}
    if multiplicative is not None:
        sources["multiplicative"] = projector._store(multiplicative, "multiplicative")
    projector._check_image(image_out, "image_out")
    views = projector._views(subset_num, num_subsets, views)
    result = projector._run(
        BackProgram(projector.session.kernel_geometry, multiplicative is not None),
        views,
        sources,
        {},
        "back projection",
        subset=(subset_num, num_subsets),
        **projector._result_target(image_out, accumulate),
    )
    return projector._output_image(image_out, projector._finish_image(result.image), accumulate)
