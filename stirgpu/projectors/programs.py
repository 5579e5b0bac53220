"""The projectors' chunk programs (see :mod:`stirgpu.execution.program`).

Each is a few lines: the engine does the reading, moving, writing and reducing.

* :class:`ForwardProgram`      -- ``out = A x``                       (image in, data out)
* :class:`ModelForwardProgram` -- ``out = (A x + a) / f + b``         (image and terms in, data out:
  SIRF's ``S (G x + a) + b`` with ``S = 1 / f``)
* :class:`BackProgram`         -- ``image += B data``, or ``B (data / f)`` (data in, image accumulated)
* :class:`SensitivityProgram`  -- ``image += B (1/f)`` or ``B 1``     (f in, image accumulated)
* :class:`PoissonRatioProgram` -- ``image += B(quotient(y, (A x)/f + b) / f)`` and the
  log-likelihood, with no full-size intermediate (OSEM's fused step)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..execution.program import ChunkData, ChunkProgram
from ..kernels.poisson import poisson_quotient
from .poisson import inverse_factors

if TYPE_CHECKING:
    from ..kernels.backends import ChunkKernels

__all__ = ["ForwardProgram", "ModelForwardProgram", "BackProgram", "SensitivityProgram", "PoissonRatioProgram"]

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


class _Geometric(ChunkProgram):
    """A projection of the chunk's LORs: the lane's kernel backend (``lane.kernels``, a
    :class:`stirgpu.kernels.backends.LaneKernels`) does the work, the program says what."""

    #: image-sized device arrays per lane besides the images: the input image's two zero-framed
    #: copies (forward; made once per image), the transposed accumulator of walks along x (back)
    image_workspace = 2
    #: on GPU lanes the backend sets every value of the accumulation image (it zeroes it before
    #: the first chunk): no image-sized zeroing and reading per call
    fills_accumulation = True

    def __init__(self, geometry):
        #: :class:`stirgpu.kernels.KernelGeometry` (the geometry and the image's frame)
        self.geometry = geometry
        # per lane, for this call only (a program object serves one run): the kernels of its
        # image and accumulation image, made by start_lane before the lane's first chunk
        self._kernels: dict[int, ChunkKernels] = {}

    def start_lane(self, lane, image, accum) -> None:
        self._kernels[lane.index] = lane.kernels.start(self.geometry, image, accum)

    def finish_lane(self, lane, accum) -> None:
        self._kernels.pop(lane.index).finish()

    def _tables(self, d: ChunkData):
        """The chunk's tables in the kernels' form (its float32 tables, kept on a GPU lane), made
        once for a forward and a back projection of the chunk."""
        return self._kernels[d.lane.index].tables(d.tables)

    def _forward(self, d: ChunkData, out, tables=None) -> None:
        self._kernels[d.lane.index].forward(d.tables if tables is None else tables, out, d.cancel)

    def _back(self, d: ChunkData, values, tables=None) -> None:
        self._kernels[d.lane.index].accumulate(d.tables if tables is None else tables, values, d.cancel)


class ForwardProgram(_Geometric):
    name = "forward projection"
    outputs = ("out",)
    uses_image = True

    def compute(self, d: ChunkData) -> None:
        self._forward(d, d.outputs["out"])


class ModelForwardProgram(_Geometric):
    """``out = (A x + a) / f + b`` per chunk, each term optional (``a``: STIR's additive sinogram,
    normalised units; ``f``: the multiplicative correction factors, divided by as STIR's
    ``BinNormalisation::undo`` does; ``b``: the background, measured units).  Where ``f == 0``
    the bin is left out, as everywhere in stirgpu: its value is ``b`` (0 without one)."""

    name = "forward projection"
    outputs = ("out",)
    uses_image = True
    #: chunk-sized temporaries of the element-wise step (the mask and the guarded divisor)
    workspace = 3

    def __init__(self, geometry, with_additive: bool, with_multiplicative: bool, with_background: bool):
        super().__init__(geometry)
        self.inputs = (
            (("additive",) if with_additive else ())
            + (("multiplicative",) if with_multiplicative else ())
            + (("background",) if with_background else ())
        )

    def compute(self, d: ChunkData) -> None:
        out = d.outputs["out"]
        self._forward(d, out)
        xp, terms = d.xp, d.inputs
        if "additive" in terms:
            out += terms["additive"]
        if "multiplicative" in terms:
            f = terms["multiplicative"]
            ok = f != _F0
            out[...] = xp.where(ok, out / xp.where(ok, f, _F1), _F0)
        if "background" in terms:
            out += terms["background"]


class BackProgram(_Geometric):
    """``image += B data``, or ``B (data / f)`` with the factors ``f`` (``multiplicative``; 0
    where f == 0): SIRF's backward ``G' S y`` with ``S = 1 / f``."""

    name = "back projection"
    accumulates_image = True

    def __init__(self, geometry, with_multiplicative: bool = False):
        super().__init__(geometry)
        self.inputs = ("data", "multiplicative") if with_multiplicative else ("data",)
        self.scratch = 1 if with_multiplicative else 0
        self.workspace = 3 if with_multiplicative else 0  # the mask, the guarded divisor, the quotient

    def compute(self, d: ChunkData) -> None:
        data = d.inputs["data"]
        if "multiplicative" in d.inputs:
            xp, f, values = d.xp, d.inputs["multiplicative"], d.scratch[0]
            ok = f != _F0
            values[...] = xp.where(ok, data / xp.where(ok, f, _F1), _F0)
            data = values
        self._back(d, data)


class SensitivityProgram(_Geometric):
    """``B(1/f)`` (``B(1)`` without factors): the subset sensitivity of OSEM."""

    name = "sensitivity"
    accumulates_image = True
    scratch = 1

    def __init__(self, geometry, with_factors: bool):
        super().__init__(geometry)
        self.inputs = ("multiplicative",) if with_factors else ()

    def compute(self, d: ChunkData) -> None:
        values = d.scratch[0]
        if self.inputs:
            inverse_factors(d.xp, d.inputs["multiplicative"], values)
        else:
            values.fill(1.0)
        self._back(d, values)


class PoissonRatioProgram(_Geometric):
    """OSEM's multiplicative-update numerator for one subset, fused per chunk."""

    name = "forward-back ratio"
    uses_image = True
    accumulates_image = True
    scratch = 1
    #: the quotient is one kernel per chunk writing into the forward projection's scratch: no
    #: chunk-sized temporaries (on a GPU one threshold per row of nt bins, 1/nt of a chunk)
    workspace = 0
    image_workspace = 3  # the input image's framed copies and the back projection's transposed accumulator

    def __init__(self, geometry, with_background: bool, with_multiplicative: bool, loglik: bool):
        super().__init__(geometry)
        self.inputs = (
            ("measured",)
            + (("background",) if with_background else ())
            + (("multiplicative",) if with_multiplicative else ())
        )
        self.scalars = ("loglik",) if loglik else ()

    def compute(self, d: ChunkData) -> None:
        fwd = d.scratch[0]
        tables = self._tables(d)
        self._forward(d, fwd, tables)
        poisson_quotient(
            fwd,
            d.inputs["measured"],
            d.inputs.get("background"),
            d.inputs.get("multiplicative"),
            out=fwd,
            loglik=d.scalars if self.scalars else None,
            parts=d.chunk.parts,
        )
        self._back(d, fwd, tables)
