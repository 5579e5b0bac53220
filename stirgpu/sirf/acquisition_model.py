"""SIRF's PET acquisition model on stirgpu's streaming projector.

SIRF's model (``sirf.STIR.AcquisitionModel``)::

    (F)  forward(x)  = S (G P x + a) + b      a: additive term, b: background term,
    (B)  backward(y) = P' G' S y               S: acquisition sensitivity (1 / f)
                                              P: image data processor (identity if not set)

computed by one :class:`~stirgpu.projectors.ProjectorPair` call each: the forward projection with
its terms (``forward_project(..., additive=a, multiplicative=f, background=b)``: the terms are
read and applied chunk by chunk where the chunk is projected, on the GPU when there is one) and
the back projection of ``y / f``.

Subsets are SIRF's, that is STIR's: subset ``k`` of ``n`` holds the views ``v`` with
``v % n == k`` (STIR's ``find_basic_vs_nums_in_subset`` with the trivial symmetries of
Parallelproj).  SIRF's forward projection of a subset starts from data zeroed everywhere
(STIR's ``forward_project(..., zero=true)`` for more than one subset) and then adds ``a``,
applies ``S`` and adds ``b`` to *all* views, so the other views hold the constant term
``S a + b``; here those views are written with it directly (chunk by chunk), the subset's views
by the projector.  A backward projection of a subset reads that subset's views only.

``P`` (``set_image_data_processor``, e.g. a ``SeparableGaussianImageFilter`` for resolution
modelling) is STIR's pre-data processor of the forward projector and post-data processor of the
back projector, as SIRF sets it: applied to a copy of the image before each forward projection
and to each back projection (``P' = P`` for a symmetric filter).  stirgpu's objective function
projects through the projector itself, so it refuses a model with ``P``.

Relation to STIR's OSMAPOSL: ``f`` are ``Bin Normalisation From ProjData`` factors, ``a`` is its
``additive sinogram``, ``b`` is folded into it as ``a + b f`` by :mod:`.objective` (as SIRF does).
"""

from __future__ import annotations

import warnings
from numbers import Integral
from typing import Any

import numpy as np

from ..errors import NonFiniteError
from ..formats import ProjData, VoxelsOnCartesianGrid
from ..geometry import ImageInfo
from .acquisition_data import AcquisitionData
from .errors import ConstModelError, InputError, InputTypeError, error, translate_class_errors
from .image_data import ImageData
from .outside_image import ImageReach
from .processors import ImageDataProcessor
from .sensitivity import AcquisitionSensitivityModel
from .storage import chunk_bytes

__all__ = ["AcquisitionModelUsingParallelproj", "AcquisitionModelUsingStirgpu", "AcquisitionModel"]

_DEPRECATED = (
    "is deprecated in stirgpu.sirf: give SIRF's containers (stirgpu.sirf.AcquisitionData(store) and "
    "stirgpu.sirf.ImageData.from_array(array, image_info) wrap stirgpu's without copying)"
)


def _acquisition_data(obj, what: str, template: AcquisitionData | None = None) -> AcquisitionData:
    if isinstance(obj, AcquisitionData):
        return obj
    if isinstance(obj, ProjData):
        warnings.warn(f"{what}: a stirgpu ProjData {_DEPRECATED}", DeprecationWarning, stacklevel=4)
        return AcquisitionData(obj)
    if template is not None and isinstance(obj, np.ndarray):
        warnings.warn(f"{what}: a numpy array {_DEPRECATED}", DeprecationWarning, stacklevel=4)
        return AcquisitionData(template).fill(obj if obj.ndim == 4 else obj[None])
    raise InputTypeError(f"{what}: expected AcquisitionData, not {type(obj).__name__}")


def _image_data(obj, what: str, template=None) -> ImageData:
    if isinstance(obj, ImageData):
        return obj
    if isinstance(obj, (VoxelsOnCartesianGrid, ImageInfo)) or (template is not None and hasattr(obj, "shape")):
        warnings.warn(f"{what}: a {type(obj).__name__} {_DEPRECATED}", DeprecationWarning, stacklevel=4)
        if isinstance(obj, ImageInfo):
            return ImageData._zeros(obj, np)
        if isinstance(obj, VoxelsOnCartesianGrid):
            return ImageData.from_array(obj.array, obj.info)
        if tuple(obj.shape) != template.dimensions():
            raise InputError(
                f"{what}: shape {tuple(obj.shape)} differs from the image template's {template.dimensions()}"
            )
        return ImageData.from_array(obj, template.image_info)
    raise InputTypeError(f"{what}: expected ImageData, not {type(obj).__name__}")


@translate_class_errors
class AcquisitionModelUsingParallelproj:
    """SIRF's ``AcquisitionModelUsingParallelproj`` (the module docstring says what it computes).

    stirgpu's execution settings are optional keywords (default: the scoped
    :func:`stirgpu.config`): ``backend``, ``devices``, ``gpu_memory_budget``,
    ``host_memory_budget``, ``max_views_per_chunk``; ``restrict_to_cylindrical_fov`` as STIR's
    Parallelproj projector (on by default); ``comm``, the MPI communicator the projections are
    shared by (default ``COMM_WORLD`` under an MPI launcher; see docs/distributed.md: every rank
    projects its share, and every rank's results are whole).
    """

    def __init__(
        self,
        *,
        backend: str | None = None,
        devices=None,
        gpu_memory_budget=None,
        host_memory_budget=None,
        max_views_per_chunk: int | None = None,
        restrict_to_cylindrical_fov: bool = True,
        comm=None,
    ):
        self._options = dict(
            comm=comm,
            backend=backend,
            devices=devices,
            gpu_memory_budget=gpu_memory_budget,
            host_memory_budget=host_memory_budget,
            max_views_per_chunk=max_views_per_chunk,
            restrict_to_cylindrical_fov=restrict_to_cylindrical_fov,
        )
        self.name = "AcqModUsingParallelproj"
        self._projector: Any = None
        self._reach: ImageReach | None = None  # which bins reach the image (made when needed)
        self.acq_templ: AcquisitionData | None = None
        self.img_templ: ImageData | None = None
        self.at: AcquisitionData | None = None  # SIRF's names: additive term, background term, sensitivity
        self.bt: AcquisitionData | None = None
        self.asm: AcquisitionSensitivityModel | None = None
        self.processor: ImageDataProcessor | None = None  # P of (F) and (B)
        self._num_subsets = 1
        self._subset_num = 0
        self.const = False  # the linear part SIRF hands out is a const object

    def _new_projector(self):
        from ..projectors import ProjectorPair

        return ProjectorPair(**self._options)  # None options: the scoped configuration

    # -- set up --------------------------------------------------------------------------------
    def set_up(self, acq_templ, img_templ) -> None:
        """Prepare projections between data like ``acq_templ`` and images like ``img_templ``."""
        self._refuse_if_const("set_up")
        acq_templ = _acquisition_data(acq_templ, "set_up: acq_templ")
        img_templ = _image_data(img_templ, "set_up: img_templ")
        projector = self._new_projector()
        projector.set_up(acq_templ.get_proj_data_info(), img_templ.image_info)
        self._projector, self.acq_templ, self.img_templ = projector, acq_templ, img_templ
        self._reach = ImageReach(projector, acq_templ, img_templ)
        for name, term in (("additive term", self.at), ("background term", self.bt)):
            if term is not None:
                acq_templ._check_compatible(term, name)
        if self.asm is not None:
            self.asm.set_up(acq_templ)
        if self.processor is not None and hasattr(self.processor, "set_up"):
            self.processor.set_up(img_templ)  # STIR sets the projectors' data processor up with them

    def _require_set_up(self) -> tuple:
        """(projector, acquisition template, image template), once set up."""
        if self._projector is None or self.acq_templ is None or self.img_templ is None:
            raise error("AcquisitionModel: call set_up(acq_templ, img_templ) first")
        return self._projector, self.acq_templ, self.img_templ

    def _refuse_if_const(self, what: str) -> None:
        if self.const:
            raise ConstModelError(f"cannot {what} for a const object (the linear part of an acquisition model)")

    @property
    def projector(self):
        """The :class:`~stirgpu.projectors.ProjectorPair` doing the work (after set_up)."""
        return self._require_set_up()[0]

    @property
    def pdi(self):
        """The projection-data geometry (after set_up)."""
        return self._require_set_up()[1].get_proj_data_info()

    # -- the terms -------------------------------------------------------------------------------
    def set_additive_term(self, at) -> None:
        """``a`` in (F): inside ``S`` (STIR's additive sinogram: normalised units)."""
        self._refuse_if_const("set_additive_term")
        self.at = _acquisition_data(at, "set_additive_term")

    def set_background_term(self, bt) -> None:
        """``b`` in (F): after ``S`` (measured units)."""
        self._refuse_if_const("set_background_term")
        self.bt = _acquisition_data(bt, "set_background_term")

    def set_acquisition_sensitivity(self, asm) -> None:
        """``S`` in (F)."""
        self._refuse_if_const("set_acquisition_sensitivity")
        if not isinstance(asm, AcquisitionSensitivityModel):
            raise InputTypeError(
                f"set_acquisition_sensitivity: expected an AcquisitionSensitivityModel, not {type(asm).__name__}"
            )
        self.asm = asm

    def set_image_data_processor(self, processor) -> None:
        """``P`` in (F) and (B) (the module docstring says where it applies); call before set_up."""
        self._refuse_if_const("set_image_data_processor")
        if not isinstance(processor, ImageDataProcessor):
            raise InputTypeError(
                f"set_image_data_processor: expected an ImageDataProcessor, not {type(processor).__name__}"
            )
        self.processor = processor

    def get_additive_term(self) -> AcquisitionData:
        return self.at if self.at is not None else AcquisitionData(self._require_set_up()[1])

    def get_background_term(self) -> AcquisitionData:
        return self.bt if self.bt is not None else AcquisitionData(self._require_set_up()[1])

    def get_acquisition_sensitivity(self) -> AcquisitionSensitivityModel | None:
        return self.asm

    def get_constant_term(self) -> AcquisitionData:
        """``S a + b``."""
        a = self.get_additive_term()
        sa = self.asm.forward(a) if self.asm is not None else a
        return sa + self.get_background_term()

    def _terms(self) -> dict:
        """The projector's keywords for a, f and b (stirgpu stores)."""
        terms = {}
        if self.at is not None:
            terms["additive"] = self.at.proj_data
        if self.asm is not None:
            acq_templ = self._require_set_up()[1]
            if not self.asm.is_set_up_for(acq_templ):
                self.asm.set_up(acq_templ)
            terms["multiplicative"] = self.asm.normalisation_factors()
        if self.bt is not None:
            terms["background"] = self.bt.proj_data
        return terms

    def is_affine(self) -> bool:
        return True

    def is_linear(self) -> bool:
        """True when the constant term is zero: no additive and no background term, or zero ones."""
        return all(t is None or t.norm() == 0 for t in (self.at, self.bt))

    def get_linear_acquisition_model(self) -> AcquisitionModelUsingParallelproj:
        """``S G``: the same projector and sensitivity, no terms (a const object, as SIRF's)."""
        lin = AcquisitionModelUsingParallelproj(**self._options)
        lin._projector, lin.acq_templ, lin.img_templ = self._require_set_up()
        lin.asm = self.asm
        lin.processor = self.processor
        lin.const = True
        return lin

    def range_geometry(self) -> AcquisitionData:
        """The acquisition template given to :meth:`set_up` itself, values and all (SIRF's)."""
        return self._require_set_up()[1]

    def domain_geometry(self) -> ImageData:
        """The image template given to :meth:`set_up` itself, values and all (SIRF's)."""
        return self._require_set_up()[2]

    # -- subsets --------------------------------------------------------------------------------------
    @property
    def subset_num(self) -> int:
        """The subset of ``direct`` / ``adjoint``, and the default of ``forward`` / ``backward``."""
        return self._subset_num

    @subset_num.setter
    def subset_num(self, value) -> None:
        if not isinstance(value, Integral):
            raise InputError(f"Expected an integer. Got {type(value).__name__}")
        if not 0 <= int(value) < self._num_subsets:
            raise InputError(f"Expected a subset number below {self._num_subsets} and >= 0. Got {value}")
        self._subset_num = int(value)

    @property
    def num_subsets(self) -> int:
        """The number of subsets of ``direct`` / ``adjoint`` and the default of ``forward`` /
        ``backward``; setting it sets ``subset_num`` to 0 (as SIRF)."""
        return self._num_subsets

    @num_subsets.setter
    def num_subsets(self, value) -> None:
        if not isinstance(value, Integral):
            raise InputError(f"Expected an integer. Got {type(value).__name__}")
        if int(value) < 1:
            raise InputError(f"Expected a number of subsets larger than 0. Got {value}")
        self._num_subsets = int(value)
        self._subset_num = 0

    def _subset(self, subset_num, num_subsets) -> tuple[int, int]:
        k = self._subset_num if subset_num is None else int(subset_num)
        n = self._num_subsets if num_subsets is None else int(num_subsets)
        self.pdi.subset_views(k, n)  # refuses a subset that does not exist, naming it
        return k, n

    # -- projections ------------------------------------------------------------------------------------
    def forward(self, image, subset_num=None, num_subsets=None, out=None):
        """``S (G x + a) + b`` on subset ``subset_num`` of ``num_subsets`` (default: the members),
        the constant term ``S a + b`` on the other views.  New AcquisitionData, or into ``out``
        (then returns None, as SIRF)."""
        projector, acq_templ, img_templ = self._require_set_up()
        image = _image_data(image, "forward: image", img_templ)
        img_templ._check_compatible(image, "forward: image")
        k, n = self._subset(subset_num, num_subsets)
        if out is None:
            target = AcquisitionData(acq_templ)
        else:
            given_store = isinstance(out, ProjData)  # (deprecated) a store the caller reads afterwards
            out = _acquisition_data(out, "forward: out")
            acq_templ._check_compatible(out, "forward: out")
            if given_store:
                out._check_writable()
            target = out._result_holder()  # new data where out's values are a file read
        if self.processor is not None:
            image = image.clone()
            self.processor.apply(image)
        terms = self._terms()
        projector.forward_project(target.proj_data, image.array, k, n, **terms)
        if n > 1 and (out is not None or "additive" in terms or "background" in terms):
            others = np.setdiff1d(np.arange(self.pdi.get_num_views()), self.pdi.subset_views(k, n))
            _write_constant_term(target.proj_data, others, terms)
        if out is None:
            return target
        out._keep_result(target)
        return None

    def backward(self, ad, subset_num=None, num_subsets=None, out=None):
        """``G' S y`` over the views of subset ``subset_num`` of ``num_subsets``.  New ImageData
        (where the image template is: host or GPU), or into ``out`` (then returns None)."""
        projector, acq_templ, img_templ = self._require_set_up()
        ad = _acquisition_data(ad, "backward: data", acq_templ)
        acq_templ._check_compatible(ad, "backward: data")
        k, n = self._subset(subset_num, num_subsets)
        target = img_templ._new_like() if out is None else _image_data(out, "backward: out")
        img_templ._check_compatible(target, "backward: out")
        f = self._terms().get("multiplicative")
        try:
            projector.back_project(target.array, ad.proj_data, k, n, multiplicative=f)
        except NonFiniteError:
            # NaN or Inf only in bins that miss the image (0/0 of SIRF's own ratios): they add
            # nothing in SIRF either (outside_image.py); anywhere else they are refused
            zeroed = None if self._reach is None else self._reach.zeroed_outside(ad)
            if zeroed is None:
                raise
            projector.back_project(target.array, zeroed.proj_data, k, n, multiplicative=f)
        if self.processor is not None:
            self.processor.apply(target)
        return target if out is None else None

    def direct(self, image, out=None):
        """``forward`` of the members' subset, for a linear model only (CIL's ``direct``)."""
        if not self.is_linear():
            raise error(
                "AcquisitionModel is not linear\nYou can get the linear part of the AcquisitionModel with "
                "get_linear_acquisition_model"
            )
        return self.forward(image, subset_num=self._subset_num, num_subsets=self._num_subsets, out=out)

    def adjoint(self, ad, out=None):
        """``backward`` of the members' subset, for a linear model only (CIL's ``adjoint``)."""
        if not self.is_linear():
            raise error(
                "AcquisitionModel is not linear. You can get the linear part of the AcquisitionModel with "
                "get_linear_acquisition_model"
            )
        return self.backward(ad, subset_num=self._subset_num, num_subsets=self._num_subsets, out=out)

    def norm(self, subset_num=0, num_subsets=1, num_iter=2, verb=0) -> float:
        """An estimate of the operator norm of ``S G`` on a subset: the square root of the Rayleigh
        quotient of ``G' S S G`` after ``num_iter`` power iterations from a uniform image (SIRF
        uses a Jacobi-CG eigenvalue method; both approach the norm from below)."""
        lin = self.get_linear_acquisition_model()
        x = self._require_set_up()[2].get_uniform_copy(1.0)
        lam = 0.0
        for _ in range(max(1, int(num_iter))):
            y = lin.backward(lin.forward(x, subset_num, num_subsets), subset_num, num_subsets)
            xx = x.squared_norm()
            lam = float(x.dot(y)) / xx if xx > 0 else 0.0
            ny = y.norm()
            if ny == 0:
                break
            x = y / ny
        return float(np.sqrt(max(lam, 0.0)))

    # -- attenuation (for AcquisitionSensitivityModel) ---------------------------------------------------
    def _attenuation_factors(self, mu, ad: AcquisitionData) -> AcquisitionData:
        """``exp(G mu)`` for data like ``ad`` (``mu`` in 1/cm, as STIR and SIRF take it), with this
        model's projector settings."""
        mu = _image_data(mu, "attenuation image")
        projector = self._new_projector()
        projector.set_up(ad.get_proj_data_info(), mu.image_info)
        acf = AcquisitionData(ad)
        projector.forward_project(acf.proj_data, _per_x_voxel(mu))
        return acf.exp(out=acf)


def _per_x_voxel(mu: ImageData):
    """``mu`` (1/cm) per x voxel: the projector's line integrals are in units of the x voxel size
    (STIR's), so ``G`` of this is the line integral of ``mu`` in cm.  STIR's
    ``BinNormalisationFromAttenuationImage`` scales its copy of the image by the same float32
    factor, x voxel size (mm) / 10."""
    rescale = np.float32(mu.image_info.voxel_size[2]) / np.float32(10)
    return mu.array * rescale


def _write_constant_term(store: ProjData, views: np.ndarray, terms: dict) -> None:
    """``(0 + a) / f + b`` (0 where f == 0, then b) on ``views`` of every segment: what the
    projector's model forward gives a zero projection, written chunk by chunk."""
    if not len(views):
        return
    a, f, b = (terms.get(n) for n in ("additive", "multiplicative", "background"))
    pdi = store.get_proj_data_info()
    for seg in pdi.segment_nums:
        step = max(1, chunk_bytes() // (4 * pdi.get_num_axial_poss(seg) * pdi.get_num_tangential_poss()))
        for i in range(0, len(views), step):
            v = views[i : i + step]
            shape = (len(v), pdi.get_num_axial_poss(seg), pdi.get_num_tangential_poss())
            value = a.read_views(seg, v) if a is not None else np.zeros(shape, dtype=np.float32)
            if f is not None:
                fv = f.read_views(seg, v)
                ok = fv != 0
                value = np.where(ok, value / np.where(ok, fv, np.float32(1)), np.float32(0))
            if b is not None:
                value += b.read_views(seg, v)
            store.write_views(value, seg, v)


#: stirgpu's own name for the same model
AcquisitionModelUsingStirgpu = AcquisitionModelUsingParallelproj
#: SIRF's base-class name; here the same class (so SIRF's isinstance checks hold)
AcquisitionModel = AcquisitionModelUsingParallelproj
