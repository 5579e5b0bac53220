"""A SIRF-style acquisition model on stirgpu's streaming projector.

SIRF (``sirf.STIR.AcquisitionModel``) models PET data as

    (F)   y = S (G x + a) + b          forward
    (B)   z = G' S y                   backward (the adjoint of the linear part S G)

with ``G`` the geometric projector, ``a`` the *additive term*, ``b`` the *background
term* and ``S`` the *acquisition sensitivity* (bin efficiencies: ``AcquisitionSensitivityModel``,
whose ``forward`` multiplies by S and ``invert`` divides by it).  This module gives
the same methods and semantics, computed by :class:`stirgpu.projectors.ProjectorPair`
(STIR's Parallelproj/Joseph numbers), chunk by chunk:

=====================================  =====================================================
SIRF                                   stirgpu
=====================================  =====================================================
``AcquisitionModelUsingParallelproj``  :class:`AcquisitionModelUsingParallelproj` (alias
                                       :data:`AcquisitionModel`)
``AcquisitionData``                    any :class:`stirgpu.formats.ProjData` (results:
                                       :class:`~stirgpu.formats.ProjDataInMemory`)
``ImageData``                          :class:`stirgpu.formats.VoxelsOnCartesianGrid` (numpy
                                       (z, y, x) arrays are accepted as input)
``AcquisitionSensitivityModel(ad)``    :class:`AcquisitionSensitivityModel` (from bin
                                       efficiencies, or two chained)
``make_Poisson_loglikelihood``         :func:`make_Poisson_loglikelihood` (for
                                       :class:`stirgpu.recon.OSEM`)
=====================================  =====================================================

Relation to STIR's OSMAPOSL keys: ``S = 1 / f`` (f: ``Bin Normalisation From ProjData``
factors), ``a`` = STIR's ``additive sinogram``, and ``b`` has no STIR key (it is
folded into STIR's additive term as ``a + b / S``, which is what
:func:`make_Poisson_loglikelihood` does).  The words mean what they mean everywhere in
stirgpu: *additive* is inside the normalisation (normalised units, STIR's additive sinogram,
``PoissonLogLikelihood(additive=...)``), *background* is after it (measured units,
``ProjectorPair.forward_back_ratio(background=...)``).

Subsets (``subset_num``, ``num_subsets``) are STIR's: views ``v`` with ``v mod K == k``.
A subset forward projection returns full-size data whose other views are 0 (or left as
they were in ``out``); a subset backward projection uses only the subset's views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import GeometryError, StirGpuError
from .formats import ProjData, ProjDataInMemory, VoxelsOnCartesianGrid
from .geometry import ImageInfo, ProjDataInfo
from .recon.objective import PoissonLogLikelihood
from .recon.views import Product, Quotient, Reciprocal, Sum

if TYPE_CHECKING:
    from .projectors import ProjectorPair

__all__ = [
    "AcquisitionModelUsingParallelproj",
    "AcquisitionModel",
    "AcquisitionSensitivityModel",
    "make_Poisson_loglikelihood",
]


def _as_proj_data(name: str, d, pdi) -> ProjData:
    if isinstance(d, ProjData):
        if d.get_proj_data_info() != pdi:
            raise GeometryError(f"{name}: geometry differs from the acquisition template's")
        return d
    arr = np.asarray(d, dtype=np.float32)
    return ProjDataInMemory(pdi, fill=arr)


class AcquisitionSensitivityModel:
    """Bin efficiencies ``S`` (SIRF's ``AcquisitionSensitivityModel``).

    ``AcquisitionSensitivityModel(efficiencies)`` with a ProjData of efficiencies (e.g.
    ``1 / ACF``), or ``AcquisitionSensitivityModel(asm1, asm2)`` for the product of two."""

    def __init__(self, src, other_src=None):
        self._eff: ProjData
        if isinstance(src, AcquisitionSensitivityModel) and isinstance(other_src, AcquisitionSensitivityModel):
            self._eff = Product(src.efficiencies, other_src.efficiencies)
        elif isinstance(src, ProjData) and other_src is None:
            self._eff = src
        else:
            raise StirGpuError(
                "AcquisitionSensitivityModel: give a ProjData of bin efficiencies, or two "
                "AcquisitionSensitivityModel objects to chain"
            )

    @property
    def efficiencies(self) -> ProjData:
        """S as (lazy) projection data."""
        return self._eff

    def set_up(self, acq_templ: ProjData) -> None:
        if acq_templ.get_proj_data_info() != self._eff.get_proj_data_info():
            raise GeometryError("AcquisitionSensitivityModel.set_up: geometry differs from the efficiencies'")

    def forward(self, ad: ProjData) -> ProjDataInMemory:
        """``S * ad`` (SIRF: ``unnormalise`` without changing the argument)."""
        return ProjDataInMemory(ad.get_proj_data_info(), fill=Product(ad, self._eff))

    def invert(self, ad: ProjData) -> ProjDataInMemory:
        """``ad / S`` (0 where S is 0) (SIRF: ``normalise`` without changing the argument)."""
        return ProjDataInMemory(ad.get_proj_data_info(), fill=Quotient(ad, self._eff))

    def unnormalise(self, ad: ProjData) -> None:
        """``ad *= S`` in place."""
        ad.fill(Product(ProjDataInMemory.from_proj_data(ad), self._eff))

    def normalise(self, ad: ProjData) -> None:
        """``ad /= S`` in place."""
        ad.fill(Quotient(ProjDataInMemory.from_proj_data(ad), self._eff))


class AcquisitionModelUsingParallelproj:
    """SIRF's acquisition model ``y = S (G x + a) + b`` (see the module docstring).

    Execution settings (all optional; default: the scoped :func:`stirgpu.config`):
    ``backend``, ``devices``, ``gpu_memory_budget``, ``host_memory_budget`` (bytes),
    ``max_views_per_chunk``; ``restrict_to_cylindrical_fov`` as STIR's Parallelproj.
    """

    def __init__(
        self,
        *,
        backend: str | None = None,
        devices=None,
        gpu_memory_budget: int | None = None,
        host_memory_budget: int | None = None,
        max_views_per_chunk: int | None = None,
        restrict_to_cylindrical_fov: bool = True,
    ):
        self._options = dict(
            backend=backend,
            devices=devices,
            gpu_memory_budget=gpu_memory_budget,
            host_memory_budget=host_memory_budget,
            max_views_per_chunk=max_views_per_chunk,
            restrict_to_cylindrical_fov=restrict_to_cylindrical_fov,
        )
        self._projector: ProjectorPair | None = None
        self.acq_templ: ProjData | None = None
        self.img_templ: ImageInfo | None = None
        self._a: ProjData | None = None
        self._b: ProjData | None = None
        self._asm: AcquisitionSensitivityModel | None = None
        self._num_subsets = 1
        self._subset_num = 0

    # -- set up ------------------------------------------------------------------------------
    def set_up(self, acq_templ: ProjData, img_templ) -> None:
        """Prepare for projections between data shaped like ``acq_templ`` and images like
        ``img_templ`` (a VoxelsOnCartesianGrid or an ImageInfo)."""
        from .projectors import ProjectorPair

        if not isinstance(acq_templ, ProjData):
            raise StirGpuError(f"set_up: acq_templ must be projection data (ProjData), not {type(acq_templ).__name__}")
        info = img_templ.info if isinstance(img_templ, VoxelsOnCartesianGrid) else img_templ
        if not isinstance(info, ImageInfo):
            raise StirGpuError("set_up: img_templ must be a VoxelsOnCartesianGrid or an ImageInfo")
        self._projector = ProjectorPair(**self._options)  # None options: the scoped configuration
        self._projector.set_up(acq_templ.get_proj_data_info(), info)
        self.acq_templ, self.img_templ = acq_templ, info
        for name, term in (("additive term", self._a), ("background term", self._b)):
            if term is not None:
                _as_proj_data(name, term, self.pdi)

    def _require_set_up(self) -> ProjectorPair:
        if self._projector is None:
            raise StirGpuError("AcquisitionModel: call set_up(acq_templ, img_templ) first")
        return self._projector

    def _image_info(self) -> ImageInfo:
        self._require_set_up()
        assert self.img_templ is not None  # (set_up sets both)
        return self.img_templ

    @property
    def pdi(self) -> ProjDataInfo:
        self._require_set_up()
        assert self.acq_templ is not None  # (set_up sets it)
        return self.acq_templ.get_proj_data_info()

    @property
    def projector(self) -> ProjectorPair:
        """The underlying :class:`~stirgpu.projectors.ProjectorPair` (after set_up)."""
        return self._require_set_up()

    # -- the terms ---------------------------------------------------------------------------
    def set_additive_term(self, at: ProjData) -> None:
        """``a`` in (F) (SIRF: randoms + scatter in the "normalised" units of G x)."""
        self._a = at

    def set_background_term(self, bt: ProjData) -> None:
        """``b`` in (F) (added after S, in measured units)."""
        self._b = bt

    def set_acquisition_sensitivity(self, asm: AcquisitionSensitivityModel) -> None:
        """``S`` in (F)."""
        if not isinstance(asm, AcquisitionSensitivityModel):
            raise StirGpuError("set_acquisition_sensitivity: expected an AcquisitionSensitivityModel")
        self._asm = asm

    def get_additive_term(self) -> ProjData:
        return self._a if self._a is not None else ProjDataInMemory(self.pdi)

    def get_background_term(self) -> ProjData:
        return self._b if self._b is not None else ProjDataInMemory(self.pdi)

    def get_acquisition_sensitivity(self) -> AcquisitionSensitivityModel | None:
        return self._asm

    def get_constant_term(self) -> ProjDataInMemory:
        """``S a + b``."""
        a = self.get_additive_term()
        sa = self._asm.forward(a) if self._asm is not None else ProjDataInMemory.from_proj_data(a)
        return ProjDataInMemory(self.pdi, fill=Sum(sa, self.get_background_term()))

    def is_linear(self) -> bool:
        """True when there is no additive and no background term (SIRF: both zero)."""
        return self._a is None and self._b is None

    def is_affine(self) -> bool:
        return True

    def get_linear_acquisition_model(self) -> AcquisitionModelUsingParallelproj:
        """``S G`` (same projector, no terms)."""
        lin = AcquisitionModelUsingParallelproj(**self._options)
        lin._projector, lin.acq_templ, lin.img_templ = self._projector, self.acq_templ, self.img_templ
        lin._asm = self._asm
        lin._num_subsets, lin._subset_num = self._num_subsets, self._subset_num
        return lin

    # -- subsets -------------------------------------------------------------------------------
    @property
    def num_subsets(self) -> int:
        return self._num_subsets

    @num_subsets.setter
    def num_subsets(self, value: int) -> None:
        value = int(value)
        if value < 1:
            raise StirGpuError(f"num_subsets must be at least 1, not {value}")
        self._num_subsets = value

    @property
    def subset_num(self) -> int:
        return self._subset_num

    @subset_num.setter
    def subset_num(self, value: int) -> None:
        self._subset_num = int(value)

    def _subset(self, subset_num, num_subsets) -> tuple[int, int]:
        k = self._subset_num if subset_num is None else int(subset_num)
        n = self._num_subsets if num_subsets is None else int(num_subsets)
        if n < 1 or not 0 <= k < n:
            raise StirGpuError(f"subset {k} of {n}: need num_subsets >= 1 and 0 <= subset_num < num_subsets")
        return k, n

    def _image_array(self, image) -> np.ndarray:
        if isinstance(image, VoxelsOnCartesianGrid):
            if image.info != self.img_templ:
                raise GeometryError("image: geometry differs from the image template's")
            return image.array
        arr = image
        shape = tuple(getattr(arr, "shape", ()))
        if shape != self._image_info().shape:
            raise GeometryError(f"image: shape {shape} differs from the template's {self._image_info().shape}")
        return arr

    # -- projections ------------------------------------------------------------------------------
    def forward(
        self, image, subset_num: int | None = None, num_subsets: int | None = None, out: ProjData | None = None
    ) -> ProjData:
        """``S (G x + a) + b`` on the subset's views (all views without subsets)."""
        self._require_set_up()
        k, n = self._subset(subset_num, num_subsets)
        x = self._image_array(image)
        res = out if out is not None else ProjDataInMemory(self.pdi)
        if out is not None and out.get_proj_data_info() != self.pdi:
            raise GeometryError("forward: out has a different geometry")
        self.projector.forward_project(res, x, subset_num=k, num_subsets=n)
        if self._a is None and self._b is None and self._asm is None:
            return res
        views = self.pdi.subset_views(k, n)
        a = None if self._a is None else _as_proj_data("additive term", self._a, self.pdi)
        b = None if self._b is None else _as_proj_data("background term", self._b, self.pdi)
        s = None if self._asm is None else self._asm.efficiencies
        for seg in self.pdi.segment_nums:
            for chunk in np.array_split(views, max(1, len(views) // 8)):
                if not len(chunk):
                    continue
                v = res.read_views(seg, chunk)
                if a is not None:
                    v += a.read_views(seg, chunk)
                if s is not None:
                    v *= s.read_views(seg, chunk)
                if b is not None:
                    v += b.read_views(seg, chunk)
                res.write_views(v, seg, chunk)
        return res

    def backward(
        self,
        ad,
        subset_num: int | None = None,
        num_subsets: int | None = None,
        out: VoxelsOnCartesianGrid | None = None,
    ) -> VoxelsOnCartesianGrid:
        """``G' S y`` over the subset's views."""
        self._require_set_up()
        k, n = self._subset(subset_num, num_subsets)
        d = _as_proj_data("backward: data", ad, self.pdi)
        if self._asm is not None:
            d = Product(d, self._asm.efficiencies)
        res = out if out is not None else VoxelsOnCartesianGrid(self._image_info())
        if res.info != self.img_templ:
            raise GeometryError("backward: out has a different image geometry")
        self.projector.back_project(res.array, d, subset_num=k, num_subsets=n, accumulate=False)
        return res

    # CIL-style names (as SIRF)
    def direct(self, image, out=None):
        """The linear part ``S G x`` (CIL's ``direct``)."""
        return self.get_linear_acquisition_model().forward(image, out=out)

    def adjoint(self, ad, out=None):
        """``G' S y`` (CIL's ``adjoint``)."""
        return self.backward(ad, out=out)


#: the short name
AcquisitionModel = AcquisitionModelUsingParallelproj


def make_Poisson_loglikelihood(
    acq_data: ProjData, acq_model: AcquisitionModelUsingParallelproj
) -> PoissonLogLikelihood:
    """The Poisson log-likelihood of ``acq_data`` under ``acq_model`` as OSMAPOSL sees it:
    STIR's normalisation ``f = 1 / S`` and additive sinogram ``a + b / S``."""
    pdi = acq_model.pdi
    asm = acq_model.get_acquisition_sensitivity()
    f = None if asm is None else Reciprocal(asm.efficiencies)
    a = None if acq_model._a is None else _as_proj_data("additive term", acq_model._a, pdi)
    if acq_model._b is not None:
        b = _as_proj_data("background term", acq_model._b, pdi)
        b_norm = b if asm is None else Quotient(b, asm.efficiencies)
        a = b_norm if a is None else Sum(a, b_norm)
    return PoissonLogLikelihood(acq_data, additive=a, normalisation=f)
