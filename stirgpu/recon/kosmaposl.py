"""KOSMAPOSL: STIR's kernelised EM (``KOSMAPOSLReconstruction``), OSMAPOSL on kernel coefficients.

The estimate ``alpha`` holds the kernel coefficients; the emission image is ``K alpha`` with the
kernel ``K`` of :mod:`.kernel_method`.  Subiteration ``n`` with subset ``k`` (STIR's
``update_estimate``; ``K(.)`` the kernel of the *kernel image*: ``alpha`` as it is at the start
of the subiteration, or, from ``freeze iterative kernel at subiteration number`` on, as it was
at the start of that subiteration)::

    lambda = K(alpha)
    update = K(B_k(y / (A_k lambda + a))) / K(s_k)    (STIR's divide, threshold 1e-6)
    update = clip(update, min_rel, max_rel)             (from subiteration 2 on)
    alpha *= update
    lambda = K(alpha)                                   (written at the save points)

With a prior (a non-zero penalisation factor) the division is by OSMAPOSL's One-Step-Late
denominator built on ``K(s_k)`` and the prior's gradient at ``alpha`` (:func:`~.arrays.osl_denominator`).
The inter-update filter acts on ``alpha`` before it is multiplied, as in OSMAPOSL.

Files: the estimates (``alpha``) as OSMAPOSL's (``output filename prefix``, off with ``disable
output``); the emission image ``lambda`` as ``<kernelised output filename prefix>_<n>.hv`` after
multiples of the save interval and the last subiteration, written whether or not output is
disabled (STIR's behaviour).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import StirGpuError
from ..formats import VoxelsOnCartesianGrid, write_image
from ..formats.naming import IMAGE
from ..formats.roles import inputs_written, reads, writes
from .arrays import SMALL_NUM, clip_update, osl_denominator, stir_divide, to_numpy
from .kernel_method import Kernel, KernelSettings
from .naming import estimate_filename
from .osem import OSEM, _file_of

__all__ = ["KOSMAPOSL"]


class KOSMAPOSL(OSEM):
    """STIR's KOSMAPOSL (module docstring).  ``OSEM``'s parameters, and:

    kernel
        :class:`~.kernel_method.KernelSettings`.
    anatomical_images
        The anatomical images (arrays, or images with ``.array``) in the reconstruction's geometry,
        one per ``sigma_m``.
    kernelised_output_filename_prefix
        Where the emission images go (``<prefix>_<n>.hv``); None: not written.
    """

    def __init__(
        self,
        objective,
        projector,
        image_info,
        *,
        kernel: KernelSettings | None = None,
        anatomical_images=(),
        kernelised_output_filename_prefix: str | os.PathLike | None = None,
        **osem_options,
    ):
        self.kernel_settings = kernel if kernel is not None else KernelSettings()
        self.anatomical_images = tuple(anatomical_images)
        prefix = kernelised_output_filename_prefix
        #: kept as given (a str): STIR's empty prefix in a folder names ``<folder>/_<n>.hv``
        self.kernelised_output_filename_prefix = None if prefix is None else os.fspath(prefix)
        self.kernel: Kernel | None = None
        #: the emission image ``K alpha`` after the last subiteration run (None before)
        self.kernelised_image = None
        #: the emission images written, in order
        self.kernelised_files: list[Path] = []
        self._frozen_kernel_image = None
        super().__init__(objective, projector, image_info, **osem_options)

    @classmethod
    def from_osem(cls, osem: OSEM, **kernel_options) -> KOSMAPOSL:
        """The KOSMAPOSL run with ``osem``'s data, projector, geometry and OSMAPOSL settings (a
        prepared ``.par`` run's, say), and ``kernel_options`` (this class's own parameters)."""
        return cls(
            osem.objective,
            osem.projector,
            osem.image_info,
            num_subsets=osem.num_subsets,
            num_subiterations=osem.num_subiterations,
            start_subiteration_num=osem.start_subiteration_num,
            start_subset_num=osem.start_subset_num,
            save_interval=osem.save_interval,
            output_filename_prefix=osem.output_filename_prefix,
            enforce_initial_positivity=osem.enforce_initial_positivity,
            minimum_relative_change=osem.minimum_relative_change,
            maximum_relative_change=osem.maximum_relative_change,
            sensitivity=osem.sensitivity_spec,
            report_log_likelihood=osem.report_log_likelihood,
            report_objective_interval=osem.report_objective_interval,
            overwrite=osem.overwrite,
            prior=osem.prior,
            map_model=osem.map_model,
            filters=osem.filters,
            comm=osem.comm,
            **kernel_options,
        )

    def _check(self) -> None:
        super()._check()
        problems = self.kernel_settings.problems(len(self.anatomical_images))
        if problems:
            raise StirGpuError(problems[0][1])
        freeze = self.kernel_settings.freeze_at_subiteration
        if freeze > 0 and self.start_subiteration_num > freeze:
            raise StirGpuError(
                f"freeze iterative kernel at subiteration number {freeze}: the run starts at subiteration "
                f"{self.start_subiteration_num}, after it, so the frozen kernel would never be made"
            )

    def _check_inputs_kept(self) -> None:
        super()._check_inputs_kept()
        files = {role: _file_of(pd) for role, pd in self.objective.given_inputs.items()}
        read = [reads(role, path) for role, path in files.items() if path is not None]
        written = [writes("kernelised estimate", f, IMAGE) for f in self.kernelised_output_files()]
        found = inputs_written(written, read)
        if found:
            raise StirGpuError(found[0][2])

    def kernelised_output_files(self) -> list[Path]:
        """Every emission image the run will write (empty without a kernelised prefix)."""
        if self.kernelised_output_filename_prefix is None:
            return []
        return [estimate_filename(self.kernelised_output_filename_prefix, n) for n in self.save_points()]

    def set_up(self) -> float:
        """OSEM's set-up (sensitivities, prior, filters), then the kernel (STIR's ``set_up``)."""
        seconds = super().set_up()
        self.kernel = self.kernel_settings.prepare(self.image_info, self.anatomical_images)
        return seconds

    def kernelise(self, image, alpha, subiteration_num: int | None = None):
        """STIR's ``compute_kernelised_image(out, image, alpha)`` (after :meth:`set_up`), in
        subiteration ``subiteration_num`` (None: a kernel not frozen)."""
        if self.kernel is None:
            self.kernel = self.kernel_settings.prepare(self.image_info, self.anatomical_images)
        return self.kernel.apply(image, alpha, updating=self._updating_kernel(subiteration_num))

    def _updating_kernel(self, subiteration_num: int | None) -> bool:
        """STIR's ``still_updating_iterative_kernel``."""
        freeze = self.kernel_settings.freeze_at_subiteration
        return freeze < 0 or subiteration_num is None or subiteration_num < freeze

    def _kernel_image(self, alpha, subiteration_num: int):
        """The image the kernel's emission part comes from in this subiteration (see the module
        docstring): a copy of ``alpha``, or the frozen one."""
        freeze = self.kernel_settings.freeze_at_subiteration
        if freeze > 0 and subiteration_num == freeze:
            self._frozen_kernel_image = alpha.copy()
        if self._updating_kernel(subiteration_num):
            return alpha.copy()
        return self._frozen_kernel_image

    def update(self, image, subiteration_num: int) -> tuple[object, float | None]:
        """Subiteration ``subiteration_num`` applied to ``alpha`` = ``image`` (in place); the
        emission image is kept as :attr:`kernelised_image` (and written at the save points).
        Returns ``(image, subset log-likelihood of the emission image before the update or None)``."""
        if self.sensitivities is None:
            raise StirGpuError("KOSMAPOSL.update: call set_up() first")
        n = int(subiteration_num)
        k = self.subset_num(n)
        kernel_image = self._kernel_image(image, n)
        emission = self.kernelise(image, kernel_image, n)
        upd = self.zeros()
        res = self.objective.gradient_plus_sensitivity(
            self.projector, emission, upd, k, self.num_subsets, return_loglik=self.report_log_likelihood
        )
        loglik = None
        if self.report_log_likelihood:
            upd, loglik = res
            loglik = float(loglik)
        elif res is not None:
            upd = res
        kupd = self.kernelise(upd, kernel_image, n)
        ksens = self.kernelise(self.sensitivities[k], kernel_image, n)
        if self.prior_is_zero:
            stir_divide(kupd, ksens, small_num=SMALL_NUM)
        else:
            denominator = osl_denominator(self._prior_gradient(image), ksens, self.num_subsets, self.map_model)
            stir_divide(kupd, denominator, small_num=SMALL_NUM)
        self._inter_update_filter(image, n)
        if n != 1:
            clip_update(kupd, self.minimum_relative_change, self.maximum_relative_change)
        image *= kupd
        self.kernelised_image = self.kernelise(image, kernel_image, n)
        self._write_kernelised(n)
        return image, loglik

    def _write_kernelised(self, subiteration_num: int) -> None:
        n = subiteration_num
        if self.kernelised_output_filename_prefix is None:
            return
        if n % self.save_interval and n != self.num_subiterations:
            return
        path = estimate_filename(self.kernelised_output_filename_prefix, n)
        with self.comm.together(f"writing {path}"):
            if self.comm.is_root:
                image = VoxelsOnCartesianGrid(self.image_info, fill=to_numpy(self.kernelised_image))
                write_image(path, image, overwrite=self.overwrite)
        self.kernelised_files.append(path)
