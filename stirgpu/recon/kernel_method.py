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

STIR computes the kernel from feature vectors of more than one element (``number of non-zero
feature elements`` > 1) through a norm matrix whose indexing does not follow the documented
feature vectors; stirgpu refuses that setting rather than guess.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import StirGpuError
from ..geometry import ImageInfo
from ..kernels.kernelised import anatomical_stack, distance_table, kernelised_image, standard_deviation
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
        if self.num_non_zero_features != 1:
            out.append(
                (
                    "num_non_zero_features",
                    f"number of non-zero feature elements {self.num_non_zero_features}: stirgpu computes "
                    "STIR's kernel with 1 (its compact form) only",
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
        that shape); raises StirGpuError naming the first problem."""
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
        distance = distance_table(self.num_neighbours, self.only_2d, image_info.voxel_size)
        return Kernel(self, anatomical_stack(images), deviations, distance)


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

    def apply(self, image, alpha):
        """STIR's ``compute_kernelised_image(out, image, alpha)``: a new float32 array where
        ``image`` lives (on a GPU there; ``alpha`` is taken there too)."""
        s = self.settings
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
        )

    def _anatomical_where(self, image):
        if not is_gpu_array(image):
            return self.anatomical_images
        device = int(image.device.id)
        if device not in self.on_devices:
            self.on_devices[device] = anatomical_stack(self.anatomical_images, image)
        return self.on_devices[device]
