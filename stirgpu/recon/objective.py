"""The Poisson log-likelihood of OSMAPOSL (STIR's ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData``).

Model (STIR's documentation of that class, and its code): with ``A`` the projector,
``f`` the correction factors of ``Bin Normalisation type := From ProjData`` (STIR's
``BinNormalisation::undo`` divides by them) and ``a`` the ``additive sinogram``,

    mean data  ybar = (A x + a) / f

i.e. the additive sinogram is in *normalised* (pre-corrected) units -- STIR's class
documentation: "the background term a is stored in additive_proj_data_sptr (note: this
is not r)", with ``r`` (stirgpu's ``background`` ``b = a / f``) the background in
measured units: ``ybar = A x / f + b``.  (Checked against
``stir_reference_lpp2.0.7/osem953*``: this model reproduces STIR's estimates to 1e-4 of the
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

TOF data (docs/tof.md): the additive sinogram must be TOF too; the normalisation may be
non-TOF, its factors applying to every timing position (:class:`~.views.TofBroadcast`, STIR's
``BinNormalisationFromProjData``).  The sensitivity is then back projected without TOF, on the
non-TOF geometry with the non-TOF factors, unless ``use time-of-flight sensitivities`` or a TOF
normalisation asks for all timing positions (STIR's ``use_tofsens``).

The quotient ``y / ybar`` follows STIR's ``divide_and_truncate`` (0 where ``y`` is
nearly 0, capped at 1e4) inside the projector's fused call
(:mod:`stirgpu.projectors.poisson`).
"""

from __future__ import annotations

from ..errors import GeometryError
from ..formats import ProjData
from ..formats.finite import check_finite_store
from ..geometry import ImageInfo, ProjDataInfo
from .views import Constant, EndPlanes, Quotient, TofBroadcast, restrict_segments

__all__ = ["PoissonLogLikelihood", "as_float_image", "geometry_problem", "sensitivity_uses_same_projector"]


def geometry_problem(name: str, proj_data_info: ProjDataInfo, measured: ProjDataInfo) -> str | None:
    """Why STIR's OSMAPOSL cannot take ``name`` (``"additive"`` or ``"normalisation"``) of
    geometry ``proj_data_info`` with measured data of geometry ``measured``; None if it can.

    Both must have the measured data's geometry, with one exception that STIR 6.5 makes
    (``BinNormalisationFromProjData::set_up``): a non-TOF normalisation with TOF data, whose
    factors then apply to every timing position.  A non-TOF additive sinogram with TOF data
    stops STIR's OSMAPOSL at its first TOF viewgram ("Viewgram constructed with out-of-range
    indices"); a TOF additive sinogram with non-TOF data runs there, adding its timing position
    0 alone, which stirgpu refuses rather than lose the others (docs/tof.md)."""
    if proj_data_info == measured:
        return None
    n, n_measured = proj_data_info.get_num_tof_poss(), measured.get_num_tof_poss()
    if proj_data_info.create_non_tof_clone() != measured.create_non_tof_clone():
        return f"its geometry differs from the measured data's:\n  {name}: {proj_data_info!r}\n  measured: {measured!r}"
    tof, tof_measured = proj_data_info.is_tof_data(), measured.is_tof_data()
    data = "the measured data ('input file')"
    if tof == tof_measured:
        return (
            f"its TOF sampling ({n} timing positions, TOF mashing factor {proj_data_info.get_tof_mash_factor()}) "
            f"differs from that of {data} ({n_measured}, {measured.get_tof_mash_factor()}): they must be equal"
        )
    if name == "normalisation" and tof_measured:
        return None
    if name == "normalisation":
        return (
            f"the normalisation has {n} TOF timing positions but {data} are non-TOF: STIR 6.5 refuses this "
            f"too ('BinNormalisationFromProjData: incompatible projection data'); give a non-TOF normalisation"
        )
    if tof_measured:
        return (
            f"the additive sinogram is non-TOF but {data} have {n_measured} TOF timing positions: STIR 6.5's "
            f"OSMAPOSL stops on this ('Viewgram constructed with out-of-range indices'); give an additive "
            f"sinogram with their TOF sampling"
        )
    return (
        f"the additive sinogram has {n} TOF timing positions but {data} are non-TOF: STIR 6.5's OSMAPOSL "
        f"would add its timing position 0 alone to the non-TOF model and ignore the others; stirgpu refuses "
        f"this: give a non-TOF additive sinogram"
    )


def _check_input(name: str, pd: ProjData | None, measured: ProjDataInfo) -> None:
    if pd is None:
        return
    if not isinstance(pd, ProjData):
        raise GeometryError(f"{name}: expected projection data (a stirgpu ProjData), not {type(pd).__name__}")
    problem = geometry_problem(name, pd.get_proj_data_info(), measured)
    if problem is not None:
        raise GeometryError(f"{name}: {problem}")


def sensitivity_uses_same_projector(
    measured: ProjDataInfo, normalisation: ProjDataInfo | None, use_tof_sensitivities: bool
) -> bool:
    """STIR's rule (``PoissonLogLikelihoodWithLinearModelForMeanAndProjData``'s
    ``set_up_before_sensitivity`` and ``sensitivity_uses_same_projector``): the sensitivity
    of TOF data is back projected over all timing positions (with the data's projector) when
    ``use time-of-flight sensitivities`` says so or the normalisation is TOF (more than one
    timing position: STIR then sets that key itself); otherwise without TOF, on the data's
    non-TOF geometry.  Non-TOF data: always the data's projector."""
    if not measured.is_tof_data() or use_tof_sensitivities:
        return True
    return normalisation is not None and normalisation.get_num_tof_poss() > 1


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
        With TOF measured data it may be non-TOF (its factors apply to every timing position).
    zero_end_planes_of_segment_0, max_segment_num_to_process
        As STIR's keys of the same names (None: all segments).
    use_tof_sensitivities
        STIR's ``use time-of-flight sensitivities``: with TOF data, back project the
        sensitivity over all timing positions even without a TOF normalisation (see
        :func:`sensitivity_uses_same_projector`).

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
        use_tof_sensitivities: bool = False,
    ):
        if not isinstance(measured, ProjData):
            raise GeometryError(
                f"measured: expected projection data (a stirgpu ProjData), not {type(measured).__name__}"
            )
        full = measured.get_proj_data_info()
        _check_input("additive", additive, full)
        _check_input("normalisation", normalisation, full)
        norm_pdi = None if normalisation is None else normalisation.get_proj_data_info()
        #: False: the sensitivity of TOF data is back projected without TOF (STIR's rule)
        self.sensitivity_uses_same_projector = sensitivity_uses_same_projector(
            full, norm_pdi, bool(use_tof_sensitivities)
        )
        if norm_pdi is not None and norm_pdi.is_tof_data() and not self.sensitivity_uses_same_projector:
            raise GeometryError(
                "normalisation: TOF with one timing position; STIR computes this sensitivity without TOF "
                "and cannot set this normalisation up for it: use use_tof_sensitivities=True"
            )
        self._measured_full = measured
        #: the stores given, by role (what a run must never write over)
        given = (("input data", measured), ("additive", additive), ("normalisation", normalisation))
        self.given_inputs = {role: pd for role, pd in given if pd is not None}
        self.zero_end_planes_of_segment_0 = bool(zero_end_planes_of_segment_0)
        self.max_segment_num_to_process = (
            None if max_segment_num_to_process is None else int(max_segment_num_to_process)
        )
        y = restrict_segments(measured, self.max_segment_num_to_process)
        a = restrict_segments(additive, self.max_segment_num_to_process)
        f_own = restrict_segments(normalisation, self.max_segment_num_to_process)
        pdi = y.get_proj_data_info()
        #: the inputs as given (the segments processed), by the names their messages use
        self.inputs = {"measured": y, "additive": a, "normalisation": f_own}
        # a non-TOF normalisation applies to every timing position of TOF data (STIR)
        f = f_own if f_own is None or f_own.get_proj_data_info() == pdi else TofBroadcast(f_own, pdi)
        #: the geometry the sensitivity is back projected on (STIR's ``sens_proj_data_info_sptr``)
        self.sensitivity_proj_data_info = pdi if self.sensitivity_uses_same_projector else pdi.create_non_tof_clone()
        f_sens = f if self.sensitivity_uses_same_projector else f_own
        if self.zero_end_planes_of_segment_0:
            # STIR zeroes y, a and 1/f there; f = 0 makes the projector leave those bins out
            y = EndPlanes(y, 0.0)
            a = None if a is None else EndPlanes(a, 0.0)
            f = EndPlanes(f if f is not None else Constant(pdi, 1.0), 0.0)
            f_sens = EndPlanes(f_sens if f_sens is not None else Constant(self.sensitivity_proj_data_info, 1.0), 0.0)
        #: what the projector reads: y, the additive sinogram a (normalised units) for the update,
        #: the background b = a / f (measured units) and f for sensitivities and log-likelihoods
        self.measured = y
        self.multiplicative = f
        #: the factors of the sensitivity, on :attr:`sensitivity_proj_data_info`
        self.sensitivity_multiplicative = f_sens
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
        the last bit (:func:`stirgpu.kernels.joseph.lors.stir_default_image_info`)."""
        from ..kernels.joseph.lors import stir_default_image_info

        return stir_default_image_info(
            self._measured_full.get_proj_data_info(),
            zoom=zoom,
            xy_size=xy_size,
            z_size=z_size,
            origin=(z_offset, 0.0, 0.0),
        )

    def check_finite(self) -> None:
        """Refuse measured data, an additive sinogram or a normalisation holding NaN or ±Inf
        (:class:`~stirgpu.errors.NonFiniteError` naming the file, else the argument, and the
        count): each read once, chunk by chunk, on the host (what OSEM does before its first
        subiteration: docs/execution.md, "Non-finite inputs")."""
        for name, store in self.inputs.items():
            if store is not None:
                check_finite_store(store, name)

    def set_up(self, projector, image_info: ImageInfo) -> None:
        """Prepare ``projector`` (a :class:`~stirgpu.projectors.ProjectorPair`) for these data
        and ``image_info``."""
        projector.set_up(self.proj_data_info, image_info)

    # -- the two operations OSMAPOSL uses ------------------------------------------------
    def subset_sensitivity(self, projector, out_image, subset_num: int, num_subsets: int):
        """``out_image = B_k(1/f)`` (overwritten) and returned.  Where
        :attr:`sensitivity_uses_same_projector` is False (TOF data, no TOF normalisation, no
        ``use_tof_sensitivities``), ``B_k`` is the non-TOF
        back projection, as in STIR: the projector (set up by :meth:`set_up`) is set up on the
        non-TOF geometry for the call, then back on the data's; the uploaded input image is
        forgotten then (OSEM passes its image with every call)."""
        own = self.sensitivity_proj_data_info
        if own == self.proj_data_info:
            return projector.sensitivity(out_image, subset_num, num_subsets, multiplicative=self.multiplicative)
        image_info = projector.get_image_info()
        projector.set_up(own, image_info)
        try:
            return projector.sensitivity(
                out_image, subset_num, num_subsets, multiplicative=self.sensitivity_multiplicative
            )
        finally:
            projector.set_up(self.proj_data_info, image_info)

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
