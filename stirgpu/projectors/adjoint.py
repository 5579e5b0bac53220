"""The dot-product test of a forward and a back projector: ``<A x, y> = <x, B y>``.

A linear operator's test, as parallelproj 2's ``LinearOperator.adjointness_test`` makes it:
random x and y, both inner products summed in float64, their relative difference returned
(0 for an exact adjoint; float32 rounding of the projections in practice, ~1e-6).  The
cylindrical-FOV restriction is part of both operators (A masks its input, B its output), so
it is tested with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError

if TYPE_CHECKING:
    from .back import BackProjector
    from .forward import ForwardProjector
    from .pair import ProjectorPair

__all__ = ["adjointness_test"]


def adjointness_test(
    forward: ForwardProjector | ProjectorPair, back: BackProjector | ProjectorPair, seed: int = 0
) -> float:
    """Relative difference of ``<A x, y>`` and ``<x, B y>`` for random non-negative x (an image)
    and y (projection data on the segments the projectors process), with A = ``forward``
    (a :class:`~stirgpu.projectors.ForwardProjector`, or a pair) and B = ``back`` (a
    :class:`~stirgpu.projectors.BackProjector`, or a pair), both set up for one geometry.
    ``forward``'s session gets x as its input image."""
    from ..formats import ProjDataInMemory

    pdi, info = forward.get_proj_data_info(), forward.get_image_info()
    if (back.get_proj_data_info(), back.get_image_info()) != (pdi, info):
        raise GeometryError("adjointness_test: the forward and the back projector have different set-ups")
    segments = forward.segments_to_process()
    rng = np.random.default_rng(seed)
    x = rng.random(info.shape, dtype=np.float32)
    views = np.arange(pdi.get_num_views())
    y = ProjDataInMemory(pdi)
    for s in segments:
        shape = (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
        y.write_views(rng.random(shape, dtype=np.float32), s, views)
    ax = forward.forward_project(ProjDataInMemory(pdi), x)
    bty = back.back_project(None, y)
    lhs = sum(_dot(ax.read_views(s, views), y.read_views(s, views)) for s in segments)
    rhs = _dot(x, bty)
    return abs(lhs - rhs) / max(abs(lhs), abs(rhs), 1e-30)


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a.ravel().astype(np.float64), b.ravel().astype(np.float64)))
