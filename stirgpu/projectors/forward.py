"""STIR-shaped streaming forward projector."""

from __future__ import annotations

from ..interop import is_stir_proj_data
from .base import StreamingProjector
from .programs import ForwardProgram

__all__ = ["ForwardProjector"]


class ForwardProjector(StreamingProjector):
    """Joseph forward projector with STIR's Parallelproj numbers, streamed chunk by chunk.

    >>> fp = ForwardProjector(backend="cpu")
    >>> fp.set_up(proj_data_info, image_info)
    >>> fp.forward_project(proj_data_out, image, subset_num=0, num_subsets=21)

    Options: see :class:`~stirgpu.projectors.base.StreamingProjector`.
    """

    def forward_project(self, proj_data_out, image=None, subset_num: int = 0, num_subsets: int = 1, *, views=None):
        """Write the forward projection of ``image`` (default: the one of :meth:`set_input`)
        into ``proj_data_out`` -- only the views of subset ``subset_num`` of ``num_subsets``
        (and segments up to ``max_segment_num_to_process``); nothing else of it is touched.

        ``proj_data_out``: a stirgpu store or a STIR ProjData (``ProjDataInterfile`` opened for
        writing, ``ProjDataInMemory``; written viewgram by viewgram, the subset's only).
        ``views`` (instead of a subset): exactly these views (distinct, ascending).
        ``image``: numpy/cupy/torch (z, y, x), a stirgpu image or a ``stir.FloatVoxelsOnCartesianGrid``
        of the set-up's geometry.  A new disk store whose projection fails is aborted (never
        committed).  Returns ``proj_data_out``.
        """
        self._auto_set_up(_pdi_source(proj_data_out), image)
        out = self._store(proj_data_out, "proj_data_out")
        self._check_image(image, "image")
        views = self._views(subset_num, num_subsets, views)
        try:
            self._prepare_input(image)
            self._run(
                ForwardProgram(self._geometry),
                views,
                {},
                {"out": out},
                "forward projection",
                subset=(subset_num, num_subsets),
            )
        except BaseException:
            self._abort_new_store(proj_data_out)
            raise
        return proj_data_out


def _pdi_source(obj):
    """``obj`` if it can say its geometry (a stirgpu store, a STIR ProjData; for automatic
    set-up), else None."""
    return (
        obj if (hasattr(obj, "read_views") or is_stir_proj_data(obj)) and hasattr(obj, "get_proj_data_info") else None
    )
