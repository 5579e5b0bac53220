"""OSEM and OSMAPOSL with a prior (One-Step-Late), as STIR's OSMAPOSL runs them.

* :class:`PoissonLogLikelihood` -- STIR's ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData``:
  measured data, additive sinogram, ``Bin Normalisation From ProjData`` factors;
  mean = (A x + a) / f;
* :class:`OSEM` -- the subiterations (with ``prior=``: STIR's OSL update), sensitivities
  (:class:`SensitivitySpec`), saved estimates;
* :class:`FilterSchedule` -- STIR's inter-update, inter-iteration and post-filters, where and when
  STIR applies them (:mod:`.filtering`);
* :func:`run_osmaposl` / :func:`prepare_osmaposl` -- from an OSMAPOSL ``.par`` file (all checks first);
* :class:`OSSPS`, :func:`run_ossps` / :func:`prepare_ossps` -- STIR's OSSPS (:mod:`.ossps`);
* :class:`KOSMAPOSL`, :class:`KernelSettings` -- STIR's kernelised EM (:mod:`.kosmaposl`,
  :mod:`.kernel_method`);
* :mod:`.simulate` -- phantoms and simulated data (demo, examples, tests).

Nothing happens at import.
"""

from .filtering import FilterSchedule
from .kernel_method import Kernel, KernelSettings
from .kosmaposl import KOSMAPOSL
from .objective import PoissonLogLikelihood
from .osem import OSEM, OSEMResult, SubiterationRecord, subsets_problem
from .ossps import OSSPS
from .ossps_run import prepare_ossps, run_ossps
from .run import PreparedRun, make_projector, prepare_osmaposl, run_osmaposl
from .sensitivity import Sensitivities, SensitivitySpec

__all__ = [
    "PoissonLogLikelihood",
    "OSEM",
    "OSEMResult",
    "SubiterationRecord",
    "subsets_problem",
    "FilterSchedule",
    "SensitivitySpec",
    "Sensitivities",
    "run_osmaposl",
    "prepare_osmaposl",
    "PreparedRun",
    "make_projector",
    "OSSPS",
    "run_ossps",
    "prepare_ossps",
    "KOSMAPOSL",
    "KernelSettings",
    "Kernel",
]
