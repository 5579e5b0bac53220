"""The Hessian of SIRF's Poisson log-likelihood times an image, as STIR computes it.

STIR's ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData::
actual_accumulate_sub_Hessian_times_input_without_penalty`` adds, for subset ``k``,

    - B_k( divide_and_truncate(y * A_k v, (A_k x + a)^2) )

to its output: ``A`` the projector without the normalisation and ``a`` the additive sinogram in
normalised units (with the mean ``(A x + a) / f`` the factors ``f`` cancel from the Hessian, which
is why STIR leaves them out).  ``divide_and_truncate`` is the quotient rule of the gradient (per
viewgram: 0 where the numerator is at most 1e-6 of the viewgram's largest, at most 1e4), here
:func:`stirgpu.kernels.poisson.poisson_quotient` with no background and no factors.  STIR stops
when ``A_k v`` has a negative bin ("the result would be incorrect", STIR issue #1461), and so does
this.  The objective function subtracts the prior's ``H v`` (divided by the number of subsets for
one subset: STIR's ``accumulate_sub_Hessian_times_input``).

The subset's projections ``A_k v`` and ``A_k x + a`` are held in memory (two sinograms the size
of the data); the back projection runs on the projector's device.
"""

from __future__ import annotations

import numpy as np

from ..formats import ProjDataInMemory
from ..kernels.poisson import poisson_quotient
from ..recon import PoissonLogLikelihood
from .errors import error

__all__ = ["likelihood_hessian_times"]


def likelihood_hessian_times(objective: PoissonLogLikelihood, projector, x, v, subset: int, num_subsets: int):
    """``B_k(divide_and_truncate(y A_k v, (A_k x + a)^2))`` of subset ``subset`` (the negated
    sub-Hessian of the log-likelihood at image array ``x`` times image array ``v``), a new image
    array where the projector puts back projections."""
    along_v = projector.forward_project(None, v, subset, num_subsets)
    if float(np.min(along_v.as_array())) < 0.0:
        raise error(
            "accumulate_Hessian_times_input: the forward projection of the input has negative values; the "
            "result would be incorrect, so it stops here as STIR does (STIR issue #1461)"
        )
    mean = projector.forward_project(None, x, subset, num_subsets, additive=objective.additive)
    quotient = _quotient(objective.measured, along_v, mean)
    return projector.back_project(None, quotient, subset, num_subsets)


def _quotient(measured, along_v: ProjDataInMemory, mean: ProjDataInMemory) -> ProjDataInMemory:
    """``divide_and_truncate(y * A v, (A x + a)^2)`` viewgram by viewgram, float32 as STIR."""
    pdi = mean.get_proj_data_info()
    out = ProjDataInMemory(pdi)
    for t in range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1):
        for seg in pdi.segment_nums:
            numerator = measured.get_segment_by_view(seg, t) * along_v.get_segment_by_view(seg, t)
            m = mean.get_segment_by_view(seg, t)
            out.set_segment_by_view(poisson_quotient(m * m, numerator), seg, t)
    return out
