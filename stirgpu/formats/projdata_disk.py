"""Interfile projection data on disk (STIR's ``ProjDataFromStream`` / ``ProjDataInterfile``).

Values are never loaded as a whole: every access reads or writes only the bytes of
the requested bins with ``os.preadv``/``os.pwrite`` on a file descriptor, so a
100 GB file is usable with a few hundred MB of RAM, and several threads may read
concurrently (or write disjoint parts) through one store.

File layout: ``data offset`` bytes, then for each timing position (outermost), each
segment in the header's order, the segment's bins in view order ``[view][axial][tang]``
or sinogram order ``[axial][view][tang]``.

Safety:

* a store opened with ``mode="r"`` refuses every write; the file is opened read-only;
* :meth:`ProjDataFromFile.create` writes the data under a temporary name and puts data
  and header (last) in place only on :meth:`~ProjDataFromFile.commit` / ``close()``; a
  ``with`` block that ends in an exception, :meth:`~ProjDataFromFile.abort`, or a writer that
  dies, leaves no ``.hs`` (and a file it was to replace as it was);
* a header whose data file is absent, empty or the header itself is a *template* (geometry
  only): asking it for values is a FormatError, and ``open(..., allow_template=False)``
  refuses it at once, naming the header and the missing data file;
* what a store can do at a given moment is in its ``abilities``
  (:class:`~stirgpu.formats.StoreAbilities`: readable unless a template or closed, writable
  unless also opened read-only, parallel reads and writes through positioned I/O, write-behind
  when writable, abortable from ``create`` until committed); refusals are
  :class:`~stirgpu.errors.FileStoreAbilityError` (a FormatError naming the file);
* a data file of another size than the header describes (``data offset in bytes`` plus the
  bins) is a FormatError naming both sizes: shorter cannot be read, and longer means the
  header does not describe the file (STIR 6.5 reads the first bytes of a longer file without
  a word, which gives garbage when, say, the number format or a size in the header is wrong).
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from pathlib import Path

import numpy as np

from ..errors import FileStoreAbilityError, FormatError, GeometryError
from ..geometry import ProjDataInfo
from .abilities import Residence, StoreAbilities
from .interfile import encode_header
from .naming import PROJDATA, output_names
from .projdata import ProjData
from .projdata_header import ProjDataHeader, format_projdata_header, read_projdata_header
from .rawfile import PendingFiles, data_file_is_a_folder, keys_from_dtype, pread_into, pwrite_from
from .storage_order import StorageOrder

__all__ = ["ProjDataFromFile", "ProjDataOnDisk"]

#: bytes converted per step when the file's number format is not native float32
_STEP_BYTES = 16 * 1024 * 1024
_NATIVE_F32 = np.dtype(np.float32)
#: write-behind needs posix_fadvise (Linux, most POSIX systems)
_CAN_FADVISE = hasattr(os, "posix_fadvise")


class _Handle:
    """The open file descriptor, shared with the finalizer (which must not hold the store)."""

    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def _finalize(handle: _Handle, pending: PendingFiles | None) -> None:
    # A store dropped without close(): release the descriptor; an uncommitted new file is
    # incomplete by definition, so its temporary data go (no header was ever written).
    handle.close()
    if pending is not None:
        pending.abort()


class ProjDataFromFile(ProjData):
    """Projection data in an Interfile ``.hs`` + raw data file.

    Open with :func:`~stirgpu.formats.read_from_file` / :meth:`open`; make a new one with
    :meth:`create`.
    """

    def __init__(
        self,
        header: ProjDataHeader,
        mode: str,
        fd: int | None,
        pending: PendingFiles | None = None,
        template_reason: str | None = None,
    ):
        self._header = header
        self._mode = mode
        self._pending = pending
        self._template_reason = template_reason
        self._handle = _Handle(-1 if fd is None else fd)
        self._finalizer = weakref.finalize(self, _finalize, self._handle, pending)
        pdi = header.proj_data_info
        self._dtype = header.dtype
        self._isz = header.dtype.itemsize
        self._scale = float(header.scale_factor)
        self._direct = header.dtype == _NATIVE_F32 and self._scale == 1.0
        self._nt = pdi.get_num_tangential_poss()
        self._nv = pdi.get_num_views()
        self._seg_offset: dict[int, int] = {}
        off = 0
        for seg in header.segment_sequence:
            self._seg_offset[seg] = off
            off += pdi.get_num_axial_poss(seg) * self._nv * self._nt * self._isz
        self._tof_stride = off
        #: other processes write disjoint parts of this store's data file (share_for_writing,
        #: open_part): MPI ranks of one forward projection
        self._shared = False
        self._part = False

    # -- opening and creating ------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, mode: str = "r", *, allow_template: bool = True) -> ProjDataFromFile:
        """Open existing data: ``mode="r"`` (read-only) or ``"r+"`` (read/write in place).

        A header whose data file is absent, empty or the header itself opens as a template
        (geometry only), unless ``allow_template=False``: then that is a FormatError naming the
        header and the data file."""
        if mode not in ("r", "r+"):
            raise FormatError(f"mode must be 'r' or 'r+', not {mode!r}", path=path)
        hdr = read_projdata_header(path)
        dp = hdr.data_path
        reason = None
        if dp is None:
            reason = "the header names no data file ('name of data file')"
        elif dp.is_dir():
            raise data_file_is_a_folder(dp, hdr.path)
        elif hdr.path is not None and dp.exists() and dp.samefile(hdr.path):
            # SIRF's example templates name their own header as data file (nothing to read)
            reason = "its data file is the header itself"
        elif not dp.exists():
            reason = f"its data file {dp} does not exist"
        else:
            size = dp.stat().st_size
            need = hdr.data_offset + hdr.data_nbytes
            if size == 0:
                reason = f"its data file {dp} is empty"
            elif size != need:
                what = "is truncated" if size < need else "is larger than its header describes"
                raise FormatError(
                    f"data file {what}: it has {size} bytes but the header {hdr.path} describes "
                    f"{need} ({hdr.data_offset} offset + {hdr.proj_data_info.total_num_bins} bins x "
                    f"{hdr.dtype.itemsize} bytes)",
                    path=dp,
                )
        if reason is not None:
            if not allow_template:
                raise FormatError(
                    f"has no values: {reason} (a header without data is only a template, and values are needed here)",
                    path=hdr.path,
                )
            if mode == "r+":
                raise FormatError(
                    f"is a template ({reason}); it cannot be opened for writing; create "
                    "new data with ProjDataFromFile.create",
                    path=hdr.path,
                )
            return cls(hdr, mode, None, template_reason=reason)
        assert dp is not None  # (no reason: the data file exists)
        if mode == "r+" and hdr.dtype.kind != "f":
            raise FormatError(
                f"writing {hdr.dtype} data in place is not supported (float only)", path=hdr.path, key="number format"
            )
        try:
            fd = os.open(dp, os.O_RDONLY if mode == "r" else os.O_RDWR)
        except OSError as exc:
            raise FormatError(f"cannot open data file: {exc.strerror or exc}", path=dp) from None
        return cls(hdr, mode, fd)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        proj_data_info: ProjDataInfo,
        storage_order: StorageOrder = StorageOrder.VIEW,
        dtype=np.float32,
        overwrite: bool = False,
        fill=None,
    ) -> ProjDataFromFile:
        """New data: header and data file named as STIR names them (:func:`~.naming.output_names`:
        ``out``, ``out.hs`` and ``out.s`` all give ``out.hs`` + ``out.s``; the store's ``path``
        and ``data_path`` say which); float32 view order like STIR unless asked otherwise
        (``dtype`` float32 or float64, either byte order).

        Values start at 0 (or ``fill``: a number, an ``as_array()``-ordered array or a
        ProjData).  Nothing appears under the final names until :meth:`commit` or
        :meth:`close`; an existing file is replaced only with ``overwrite=True``.
        """
        names = output_names(path, PROJDATA)
        hs = names.header
        if not isinstance(proj_data_info, ProjDataInfo):
            raise GeometryError(
                f"create: proj_data_info must be a stirgpu ProjDataInfo, not {type(proj_data_info).__name__}"
            )
        if not isinstance(storage_order, StorageOrder):
            raise FormatError(f"storage_order must be a StorageOrder, not {storage_order!r}", path=hs)
        dt = np.dtype(dtype)
        if dt.kind != "f":
            raise FormatError(f"new projection data are written as float32 or float64, not {dt}", path=hs)
        keys_from_dtype(dt)  # validates
        data = names.data
        pending = PendingFiles({"data": data, "header": hs}, overwrite=overwrite)
        tmp = pending.temp("data")
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise FormatError(f"cannot create: {exc.strerror or exc}", path=tmp) from None
        try:
            os.ftruncate(fd, proj_data_info.total_num_bins * dt.itemsize)  # zeros, sparse
        except OSError as exc:
            os.close(fd)
            pending.abort()
            raise FormatError(f"cannot size the data file: {exc.strerror or exc}", path=tmp) from None
        ntof = proj_data_info.get_num_tof_poss()
        sc = proj_data_info.get_scanner()
        header = ProjDataHeader(
            path=hs,
            proj_data_info=proj_data_info,
            storage_order=storage_order,
            dtype=dt,
            data_file_name=data.name,
            data_path=data,
            data_offset=0,
            scale_factor=1.0,
            segment_sequence=proj_data_info.segment_nums,
            tof_mash_factor=proj_data_info.get_tof_mash_factor() if ntof > 1 else 1,
            originating_system=sc.name,
        )
        store = cls(header, "w", fd, pending=pending)
        if fill is not None and not (np.ndim(fill) == 0 and not isinstance(fill, ProjData) and float(fill) == 0.0):
            try:
                store.fill(fill)
            except BaseException:
                store.abort()
                raise
        return store

    # -- one new file, written by several processes ----------------------------------------
    def share_for_writing(self) -> ProjDataHeader:
        """Let other processes (MPI ranks) write disjoint parts of this new store's data: returns
        what :meth:`open_part` opens in each of them (picklable: the header, naming the
        temporary data file).  This store alone commits (or aborts) the file, after the parts
        are closed.  Only for a store from :meth:`create`, before its commit."""
        if not self.abilities.abortable:
            raise self._refusal("abortable")
        assert self._pending is not None  # (abortable)
        self._shared = True
        return dataclasses.replace(self._header, data_path=self._pending.temp("data"))

    @classmethod
    def open_part(cls, shared: ProjDataHeader) -> ProjDataFromFile:
        """A store that writes (and reads) parts of the new data file another process created
        (:meth:`share_for_writing`'s answer).  It never commits: :meth:`close` flushes its
        writes to disk and releases the file; that other process commits.  The data file must
        be on a file system this process sees (a folder shared by the nodes, for MPI ranks on
        several machines): otherwise a FormatError says so."""
        dp = shared.data_path
        assert dp is not None  # (share_for_writing names it)
        try:
            fd = os.open(dp, os.O_RDWR)
        except OSError as exc:
            raise FormatError(
                f"cannot open the data file another process is writing ({exc.strerror or exc}); "
                "the output must be on a file system every process sees",
                path=dp,
            ) from None
        store = cls(shared, "w", fd)
        store._shared = store._part = True
        return store

    @property
    def written_by_ranks(self) -> bool:
        """Whether several processes write disjoint parts of this store's data file (each its own
        share of a projection; see :meth:`share_for_writing`)."""
        return self._shared

    # -- committing / closing ------------------------------------------------------------
    def commit(self) -> None:
        """Make new data visible: flush, write the header, rename both into place.
        Afterwards the store behaves like one opened with ``mode="r+"``."""
        p = self._pending
        if p is None or p.done:
            return
        fd = self._fd()
        os.fsync(fd)
        h = self._header
        assert h.data_file_name is not None  # (create names it)
        try:  # the header is written under its temporary name: a failure leaves no file
            text = format_projdata_header(
                h.proj_data_info, h.data_file_name, h.storage_order, h.dtype, originating_system=h.originating_system
            )
            with open(p.temp("header"), "xb") as f:
                f.write(encode_header(text))
                f.flush()
                os.fsync(f.fileno())
            p.commit(("data", "header"))
        except BaseException:
            p.abort()
            raise
        self._mode = "r+"

    def start_writeback(self) -> None:
        """Start writing the data file's dirty pages to disk now (asynchronously) and drop pages
        already written from the page cache (``posix_fadvise(DONTNEED)``), so a streaming writer
        overlaps disk time with compute (``abilities.write_behind``: a writable store where the
        system has posix_fadvise; otherwise a FileStoreAbilityError)."""
        if not self.abilities.write_behind:
            raise self._refusal("write_behind")
        os.posix_fadvise(self._handle.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def abort(self) -> None:
        """Forget new data not yet committed (the temporary files removed: nothing appears under
        the final names, and a file they were to replace stays as it was) and close.  For a
        store made by :meth:`create` until :meth:`commit` (``abilities.abortable``); again
        after an abort it does nothing.  A store of existing or committed data refuses
        (FileStoreAbilityError): writes in place cannot be undone."""
        if self._pending is None or self._mode != "w":
            raise self._refusal("abortable")
        self._pending.abort()
        self._handle.close()

    def close(self) -> None:
        """Commit new data (if any) and release the file."""
        try:
            if self._handle.fd >= 0:
                if self._part:  # the writes reach the disk before the creator commits
                    os.fsync(self._handle.fd)
                self.commit()
        finally:
            self._finalizer()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self._pending is not None and not self._pending.done:
            self.abort()  # an error inside ``with``: the new file is not complete
        self.close()

    # -- properties ----------------------------------------------------------------------
    @property
    def proj_data_info(self) -> ProjDataInfo:
        return self._header.proj_data_info

    @property
    def storage_order(self) -> StorageOrder:
        return self._header.storage_order

    @property
    def header(self) -> ProjDataHeader:
        return self._header

    @property
    def path(self) -> Path | None:
        """The header file."""
        return self._header.path

    @property
    def source_file(self) -> str | None:
        return None if self.path is None else str(self.path)

    @property
    def data_path(self) -> Path | None:
        return self._header.data_path

    @property
    def dtype(self) -> np.dtype:
        """Number format of the file (values are always returned as float32)."""
        return self._dtype

    @property
    def mode(self) -> str:
        """'r', 'r+', or 'w' (new, not yet committed)."""
        return self._mode

    @property
    def is_template(self) -> bool:
        """True when the header has no data (geometry only)."""
        return self._template_reason is not None

    @property
    def closed(self) -> bool:
        return self._handle.fd < 0 and not self.is_template

    @property
    def abilities(self) -> StoreAbilities:
        """Readable unless a template or closed; writable unless also opened with mode 'r';
        parallel reads and writes (positioned I/O on one descriptor); write-behind when
        writable; abortable from :meth:`create` until committed; on disk."""
        has_values = self._template_reason is None and self._handle.fd >= 0
        writable = has_values and self._mode != "r"
        return StoreAbilities(
            readable=has_values,
            writable=writable,
            parallel_reads=has_values,
            parallel_writes=writable,
            write_behind=writable and _CAN_FADVISE,
            abortable=writable and self._mode == "w" and self._pending is not None and not self._pending.done,
            template=self._template_reason is not None,
            host_memory=False,
            residence=Residence.DISK,
        )

    def _refusal(self, ability: str) -> FileStoreAbilityError:
        if self._template_reason is not None:
            why = f"has no values: it is a template ({self._template_reason})"
        elif self._handle.fd < 0:
            why = "is closed"
        elif ability in ("writable", "write_behind") and self._mode == "r":
            why = "was opened read-only (mode 'r'); open it with mode 'r+' to modify it"
        elif ability == "abortable":
            what = (
                "were committed" if self._pending is not None else f"were opened as existing data (mode {self._mode!r})"
            )
            why = (
                f"holds no new data that abort() could discard: its values {what}, and writes in place cannot be undone"
            )
        elif ability == "write_behind":
            why = "has no write-behind here (this system has no os.posix_fadvise)"
        else:
            why = f"cannot do what needs {ability}"
        return FileStoreAbilityError(why, path=self._header.path)

    # -- the two primitives --------------------------------------------------------------
    def _fd(self) -> int:
        if self._template_reason is not None or self._handle.fd < 0:
            raise self._refusal("readable")
        return self._handle.fd

    def _pieces(self, segment: int, tof_index: int, view_range, axial_range):
        """Contiguous file pieces of a box: (byte offset, byte length, index into the box in
        file axis order)."""
        na = self.proj_data_info.get_num_axial_poss(segment)
        if self._header.storage_order is StorageOrder.VIEW:
            outer, inner, n_inner = view_range, axial_range, na
        else:
            outer, inner, n_inner = axial_range, view_range, self._nv
        base = self._header.data_offset + tof_index * self._tof_stride + self._seg_offset[segment]
        row = n_inner * self._nt * self._isz
        if inner[0] == 0 and inner[1] == n_inner:
            yield base + outer[0] * row, (outer[1] - outer[0]) * row, slice(None)
        else:
            skip = inner[0] * self._nt * self._isz
            length = (inner[1] - inner[0]) * self._nt * self._isz
            for k, o in enumerate(range(outer[0], outer[1])):
                yield base + o * row + skip, length, k

    def _will_read(self, segment, tof_index, view_ranges) -> None:
        if not _CAN_FADVISE:
            return
        fd = self._fd()
        na = self.proj_data_info.get_num_axial_poss(segment)
        for view_range in view_ranges:
            for offset, length, _ in self._pieces(segment, tof_index, view_range, (0, na)):
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)

    def _in_file_order(self, box: np.ndarray) -> np.ndarray:
        return box if self._header.storage_order is StorageOrder.VIEW else box.transpose(1, 0, 2)

    def _read_box(self, segment, tof_index, view_range, axial_range, out) -> None:
        fd = self._fd()
        box = self._in_file_order(out)
        for offset, _, sel in self._pieces(segment, tof_index, view_range, axial_range):
            self._read_into(fd, offset, box[sel])

    def _read_into(self, fd: int, offset: int, dst: np.ndarray) -> None:
        """Fill ``dst`` (C order == file order) from ``offset``, converting to float32."""
        if self._direct and dst.flags.c_contiguous:
            pread_into(fd, dst, offset, self._header.data_path)
            return
        row = (dst[0].size if dst.ndim > 1 else 1) * self._isz
        step = max(1, _STEP_BYTES // row)
        for i in range(0, dst.shape[0], step):
            part = dst[i : i + step]
            tmp = np.empty(part.shape, dtype=self._dtype)
            pread_into(fd, tmp, offset + i * row, self._header.data_path)
            part[...] = tmp
            if self._scale != 1.0:
                part *= np.float32(self._scale)  # in float32, as STIR multiplies

    def _write_box(self, segment, tof_index, v0, a0, data) -> None:
        if self._mode == "r":
            raise self._refusal("writable")
        fd = self._fd()
        nv, na = data.shape[:2]
        box = self._in_file_order(data)
        for offset, _, sel in self._pieces(segment, tof_index, (v0, v0 + nv), (a0, a0 + na)):
            self._write_from(fd, offset, box[sel])

    def _write_from(self, fd: int, offset: int, src: np.ndarray) -> None:
        if self._direct and src.flags.c_contiguous:
            pwrite_from(fd, src, offset)
            return
        row = (src[0].size if src.ndim > 1 else 1) * self._isz
        step = max(1, _STEP_BYTES // row)
        for i in range(0, src.shape[0], step):
            part = src[i : i + step]
            if self._scale != 1.0:
                part = part / np.float32(self._scale)
            pwrite_from(fd, np.ascontiguousarray(part, dtype=self._dtype), offset + i * row)

    def __repr__(self) -> str:
        what = "template" if self.is_template else self._mode
        return f"ProjDataFromFile({str(self.path)!r}, {what}, {self.storage_order.name} order, {self._dtype})"


#: STIR-style name for creating new data on disk (same class)
ProjDataOnDisk = ProjDataFromFile
