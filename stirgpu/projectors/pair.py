"""The projector pair: a forward and a back projector on one session, with the fused
per-chunk operations OSEM needs."""

from __future__ import annotations

import functools

from ..errors import renamed_arguments
from .back import BackProjector, back_project
from .base import StreamingProjector, _pdi_source
from .forward import ForwardProjector, forward_project
from .poisson import BACKGROUND_RENAMED
from .programs import PoissonRatioProgram, SensitivityProgram

__all__ = ["ProjectorPair"]


class ProjectorPair(StreamingProjector):
    """A forward and a back projector on one :class:`~stirgpu.projectors.session.ProjectionSession`
    (so one set-up, one uploaded image, one engine with its buffers), plus OSEM's fused steps:

    * :meth:`forward_back_ratio` -- ``B_s( y / ((A_s x)/f + b) / f )`` with STIR's division
      rule, and optionally the Poisson log-likelihood, chunk by chunk (``b``: the background
      in measured units);
    * :meth:`sensitivity` -- ``B_s(1/f)`` (``B_s(1)`` without factors).

    The pair projects in both directions itself (:meth:`forward_project`, :meth:`back_project`,
    its own ``last_stats``); :attr:`forward` and :attr:`back` are its two directions as a
    :class:`ForwardProjector` and a :class:`BackProjector` on the same session (STIR's
    ``get_forward_projector_sptr()`` / ``get_back_projector_sptr()``), with statistics of their own.

    Options: see :mod:`stirgpu.projectors.session`; ``session=`` makes a pair on an existing session.
    """

    @functools.cached_property
    def forward(self) -> ForwardProjector:
        """The pair's forward projector: a ForwardProjector on the pair's session (one object,
        made at first use)."""
        return ForwardProjector(session=self.session)

    @functools.cached_property
    def back(self) -> BackProjector:
        """The pair's back projector: a BackProjector on the pair's session (one object, made at
        first use)."""
        return BackProjector(session=self.session)

    def get_forward_projector(self) -> ForwardProjector:
        """:attr:`forward`: a ForwardProjector sharing this pair's session (engine, set-up,
        uploaded image)."""
        return self.forward

    def get_back_projector(self) -> BackProjector:
        """:attr:`back`: a BackProjector sharing this pair's session."""
        return self.back

    def _forward_and_back(self) -> tuple[ProjectorPair, ProjectorPair]:
        return self, self

    def forward_project(
        self,
        proj_data_out,
        image=None,
        subset_num: int = 0,
        num_subsets: int = 1,
        *,
        views=None,
        additive=None,
        multiplicative=None,
        background=None,
    ):
        """:meth:`ForwardProjector.forward_project`, by the pair."""
        return forward_project(
            self, proj_data_out, image, subset_num, num_subsets, views, additive, multiplicative, background
        )

    def back_project(
        self,
        image_out,
        proj_data,
        subset_num: int = 0,
        num_subsets: int = 1,
        accumulate: bool = False,
        *,
        views=None,
        multiplicative=None,
    ):
        """:meth:`BackProjector.back_project`, by the pair."""
        return back_project(self, image_out, proj_data, subset_num, num_subsets, accumulate, views, multiplicative)

    @renamed_arguments(additive=BACKGROUND_RENAMED)
    def forward_back_ratio(
        self,
        image,
        measured,
        subset_num: int = 0,
        num_subsets: int = 1,
        background=None,
        multiplicative=None,
        out_image=None,
        accumulate: bool = False,
        return_loglik: bool = False,
    ):
        """OSEM's update numerator for one subset, fused per chunk (no full-size intermediate).

        Computes ``B_s( q / f )`` with ``q = divide_and_truncate(y, (A_s x)/f + b)`` (STIR's rule,
        :mod:`stirgpu.projectors.poisson`), ``y`` = ``measured``, ``b`` = ``background`` (None: 0)
        in *measured* units, ``f`` = ``multiplicative`` (None: 1), all projection data (stirgpu
        stores or STIR ProjData).  ``image`` is x (None: the image of :meth:`set_input`).
        STIR's ``additive sinogram`` ``a`` is in normalised units (mean = (A x + a)/f), so it
        is ``background = a / f`` here -- or ``background = a`` with no ``multiplicative``,
        which is STIR's update numerator ``B(y / (A x + a))``
        (:class:`stirgpu.recon.PoissonLogLikelihood` makes both calls).

        The result replaces ``out_image`` (is added to it with ``accumulate``); with
        ``out_image=None`` a new numpy array is returned.  With ``return_loglik`` the result is
        ``(image, loglik)``, ``loglik`` = sum over the subset of ``y log(ybar) - ybar`` (STIR's
        ``accumulate_loglikelihood`` rule).
        """
        self._auto_set_up(_pdi_source(measured), image if image is not None else out_image)
        sources = {"measured": self._store(measured, "measured")}
        if background is not None:
            sources["background"] = self._store(background, "background")
        if multiplicative is not None:
            sources["multiplicative"] = self._store(multiplicative, "multiplicative")
        self._check_image(image, "image")
        self._check_image(out_image, "out_image")
        views = self._views(subset_num, num_subsets)
        upload = self._prepare_input(image)
        program = PoissonRatioProgram(
            self.session.kernel_geometry, background is not None, multiplicative is not None, bool(return_loglik)
        )
        result = self._run(
            program,
            views,
            sources,
            {},
            "forward-back ratio",
            subset=(subset_num, num_subsets),
            upload=upload,
            **self._result_target(out_image, accumulate),
        )
        out = self._output_image(out_image, self._finish_image(result.image), accumulate)
        return (out, result.scalars["loglik"]) if return_loglik else out

    def sensitivity(
        self, out_image=None, subset_num: int = 0, num_subsets: int = 1, multiplicative=None, accumulate: bool = False
    ):
        """Subset sensitivity ``B_s(1/f)`` computed on the device from the factors ``f``
        (``multiplicative``; where f == 0 the bin contributes nothing), or ``B_s(1)`` when
        None.  Output handling as :meth:`forward_back_ratio`."""
        self._auto_set_up(_pdi_source(multiplicative), out_image)
        sources = {}
        if multiplicative is not None:
            sources["multiplicative"] = self._store(multiplicative, "multiplicative")
        self._check_image(out_image, "out_image")
        views = self._views(subset_num, num_subsets)
        result = self._run(
            SensitivityProgram(self.session.kernel_geometry, multiplicative is not None),
            views,
            sources,
            {},
            "sensitivity",
            subset=(subset_num, num_subsets),
            **self._result_target(out_image, accumulate),
        )
        return self._output_image(out_image, self._finish_image(result.image), accumulate)
