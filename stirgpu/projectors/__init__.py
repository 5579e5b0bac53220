"""STIR-shaped projectors composing geometry, the execution engine and the kernels.

* :class:`ForwardProjector` -- ``set_up``, ``set_input``, ``forward_project(proj_data_out, image,
  subset_num, num_subsets)``;
* :class:`BackProjector` -- ``back_project(image_out, proj_data, subset_num, num_subsets, accumulate)``;
* :class:`ProjectorPair` -- both, sharing one engine, plus OSEM's fused ``forward_back_ratio``
  and ``sensitivity``.

All stream projection data chunk by chunk (cost follows the data touched; memory is bounded
by the plan); see docs/execution.md.
"""

from .back import BackProjector
from .base import StreamingProjector
from .forward import ForwardProjector
from .pair import ProjectorPair
from .poisson import poisson_quotient

__all__ = ["ForwardProjector", "BackProjector", "ProjectorPair", "StreamingProjector", "poisson_quotient"]
