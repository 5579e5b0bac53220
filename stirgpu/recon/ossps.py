"""OSSPS: ordered-subsets separable paraboloidal surrogates, as STIR's ``OSSPS`` runs it.

Facts from ``OSSPSReconstruction.cxx`` (STIR 6.5), reproduced here.  Set-up (after the
objective function's, which computes or reads the sensitivities as for OSMAPOSL):

* ``enforce initial positivity condition`` (OSSPS's default: off) raises the initial estimate
  to at least 1e-5 (STIR's ``10.E-6F``) times its smallest positive value;
* the *precomputed denominator* ``d``: a file, all ones (``1``), or computed (and written as
  ``<prefix>_precomputed_denominator.hv``) as minus the objective function's
  ``add_multiplication_with_approximate_Hessian_without_penalty`` of an image of ones, that is,
  summed over subsets and every bin of the data (every timing position of TOF data, each with
  its own data)::

      d = sum_bins A^T( divide_and_truncate(A 1, y f^2) )

  with ``f`` the normalisation's factors (mean = (A x + a) / f), no additive term, and STIR's
  ``divide_and_truncate`` per viewgram (0 where ``A 1`` is at most 1e-6 of the viewgram's
  maximum, the quotient capped at 1e4, so a bin without counts weighs 1e4).  STIR 6.5 loses
  the timing position in this loop for TOF data (``docs/stir-plugin.md``, "OSSPS on TOF
  data"): stirgpu computes the definition above.

Subiteration ``n`` with subset ``k`` (STIR's order, float32 as STIR):

* at the first subiteration of the run, voxels whose total sensitivity is 0 are set to 0;
* ``g = B_k(divide_and_truncate(y, A_k x + a) - 1/f)`` (STIR's ``compute_sub_gradient``:
  the gradient without the sensitivity), minus the prior's gradient / K; ``g *= K``;
* the denominator at the first subiteration (and every one for a prior whose curvature
  depends on the image): ``2 c + d`` with ``c`` the prior's parabolic surrogate curvature
  (:meth:`~stirgpu.priors.QuadraticPrior.parabolic_surrogate_curvature`), else ``d``; raised to
  at least 1e-5 of its smallest positive value; it then replaces ``d`` for the later ones;
* ``x += g / denominator * relaxation / (1 + gamma * floor(n / K))``; clipped into
  ``[0, upper bound]``.

Outputs, save points, filters (STIR's inter-iteration and post-filters) and restarts are
OSMAPOSL's (:class:`~.osem.OSEM`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import GeometryError, StirGpuError
from ..formats import ProjDataInMemory, VoxelsOnCartesianGrid, write_image
from ..formats.naming import IMAGE
from ..formats.roles import inputs_written, reads, writes
from ..projectors.poisson import MAX_QUOTIENT, SMALL_FRACTION
from .arrays import FLOAT32_MAX, array_module, threshold_min_to_small_positive, to_numpy
from .osem import OSEM, _file_of
from .views import TofBroadcast

__all__ = [
    "OSSPS",
    "approximate_hessian_of_ones",
    "divide_and_truncate_views",
    "denominator_filename",
    "OSSPS_SMALL_NUM",
    "PARABOLIC_SURROGATE_PRIORS",
]

#: STIR's priors derived from ``PriorWithParabolicSurrogate`` that stirgpu has (their
#: ``parabolic_surrogate_curvature``); not the Gibbs ones, whatever their potential
PARABOLIC_SURROGATE_PRIORS = ("Quadratic", "Logcosh")
#: STIR's OSSPS threshold (``10.E-6F``) of the initial positivity and of the denominator
OSSPS_SMALL_NUM = 1e-5


def denominator_filename(prefix: str | Path) -> Path:
    """STIR's name of the computed denominator: ``<prefix>_precomputed_denominator.hv``."""
    return Path(f"{prefix}_precomputed_denominator.hv")


def divide_and_truncate_views(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """STIR's ``divide_and_truncate`` (no rim truncation) of views ``[v, axial, tangential]``,
    each view one viewgram: 0 where the numerator is at most 1e-6 of its viewgram's maximum,
    else ``min(numerator / denominator, 1e4)`` (also where the denominator is 0)."""
    small = np.maximum(numerator.max(axis=(1, 2), keepdims=True) * np.float32(SMALL_FRACTION), np.float32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = numerator / denominator
    capped = numerator > MAX_QUOTIENT * denominator
    q = np.where(capped, MAX_QUOTIENT, q)
    return np.where(numerator <= small, np.float32(0), q).astype(np.float32)


def approximate_hessian_of_ones(objective, projector, out_image, num_subsets: int):
    """``out_image = sum_k A_k^T(divide_and_truncate(A_k 1, y f^2))`` (overwritten, returned):
    minus STIR's ``add_multiplication_with_approximate_Hessian_without_penalty`` of ones, for
    the objective's processed segments and every timing position.  One subset at a time, through
    one projection data set in host memory (the size of the processed data) that holds the
    subset's forward projection and then its quotient."""
    pdi = objective.proj_data_info
    y = objective.inputs["measured"]
    f = objective.inputs["normalisation"]
    if f is not None and f.get_proj_data_info() != pdi:
        f = TofBroadcast(f, pdi)
    xp = array_module(out_image)
    ones = xp.ones_like(out_image)
    out_image[...] = 0
    work = ProjDataInMemory(pdi)
    for k in range(num_subsets):
        views = pdi.subset_views(k, num_subsets)
        projector.forward_project(work, ones, k, num_subsets)
        for seg in range(pdi.get_min_segment_num(), pdi.get_max_segment_num() + 1):
            for t in range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1):
                data = y.read_views(seg, views, timing_pos=t)
                if f is not None:
                    factors = f.read_views(seg, views, timing_pos=t)
                    data = data * factors * factors  # STIR: normalisation applied twice, in float
                fwd = work.read_views(seg, views, timing_pos=t)
                work.write_views(divide_and_truncate_views(fwd, data), seg, views, timing_pos=t)
        projector.back_project(out_image, work, k, num_subsets, accumulate=True)
    return out_image


class OSSPS(OSEM):
    """STIR's OSSPS (see the module docstring), driving a streaming ``ProjectorPair``.

    Parameters as :class:`~.osem.OSEM` (OSMAPOSL's ``MAP model``, relative-change limits and
    inter-update filter do not exist here), and:

    relaxation_parameter, relaxation_gamma, upper_bound
        STIR's keys (1, 0.1, the largest float32).
    precomputed_denominator
        None: computed at set-up (and written beside the estimates as
        ``<prefix>_precomputed_denominator.hv`` when there is a prefix); ``1.0``: ones (STIR's
        ``1``); an image (``VoxelsOnCartesianGrid`` of the reconstruction's geometry) or array.
    prior
        None, or a prior with a parabolic surrogate (STIR's ``PriorWithParabolicSurrogate``:
        stirgpu's :class:`~stirgpu.priors.QuadraticPrior` and :class:`~stirgpu.priors.LogcoshPrior`).
    enforce_initial_positivity
        OSSPS's default is False.
    denominator_prefix
        Where a computed denominator is written (``<prefix>_precomputed_denominator.hv``) when it
        is not the estimates' prefix: STIR writes it even with ``disable output := 1``.
    """

    def __init__(
        self,
        objective,
        projector,
        image_info,
        *,
        relaxation_parameter: float = 1.0,
        relaxation_gamma: float = 0.1,
        upper_bound: float = FLOAT32_MAX,
        precomputed_denominator=None,
        enforce_initial_positivity: bool = False,
        denominator_prefix: str | Path | None = None,
        **kw,
    ):
        for key in ("map_model", "minimum_relative_change", "maximum_relative_change"):
            if key in kw:
                raise StirGpuError(f"OSSPS: {key} is an OSMAPOSL setting; STIR's OSSPS has none")
        self.relaxation_parameter = float(relaxation_parameter)
        self.relaxation_gamma = float(relaxation_gamma)
        self.upper_bound = float(upper_bound)
        self.precomputed_denominator = precomputed_denominator
        self._denominator = None
        #: the denominator file this run writes (None: none)
        self.denominator_file: Path | None = None
        super().__init__(objective, projector, image_info, enforce_initial_positivity=enforce_initial_positivity, **kw)
        prefix = self.output_filename_prefix if denominator_prefix is None else denominator_prefix
        if precomputed_denominator is None and prefix is not None:
            self.denominator_file = denominator_filename(prefix)
            self._check_denominator_file(self.denominator_file)

    # -- validation ---------------------------------------------------------------------------
    def _check_prior(self) -> None:
        super()._check_prior()
        name = getattr(self.prior, "registered_name", type(self.prior).__name__)
        if self.prior is not None and name not in PARABOLIC_SURROGATE_PRIORS:
            raise StirGpuError(
                f"OSSPS: the prior {name!r} has no parabolic surrogate; STIR's OSSPS takes priors derived from "
                f"PriorWithParabolicSurrogate (stirgpu: {', '.join(PARABOLIC_SURROGATE_PRIORS)})"
            )
        if self.relaxation_parameter <= 0:
            raise StirGpuError(f"OSSPS: relaxation parameter {self.relaxation_parameter:g}: must be positive")
        if self.relaxation_gamma < 0:
            raise StirGpuError(f"OSSPS: relaxation gamma {self.relaxation_gamma:g}: must be >= 0")
        d = self.precomputed_denominator
        if isinstance(d, VoxelsOnCartesianGrid) and d.info != self.image_info:
            raise GeometryError(
                f"OSSPS: the precomputed denominator's geometry {d.info!r} differs from the image's "
                f"{self.image_info!r} (STIR refuses this too)"
            )

    def _check_denominator_file(self, path: Path) -> None:
        """The computed denominator's file is never one of the objective's inputs."""
        files = {role: _file_of(pd) for role, pd in self.objective.given_inputs.items()}
        read = [reads(role, f) for role, f in files.items() if f is not None]
        found = inputs_written([writes("precomputed denominator", path, IMAGE)], read)
        if found:
            raise StirGpuError(found[0][2])

    # -- set up -------------------------------------------------------------------------------
    def set_up(self) -> float:
        seconds = super().set_up()
        self.prepare_denominator()
        return seconds

    def prepare_denominator(self) -> None:
        """Compute (and write), read or fill the precomputed denominator: what :meth:`set_up`
        does after the sensitivities (for a caller that sets the sensitivities itself)."""
        self._denominator = self._initial_denominator()

    def set_up_files(self) -> list[Path]:
        """The sensitivities and the denominator :meth:`set_up` wrote."""
        files = super().set_up_files()
        if self.denominator_file is not None and self._denominator is not None:
            files.append(self.denominator_file)
        return files

    def _initial_denominator(self):
        d = self.precomputed_denominator
        if d is None:
            out = approximate_hessian_of_ones(self.objective, self.projector, self.zeros(), self.num_subsets)
            if self.denominator_file is not None:
                with self.comm.together(f"writing {self.denominator_file}"):
                    if self.comm.is_root:
                        image = VoxelsOnCartesianGrid(self.image_info, fill=to_numpy(out))
                        write_image(self.denominator_file, image, overwrite=self.overwrite)
            return out
        if isinstance(d, (int, float, np.floating, np.integer)):
            if float(d) != 1.0:
                raise StirGpuError(f"OSSPS: precomputed denominator {d!r}: STIR's constant is 1 (or give an image)")
            out = self.zeros()
            out[...] = 1
            return out
        array = d.array if isinstance(d, VoxelsOnCartesianGrid) else to_numpy(d)
        if tuple(array.shape) != tuple(self.image_info.shape):
            raise GeometryError(
                f"OSSPS: precomputed denominator of shape {tuple(array.shape)}, the image's is {self.image_info.shape}"
            )
        return self.to_device(np.array(array, dtype=np.float32))

    def _initial_positivity(self, x) -> None:
        threshold_min_to_small_positive(x, OSSPS_SMALL_NUM)

    # -- one subiteration ---------------------------------------------------------------------------
    def update(self, image, subiteration_num: int) -> tuple[object, float | None]:
        """STIR's ``OSSPSReconstruction::update_estimate`` (module docstring), in place."""
        if self.sensitivities is None or self._denominator is None:
            raise StirGpuError("OSSPS.update: call set_up() first")
        n, K = int(subiteration_num), self.num_subsets
        first = n == self.start_subiteration_num
        if first:
            image[self.sensitivities.total == 0] = 0  # STIR's fill_nonidentifiable_target_parameters
        k = self.subset_num(n)
        gradient = self._sub_gradient(image, k)
        f32 = np.float32
        gradient *= f32(K)
        recompute = not self.prior_is_zero and bool(
            getattr(self.prior, "parabolic_surrogate_curvature_depends_on_argument", False)
        )
        if first or recompute:
            denominator = self._denominator.copy()
            if not self.prior_is_zero:
                denominator = self.prior.parabolic_surrogate_curvature(image) * f32(2) + self._denominator
            threshold_min_to_small_positive(denominator, OSSPS_SMALL_NUM)
            if not recompute:
                self._denominator = denominator
        else:
            denominator = self._denominator
        gradient /= denominator
        step = f32(self.relaxation_parameter) / (f32(1) + f32(self.relaxation_gamma) * f32(n // K))
        gradient *= step
        image += gradient
        array_module(image).clip(image, f32(0), f32(self.upper_bound), out=image)
        return image, None

    def _sub_gradient(self, image, k: int):
        """STIR's ``compute_sub_gradient``: ``B_k(q - 1/f)`` over the data's own geometry (every
        timing position), minus the prior's gradient / K."""
        gradient = self.objective.gradient_plus_sensitivity(self.projector, image, self.zeros(), k, self.num_subsets)
        gradient -= self.projector.sensitivity(
            self.zeros(), k, self.num_subsets, multiplicative=self.objective.multiplicative
        )
        if not self.prior_is_zero:
            gradient -= self._prior_gradient(image) / np.float32(self.num_subsets)
        return gradient
