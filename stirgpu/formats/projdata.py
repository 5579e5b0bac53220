"""The projection-data protocol: :class:`ProjData`, with STIR's Python names.

Code written for ``stir.ProjData`` works on any store: ``get_viewgram(view, segment)``,
``get_segment_by_sinogram(segment)``, ``as_array()``, ``fill(...)`` ...; the
execution engine uses the chunk calls :meth:`ProjData.read_views` and
:meth:`ProjData.write_views` (any set of views of one segment, into a caller-supplied
(pinned) buffer if wanted).

All of it is implemented here once, on two primitives a store provides:

* ``_read_box(segment, tof_index, (v0, v1), (a0, a1), out)``: fill ``out`` (float32,
  shape ``(v1-v0, a1-a0, num_tangential)``, possibly a strided view) with those bins;
* ``_write_box(segment, tof_index, v0, a0, data)``: the reverse.

So there is one indexing layer; a store only maps a box to its own layout.  A store
that holds its bins in host memory in view order may also hand that memory out
(:meth:`ProjData.host_array`), so that GPUs copy chunks straight to and from it.

Arrays are float32.  Shapes: viewgram ``(axial, tangential)``; sinogram ``(view,
tangential)``; segment by view ``(view, axial, tangential)``; segment by sinogram
``(axial, view, tangential)``; ``as_array()`` STIR's ``([TOF,] sinograms of segments 0,
+1, -1, +2, ..., view, tangential)``.  Timing positions are numbered as STIR does,
centred on 0 (``get_min_tof_pos_num()`` .. ``get_max_tof_pos_num()``); non-TOF data
have the single timing position 0.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterator

import numpy as np

from ..errors import GeometryError, StoreAbilityError
from ..geometry import ProjDataInfo
from .abilities import StoreAbilities
from .storage_order import StorageOrder

__all__ = ["ProjData", "StorageOrder", "view_runs", "read_from_file"]

#: what a store lacking an ability (a StoreAbilities field) cannot do, for refusals
_CANNOT = {
    "readable": "cannot be read",
    "writable": "cannot be written",
    "write_behind": "has no write-behind (start_writeback)",
    "abortable": "holds no new data that abort() could discard",
}

#: bytes of float32 data handled per step by bulk operations (fill, copy)
_STEP_BYTES = 32 * 1024 * 1024


def view_runs(views: np.ndarray) -> list[tuple[int, int, int]]:
    """Split a view list into runs of consecutive ascending views:
    ``[(position in list, first view, last view + 1), ...]``."""
    runs = []
    n = len(views)
    i = 0
    while i < n:
        j = i + 1
        while j < n and views[j] == views[j - 1] + 1:
            j += 1
        runs.append((i, int(views[i]), int(views[j - 1]) + 1))
        i = j
    return runs


class ProjData(abc.ABC):
    """Projection data of one :class:`~stirgpu.geometry.ProjDataInfo` (a store).

    Stores: :class:`~stirgpu.formats.ProjDataFromFile` (Interfile on disk, view or
    sinogram order), :class:`~stirgpu.formats.ProjDataInMemory`,
    :class:`~stirgpu.formats.ProjDataViewgrams`, the computed views of :mod:`stirgpu.recon.views`,
    :class:`~stirgpu.interop.StirProjDataAdapter` (a STIR ProjData).  Each declares what it can
    do in :attr:`abilities`.  Use as a context manager (or call :meth:`close`) to release files.
    """

    # -- what a store provides -----------------------------------------------------------
    @property
    @abc.abstractmethod
    def proj_data_info(self) -> ProjDataInfo:
        """The geometry."""

    @property
    @abc.abstractmethod
    def storage_order(self) -> StorageOrder:
        """How bins are laid out in the store (see :class:`StorageOrder`)."""

    @abc.abstractmethod
    def _read_box(
        self, segment: int, tof_index: int, view_range: tuple[int, int], axial_range: tuple[int, int], out: np.ndarray
    ) -> None:
        """Fill ``out`` (float32, shape (nv, na, nt), maybe strided) with the box's bins."""

    @abc.abstractmethod
    def _write_box(self, segment: int, tof_index: int, v0: int, a0: int, data: np.ndarray) -> None:
        """Store ``data`` (float32, shape (nv, na, nt), maybe strided) at views v0.., axial a0.."""

    @property
    @abc.abstractmethod
    def abilities(self) -> StoreAbilities:
        """What the store can do now (:class:`~stirgpu.formats.StoreAbilities`: readable,
        writable, parallel reads and writes, write-behind, abortable, template, host memory,
        where the bins are).  Callers decide by it, never by the store's type or attributes."""

    def close(self) -> None:  # noqa: B027 (optional hook; default: nothing)
        """Release resources (files).  Further use is an error for file-backed stores."""

    @property
    def source_file(self) -> str | None:
        """The file the store's values come from (its header), for messages that name an
        input; None for a store of no one file (in memory, computed from several)."""
        return None

    def check_readable(self) -> None:
        """Raise :class:`~stirgpu.errors.StoreAbilityError` naming the store (and its file) when
        it is not ``abilities.readable`` -- a template (a header without data), a closed file --
        so that a caller can refuse before any work instead of failing in the middle of it."""
        if not self.abilities.readable:
            raise self._refusal("readable")

    def check_writable(self) -> None:
        """Like :meth:`check_readable`, for ``abilities.writable`` (a read-only store, a
        computed view, ... are refused too)."""
        if not self.abilities.writable:
            raise self._refusal("writable")

    def start_writeback(self) -> None:
        """Start writing what was written so far to the disk now, for stores with
        ``abilities.write_behind``; the others raise StoreAbilityError."""
        raise self._refusal("write_behind")

    def abort(self) -> None:
        """Discard new, uncommitted data and close, for stores with ``abilities.abortable``;
        the others raise StoreAbilityError."""
        raise self._refusal("abortable")

    def _refusal(self, ability: str) -> StoreAbilityError:
        """The error refusing what needs ``ability`` (a StoreAbilities field) the store lacks.
        Stores override it to say why (and name their file)."""
        return StoreAbilityError(f"{self!r} {_CANNOT.get(ability, 'is not ' + ability)} (it is: {self.abilities})")

    def host_array(self, segment: int, timing_pos: int = 0) -> np.ndarray | None:
        """The store's own memory for one segment and timing position, when the store keeps
        its bins in host memory in view order: a writable, C-contiguous float32 array
        (views, axial, tangential) that *is* the data (writes to it change the store), and
        the same memory for the store's whole life.  ``None`` (the default) for stores that
        do not.  A TOF store has one such array for every segment and timing position, none
        sharing memory with another (the engine copies each timing position of a chunk's part
        from and to its own array).  The execution engine page-locks them and moves chunks
        between them and a GPU by DMA, with no staging copy."""
        return None

    # -- context manager -----------------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    # -- STIR-named geometry accessors ---------------------------------------------------
    def get_proj_data_info(self) -> ProjDataInfo:
        return self.proj_data_info

    def get_min_segment_num(self) -> int:
        return self.proj_data_info.get_min_segment_num()

    def get_max_segment_num(self) -> int:
        return self.proj_data_info.get_max_segment_num()

    def get_num_segments(self) -> int:
        return self.proj_data_info.get_num_segments()

    def get_num_views(self) -> int:
        return self.proj_data_info.get_num_views()

    def get_min_view_num(self) -> int:
        return self.proj_data_info.get_min_view_num()

    def get_max_view_num(self) -> int:
        return self.proj_data_info.get_max_view_num()

    def get_num_tangential_poss(self) -> int:
        return self.proj_data_info.get_num_tangential_poss()

    def get_min_tangential_pos_num(self) -> int:
        return self.proj_data_info.get_min_tangential_pos_num()

    def get_max_tangential_pos_num(self) -> int:
        return self.proj_data_info.get_max_tangential_pos_num()

    def get_num_axial_poss(self, segment_num: int) -> int:
        return self.proj_data_info.get_num_axial_poss(segment_num)

    def get_min_axial_pos_num(self, segment_num: int) -> int:
        return self.proj_data_info.get_min_axial_pos_num(segment_num)

    def get_max_axial_pos_num(self, segment_num: int) -> int:
        return self.proj_data_info.get_max_axial_pos_num(segment_num)

    def get_num_tof_poss(self) -> int:
        return self.proj_data_info.get_num_tof_poss()

    def get_min_tof_pos_num(self) -> int:
        return -(self.get_num_tof_poss() // 2)

    def get_max_tof_pos_num(self) -> int:
        return self.get_min_tof_pos_num() + self.get_num_tof_poss() - 1

    def get_num_sinograms(self) -> int:
        """Sinograms of all segments and timing positions (STIR's count)."""
        return self.proj_data_info.get_num_sinograms()

    def get_num_non_tof_sinograms(self) -> int:
        return self.proj_data_info.get_num_axial_poss_total()

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of :meth:`as_array`."""
        sino = (self.get_num_non_tof_sinograms(), self.get_num_views(), self.get_num_tangential_poss())
        return ((self.get_num_tof_poss(),) + sino) if self.get_num_tof_poss() > 1 else sino

    # -- validation ----------------------------------------------------------------------
    def _segment(self, segment: int) -> int:
        s = int(segment)
        self.proj_data_info.segment(s)  # GeometryError when out of range
        return s

    def _tof_index(self, timing_pos: int) -> int:
        t = int(timing_pos)
        lo, hi = self.get_min_tof_pos_num(), self.get_max_tof_pos_num()
        if not lo <= t <= hi:
            raise GeometryError(f"timing_pos {t} out of range [{lo}, {hi}]")
        return t - lo

    def _views(self, views) -> np.ndarray:
        if isinstance(views, slice):
            v = np.arange(self.get_num_views())[views]
        else:
            v = np.asarray(views if not isinstance(views, range) else np.arange(views.start, views.stop, views.step))
            if v.ndim == 0:
                v = v.reshape(1)
            if v.ndim != 1 or (v.size and v.dtype.kind not in "iu"):
                raise GeometryError(f"views must be a 1-D sequence of integers, got {views!r}")
            v = v.astype(np.int64, copy=False)
        if v.size and (v.min() < 0 or v.max() >= self.get_num_views()):
            raise GeometryError(
                f"views must be in [0, {self.get_num_views() - 1}], got values in [{v.min()}, {v.max()}]"
            )
        return v

    def _axial(self, segment: int, ax: int) -> int:
        a = int(ax)
        n = self.get_num_axial_poss(segment)
        if not 0 <= a < n:
            raise GeometryError(f"axial position {a} out of range [0, {n - 1}] for segment {segment}")
        return a

    @staticmethod
    def _check_shape(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> None:
        if arr.shape != tuple(shape):
            raise GeometryError(f"{name}: expected shape {tuple(shape)}, got {arr.shape}")

    # -- chunk access (the execution engine's calls) -------------------------------------
    def read_views(self, segment: int, views, out: np.ndarray | None = None, timing_pos: int = 0) -> np.ndarray:
        """Bins of ``views`` (any int sequence) of one segment: float32 (len(views), axial,
        tangential).  Runs of consecutive views are read in one go.  ``out`` (e.g. a pinned
        buffer) is filled in place and returned."""
        seg, t, v, out = self._read_args(segment, views, out, timing_pos)
        runs = view_runs(v)
        if len(runs) > 1:  # scattered views (a subset's): announced together, see prefetch_views
            self._will_read(seg, t, [(v0, v1) for _, v0, v1 in runs])
        for pos, v0, v1 in runs:
            self._read_box(seg, t, (v0, v1), (0, out.shape[1]), out[pos : pos + v1 - v0])
        return out

    def prefetch_views(self, segment: int, views, timing_pos: int = 0) -> None:
        """A hint that ``views`` of one segment will be read soon; values are not affected.

        A store that can start fetching them in the background does: a file store asks the
        system to read exactly those bytes (``posix_fadvise(WILLNEED)``), every request queued at
        once.  Without the hint the system guesses from each read, and for a subset's views
        (every 21st) it reads the views in between too: an OSEM iteration's first subsets then
        read most of the file and its later ones nothing, so the reads and the kernels no longer
        overlap (``docs/execution.md``).  ``read_views`` gives the hint itself for views that are
        not consecutive; the execution engine's reader gives it for a whole chunk while it still
        reads the chunk before.
        Stores that hold their bins in memory do nothing."""
        seg = self._segment(segment)
        t = self._tof_index(timing_pos)
        self._will_read(seg, t, [(v0, v1) for _, v0, v1 in view_runs(self._views(views))])

    def _will_read(self, segment: int, tof_index: int, view_ranges: list[tuple[int, int]]) -> None:  # noqa: B027
        """Hook for :meth:`prefetch_views`: these view ranges (all axial positions) of one
        segment and TOF index are about to be read.  Default: nothing."""

    def write_views(self, array, segment: int, views, timing_pos: int = 0) -> None:
        """Store ``array`` (len(views), axial, tangential) as those views of one segment."""
        seg, t, v, a = self._write_args(array, segment, views, timing_pos)
        for pos, v0, v1 in view_runs(v):
            self._write_box(seg, t, v0, 0, a[pos : pos + v1 - v0])

    def _read_args(self, segment, views, out, timing_pos):
        """Validated (segment, TOF index, views, output array) of a read_views call."""
        seg = self._segment(segment)
        t = self._tof_index(timing_pos)
        v = self._views(views)
        shape = (len(v), self.get_num_axial_poss(seg), self.get_num_tangential_poss())
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        else:
            if not isinstance(out, np.ndarray) or out.dtype != np.float32:
                raise GeometryError(
                    f"read_views: out must be a float32 numpy array, got {getattr(out, 'dtype', type(out).__name__)}"
                )
            self._check_shape("read_views: out", out, shape)
            if not out.flags.writeable:
                raise GeometryError("read_views: out is read-only")
        return seg, t, v, out

    def _write_args(self, array, segment, views, timing_pos):
        """Validated (segment, TOF index, views, float32 array) of a write_views call."""
        seg = self._segment(segment)
        t = self._tof_index(timing_pos)
        v = self._views(views)
        a = np.asarray(array, dtype=np.float32)
        self._check_shape(
            "write_views: array", a, (len(v), self.get_num_axial_poss(seg), self.get_num_tangential_poss())
        )
        return seg, t, v, a

    def view_chunks(self, segment: int, max_bytes: int = _STEP_BYTES) -> Iterator[range]:
        """Consecutive view ranges of one segment, each at most ``max_bytes`` of float32
        (at least one view)."""
        seg = self._segment(segment)
        per_view = 4 * self.get_num_axial_poss(seg) * self.get_num_tangential_poss()
        step = max(1, int(max_bytes) // per_view)
        for v0 in range(0, self.get_num_views(), step):
            yield range(v0, min(v0 + step, self.get_num_views()))

    # -- STIR's getters and setters ------------------------------------------------------
    def get_viewgram(self, view: int, segment: int, timing_pos: int = 0) -> np.ndarray:
        """(axial, tangential) bins of one view."""
        return self.read_views(segment, [view], timing_pos=timing_pos)[0]

    def set_viewgram(self, array, view: int, segment: int, timing_pos: int = 0) -> None:
        a = np.asarray(array, dtype=np.float32)
        seg = self._segment(segment)
        self._check_shape("set_viewgram: array", a, (self.get_num_axial_poss(seg), self.get_num_tangential_poss()))
        self.write_views(a[None], seg, [view], timing_pos)

    def get_sinogram(self, axial_pos: int, segment: int, timing_pos: int = 0) -> np.ndarray:
        """(view, tangential) bins of one axial position."""
        seg = self._segment(segment)
        t = self._tof_index(timing_pos)
        ax = self._axial(seg, axial_pos)
        out = np.empty((1, self.get_num_views(), self.get_num_tangential_poss()), dtype=np.float32)
        self._read_box(seg, t, (0, self.get_num_views()), (ax, ax + 1), out.transpose(1, 0, 2))
        return out[0]

    def set_sinogram(self, array, axial_pos: int, segment: int, timing_pos: int = 0) -> None:
        seg = self._segment(segment)
        t = self._tof_index(timing_pos)
        ax = self._axial(seg, axial_pos)
        a = np.asarray(array, dtype=np.float32)
        self._check_shape("set_sinogram: array", a, (self.get_num_views(), self.get_num_tangential_poss()))
        self._write_box(seg, t, 0, ax, a[:, None, :])

    def get_segment_by_view(self, segment: int, timing_pos: int = 0) -> np.ndarray:
        """(view, axial, tangential)."""
        return self.read_views(segment, slice(None), timing_pos=timing_pos)

    def get_segment_by_sinogram(self, segment: int, timing_pos: int = 0) -> np.ndarray:
        """(axial, view, tangential)."""
        seg = self._segment(segment)
        out = np.empty(
            (self.get_num_axial_poss(seg), self.get_num_views(), self.get_num_tangential_poss()), dtype=np.float32
        )
        self._read_segment_by_sinogram_into(seg, self._tof_index(timing_pos), out)
        return out

    def _read_segment_by_sinogram_into(self, seg: int, t: int, out: np.ndarray) -> None:
        self._read_box(seg, t, (0, self.get_num_views()), (0, out.shape[0]), out.transpose(1, 0, 2))

    def set_segment_by_view(self, array, segment: int, timing_pos: int = 0) -> None:
        seg = self._segment(segment)
        a = np.asarray(array, dtype=np.float32)
        self._check_shape(
            "set_segment_by_view: array",
            a,
            (self.get_num_views(), self.get_num_axial_poss(seg), self.get_num_tangential_poss()),
        )
        self._write_box(seg, self._tof_index(timing_pos), 0, 0, a)

    def set_segment_by_sinogram(self, array, segment: int, timing_pos: int = 0) -> None:
        seg = self._segment(segment)
        a = np.asarray(array, dtype=np.float32)
        self._check_shape(
            "set_segment_by_sinogram: array",
            a,
            (self.get_num_axial_poss(seg), self.get_num_views(), self.get_num_tangential_poss()),
        )
        self._write_box(seg, self._tof_index(timing_pos), 0, 0, a.transpose(1, 0, 2))

    # -- whole data ----------------------------------------------------------------------
    def _stir_blocks(self) -> Iterator[tuple[int, int, int, int]]:
        """(tof index, segment, first sinogram, end sinogram) in ``as_array`` order."""
        for t in range(self.get_num_tof_poss()):
            start = 0
            for seg in self.proj_data_info.segment_nums_stir_order:
                n = self.get_num_axial_poss(seg)
                yield t, seg, start, start + n
                start += n

    def as_array(self) -> np.ndarray:
        """All data in STIR's Python order (see the module docstring); a copy."""
        out = np.empty(self.shape, dtype=np.float32)
        out4 = out if out.ndim == 4 else out[None]
        for t, seg, a, b in self._stir_blocks():
            self._read_segment_by_sinogram_into(seg, t, out4[t, a:b])
        return out

    def fill(self, value) -> None:
        """Set every bin: a number, an array in :meth:`as_array` order, or another ProjData
        of the same geometry."""
        if isinstance(value, ProjData):
            if value.proj_data_info != self.proj_data_info:
                raise GeometryError("fill: the other ProjData has a different geometry")
            for t in range(self.get_num_tof_poss()):
                tp = t + self.get_min_tof_pos_num()
                for seg in self.proj_data_info.segment_nums:
                    for views in self.view_chunks(seg):
                        self.write_views(value.read_views(seg, views, timing_pos=tp), seg, views, tp)
            return
        arr = np.asarray(value, dtype=np.float32)
        if arr.ndim == 0:
            for t in range(self.get_num_tof_poss()):
                for seg in self.proj_data_info.segment_nums:
                    for views in self.view_chunks(seg):
                        block = np.full(
                            (len(views), self.get_num_axial_poss(seg), self.get_num_tangential_poss()),
                            arr,
                            dtype=np.float32,
                        )
                        self._write_box(seg, t, views.start, 0, block)
            return
        self._check_shape("fill: array", arr, self.shape)
        arr4 = arr if arr.ndim == 4 else arr[None]
        for t, seg, a, b in self._stir_blocks():
            self._write_box(seg, t, 0, 0, arr4[t, a:b].transpose(1, 0, 2))

    # -- files ---------------------------------------------------------------------------
    @classmethod
    def read_from_file(cls, path: str | os.PathLike, mode: str = "r", *, allow_template: bool = True) -> ProjData:
        """STIR's ``ProjData.read_from_file``: the Interfile store of ``path`` (``.hs``)."""
        return read_from_file(path, mode, allow_template=allow_template)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.proj_data_info!r}, storage_order={self.storage_order.name})"


def read_from_file(path: str | os.PathLike, mode: str = "r", *, allow_template: bool = True) -> ProjData:
    """Open Interfile projection data (``.hs``) without reading the values.

    ``mode="r"``: read-only (writing is an error); ``"r+"``: read and write in place.
    ``allow_template=False``: a header whose data file is absent or empty is a FormatError
    naming the header and the data file (by default it opens as a template: geometry only).
    """
    from .projdata_disk import ProjDataFromFile  # the disk store depends on this module

    return ProjDataFromFile.open(path, mode, allow_template=allow_template)
