"""The projector pair, with the fused per-chunk operations OSEM needs."""

from __future__ import annotations

import numpy as np

from ..errors import renamed_arguments
from .back import BackProjector
from .forward import ForwardProjector, _pdi_source
from .poisson import BACKGROUND_RENAMED
from .programs import PoissonRatioProgram, SensitivityProgram

__all__ = ["ProjectorPair"]


class ProjectorPair(ForwardProjector, BackProjector):
    """Forward and back projector sharing one engine (so one uploaded image, one set of
    buffers), plus OSEM's fused steps:

    * :meth:`forward_back_ratio` -- ``B_s( y / ((A_s x)/f + b) / f )`` with STIR's division
      rule, and optionally the Poisson log-likelihood, chunk by chunk (``b``: the background
      in measured units);
    * :meth:`sensitivity` -- ``B_s(1/f)`` (``B_s(1)`` without factors).

    Options: see :class:`~stirgpu.projectors.base.StreamingProjector`.
    """

    def get_forward_projector(self) -> ForwardProjector:
        """A ForwardProjector sharing this pair's engine, set-up and uploaded image."""
        return self._view_as(ForwardProjector)

    def get_back_projector(self) -> BackProjector:
        """A BackProjector sharing this pair's engine and set-up."""
        return self._view_as(BackProjector)

    def _view_as(self, cls):
        obj = cls.__new__(cls)
        obj.__dict__.update(self.__dict__)  # same _shared engine state; own statistics
        obj.last_stats = None
        obj.last_plan = None
        return obj

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
        self._prepare_input(image)
        program = PoissonRatioProgram(
            self._geometry, background is not None, multiplicative is not None, bool(return_loglik)
        )
        result = self._run(
            program,
            views,
            sources,
            {},
            "forward-back ratio",
            subset=(subset_num, num_subsets),
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
        self._pending_upload = (0, 0.0)
        result = self._run(
            SensitivityProgram(self._geometry, multiplicative is not None),
            views,
            sources,
            {},
            "sensitivity",
            subset=(subset_num, num_subsets),
            **self._result_target(out_image, accumulate),
        )
        return self._output_image(out_image, self._finish_image(result.image), accumulate)

    def adjointness_test(self, seed: int = 0) -> float:
        """Relative difference of ``<A x, y>`` and ``<x, B y>`` for random non-negative x, y
        (0 for an exact adjoint, float32 rounding in practice)."""
        from ..formats import ProjDataInMemory

        self._require_set_up()
        rng = np.random.default_rng(seed)
        x = rng.random(self._image_info.shape, dtype=np.float32)
        y = ProjDataInMemory(self._pdi)
        for s in self.segments_to_process():
            y.write_views(
                rng.random(
                    (self._pdi.get_num_views(), self._pdi.get_num_axial_poss(s), self._pdi.get_num_tangential_poss()),
                    dtype=np.float32,
                ),
                s,
                np.arange(self._pdi.get_num_views()),
            )
        ax = ProjDataInMemory(self._pdi)
        self.forward_project(ax, x)
        bty = self.back_project(None, y)
        segs = self.segments_to_process()
        lhs = sum(
            float(
                np.dot(
                    ax.read_views(s, range(self._pdi.get_num_views())).ravel().astype(np.float64),
                    y.read_views(s, range(self._pdi.get_num_views())).ravel().astype(np.float64),
                )
            )
            for s in segs
        )
        if self._fov_mask is not None:  # the FOV restriction is part of both operators
            x = x * self._fov_mask
        rhs = float(np.dot(x.ravel().astype(np.float64), bty.ravel().astype(np.float64)))
        return abs(lhs - rhs) / max(abs(lhs), abs(rhs), 1e-30)
