"""SIRF's PET names that stirgpu does not provide, each a clear error naming what to use instead.

* :class:`AcquisitionModelUsingRayTracingMatrix` (SIRF's default model), its base
  :class:`AcquisitionModelUsingMatrix` and :class:`RayTracingMatrix` (where
  ``set_num_tangential_LORs`` lives): STIR's ray-tracing matrix is another projector than
  Parallelproj's, with other numbers; constructing one raises :class:`~.errors.NotSupported`
  naming ``AcquisitionModelUsingParallelproj``, the model stirgpu computes.
* :class:`FBP2DReconstructor`: STIR's FBP2D back projects with its interpolating back projector,
  not Parallelproj's; constructing one raises :class:`~.errors.NotSupported` saying so.
* Names SIRF defines only when it was built with an optional engine stirgpu does not have
  (NiftyPET's GPU projector): SIRF without that engine has no such attribute, and SIRF's own
  tests check with ``hasattr`` (``tests_NiftyPET.py``).  Here too ``hasattr`` is False, and a
  script that uses the name gets :class:`NotProvided`, an ``AttributeError`` that is also a
  :class:`~.errors.NotSupported` and says what to use (:func:`missing_engine_name`, the
  package's module ``__getattr__``).
"""

from __future__ import annotations

from .errors import NotSupported

__all__ = [
    "AcquisitionModelUsingMatrix",
    "AcquisitionModelUsingRayTracingMatrix",
    "RayTracingMatrix",
    "FBP2DReconstructor",
    "NotProvided",
    "ENGINE_NAMES",
    "missing_engine_name",
]

_USE_PARALLELPROJ = (
    "use AcquisitionModelUsingParallelproj (STIR's Parallelproj projector, which stirgpu computes); "
    "STIR's ray-tracing matrix is not provided by stirgpu"
)


class NotProvided(NotSupported, AttributeError):
    """A SIRF name that exists only in SIRF built with an engine stirgpu lacks (``hasattr`` is False)."""


class AcquisitionModelUsingMatrix:
    """SIRF's model on a projection matrix: not provided (STIR's matrices are not stirgpu's)."""

    def __init__(self, matrix=None):
        raise NotSupported(f"AcquisitionModelUsingMatrix: {_USE_PARALLELPROJ}")


class AcquisitionModelUsingRayTracingMatrix(AcquisitionModelUsingMatrix):
    """SIRF's default PET model (STIR's ray-tracing matrix): not provided."""

    def __init__(self, matrix=None):
        raise NotSupported(f"AcquisitionModelUsingRayTracingMatrix: {_USE_PARALLELPROJ}")


class RayTracingMatrix:
    """STIR's ray-tracing projection matrix (``set_num_tangential_LORs`` and its symmetries): not provided."""

    def __init__(self):
        raise NotSupported(f"RayTracingMatrix: {_USE_PARALLELPROJ}")


class FBP2DReconstructor:
    """SIRF's ``FBP2DReconstructor`` (STIR's ``FBP2DReconstruction``): not provided."""

    def __init__(self, *args, **kwargs):
        raise NotSupported(
            "FBP2DReconstructor: STIR's FBP2D back projects with its interpolating back projector "
            "(BackProjectorByBinUsingInterpolation), which stirgpu does not compute, so its numbers cannot be "
            "STIR's; reconstruct with OSMAPOSLReconstructor, or run STIR's own FBP2D"
        )


#: SIRF names that need an engine stirgpu does not have -> what that engine is
ENGINE_NAMES = {
    "AcquisitionModelUsingNiftyPET": "NiftyPET's GPU projector",
}


def missing_engine_name(module: str, name: str) -> NotProvided | AttributeError:
    """The error for ``module.name``: :class:`NotProvided` for :data:`ENGINE_NAMES`, else Python's
    own ``AttributeError`` text."""
    if name in ENGINE_NAMES:
        return NotProvided(
            f"{name}: {ENGINE_NAMES[name]} is not part of stirgpu (SIRF defines {name} only when built with "
            "it); use AcquisitionModelUsingParallelproj, which runs on the GPU where cupy sees one"
        )
    return AttributeError(f"module {module!r} has no attribute {name!r}")
