"""STIR-shaped streaming forward projector."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats import ProjDataInMemory
from .base import StreamingProjector, _pdi_source
from .programs import ForwardProgram, ModelForwardProgram

if TYPE_CHECKING:
    from .back import BackProjector

__all__ = ["ForwardProjector"]


class ForwardProjector(StreamingProjector):
    """Joseph forward projector with STIR's Parallelproj numbers, streamed chunk by chunk.

    >>> fp = ForwardProjector(backend="cpu")
    >>> fp.set_up(proj_data_info, image_info)
    >>> fp.forward_project(proj_data_out, image, subset_num=0, num_subsets=21)

    Options: see :mod:`stirgpu.projectors.session`; ``session=`` projects on an existing
    session (a :class:`~stirgpu.projectors.ProjectorPair`'s ``.forward`` is one).
    """

    def forward_project(
        self,
        proj_data_out,
        image=None,
        subset_num: int = 0,
        num_subsets: int = 1,
        *,
        views=None,
        additive=None,
        multiplicative=None,
        background=None,
    ):
        """Write the forward projection of ``image`` (default: the one of :meth:`set_input`)
        into ``proj_data_out`` -- only the views of subset ``subset_num`` of ``num_subsets``
        (and segments up to ``max_segment_num_to_process``); nothing else of it is touched.

        ``proj_data_out``: a stirgpu store or a STIR ProjData (``ProjDataInterfile`` opened for
        writing, ``ProjDataInMemory``; written viewgram by viewgram, the subset's only), or None:
        a new :class:`~stirgpu.formats.ProjDataInMemory` of the set-up's geometry (zeros outside
        the subset) is returned, as ``back_project(None, data)`` returns a new image.
        ``views`` (instead of a subset): exactly these views (distinct, ascending).
        ``image``: numpy/cupy/torch (z, y, x), a stirgpu image or a ``stir.FloatVoxelsOnCartesianGrid``
        of the set-up's geometry.  A new disk store whose projection fails is aborted (never
        committed).  Returns ``proj_data_out``.

        ``additive`` (a), ``multiplicative`` (f) and ``background`` (b), projection data like
        ``proj_data_out``, make it the model ``(A x + a) / f + b`` instead of ``A x``, in the same
        streaming pass (:class:`~stirgpu.projectors.programs.ModelForwardProgram`; where f == 0
        the bin is ``b``): SIRF's ``S (G x + a) + b`` with ``S = 1 / f``, STIR's mean of
        ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData`` with ``b = 0``.
        """
        return forward_project(
            self, proj_data_out, image, subset_num, num_subsets, views, additive, multiplicative, background
        )

    def _forward_and_back(self) -> tuple[ForwardProjector, BackProjector]:
        from .back import BackProjector  # (here: back.py imports this module)

        return self, BackProjector(session=self.session)


def forward_project(
    projector: StreamingProjector,
    proj_data_out,
    image,
    subset_num: int,
    num_subsets: int,
    views,
    additive=None,
    multiplicative=None,
    background=None,
):
    """:meth:`ForwardProjector.forward_project` by ``projector`` (on its session, in its
    statistics): what a ForwardProjector and a ProjectorPair run."""
    projector._auto_set_up(_pdi_source(proj_data_out), image)
    if proj_data_out is None:  # (after the set-up check: the geometry is the set-up's)
        proj_data_out = ProjDataInMemory(projector.session.proj_data_info)
    out = projector._store(proj_data_out, "proj_data_out")
    terms = {
        name: projector._store(term, name)
        for name, term in (("additive", additive), ("multiplicative", multiplicative), ("background", background))
        if term is not None
    }
    projector._check_image(image, "image")
    views = projector._views(subset_num, num_subsets, views)
    geometry = projector.session.kernel_geometry
    program = (
        ModelForwardProgram(geometry, additive is not None, multiplicative is not None, background is not None)
        if terms
        else ForwardProgram(geometry)
    )
    try:
        upload = projector._prepare_input(image)
        projector._run(
            program,
            views,
            terms,
            {"out": out},
            "forward projection",
            subset=(subset_num, num_subsets),
            upload=upload,
        )
    except BaseException:
        projector._abort_new_store(out)
        raise
    return proj_data_out
