"""SIRF's PET interface (``sirf.STIR``) on stirgpu: a SIRF script runs with ``import stirgpu.sirf as pet``.

* :class:`AcquisitionData`, :class:`ImageData` -- SIRF's containers: arithmetic, norms, copies,
  files; projection data streamed chunk by chunk from their store (file or memory), images on
  the host or a GPU (:mod:`.acquisition_data`, :mod:`.image_data`, :mod:`.containers`);
* :class:`AcquisitionModelUsingParallelproj` (also :data:`AcquisitionModelUsingStirgpu`,
  :data:`AcquisitionModel`) and :class:`AcquisitionSensitivityModel` -- ``S (G x + a) + b`` on
  stirgpu's streaming projector (:mod:`.acquisition_model`, :mod:`.sensitivity`);
* :func:`make_Poisson_loglikelihood`, :class:`OSMAPOSLReconstructor`, :class:`QuadraticPrior`,
  :class:`RelativeDifferencePrior` -- OSMAPOSL (OSEM, or OSL with stirgpu's priors) as SIRF
  drives it (:mod:`.objective`, :mod:`.reconstructor`, :mod:`.priors`); :class:`OSSPSReconstructor`
  -- STIR's OSSPS the same way (:mod:`.ossps_reconstructor`);
* :class:`error`, :class:`MessageRedirector` -- SIRF's error class (every error of this package
  is one, and a :class:`stirgpu.errors.StirGpuError`) and message routing (:mod:`.messages`).

``docs/sirf.md`` lists every SIRF name provided and what behaves differently.  Nothing happens
at import.
"""

from .acquisition_data import AcquisitionData
from .acquisition_model import AcquisitionModel, AcquisitionModelUsingParallelproj, AcquisitionModelUsingStirgpu
from .containers import DataContainer, dot, norm
from .errors import error
from .image_data import GeometricalInfo, ImageData
from .messages import MessageRedirector
from .objective import PoissonLogLikelihoodWithLinearModelForMeanAndProjData, make_Poisson_loglikelihood
from .ossps_reconstructor import OSSPSReconstructor
from .priors import Prior, QuadraticPrior, RelativeDifferencePrior
from .reconstructor import OSMAPOSLReconstructor
from .sensitivity import AcquisitionSensitivityModel
from .storage import storage_scheme

__all__ = [
    "AcquisitionData",
    "ImageData",
    "DataContainer",
    "GeometricalInfo",
    "AcquisitionModelUsingParallelproj",
    "AcquisitionModelUsingStirgpu",
    "AcquisitionModel",
    "AcquisitionSensitivityModel",
    "make_Poisson_loglikelihood",
    "PoissonLogLikelihoodWithLinearModelForMeanAndProjData",
    "OSMAPOSLReconstructor",
    "OSSPSReconstructor",
    "Prior",
    "QuadraticPrior",
    "RelativeDifferencePrior",
    "MessageRedirector",
    "error",
    "norm",
    "dot",
    "storage_scheme",
]
