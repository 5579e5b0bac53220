"""STIR's ``PLSPrior`` (``prior type := PLS``): Parallel Level Sets with an anatomical image.

With forward differences ``D_d u = u[i + e_d] - u[i]`` along z (not with ``only_2D``), y and x (0
at each axis' last index, as STIR leaves them), ``a`` the anatomical image and, per voxel,

    |D a| = sqrt(sum_d (D_d a)^2 + eta^2)
    p     = sum_d D_d x D_d a / |D a|                  (the inner product)
    phi   = sqrt(alpha^2 + sum_d (D_d x)^2 - p^2)      (the penalty)

the value is ``beta sum(phi kappa)`` (kappa 1 without a kappa image), summed in float64.  The
gradient is STIR's (``PLSPrior::compute_gradient``): with ``T_d = (D_d x - D_d a p / |D a|) / phi``
(float32, STIR's order of operations), ``g_d[i] = T_d[i] - T_d[i - e_d]`` where ``i - e_d`` lies
in the image and every other index of ``i - e_d`` is below its axis' last (STIR's loop bounds;
``only_2D`` drops the z bound), else 0, and the gradient ``-beta kappa sum_d g_d``.  Defaults as
STIR: penalisation factor 0, alpha 1, eta 1, 3-D.  STIR has no Hessian for this prior, and neither
has stirgpu.

Images are (z, y, x) float32 arrays, numpy or cupy (results come back where the image lives).
"""

from __future__ import annotations

import numpy as np

from ..arrays import array_module
from ..errors import GeometryError, StirGpuError
from ..geometry import ImageInfo
from .base import PenalisedPrior

__all__ = ["PLSPrior"]


class PLSPrior(PenalisedPrior):
    """STIR's Parallel Level Sets prior (module docstring)."""

    registered_name = "PLS"

    def __init__(self, penalisation_factor: float = 0.0, *, alpha: float = 1.0, eta: float = 1.0, only_2D=False):
        super().__init__(penalisation_factor)
        self._alpha = float(alpha)
        self._eta = float(eta)
        self._only_2d = bool(only_2D)
        self._anatomical = None
        self._kappa = None
        self._info: ImageInfo | None = None
        self._anatomical_parts: tuple | None = None  # (D a per axis, |D a|) after set_up

    # -- parameters ------------------------------------------------------------------------
    def get_alpha(self) -> float:
        return self._alpha

    def set_alpha(self, value: float) -> None:
        self._alpha = float(value)

    def get_eta(self) -> float:
        return self._eta

    def set_eta(self, value: float) -> None:
        self._eta, self._anatomical_parts = float(value), None

    def get_only_2D(self) -> bool:
        return self._only_2d

    def set_only_2D(self, value: bool) -> None:
        self._only_2d, self._anatomical_parts = bool(value), None

    def get_anatomical_image(self):
        return self._anatomical

    def set_anatomical_image(self, image) -> None:
        """The anatomical image (a (z, y, x) array like the reconstructed images)."""
        self._anatomical, self._anatomical_parts = image, None

    def get_kappa(self):
        return self._kappa

    def set_kappa(self, kappa) -> None:
        self._kappa = kappa

    def get_gradient_filename_prefix(self) -> None:
        return None

    # -- set up ----------------------------------------------------------------------------
    def set_up(self, image_info: ImageInfo) -> None:
        """Prepare for images of ``image_info``: the anatomical image's differences and norm."""
        if self._anatomical is None:
            raise StirGpuError("PLS prior needs an anatomical image (set_anatomical_image)")
        for name, a in (("anatomical image", self._anatomical), ("kappa", self._kappa)):
            if a is not None and tuple(a.shape) != tuple(image_info.shape):
                raise GeometryError(f"PLS prior: the {name} has shape {tuple(a.shape)}, the image {image_info.shape}")
        self._info = image_info
        self._anatomical_parts = None

    def anatomical_parts(self):
        """(the anatomical image's forward differences per axis (z, y, x; z None with only_2D), |D a|)."""
        if self._info is None:
            raise StirGpuError("PLSPrior: call set_up(image) first (STIR: the prior is not set up)")
        if self._anatomical_parts is None:
            a = self._anatomical
            xp = array_module(a)
            diffs = self._differences(a)
            # STIR: the float squares summed in float, then eta^2 in double
            squares = sum(d * d for d in diffs if d is not None).astype(np.float64) + self._eta**2
            self._anatomical_parts = (diffs, xp.sqrt(squares).astype(np.float32))
        return self._anatomical_parts

    def _differences(self, u):
        """Forward differences of ``u`` along z (None with only_2D), y and x; 0 at each last index."""
        xp = array_module(u)
        out: list = []
        for axis in range(3):
            if axis == 0 and self._only_2d:
                out.append(None)
                continue
            d = xp.zeros(u.shape, dtype=np.float32)
            hi = [slice(None)] * 3
            lo = [slice(None)] * 3
            hi[axis], lo[axis] = slice(1, None), slice(None, -1)
            d[tuple(lo)] = u[tuple(hi)] - u[tuple(lo)]
            out.append(d)
        return out

    def _inner_and_penalty(self, x):
        xp = array_module(x)
        (adiff, norm), xdiff = self.anatomical_parts(), self._differences(x)
        # the anatomical parts where the image lives (a host anatomical image with a GPU one)
        adiff, norm = [None if d is None else xp.asarray(d) for d in adiff], xp.asarray(norm)
        pairs = [(dx, da) for dx, da in zip(xdiff, adiff, strict=True) if dx is not None]
        if self._only_2d:  # STIR divides each term in 2-D, the sum in 3-D
            inner = sum(dx * da / norm for dx, da in pairs)
        else:
            inner = sum(dx * da for dx, da in pairs) / norm
        # STIR: alpha^2 in double, each float square added to it, the float p^2 subtracted
        squares = sum((dx * dx).astype(np.float64) for dx, _ in pairs)
        total = self._alpha**2 + squares - (inner * inner).astype(np.float64)
        penalty = array_module(x).sqrt(total).astype(np.float32)
        return xdiff, adiff, norm, inner, penalty

    # -- the operations ---------------------------------------------------------------------
    def get_value(self, image) -> float:
        """``beta sum(phi kappa)`` (0 for a zero penalisation factor, as STIR)."""
        if self.is_zero:
            return 0.0
        penalty = self._inner_and_penalty(self._array(image))[4].astype(np.float64)
        if self._kappa is not None:
            penalty = penalty * array_module(penalty).asarray(self._kappa)
        return float(penalty.sum()) * self._beta

    def get_gradient(self, image, out=None, *, write_file: bool = True):
        """STIR's gradient (module docstring), into ``out`` (overwritten) or a new array."""
        x = self._array(image)
        xp = array_module(x)
        target = xp.empty(x.shape, dtype=np.float32) if out is None else out
        if self.is_zero:
            target[...] = 0
            return target
        xdiff, adiff, norm, inner, penalty = self._inner_and_penalty(x)
        total = xp.zeros(x.shape, dtype=np.float32)
        for axis, (dx, da) in enumerate(zip(xdiff, adiff, strict=True)):
            if dx is None:
                continue
            t = (dx - da * inner / norm) / penalty
            total += self._shifted_difference(t, axis)
        total = -total
        if self._kappa is not None:
            total *= xp.asarray(self._kappa)
        target[...] = total * np.float32(self._beta)
        return target

    def _shifted_difference(self, t, axis: int):
        """``t[i] - t[i - e_axis]`` where STIR's loop sets it (module docstring), else 0."""
        g = array_module(t).zeros(t.shape, dtype=np.float32)
        loop = [slice(None, -1)] * 3  # STIR's loop: every index below its last ...
        if self._only_2d:
            loop[0] = slice(None)  # ... except z with only_2D
        here, before = list(loop), list(loop)
        here[axis] = slice(1, None)
        before[axis] = slice(None, -1)
        g[tuple(here)] = t[tuple(here)] - t[tuple(before)]
        return g

    def accumulate_Hessian_times_input(self, current_estimate, input_, out):
        raise StirGpuError("PLSPrior: STIR's PLS prior has no Hessian (accumulate_Hessian_times_input)")

    def multiply_with_Hessian(self, current_estimate, input_, out=None):
        raise StirGpuError("PLSPrior: STIR's PLS prior has no Hessian (multiply_with_Hessian)")

    def _array(self, image):
        if getattr(image, "ndim", None) != 3:
            raise GeometryError(f"PLSPrior: expected a 3-D image array, not {type(image).__name__}")
        if self._info is not None and tuple(image.shape) != tuple(self._info.shape):
            raise GeometryError(f"PLSPrior: shape {tuple(image.shape)} differs from the set-up one {self._info.shape}")
        return image

    def __repr__(self) -> str:
        return f"PLSPrior(penalisation_factor={self._beta!r}, alpha={self._alpha!r}, eta={self._eta!r})"
