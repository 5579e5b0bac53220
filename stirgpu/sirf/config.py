"""SIRF's ``sirf.config``: what the SIRF build offers, here what stirgpu offers (SIRF's names).

* ``SIRF_HAS_Parallelproj`` -- True: stirgpu computes Parallelproj's projector
  (``AcquisitionModelUsingParallelproj``);
* ``SIRF_HAS_NiftyPET`` -- False: NiftyPET's projector is not part of stirgpu;
* ``STIR_WITH_CUDA`` -- False: STIR's own CUDA classes (``CudaRelativeDifferencePrior``) are not
  provided (stirgpu's priors run on a GPU through cupy images instead);
* ``SIRF_HAS_SPM`` -- False: SIRF's registration engines are not part of stirgpu.

A SIRF script's ``import sirf.config`` becomes ``import stirgpu.sirf.config``.
"""

from __future__ import annotations

__all__ = ["SIRF_HAS_NiftyPET", "SIRF_HAS_Parallelproj", "STIR_WITH_CUDA", "SIRF_HAS_SPM"]

SIRF_HAS_NiftyPET = False
SIRF_HAS_Parallelproj = True
STIR_WITH_CUDA = False
SIRF_HAS_SPM = False
