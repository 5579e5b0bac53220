"""SIRF's ``KOSMAPOSLReconstructor``: STIR's kernelised EM (KOSMAPOSL, the hybrid kernel method)
driven step by step from Python.

SIRF's class is its ``IterativeReconstructor`` (the calls of
:class:`~.reconstructor.OSMAPOSLReconstructor`: subsets, subiterations, ``set_up``, ``update``,
``reconstruct``, current estimate, output) plus the kernel's setters -- ``set_anatomical_prior``,
``set_num_neighbours``, ``set_num_non_zero_features``, ``set_sigma_m``, ``set_sigma_p``,
``set_sigma_dm``, ``set_sigma_dp``, ``set_only_2D``, ``set_hybrid`` (STIR's keys and defaults,
:class:`stirgpu.recon.KernelSettings`) -- and ``compute_kernelised_image(image, alpha)``.

The current estimate holds the kernel coefficients (STIR's alpha); a subiteration is
:meth:`stirgpu.recon.KOSMAPOSL.update`.  ``compute_kernelised_image(image, alpha)`` is STIR's
``compute_kernelised_image``: ``image`` under the kernel of the anatomical image and (hybrid) of
``alpha``, available after ``set_up``.  Where SIRF differs from STIR, stirgpu follows STIR
(``docs/sirf.md``): SIRF starts its result from a copy of ``image`` instead of zeros, so it adds
``image_j / sum_l k_jl`` to every voxel; and STIR, under SIRF, writes each emission image as
``_N.hv`` into the working directory (an empty kernelised output prefix), which stirgpu does not.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..recon import KOSMAPOSL, KernelSettings
from .errors import InputError, NotSupported, error, translate_class_errors
from .image_data import ImageData
from .reconstructor import OSMAPOSLReconstructor, _image

__all__ = ["KOSMAPOSLReconstructor"]


@translate_class_errors
class KOSMAPOSLReconstructor(OSMAPOSLReconstructor):
    """SIRF's ``KOSMAPOSLReconstructor`` (module docstring).  Defaults are STIR's: 3 neighbours,
    1 non-zero feature element, no sigma_m (set one with the anatomical image), sigma_p, sigma_dp
    and sigma_dm 1, 3-D, not hybrid; 1 subset, 1 subiteration, no output."""

    def __init__(self, filename=""):
        if filename:
            raise NotSupported(
                "KOSMAPOSLReconstructor(parameter file): run the .par with STIR's KOSMAPOSL and stirgpu's "
                "plugin ('stirgpu stir KOSMAPOSL FILE.par'), or set the reconstructor up with its setters"
            )
        super().__init__()
        self.name = "KOSMAPOSL"
        self._kernel = KernelSettings()
        self._anatomical: ImageData | None = None

    def _set(self, **changes) -> None:
        self._kernel = dataclasses.replace(self._kernel, **changes)
        self._osem = None  # (STIR: set up again)

    # -- the kernel's settings ---------------------------------------------------------------------
    def set_anatomical_prior(self, ap) -> None:
        """The anatomical image (in the reconstruction's geometry); its values are read at set_up."""
        self._anatomical, self._osem = _image(ap, "set_anatomical_prior"), None

    def set_num_neighbours(self, n) -> None:
        """Neighbours along each axis (the neighbourhood is n x n x n, n x n with only_2D)."""
        self._set(num_neighbours=int(n))

    def set_num_non_zero_features(self, n) -> None:
        """Non-zero elements of the feature vectors (1, STIR's default: its compact kernel)."""
        self._set(num_non_zero_features=int(n))

    def set_sigma_m(self, v) -> None:
        """The anatomical intensity scale (in units of the anatomical image's standard deviation)."""
        self._set(sigma_m=(_float(v),))

    def set_sigma_p(self, v) -> None:
        """The emission intensity scale (relative to the voxel's coefficient; hybrid only)."""
        self._set(sigma_p=_float(v))

    def set_sigma_dm(self, v) -> None:
        """The anatomical part's distance scale (in x voxel sizes)."""
        self._set(sigma_dm=_float(v))

    def set_sigma_dp(self, v) -> None:
        """The emission part's distance scale (in x voxel sizes; hybrid only)."""
        self._set(sigma_dp=_float(v))

    def set_only_2D(self, tf) -> None:
        """Neighbourhoods within a plane."""
        self._set(only_2d=bool(tf))

    def set_hybrid(self, tf) -> None:
        """The kernel also of the current coefficients (the hybrid kernel method)."""
        self._set(hybrid=bool(tf))

    # -- set up and the kernel ---------------------------------------------------------------------------
    def _algorithm(self, obj, image) -> KOSMAPOSL:
        anatomical = () if self._anatomical is None else (self._anatomical,)
        for a in anatomical:
            if a.image_info != image.image_info:
                raise InputError(
                    f"anatomical and emission image have different sizes: {a.image_info!r} and "
                    f"{image.image_info!r}; make sure they are the same"
                )
        kosmaposl = KOSMAPOSL(
            obj.stirgpu_objective(),
            obj.projector,
            image.image_info,
            num_subsets=self._num_subsets,
            num_subiterations=max(self._num_subiterations, 1),
            minimum_relative_change=self._min_change,
            maximum_relative_change=self._max_change,
            enforce_initial_positivity=False,
            prior=None if obj.prior is None else obj.prior.stirgpu_prior,  # set up by the objective function
            kernel=self._kernel,
            anatomical_images=anatomical,
        )
        kosmaposl.sensitivities = obj.sensitivities  # computed by the objective function's set_up
        kosmaposl.kernel = self._kernel.prepare(image.image_info, anatomical)
        return kosmaposl

    def compute_kernelised_image(self, image, alpha) -> ImageData:
        """STIR's kernelised ``image`` with the kernel of ``alpha`` (a new image; after set_up)."""
        image = _image(image, "compute_kernelised_image")
        alpha = _image(alpha, "compute_kernelised_image")
        if not isinstance(self._osem, KOSMAPOSL):
            raise error("KOSMAPOSLReconstructor: call set_up(image) first")
        info = self._osem.image_info
        for what, im in (("image", image), ("alpha", alpha)):
            if im.image_info != info:
                raise InputError(
                    f"compute_kernelised_image: the {what}'s geometry {im.image_info!r} differs from the "
                    f"reconstruction's {info!r}"
                )
        return ImageData.from_array(self._osem.kernelise(image.array, alpha.array), info)


def _float(v) -> float:
    """A SIRF float parameter (passed through C as a float32)."""
    return float(np.float32(v))
