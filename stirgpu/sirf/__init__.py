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
  -- STIR's OSSPS the same way (:mod:`.ossps_reconstructor`); :class:`KOSMAPOSLReconstructor` --
  STIR's kernelised EM (:mod:`.kosmaposl_reconstructor`);
* :class:`error`, :class:`MessageRedirector` -- SIRF's error class (every error of this package
  is one, and a :class:`stirgpu.errors.StirGpuError`) and message routing (:mod:`.messages`).

:mod:`.Utilities` is SIRF's ``sirf.Utilities`` (what SIRF's PET scripts and tests use of it).

``docs/sirf.md`` lists every SIRF name provided and what behaves differently.  Nothing happens
at import.
"""

from .acquisition_data import AcquisitionData
from .acquisition_model import AcquisitionModel, AcquisitionModelUsingParallelproj, AcquisitionModelUsingStirgpu
from .containers import DataContainer, copyto, dot, norm
from .engine_info import (
    get_engine_doc_dir,
    get_engine_examples_dir,
    get_engine_version_string,
    get_verbosity,
    scanner_names,
    set_verbosity,
)
from .errors import error
from .image_data import GeometricalInfo, ImageData
from .kosmaposl_reconstructor import KOSMAPOSLReconstructor
from .messages import MessageRedirector
from .noise import PoissonNoiseGenerator
from .not_supported import (
    AcquisitionModelUsingMatrix,
    AcquisitionModelUsingRayTracingMatrix,
    FBP2DReconstructor,
    RayTracingMatrix,
    missing_engine_name,
)
from .objective import PoissonLogLikelihoodWithLinearModelForMeanAndProjData, make_Poisson_loglikelihood
from .ossps_reconstructor import OSSPSReconstructor
from .priors import LogcoshPrior, PLSPrior, Prior, QuadraticPrior, RelativeDifferencePrior
from .processors import ImageDataProcessor, SeparableGaussianImageFilter, TruncateToCylinderProcessor
from .reconstructor import OSMAPOSLReconstructor
from .scatter import SingleScatterSimulator
from .scatter_estimator import ScatterEstimator
from .sensitivity import AcquisitionSensitivityModel
from .shapes import EllipticCylinder, Shape
from .storage import storage_scheme
from .threads import (
    get_default_num_omp_threads,
    get_max_omp_threads,
    set_default_num_omp_threads,
    set_max_omp_threads,
)
from .Utilities import examples_data_path, existing_filepath, pTest, show_2D_array, show_3D_array

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
    "SingleScatterSimulator",
    "KOSMAPOSLReconstructor",
    "ScatterEstimator",
    "Prior",
    "QuadraticPrior",
    "RelativeDifferencePrior",
    "LogcoshPrior",
    "PLSPrior",
    "MessageRedirector",
    "error",
    "norm",
    "dot",
    "copyto",
    "storage_scheme",
    # what sirf.STIR takes from sirf.Utilities, so `from sirf.STIR import *` gives it
    "examples_data_path",
    "existing_filepath",
    "pTest",
    "show_2D_array",
    "show_3D_array",
    "AcquisitionModelUsingMatrix",
    "AcquisitionModelUsingRayTracingMatrix",
    "RayTracingMatrix",
    "FBP2DReconstructor",
    "Shape",
    "EllipticCylinder",
    "set_verbosity",
    "get_verbosity",
    "get_engine_version_string",
    "get_engine_doc_dir",
    "get_engine_examples_dir",
    "scanner_names",
    "ImageDataProcessor",
    "TruncateToCylinderProcessor",
    "SeparableGaussianImageFilter",
    "PoissonNoiseGenerator",
    "set_max_omp_threads",
    "get_max_omp_threads",
    "set_default_num_omp_threads",
    "get_default_num_omp_threads",
]


def __getattr__(name: str):
    """SIRF's names for engines stirgpu lacks: ``hasattr`` False, and a use says what to take instead."""
    raise missing_engine_name(__name__, name)
