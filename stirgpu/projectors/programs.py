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

import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..execution.program import ChunkData, ChunkProgram
from ..kernels import back_chunk, back_chunk_stir, forward_chunk, forward_chunk_stir
from ..kernels.poisson import poisson_quotient
from ..kernels.stir_api import StirChunk
from .poisson import inverse_factors

if TYPE_CHECKING:
    from ..kernels.cuda_backend import ChunkLauncher

__all__ = ["ForwardProgram", "ModelForwardProgram", "BackProgram", "SensitivityProgram", "PoissonRatioProgram"]

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


class _Geometric(ChunkProgram):
    #: the CUDA backend's tiled kernels keep two padded image copies per lane: the input
    #: image's (forward) or the accumulators (back)
    image_workspace = 2
    #: on GPU lanes the accumulators' fold overwrites the accumulation image (start_lane zeroes
    #: it where there are no accumulators): no image-sized zeroing and reading per call
    fills_accumulation = True

    def __init__(self, geometry):
        #: :class:`stirgpu.kernels.KernelGeometry` (origin, voxel size, scale)
        self.geometry = geometry
        # per GPU lane, for this call only (a program object serves one run): kernel
        # launchers of the input image prepared for the tiled kernels ("forward") and of
        # the back-projection accumulators ("back"), made by start_lane before the lane's
        # first chunk.  Without them the CUDA backend would copy the image (or fold its
        # accumulators) for every chunk, or fall back to its slower kernels for small
        # chunks such as a subset's, and check every argument of every chunk again.
        self._lane_state: dict[int, dict[str, ChunkLauncher]] = {}

    def _launcher(self, target, kept: dict | None = None):
        """A kernel launcher for ``target``; with ``kept`` (the engine's per-lane dict) the
        set-up of the last call's launcher of that kind is used again when it fits (making
        one costs tens of microseconds, on the critical path of every call)."""
        from ..kernels import cuda_backend as cb

        g = self.geometry
        key = "back launcher" if isinstance(target, cb.BackAccumulator) else "forward launcher"
        last = kept.get(key) if kept is not None else None
        if last is not None:
            launcher = last.for_target(target, g.origin, g.voxel_size, g.scale)
        else:
            launcher = cb.ChunkLauncher(target, g.origin, g.voxel_size, g.scale)
        if kept is not None and (last is None or launcher.setup_id is not last.setup_id):
            kept[key] = launcher.without_target()  # holds no array between calls
        return launcher

    def start_lane(self, lane, image, accum, kept: dict) -> None:
        # made here, before any chunk, on the first compute stream that every other one
        # waits for: chunks on two compute streams share them from the start.  The back
        # projection's two padded accumulators are kept by the engine between calls (an
        # allocation of each per call costs more Python than an OSEM subset can spare)
        if lane.kind != "cuda":
            return
        if self.geometry.numerics == "stir":
            # one thread per LOR on the plain image (no padded copies, no accumulators):
            # the kernels add into the accumulation image itself, zeroed here (fills_accumulation)
            if accum is not None:
                accum.data.memset_async(0, accum.nbytes, lane.cp.cuda.get_current_stream())
            return
        from ..kernels import cuda_backend as cb

        state = self._lane_state.setdefault(lane.index, {})
        if image is not None:
            state["forward"] = self._target_launcher("forward", cb.prepare_image(image), kept)
        if accum is not None:
            # the engine's accumulation image is (nz, ny, nx) float32, C-contiguous, on this
            # lane's GPU: when the kept accumulators fit its shape, the last call's
            # BackAccumulator takes it as it is, its accumulators zeroed on this stream (no
            # argument checks: a fraction of an OSEM subset's set-up); else a new one
            last = kept.get("back target")
            pair = kept.get("back accumulators")
            if last is not None and pair is not None and last[1] == tuple(accum.shape):
                acc = last[0]
                stream = lane.cp.cuda.get_current_stream()
                for x in pair:
                    x.data.memset_async(0, x.nbytes, stream)
                acc.image, (acc.a, acc.b) = accum, pair
            else:
                acc = cb.prepare_back_accumulator(accum, scratch=pair)
                if acc.a is not None:
                    kept["back accumulators"] = (acc.a, acc.b)
                    kept["back target"] = (acc, tuple(accum.shape))
                else:  # the kernels add into the image itself (fills_accumulation)
                    accum.data.memset_async(0, accum.nbytes, lane.cp.cuda.get_current_stream())
            state["back"] = self._target_launcher("back", acc, kept)

    def _target_launcher(self, kind: str, target, kept: dict):
        """The launcher for ``target``: the last call's when it had this very target (the
        prepared input image, or the kept accumulator), else one from :meth:`_launcher`.
        Kept launchers hold their target only during a call (see :meth:`finish_lane`)."""
        key = f"{kind} target launcher"
        last = kept.get(key)
        if last is not None and last[0]() is target:
            launcher = last[1]
            launcher.target = target
            return launcher
        launcher = self._launcher(target, kept)
        kept[key] = (weakref.ref(target), launcher)
        return launcher

    def finish_lane(self, lane, accum) -> None:
        if self.geometry.numerics == "stir":
            return
        state = self._lane_state.pop(lane.index, {})
        if "back" in state:
            # no re-zeroing here: the engine keeps the accumulators and the next call's
            # start_lane zeroes them (on its compute stream, while its first upload runs)
            from ..kernels.cuda_backend import BackAccumulator

            acc = state["back"].target
            assert isinstance(acc, BackAccumulator)  # (what start_lane made the back launcher for)
            acc.finish(reuse=False, overwrite=True)  # the image's values are replaced (fills_accumulation)
            acc.image = None  # the kept accumulator holds no image between calls (the fold is queued)
        for launcher in state.values():
            launcher.target = None  # nor do the kept launchers

    def _tables(self, d: ChunkData):
        """The tables of the chunk's parts, uploaded once per chunk on a GPU lane (on the
        compute stream; the pipeline has usually done it); with STIR's numerics their float32
        tables, computed (and uploaded) once for a forward and back projection of the chunk."""
        if self.geometry.numerics == "stir":
            return StirChunk(d.tables, self.geometry.proj_data_info)
        if d.xp is np:
            return d.tables
        from ..kernels.cuda_backend import upload_tables

        return upload_tables(d.tables)

    # On GPU lanes the programs call the CUDA backend directly: the pipeline made the tables
    # from the geometry (nothing to validate), and the public front end's per-chunk checks
    # are Python work that competes for the GIL with the reader and writer threads.
    def _forward(self, d: ChunkData, out, tables=None):
        g = self.geometry
        t = d.tables if tables is None else tables
        if g.numerics == "stir":
            return forward_chunk_stir(t, g.proj_data_info, d.image, g.stir_frame, out=out, cancel=d.cancel)
        if d.xp is np:
            return forward_chunk(t, d.image, g.origin, g.voxel_size, out=out, scale=g.scale, cancel=d.cancel)
        self._lane_state[d.lane.index]["forward"](t, out)
        return out

    def _back(self, d: ChunkData, values, tables=None):
        g = self.geometry
        t = d.tables if tables is None else tables
        if g.numerics == "stir":
            back_chunk_stir(t, g.proj_data_info, values, d.accum, g.stir_frame, cancel=d.cancel)
            return
        if d.xp is np:
            back_chunk(t, values, d.accum, g.origin, g.voxel_size, scale=g.scale, cancel=d.cancel)
            return
        self._lane_state[d.lane.index]["back"](t, values)


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
    image_workspace = 4  # the prepared input image and the back accumulators

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
