"""SIRF's ``AcquisitionData``: projection data on any stirgpu store, streamed chunk by chunk.

The values live in a :class:`~stirgpu.formats.ProjData` store: the file itself for data read
with the storage scheme ``"file"`` (read-only, as SIRF: a result given as ``out=`` goes into new
data the object then holds, see :meth:`AcquisitionData._result_holder`), a scratch file or memory
for new data (:mod:`.storage`).  Element-wise operations and reductions go through the store's chunks
(:meth:`~stirgpu.formats.ProjData.view_chunks`: views of one segment), so data on disk are never
read whole; ``as_array`` is the one call that makes a full copy, as it says.

Shapes are SIRF's: ``dimensions()`` and ``as_array()`` are (TOF bins, sinograms, views,
tangential positions), the sinograms of segments 0, +1, -1, +2, ... (STIR's order).
``get_subset(views)`` gives data of those views only (in memory, as STIR's ``get_subset``); such
data have no stirgpu geometry (they cannot be projected or written).
"""

from __future__ import annotations

import os
from numbers import Real

import numpy as np

from ..formats import ProjData, ProjDataFromFile, ProjDataInOneArray, read_from_file
from ..geometry import ProjDataInfo, Scanner
from .containers import DataContainer
from .errors import InputError, InputTypeError, NotSupported, error, translate_class_errors
from .rebin import ssrb, ssrb_geometry
from .storage import chunk_bytes, get_storage_scheme, new_store, set_storage_scheme

__all__ = ["AcquisitionData"]


class _StoreBacking:
    """Values in a stirgpu store; pieces are (timing position, segment, first view, end view)."""

    def __init__(self, store: ProjData):
        self.store = store

    @property
    def read_only(self) -> bool:
        """What the store declares (a file opened read-only, a computed view, a closed file)."""
        return not self.store.abilities.writable

    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self.store.get_proj_data_info()

    @property
    def dimensions(self) -> tuple[int, int, int, int]:
        p = self.store
        return (p.get_num_tof_poss(), p.get_num_non_tof_sinograms(), p.get_num_views(), p.get_num_tangential_poss())

    def pieces(self, nbytes: int):
        p = self.store
        for t in range(p.get_min_tof_pos_num(), p.get_max_tof_pos_num() + 1):
            for seg in self.proj_data_info.segment_nums:
                for views in p.view_chunks(seg, nbytes):
                    yield (t, seg, views.start, views.stop)

    def read(self, key) -> np.ndarray:
        t, seg, v0, v1 = key
        return self.store.read_views(seg, range(v0, v1), timing_pos=t)

    def write(self, key, values) -> None:
        t, seg, v0, v1 = key
        self.store.write_views(values, seg, range(v0, v1), timing_pos=t)

    def compatible(self, other) -> bool:
        return isinstance(other, _StoreBacking) and other.proj_data_info == self.proj_data_info

    def as_array(self) -> np.ndarray:
        a = self.store.as_array()
        return a if a.ndim == 4 else a[None]

    def fill(self, values: np.ndarray) -> None:
        self.store.fill(values if self.store.get_num_tof_poss() > 1 else values[0])

    def fill_value(self, value: np.float32) -> None:
        self.store.fill(value)  # written chunk by chunk, nothing read


class _SubsetBacking:
    """Values of some views of other data, in memory (STIR's ``ProjData::get_subset``)."""

    def __init__(self, values: np.ndarray, parent: ProjDataInfo, views: tuple[int, ...]):
        self.values = values
        self.parent = parent
        self.views = views
        self.read_only = False
        self.store = None

    @property
    def dimensions(self):
        return tuple(self.values.shape)

    def pieces(self, nbytes: int):
        per_sinogram = 4 * self.values.shape[2] * self.values.shape[3]
        step = max(1, nbytes // per_sinogram)
        for t in range(self.values.shape[0]):
            for s0 in range(0, self.values.shape[1], step):
                yield (t, s0, min(s0 + step, self.values.shape[1]))

    def read(self, key) -> np.ndarray:
        t, s0, s1 = key
        return self.values[t, s0:s1].copy()

    def write(self, key, values) -> None:
        t, s0, s1 = key
        self.values[t, s0:s1] = values

    def compatible(self, other) -> bool:
        return isinstance(other, _SubsetBacking) and (other.parent, other.views) == (self.parent, self.views)

    def as_array(self) -> np.ndarray:
        return self.values.copy()

    def fill(self, values: np.ndarray) -> None:
        self.values[...] = values

    def fill_value(self, value: np.float32) -> None:
        self.values[...] = value


def _scanner_geometry(name: str, span: int, max_ring_diff: int, view_mash_factor: int) -> ProjDataInfo:
    """SIRF's ``proj_data_info_from_scanner``: all views / mashing, the scanner's non-arc-corrected
    tangential positions, ring differences up to ``max_ring_diff`` (-1: all)."""
    if not Scanner.is_known(name):
        raise InputError(f"AcquisitionData: unknown scanner {name!r} (a name without '.' is a scanner's, as in SIRF)")
    sc = Scanner.from_name(name)
    if int(view_mash_factor) < 1 or sc.get_num_detectors_per_ring() // 2 % int(view_mash_factor):
        raise InputError(f"AcquisitionData: view_mash_factor {view_mash_factor} must divide {sc.get_max_num_views()}")
    mrd = sc.get_num_rings() - 1 if int(max_ring_diff) < 0 else int(max_ring_diff)
    return ProjDataInfo.construct(
        sc,
        int(span),
        mrd,
        num_views=sc.get_num_detectors_per_ring() // 2 // int(view_mash_factor),
        num_tangential_poss=sc.get_max_num_non_arccorrected_bins(),
        arc_corrected=False,
    )


@translate_class_errors
class AcquisitionData(DataContainer):
    """PET projection data (SIRF's ``sirf.STIR.AcquisitionData``).

    ``AcquisitionData(filename)`` (a name with a '.': Interfile ``.hs``),
    ``AcquisitionData(scanner_name, span=1, max_ring_diff=-1, view_mash_factor=1)`` (zeros),
    ``AcquisitionData(template)`` (zeros of the template's geometry) or, for stirgpu code,
    ``AcquisitionData(store)`` with a :class:`~stirgpu.formats.ProjData` (used as it is, no copy).
    """

    def __init__(self, src=None, span=1, max_ring_diff=-1, view_mash_factor=1, tof_mash_factor=1):
        self._backing: _StoreBacking | _SubsetBacking | None = None
        #: the header these data or their template came from: STIR's exam information (the
        #: energy window the scatter simulation needs) lives there
        self.exam_header: str | None = None
        self.name = "AcquisitionData"
        self.src = None
        if int(tof_mash_factor) != 1:
            raise NotSupported("AcquisitionData: TOF data (tof_mash_factor) are not supported by stirgpu's projectors")
        if src is None:
            return
        if isinstance(src, os.PathLike) or (isinstance(src, str) and "." in src):
            self.read_from_file(src)
            self.src = "file"
        elif isinstance(src, str):
            pdi = _scanner_geometry(src, span, max_ring_diff, view_mash_factor)
            self._backing = _StoreBacking(new_store(pdi))
            self.src = "scanner"
        elif isinstance(src, AcquisitionData):
            self._backing = _StoreBacking(new_store(src.get_proj_data_info()))
            self.exam_header = src.exam_header
            self.src = "template"
        elif isinstance(src, ProjData):
            self._backing = _StoreBacking(src)
            self.src = "store"
        else:
            raise error(f"Wrong source in AcquisitionData constructor: {type(src).__name__}")

    # -- storage -------------------------------------------------------------------------------
    set_storage_scheme = staticmethod(set_storage_scheme)
    get_storage_scheme = staticmethod(get_storage_scheme)

    def read_from_file(self, filename) -> None:
        """Read Interfile data (``.hs``): kept in the file, read-only, with the storage scheme
        ``"file"``; read into memory with ``"memory"`` (as SIRF).

        A header without values (its data file absent, empty or the header itself) is a
        template, as in SIRF: with ``"file"`` it has the geometry only (``is_empty()``; reading
        its values is an error naming the file); with ``"memory"`` it gives writable data of its
        geometry, zeros (SIRF leaves them uninitialised)."""
        store = read_from_file(os.fspath(filename), "r")
        self.exam_header = os.fspath(filename)
        if get_storage_scheme() == "memory":
            with store:
                values = store if store.abilities.readable else 0.0
                self._backing = _StoreBacking(ProjDataInOneArray(store.get_proj_data_info(), fill=values))
        else:
            self._backing = _StoreBacking(store)

    @property
    def read_only(self) -> bool:
        return self._backing is not None and self._backing.read_only

    def same_object(self) -> AcquisitionData:
        return AcquisitionData()

    def _require(self) -> _StoreBacking | _SubsetBacking:
        if self._backing is None:
            raise error("AcquisitionData: empty object (give a file, a scanner name or a template)")
        return self._backing

    @property
    def proj_data(self) -> ProjData:
        """The stirgpu store holding the values (for stirgpu's own projectors and OSEM)."""
        b = self._require()
        if b.store is None:
            raise NotSupported("AcquisitionData.get_subset data have no stirgpu geometry")
        return b.store

    def get_proj_data_info(self) -> ProjDataInfo:
        return self.proj_data.get_proj_data_info()

    # -- DataContainer's pieces ------------------------------------------------------------------
    def _pieces(self):
        return self._require().pieces(chunk_bytes())

    def _read(self, key):
        return self._require().read(key)

    def _write(self, key, values) -> None:
        self._require().write(key, np.asarray(values, dtype=np.float32))

    def _new_like(self) -> AcquisitionData:
        b = self._require()
        if isinstance(b, _SubsetBacking):
            new = AcquisitionData()
            new._backing = _SubsetBacking(np.zeros_like(b.values), b.parent, b.views)
            return new
        return AcquisitionData(self)

    def _check_compatible(self, other, what: str) -> None:
        if not isinstance(other, AcquisitionData):
            raise InputTypeError(f"{what}: expected AcquisitionData, not {type(other).__name__}")
        if not self._require().compatible(other._require()):
            raise InputError(f"{what}: the two AcquisitionData have different geometries")

    def _result_holder(self) -> AcquisitionData:
        """Data whose values are never written (a file read with the storage scheme ``"file"``,
        a template, a computed view) take a result given as ``out=`` into new data of the storage
        scheme in force, which then replace them in this object (as SIRF gives the object a new
        handle): the file stays as it was, and the object holds the result, writable."""
        b = self._require()
        if isinstance(b, _StoreBacking) and b.read_only:
            return self._new_like()
        return self

    def _keep_result(self, holder: AcquisitionData) -> None:
        if holder is not self:
            self._backing = holder._require()

    def _check_writable(self) -> None:
        if self._require().read_only:
            raise error(
                "Cannot fill read-only object, consider filling a clone (data read from a file with the "
                "storage scheme 'file' are read-only, as in SIRF)"
            )

    # -- SIRF's methods ------------------------------------------------------------------------------
    def dimensions(self) -> tuple[int, int, int, int]:
        """(TOF bins, sinograms, views, tangential positions)."""
        return self._require().dimensions

    def is_empty(self) -> bool:
        """True for an empty object and for a template (a header without values), as SIRF."""
        b = self._backing
        return b is None or (b.store is not None and b.store.abilities.template)

    def get_tof_mash_factor(self) -> int:
        return 1

    @property
    def modality(self) -> str:
        return "PT"

    @property
    def supports_array_view(self) -> bool:
        """True for data in memory as one array (the storage scheme ``"memory"``, as SIRF's):
        ``numpy.asarray(ad)`` and ``ad.asarray(copy=False)`` are views of the values."""
        b = self._backing
        return b is not None and isinstance(b.store, ProjDataInOneArray)

    @property
    def __array_interface__(self):
        """numpy's view of data in memory (SIRF's); other data refuse it as SIRF does."""
        store = None if self._backing is None else self._backing.store
        if not isinstance(store, ProjDataInOneArray):
            raise InputError("views not supported, please consider using `asarray()` or `as_array()`")
        return store.array.__array_interface__

    def as_array(self) -> np.ndarray:
        """A copy of all values: (TOF bins, sinograms, views, tangential) float32."""
        return self._require().as_array()

    def fill(self, value):
        """Set the values: a number, an array of :meth:`dimensions`, or other AcquisitionData."""
        b = self._require()
        self._check_writable()
        if isinstance(value, AcquisitionData):
            return self._apply(lambda xp, x, y: y, (self._operand(value, "fill"),), self, "fill")
        if isinstance(value, (Real, np.number)) and not isinstance(value, bool):
            b.fill_value(np.float32(float(value)))
            return self
        if hasattr(value, "shape"):
            arr = np.asarray(value.get() if hasattr(value, "get") else value, dtype=np.float32)
            if arr.shape != b.dimensions:
                raise InputError(f"cannot fill AcquisitionData of size {b.dimensions} with data of size {arr.shape}")
            b.fill(arr)
            return self
        raise InputTypeError(
            f"Wrong fill value. Should be numpy.ndarray, AcquisitionData, float or int, got {type(value).__name__}"
        )

    def get_uniform_copy(self, value=0):
        """New data of this geometry (storage scheme of now), every value ``value``."""
        return self._new_like().fill(value)

    def write(self, filename) -> None:
        """Write Interfile ``.hs`` + ``.s`` (STIR's names: ``out``, ``out.hs`` give ``out.hs``), chunk by
        chunk; an existing file is replaced, as SIRF does."""
        with ProjDataFromFile.create(os.fspath(filename), self.get_proj_data_info(), overwrite=True) as out:
            for key in self._pieces():
                t, seg, v0, v1 = key
                out.write_views(self._read(key), seg, range(v0, v1), timing_pos=t)

    def create_uniform_image(self, value=0, xy=None):
        """An image of STIR's default geometry for these data (``xy``: x and y size, an int or a
        (ny, nx) tuple; None: STIR's), every voxel ``value``."""
        from .image_data import ImageData

        return ImageData.default_for(self, xy).fill(value)

    def rebin(
        self,
        num_segments_to_combine,
        num_views_to_combine=1,
        num_tang_poss_to_trim=0,
        do_normalisation=True,
        max_in_segment_num_to_process=-1,
        num_tof_bins_to_combine=1,
    ) -> AcquisitionData:
        """SIRF's ``rebin``: STIR's single-slice rebinning (``stir::SSRB``, :mod:`.rebin`) into new
        data of the storage scheme in force; ``do_normalisation`` averages, otherwise adds."""
        store = self.proj_data
        pdi = ssrb_geometry(
            store.get_proj_data_info(),
            num_segments_to_combine,
            num_views_to_combine,
            num_tang_poss_to_trim,
            max_in_segment_num_to_process,
            num_tof_bins_to_combine,
        )
        return AcquisitionData(ssrb(new_store(pdi), store, bool(do_normalisation)))

    def get_subset(self, views) -> AcquisitionData:
        """The data of ``views`` only (any view numbers, in the order given), in memory."""
        v = [int(i) for i in np.asarray(views).ravel()]
        pdi = self.get_proj_data_info()
        bad = [i for i in v if not 0 <= i < pdi.get_num_views()]
        if bad or not v:
            raise InputError(f"get_subset: views must be in 0..{pdi.get_num_views() - 1}, got {v}")
        ntof, nsino, _, nt = self.dimensions()
        values = np.empty((ntof, nsino, len(v), nt), dtype=np.float32)
        store, start = self.proj_data, 0
        for seg in pdi.segment_nums_stir_order:
            na = pdi.get_num_axial_poss(seg)
            for t in range(ntof):
                block = store.read_views(seg, v, timing_pos=t + store.get_min_tof_pos_num())  # (views, axial, tang)
                values[t, start : start + na] = block.transpose(1, 0, 2)
            start += na
        sub = AcquisitionData()
        sub._backing = _SubsetBacking(values, pdi, tuple(v))
        return sub

    def show(self, sino=None, tof=0, title=None) -> None:
        """Draw sinograms of TOF bin ``tof`` with matplotlib as SIRF does (:mod:`.display`)."""
        from .display import IndexOutOfRange, show_planes  # (matplotlib only when drawing)

        data = self.as_array()
        if not 0 <= tof < data.shape[0]:
            raise IndexOutOfRange(f"show: TOF bin index {tof} is outside 0..{data.shape[0] - 1}")
        show_planes(data[tof], sino, title, "sinogram")

    def get_info(self) -> str:
        """What the data are and where they live."""
        b = self._require()
        if b.store is None:
            return f"AcquisitionData: views {list(b.views)} of {b.parent!r}, in memory"
        return (
            f"AcquisitionData {self.dimensions()} (TOF, sinograms, views, tangential): {b.store!r}, "
            f"{b.store.abilities}\n{b.proj_data_info!r}"
        )

    def __repr__(self) -> str:
        if self._backing is None:
            return "AcquisitionData()"
        return f"AcquisitionData({self.dimensions()})"
