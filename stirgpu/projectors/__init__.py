"""STIR-shaped projectors composing geometry, the execution engine and the kernels.

* :class:`ProjectionSession` -- what projectors share: options, ``set_up``, the engine (its
  devices, cached plans, kept workspaces), the uploaded input image;
* :class:`ForwardProjector` -- ``set_up``, ``set_input``, ``forward_project(proj_data_out, image,
  subset_num, num_subsets)``;
* :class:`BackProjector` -- ``back_project(image_out, proj_data, subset_num, num_subsets, accumulate)``;
* :class:`ProjectorPair` -- both on one session (``.forward``, ``.back``), plus OSEM's fused
  ``forward_back_ratio`` and ``sensitivity``.

Each projector makes its own session unless given one (``session=``).  All stream projection
data chunk by chunk (cost follows the data touched; memory is bounded by the plan); see
docs/execution.md.
"""

from .adjoint import adjointness_test
from .back import BackProjector
from .base import StreamingProjector
from .forward import ForwardProjector
from .pair import ProjectorPair
from .poisson import poisson_quotient
from .session import ProjectionSession, ProjectorOptions

__all__ = [
    "ForwardProjector",
    "BackProjector",
    "ProjectorPair",
    "ProjectionSession",
    "ProjectorOptions",
    "StreamingProjector",
    "adjointness_test",
    "poisson_quotient",
]
