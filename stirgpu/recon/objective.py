"""The Poisson log-likelihood of OSMAPOSL (STIR's ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData``).

Model (STIR's documentation of that class, and its code): with ``A`` the projector,
``f`` the correction factors of ``Bin Normalisation type := From ProjData`` (STIR's
``BinNormalisation::undo`` divides by them) and ``a`` the ``additive sinogram``,

    mean data  ybar = (A x + a) / f

i.e. the additive sinogram is in *normalised* (pre-corrected) units -- STIR's class
documentation: "the background term a is stored in additive_proj_data_sptr (note: this
is not r)", with ``r`` (stirgpu's ``background`` ``b = a / f``) the background in
measured units: ``ybar = A x / f + b``.  (Checked against
``stir_reference/osem953*``: this model reproduces STIR's estimates to 1e-4 of the
maximum, the model ``A x / f + a`` misses by 0.22 of it.)

What OSMAPOSL needs from it (no prior):

* subset sensitivity ``s_k = B_k(1 / f)`` (back projection over subset ``k``'s views);
* ``B_k(divide_and_truncate(y, A_k x + a))``, the gradient plus the sensitivity (STIR's
  ``compute_sub_gradient_without_penalty_plus_sensitivity``).  STIR's
  ``RPC_process_related_viewgrams_gradient`` divides the data by ``A x + a`` -- the
  normalisation is not applied there -- so its cap of the quotient at 1e4 applies to
  ``y / (A x + a)``, not to ``y / ybar``; this is the projector's fused
  ``forward_back_ratio`` with ``background = a`` and no multiplicative factors.  (Capping
  ``y / ybar`` and dividing by ``f`` afterwards caps ``y / (A x + a)`` at ``1e4 / f`` instead:
  from an initial estimate of 1e-6 without an additive term, 4 % of the maximum off STIR.)

The log-likelihood (reports only) uses the mean ``ybar`` itself, as STIR's
``RPC_process_related_viewgrams_accumulate_loglikelihood`` does: the fused call with
``background = a / f`` and the factors ``f``.

STIR's handling of the inputs, reproduced with read-only views (:mod:`.views`):
``maximum absolute segment number to process`` keeps segments ``-m..m``;
``zero end planes of segment 0`` zeroes the first and last axial position of
segment 0 in ``y``, ``a`` and the multiplicative factors ``1/f``; here ``y`` and ``a``
are zeroed there (the quotient of a zero datum is 0) and ``f`` is set to 0 there, which
the projector treats as "bin left out" (sensitivity contribution and log-likelihood term
0), and ``a / f`` is 0 there too.

The quotient ``y / ybar`` follows STIR's ``divide_and_truncate`` (0 where ``y`` is
nearly 0, capped at 1e4) inside the projector's fused call
(:mod:`stirgpu.projectors.poisson`).
"""

from __future__ import annotations

from ..errors import GeometryError
from ..formats import ProjData
from ..geometry import ImageInfo, ProjDataInfo
from .views import Constant, EndPlanes, Quotient, restrict_segments

__all__ = ["PoissonLogLikelihood", "as_float_image"]


def _check_same(name: str, pd: ProjData | None, pdi: ProjDataInfo) -> None:
    if pd is None:
        return
    if not isinstance(pd, ProjData):
        raise GeometryError(f"{name}: expected projection data (a stirgpu ProjData), not {type(pd).__name__}")
    if pd.get_proj_data_info() != pdi:
        raise GeometryError(
            f"{name}: its geometry differs from the measured data's:\n  {name}: "
            f"{pd.get_proj_data_info()!r}\n  measured: {pdi!r}"
        )


class PoissonLogLikelihood:
    """OSMAPOSL's objective function for projection data (no prior).

    Parameters
    ----------
    measured
        The measured data ``y`` (any :class:`~stirgpu.formats.ProjData`: on disk or in memory).
    additive
        STIR's ``additive sinogram`` ``a`` (normalised units, see the module docstring), or None.
    normalisation
        The correction factors ``f`` of ``Bin Normalisation From ProjData``, or None (f = 1).
    zero_end_planes_of_segment_0, max_segment_num_to_process
        As STIR's keys of the same names (None: all segments).

    Nothing is read until a projector uses it; the inputs are never modified.
    """

    def __init__(
        self,
        measured: ProjData,
        *,
        additive: ProjData | None = None,
        normalisation: ProjData | None = None,
        zero_end_planes_of_segment_0: bool = False,
        max_segment_num_to_process: int | None = None,
    ):
        if not isinstance(measured, ProjData):
            raise GeometryError(
                f"measured: expected projection data (a stirgpu ProjData), not {type(measured).__name__}"
            )
        full = measured.get_proj_data_info()
        _check_same("additive", additive, full)
        _check_same("normalisation", normalisation, full)
        self._measured_full = measured
        self.zero_end_planes_of_segment_0 = bool(zero_end_planes_of_segment_0)
        self.max_segment_num_to_process = (
            None if max_segment_num_to_process is None else int(max_segment_num_to_process)
        )
        y = restrict_segments(measured, self.max_segment_num_to_process)
        a = restrict_segments(additive, self.max_segment_num_to_process)
        f = restrict_segments(normalisation, self.max_segment_num_to_process)
        if self.zero_end_planes_of_segment_0:
            # STIR zeroes y, a and 1/f there; f = 0 makes the projector leave those bins out
            y = EndPlanes(y, 0.0)
            a = None if a is None else EndPlanes(a, 0.0)
            f = EndPlanes(f if f is not None else Constant(y.get_proj_data_info(), 1.0), 0.0)
        #: what the projector reads: y, the additive sinogram a (normalised units) for the update,
        #: the background b = a / f (measured units) and f for sensitivities and log-likelihoods
        self.measured = y
        self.multiplicative = f
        self.background = None if a is None else (a if f is None else Quotient(a, f))
        self.additive = a

    @property
    def proj_data_info(self) -> ProjDataInfo:
        """The geometry processed (after ``maximum absolute segment number to process``)."""
        return self.measured.get_proj_data_info()

    def default_image_info(
        self, zoom: float = 1.0, xy_size: int | None = None, z_size: int | None = None, z_offset: float = 0.0
    ) -> ImageInfo:
        """STIR's image for these data (``zoom``, ``XY/Z output image size``, ``Z offset``), to
        the last bit (:func:`stirgpu.kernels.stir_lors.stir_default_image_info`)."""
        from ..kernels.stir_lors import stir_default_image_info

        return stir_default_image_info(
            self._measured_full.get_proj_data_info(),
            zoom=zoom,
            xy_size=xy_size,
            z_size=z_size,
            origin=(z_offset, 0.0, 0.0),
        )

    def set_up(self, projector, image_info: ImageInfo) -> None:
        """Prepare ``projector`` (a :class:`~stirgpu.projectors.ProjectorPair`) for these data
        and ``image_info``."""
        projector.set_up(self.proj_data_info, image_info)

    # -- the two operations OSMAPOSL uses ------------------------------------------------
    def subset_sensitivity(self, projector, out_image, subset_num: int, num_subsets: int):
        """``out_image = B_k(1/f)`` (overwritten) and returned."""
        return projector.sensitivity(out_image, subset_num, num_subsets, multiplicative=self.multiplicative)

    def gradient_plus_sensitivity(
        self, projector, image, out_image, subset_num: int, num_subsets: int, return_loglik: bool = False
    ):
        """``out_image = B_k(divide_and_truncate(y, A_k x + a))`` (overwritten), STIR's numerator.
        Returns ``out_image``, or ``(out_image, log-likelihood of subset k at x)`` with
        ``return_loglik`` (a second pass: the log-likelihood needs the mean, with ``f``)."""
        loglik = None
        if return_loglik:
            scratch = out_image.copy()
            _, loglik = projector.forward_back_ratio(
                image,
                self.measured,
                subset_num,
                num_subsets,
                background=self.background,
                multiplicative=self.multiplicative,
                out_image=scratch,
                accumulate=False,
                return_loglik=True,
            )
        # STIR's numerator B(y / (A x + a)): a added with no factors, as STIR's gradient does
        res = projector.forward_back_ratio(
            image,
            self.measured,
            subset_num,
            num_subsets,
            background=self.additive,
            multiplicative=None,
            out_image=out_image,
            accumulate=False,
        )
        res = out_image if res is None else res
        return (res, loglik) if return_loglik else res

    def log_likelihood(self, projector, image) -> float:
        """The objective function (no prior) at ``image``: ``sum(y log ybar - ybar)`` over every
        processed bin, with STIR's ``accumulate_loglikelihood`` truncation (one fused pass)."""
        _, ll = projector.forward_back_ratio(
            image,
            self.measured,
            0,
            1,
            background=self.background,
            multiplicative=self.multiplicative,
            return_loglik=True,
        )
        return float(ll)

    def subsets_are_balanced(self, num_subsets: int) -> bool:
        """STIR's test for trivial symmetries: every subset has as many views."""
        return self.proj_data_info.subsets_are_balanced(num_subsets)


def as_float_image(array, image_info: ImageInfo, name: str = "image"):
    """Check an image array against ``image_info`` (shape, float32)."""
    shape = tuple(getattr(array, "shape", ()))
    if shape != tuple(image_info.shape):
        raise GeometryError(f"{name}: shape {shape} does not match the image geometry {image_info.shape}")
    if str(getattr(array, "dtype", "")) != "float32":
        raise GeometryError(f"{name}: expected float32, got {getattr(array, 'dtype', type(array).__name__)}")
    return array
