"""``NeighbourhoodPrior``: what STIR's Quadratic, Relative Difference and Logcosh priors share.

A penalty ``beta * sum_j sum_k w[k - j] phi(x_j, x_k) kappa_j kappa_k`` over a weighted
neighbourhood (``docs/priors.md``), with STIR's parameters and methods under SIRF's names:
``set_penalisation_factor``, ``set_kappa``, ``set_weights``, ``set_only_2D``,
``set_up(image)``, ``get_value``, ``get_gradient``, ``accumulate_Hessian_times_input``,
``multiply_with_Hessian``.  The subclasses (:mod:`.stir_priors`) choose the potential ``phi``.

Images are :class:`~stirgpu.formats.VoxelsOnCartesianGrid` (results come back as such) or
(z, y, x) arrays, numpy or cupy, float32 or float64 (results come back as arrays of the
same kind: a cupy image never leaves its GPU).  Parameters are held as STIR holds them, in
float32.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import ClassVar

import numpy as np

from ..arrays import is_cupy
from ..config import get_config
from ..errors import GeometryError, StirGpuError
from ..formats import VoxelsOnCartesianGrid, write_image
from ..geometry import ImageInfo
from ..kernels.priors import prior_gradient, prior_hessian_times, prior_value
from ..kernels.threads import numba_threads
from .hessian_diagonal import hessian_diagonal
from .neighbourhood import centred_weights, stir_default_weights

__all__ = ["PenalisedPrior", "NeighbourhoodPrior", "float32_parameter"]


def float32_parameter(value, name: str) -> float:
    """A finite parameter rounded to float32, as STIR holds it."""
    v = float(value)
    if not np.isfinite(v):
        raise StirGpuError(f"{name} must be a finite number, not {value!r}")
    return float(np.float32(v))


def _is_gpu(a) -> bool:
    return is_cupy(a)


class PenalisedPrior:
    """What every STIR prior here has (not used directly): its registered name and its
    penalisation factor ``beta`` (held in float32, as STIR holds it)."""

    #: STIR's registered name (``prior type := ...``)
    registered_name: ClassVar[str] = ""

    def __init__(self, penalisation_factor: float = 0.0):
        self._beta = float32_parameter(penalisation_factor, "penalisation factor")

    def get_registered_name(self) -> str:
        return self.registered_name

    def get_penalisation_factor(self) -> float:
        return self._beta

    def set_penalisation_factor(self, value: float) -> None:
        """STIR allows this after ``set_up``, and so does stirgpu."""
        self._beta = float32_parameter(value, "penalisation factor")

    @property
    def is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: a penalisation factor of 0 (then OSMAPOSL runs plain OSEM)."""
        return self._beta == 0.0

    def is_convex(self) -> bool:
        return True


class NeighbourhoodPrior(PenalisedPrior):
    """The base of stirgpu's STIR neighbourhood priors (not used directly)."""

    _kind: ClassVar[int] = -1
    #: whether a gradient filename prefix writes files (STIR's Gibbs penalties parse it and write none)
    _writes_gradients: ClassVar[bool] = True

    def __init__(
        self,
        penalisation_factor: float = 0.0,
        *,
        only_2D: bool = False,
        kappa=None,
        weights=None,
        gradient_filename_prefix: str | os.PathLike | None = None,
    ):
        super().__init__(penalisation_factor)
        self._only_2d = bool(only_2D)
        self._user_weights = None if weights is None else centred_weights(weights)
        self._kappa = None
        self._kappa_on_device = None
        self._info: ImageInfo | None = None
        self._weights: np.ndarray | None = None
        self._gradient_prefix = None if gradient_filename_prefix is None else os.fspath(gradient_filename_prefix)
        self._gradient_count = 0
        if kappa is not None:
            self.set_kappa(kappa)

    # -- parameters ------------------------------------------------------------------------
    def get_only_2D(self) -> bool:
        return self._only_2d

    def set_only_2D(self, value: bool) -> None:
        """Default weights in the plane only (1x3x3); ignored when weights are given (as in STIR)."""
        self._only_2d = bool(value)
        self._weights = None

    def get_weights(self) -> np.ndarray | None:
        """The weights in use ((z, y, x), centred): the user's, or after :meth:`set_up` STIR's default."""
        w = self._user_weights if self._user_weights is not None else self._weights
        return None if w is None else w.copy()

    def set_weights(self, weights) -> None:
        """User weights (see :func:`~.neighbourhood.centred_weights`); None: STIR's default again."""
        self._user_weights = None if weights is None else centred_weights(weights)

    def get_kappa(self):
        return self._kappa

    def set_kappa(self, kappa) -> None:
        """A kappa image (``VoxelsOnCartesianGrid`` or array) or None; every pair term is multiplied
        by ``kappa_j kappa_k``."""
        if kappa is not None and not isinstance(kappa, VoxelsOnCartesianGrid) and getattr(kappa, "ndim", 0) != 3:
            raise GeometryError(f"kappa: expected an image or a 3-D array, not {type(kappa).__name__}")
        self._kappa = kappa
        self._kappa_on_device = None
        if kappa is not None and self._info is not None:
            self._check_kappa(self._info)

    def get_gradient_filename_prefix(self) -> str | None:
        """The prefix of the gradient files written (None: none are; always None for the priors
        that write none, as STIR's Gibbs penalties)."""
        return self._gradient_prefix if self._writes_gradients else None

    def set_gradient_filename_prefix(self, prefix: str | os.PathLike | None) -> None:
        """When set, every :meth:`get_gradient` writes ``<prefix><n>.hv`` / ``.v`` (n = 1, 2, ...),
        as STIR's ``gradient filename prefix``."""
        self._gradient_prefix = None if prefix is None else os.fspath(prefix)

    def _potential(self) -> tuple[float, float]:
        """(p1, p2) of the kernels' potential (subclasses)."""
        return 0.0, 0.0

    # -- set up ----------------------------------------------------------------------------
    def set_up(self, image) -> None:
        """Prepare for images of this geometry (an ``ImageInfo`` or ``VoxelsOnCartesianGrid``):
        STIR's default weights for its voxel sizes (unless weights were given) and the kappa check."""
        info = image.info if isinstance(image, VoxelsOnCartesianGrid) else image
        if not isinstance(info, ImageInfo):
            raise GeometryError(
                f"{type(self).__name__}.set_up: expected an ImageInfo or VoxelsOnCartesianGrid, not "
                f"{type(image).__name__} (the voxel sizes give STIR's default weights)"
            )
        self._check_kappa(info)
        self._info = info
        self._weights = stir_default_weights(info.voxel_size, self._only_2d)

    def _check_kappa(self, info: ImageInfo) -> None:
        k = self._kappa
        if k is None:
            return
        if isinstance(k, VoxelsOnCartesianGrid):
            if k.info != info:
                raise GeometryError(
                    f"{self.registered_name}: the kappa image's geometry {k.info!r} differs from the image's {info!r}"
                )
        elif tuple(k.shape) != tuple(info.shape):
            raise GeometryError(f"{self.registered_name}: kappa has shape {tuple(k.shape)}, the image {info.shape}")

    def _ready(self) -> np.ndarray:
        if self._info is None:
            raise StirGpuError(f"{type(self).__name__}: call set_up(image) first (STIR: the prior is not set up)")
        if self._weights is None:  # set_only_2D after set_up
            self._weights = stir_default_weights(self._info.voxel_size, self._only_2d)
        return self._user_weights if self._user_weights is not None else self._weights

    # -- image arguments ----------------------------------------------------------------------
    def _array(self, image, name: str = "image"):
        if isinstance(image, VoxelsOnCartesianGrid):
            if self._info is not None and image.info != self._info:
                raise GeometryError(f"{name}: geometry {image.info!r} differs from the set-up one {self._info!r}")
            return image.array
        if getattr(image, "ndim", None) != 3:
            raise GeometryError(f"{name}: expected an image or a 3-D array, not {type(image).__name__}")
        if self._info is not None and tuple(image.shape) != tuple(self._info.shape):
            raise GeometryError(f"{name}: shape {tuple(image.shape)} differs from the set-up one {self._info.shape}")
        return image

    def _kappa_like(self, x):
        """kappa where ``x`` lives (copied to the GPU once for cupy images)."""
        if self._kappa is None:
            return None
        k = self._kappa.array if isinstance(self._kappa, VoxelsOnCartesianGrid) else self._kappa
        if _is_gpu(x) == _is_gpu(k):
            return k
        if self._kappa_on_device is None:
            import cupy

            self._kappa_on_device = cupy.asarray(k) if _is_gpu(x) else cupy.asnumpy(k)
        return self._kappa_on_device

    def _wrap(self, image, result):
        return VoxelsOnCartesianGrid(image.info, fill=result) if isinstance(image, VoxelsOnCartesianGrid) else result

    # -- the operations ---------------------------------------------------------------------
    def get_value(self, image) -> float:
        """The penalty at ``image`` (STIR's ``compute_value``; 0 for a zero penalisation factor)."""
        w = self._ready()
        x = self._array(image)
        if self.is_zero:
            return 0.0
        p1, p2 = self._potential()
        with _kernel_threads(x):
            return prior_value(x, w, self._kind, p1, p2, kappa=self._kappa_like(x)) * self._beta

    def get_gradient(self, image, out=None, *, write_file: bool = True):
        """The penalty's gradient at ``image`` (STIR's ``compute_gradient``), into ``out`` (an array
        like the image's, overwritten) or a new image / array.  ``write_file=False``: this call
        writes no gradient file even with a gradient filename prefix (under MPI every rank computes
        the same gradient and rank 0 alone writes it); the files' numbering counts it all the same."""
        w = self._ready()
        x = self._array(image)
        target = None if out is None else self._array(out, "out")
        if self.is_zero:
            res = _zero(x.copy() if target is None else target)
        else:
            p1, p2 = self._potential()
            with _kernel_threads(x):
                res = prior_gradient(x, w, self._kind, p1, p2, scale=self._beta, out=target, kappa=self._kappa_like(x))
        self._write_gradient(res, write_file)
        return out if out is not None else self._wrap(image, res)

    def accumulate_Hessian_times_input(self, current_estimate, input_, out):
        """``out += H(current_estimate) input_`` (STIR's ``accumulate_Hessian_times_input``); returns ``out``."""
        w = self._ready()
        x = self._array(current_estimate, "current_estimate")
        v = self._array(input_, "input")
        target = self._array(out, "out")
        if not self.is_zero:
            p1, p2 = self._potential()
            with _kernel_threads(x):
                prior_hessian_times(
                    x, v, w, self._kind, p1, p2, scale=self._beta, out=target, kappa=self._kappa_like(x)
                )
        return out

    def multiply_with_Hessian(self, current_estimate, input_, out=None):
        """``H(current_estimate) input_`` into ``out`` (overwritten) or a new image / array."""
        x = self._array(current_estimate, "current_estimate")
        target = _zero(x.copy() if out is None else self._array(out, "out"))
        self.accumulate_Hessian_times_input(current_estimate, input_, target)
        return out if out is not None else self._wrap(current_estimate, target)

    def compute_Hessian_diagonal(self, image):
        """The diagonal of the penalty's Hessian at ``image`` (STIR's ``GibbsPenalty::
        compute_Hessian_diagonal``, :mod:`.hessian_diagonal`): a new image / array like ``image``."""
        w = self._ready()
        x = self._array(image)
        p1, p2 = self._potential()
        diag = hessian_diagonal(x, w, self._kind, p1, p2, self._beta, kappa=self._kappa_like(x))
        return self._wrap(image, diag)

    def _write_gradient(self, gradient, write_file: bool) -> None:
        """STIR's ``gradient filename prefix``: ``<prefix><n>.v`` for the n-th gradient computed."""
        if self._gradient_prefix is None or self._info is None or not self._writes_gradients:
            return
        self._gradient_count += 1
        if not write_file:
            return
        host = gradient.get() if _is_gpu(gradient) else np.asarray(gradient)
        path = Path(f"{self._gradient_prefix}{self._gradient_count}.v")
        write_image(path, VoxelsOnCartesianGrid(self._info, fill=host.astype(np.float32)), overwrite=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(penalisation_factor={self._beta!r})"


def _kernel_threads(x):
    """``stirgpu.config``'s ``cpu_threads`` for the numba kernels of a host image (nothing for a GPU one)."""
    return contextlib.nullcontext() if _is_gpu(x) else numba_threads(get_config().cpu_threads)


def _zero(a):
    a[...] = 0
    return a
