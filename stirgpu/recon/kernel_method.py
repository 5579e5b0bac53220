"""The kernel of STIR's KOSMAPOSL (kernel method, KEM; hybrid kernel method, HKEM; Deidda et al.).

:class:`KernelSettings` holds STIR's keys (``number of neighbours``, ``number of non-zero
feature elements``, ``sigma_m`` (one per anatomical image), ``sigma_p``, ``sigma_dp``,
``sigma_dm``, ``only_2D``, ``hybrid``, ``freeze iterative kernel at subiteration number``) with
STIR's defaults; :meth:`KernelSettings.prepare` checks them against the anatomical images and the
image geometry, as STIR's ``set_up``, and gives a :class:`Kernel`: the anatomical images, their
standard deviations (all voxels, n - 1) and the distance table, ready to apply.

``Kernel.apply(image, alpha)`` is STIR's ``compute_kernelised_image(out, image, alpha)``: the
kernel of the anatomical images and (hybrid) of ``alpha``, applied to ``image``, normalised per
voxel by the sum of its kernel values (the formula: :mod:`stirgpu.kernels.kernelised.cpu`).

With more than one non-zero feature element STIR computes the kernel from norms of differences
of feature vectors, with its own indexing (:mod:`stirgpu.kernels.kernelised.cpu` states it): the
anatomical images' norms are made at set-up (``Kernel.feature_norms``), and the emission norms,
from 0, have those of the kernel image added at every kernelisation while the kernel is updated
(STIR never resets them, so they grow with every subiteration).  These run on the host (a GPU
image's result goes back to its device).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import StirGpuError
from ..geometry import ImageInfo
from ..kernels.kernelised import (
    anatomical_stack,
    distance_table,
    feature_norms,
    kernelised_image,
    standard_deviation,
)
from .arrays import is_gpu_array, to_numpy

__all__ = ["KernelSettings", "Kernel"]


@dataclasses.dataclass(frozen=True)
class KernelSettings:
    """STIR's KOSMAPOSL kernel keys, STIR's defaults (module docstring)."""

    num_neighbours: int = 3
    num_non_zero_features: int = 1
    sigma_m: tuple[float, ...] = ()
    sigma_p: float = 1.0
    sigma_dp: float = 1.0
    sigma_dm: float = 1.0
    only_2d: bool = False
    hybrid: bool = False
    #: the subiteration from which the kernel's emission part stays that of this subiteration's
    #: starting estimate; -1: never frozen
    freeze_at_subiteration: int = -1

    def problems(self, num_anatomical: int) -> list[tuple[str, str]]:
        """(field, message) of each setting STIR's ``set_up`` (or stirgpu) refuses."""
        out = []
        if num_anatomical == 0 and not self.hybrid:
            out.append(("anatomical_images", "anatomical image has not been set (needed unless hybrid)"))
        if len(self.sigma_m) != num_anatomical:
            out.append(
                (
                    "sigma_m",
                    f"{len(self.sigma_m)} sigma_m values for {num_anatomical} anatomical images: the number of "
                    "sigma_m parameters must be the same as the number of anatomical images",
                )
            )
        if self.num_neighbours < 1:
            out.append(("num_neighbours", f"number of neighbours {self.num_neighbours}: must be at least 1"))
        if self.num_non_zero_features < 1:
            out.append(
                (
                    "num_non_zero_features",
                    f"number of non-zero feature elements {self.num_non_zero_features}: must be at least 1",
                )
            )
        if self.freeze_at_subiteration == 0:
            out.append(
                (
                    "freeze_at_subiteration",
                    "the kernel cannot be frozen at subiteration 0 as subiteration number starts from 1",
                )
            )
        return out

    def prepare(self, image_info: ImageInfo, anatomical_images=()) -> Kernel:
        """The kernel for images of ``image_info`` (arrays or images with ``.array``, each of
        that shape); raises StirGpuError naming the first problem (:meth:`check`)."""
        images, deviations = self.check(image_info, anatomical_images)
        distance = distance_table(self.num_neighbours, self.only_2d, image_info.voxel_size)
        kernel = Kernel(self, anatomical_stack(images), deviations, distance)
        if self.num_non_zero_features > 1:  # STIR's set_up: the anatomical norms, once; the emission's at 0
            n, nnz, only_2d = self.num_neighbours, self.num_non_zero_features, self.only_2d
            anatomical = [feature_norms(m, nnz, n, only_2d) for m in images]
            elements = n * n if only_2d else n * n * n
            voxels = int(np.prod(image_info.shape))
            kernel.feature_norms["anatomical"] = (
                np.stack(anatomical) if anatomical else np.zeros((0, voxels, elements), np.float32)
            )
            kernel.feature_norms["emission"] = np.zeros((voxels, elements), np.float32)
        return kernel

    def check(self, image_info: ImageInfo, anatomical_images=()) -> tuple[list, tuple[float, ...]]:
        """(the anatomical images as float32 host arrays, their standard deviations), or the
        StirGpuError naming the first problem of the settings and the images (their size, NaN or
        infinite values, a constant image) -- what :meth:`prepare` checks, without its work."""
        images = [np.ascontiguousarray(to_numpy(getattr(m, "array", m)), dtype=np.float32) for m in anatomical_images]
        found = self.problems(len(images))
        if found:
            raise StirGpuError(found[0][1])
        for i, m in enumerate(images):
            if m.shape != tuple(image_info.shape):
                raise StirGpuError(
                    f"anatomical image {i}: shape {m.shape} differs from the emission image's "
                    f"{tuple(image_info.shape)} (STIR: make sure they are the same)"
                )
            if not np.isfinite(m).all():
                raise StirGpuError(f"anatomical image {i} holds NaN or infinite values")
        deviations = tuple(standard_deviation(m) for m in images)
        for i, sd in enumerate(deviations):
            if sd == 0:
                raise StirGpuError(
                    f"anatomical image {i} is constant: its standard deviation 0 leaves the kernel undefined"
                )
        return images, deviations


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A prepared kernel (:meth:`KernelSettings.prepare`)."""

    settings: KernelSettings
    #: the anatomical images, (n, nz, ny, nx) float32 on the host
    anatomical_images: np.ndarray
    standard_deviations: tuple[float, ...]
    distance: np.ndarray
    #: the anatomical images on each GPU that kernelised an image there (by device id), kept
    on_devices: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)
    #: with more than one feature element, STIR's norms: "anatomical" (n, voxels, elements), made
    #: at set-up, and "emission" (voxels, elements), to which every kernelisation while the kernel
    #: is updated adds those of its kernel image (STIR never resets them)
    feature_norms: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def apply(self, image, alpha, updating: bool = True):
        """STIR's ``compute_kernelised_image(out, image, alpha)``: a new float32 array where
        ``image`` lives (on a GPU there; ``alpha`` is taken there too).  ``updating``: STIR's
        ``still_updating_iterative_kernel`` (with more than one feature element, a hybrid kernel
        then adds ``alpha``'s norms to the emission norms first, as STIR does at every call)."""
        s = self.settings
        norms = self.feature_norms
        if norms and s.hybrid and updating:
            feature_norms(alpha, s.num_non_zero_features, s.num_neighbours, s.only_2d, norms["emission"])
        return kernelised_image(
            image,
            alpha,
            self._anatomical_where(image),
            s.sigma_m,
            self.standard_deviations,
            sigma_p=s.sigma_p,
            sigma_dp=s.sigma_dp,
            sigma_dm=s.sigma_dm,
            distance=self.distance,
            hybrid=s.hybrid,
            anatomical_norms=norms.get("anatomical"),
            emission_norms=norms.get("emission"),
        )

    def _anatomical_where(self, image):
        if not is_gpu_array(image):
            return self.anatomical_images
        device = int(image.device.id)
        if device not in self.on_devices:
            self.on_devices[device] = anatomical_stack(self.anatomical_images, image)
        return self.on_devices[device]
