"""Interfile projection-data headers (``.hs``) <-> :class:`~stirgpu.geometry.ProjDataInfo`.

Reading follows STIR's ``InterfilePDFSHeader``:

* ``Scanner parameters := ... End scanner parameters :=`` (lengths in cm, the view
  offset in degrees; converted to mm / radians).  A ``Scanner type`` (or
  ``originating system``) that names one of STIR's scanners gives its values and the
  keys present override them; any other name with a full block is a user-defined
  scanner.  As in STIR, negative values (and 0 for counts) mean "not given".
* segments in file order from ``minimum/maximum ring difference per segment``, their
  axial positions from ``!matrix size`` of the axial axis, taken as given (as STIR does; only
  STIR's own checks apply, see ``ProjDataInfo``);
* view vs sinogram order from the ``matrix axis label``s; TOF as a 5th dimension
  ``timing positions``, outermost in the file;
* ``applied corrections``: absent => arc-corrected (STIR's rule), ``{None}`` => not;
* ``!PET data type`` must be ``Emission``.

Writing (:func:`format_projdata_header`) produces the same layout STIR writes.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, GeometryError
from ..geometry import ProjDataInfo, Scanner
from .interfile import HeaderWriter, InterfileHeader, format_value, key_id, read_header
from .rawfile import dtype_from_keys, keys_from_dtype
from .storage_order import StorageOrder

__all__ = [
    "ProjDataHeader",
    "read_projdata_header",
    "projdata_header_from_interfile",
    "scanner_from_header",
    "format_projdata_header",
    "format_f32",
]


def format_f32(v: float) -> str:
    """Shortest decimal (6 to 9 significant digits) within 1e-7 (relative) of the float32
    value: STIR stores geometry as float32 and writes 6 digits; this keeps STIR's look
    (3.129319906234741 -> '3.12932') where that is precise, and more digits where 6 would
    move a value by more than float32 precision (e.g. -68.09676 stays -68.09676)."""
    x = float(np.float32(v))
    for p in range(6, 10):
        s = f"{x:.{p}g}"
        if abs(float(s) - x) <= 1e-7 * abs(x):
            return s
    return repr(x)


def same_as_written_by_stir(header_value: float, exact: float) -> bool:
    """True when ``header_value`` (in the header's units) is ``exact`` as STIR writes it: C++
    streams' default 6 significant digits (19.53125 -> 19.5312: 2.6e-6 relative), or within
    float32 precision of it (stirgpu writes more digits where 6 are not enough)."""
    if math.isclose(header_value, exact, rel_tol=1e-6, abs_tol=1e-9):
        return True
    return header_value == float(f"{exact:.6g}") or header_value == float(f"{np.float32(exact):.6g}")


# Scanner field -> (header keys (first is the one written), factor from header units, kind)
# kind "len": float, negative = not given;  "count": int, <= 0 = not given;
# "angle": degrees, always given when present;  "float": float, negative = not given.
_SCANNER_KEYS: dict[str, tuple[tuple[str, ...], float, str]] = {
    "num_rings": (("Number of rings",), 1, "count"),
    "num_detectors_per_ring": (("Number of detectors per ring",), 1, "count"),
    "inner_ring_radius": (("Inner ring diameter (cm)",), 10 / 2, "len"),
    "average_depth_of_interaction": (("Average depth of interaction (cm)",), 10, "len"),
    "ring_spacing": (("Distance between rings (cm)",), 10, "len"),
    "default_bin_size": (("Default bin size (cm)",), 10, "len"),
    "intrinsic_azimuthal_tilt": (("View offset (degrees)",), math.pi / 180, "angle"),
    "max_num_non_arccorrected_bins": (("Maximum number of non-arc-corrected bins",), 1, "count"),
    "default_num_arccorrected_bins": (("Default number of arc-corrected bins",), 1, "count"),
    "energy_resolution": (("Energy resolution",), 1, "float"),
    "reference_energy": (("Reference energy (in keV)",), 1, "float"),
    "max_num_timing_poss": (("Maximum number of (unmashed) TOF time bins",), 1, "count"),
    "size_of_timing_pos": (("Size of unmashed TOF time bins (ps)",), 1, "float"),
    "timing_resolution": (("TOF timing resolution (ps)",), 1, "float"),
    "num_transaxial_blocks_per_bucket": (("Number of blocks per bucket in transaxial direction",), 1, "count"),
    "num_axial_blocks_per_bucket": (("Number of blocks per bucket in axial direction",), 1, "count"),
    "num_axial_crystals_per_block": (("Number of crystals per block in axial direction",), 1, "count"),
    "num_transaxial_crystals_per_block": (("Number of crystals per block in transaxial direction",), 1, "count"),
    "num_detector_layers": (("Number of detector layers",), 1, "count"),
    "num_axial_crystals_per_singles_unit": (("Number of crystals per singles unit in axial direction",), 1, "count"),
    "num_transaxial_crystals_per_singles_unit": (
        ("Number of crystals per singles unit in transaxial direction",),
        1,
        "count",
    ),
    "axial_crystal_spacing": (("Distance between crystals in axial direction (cm)",), 10, "len"),
    "transaxial_crystal_spacing": (("Distance between crystals in transaxial direction (cm)",), 10, "len"),
    "axial_block_spacing": (("Distance between blocks in axial direction (cm)",), 10, "len"),
    "transaxial_block_spacing": (("Distance between blocks in transaxial direction (cm)",), 10, "len"),
}
_GEOMETRY_KEYS = ("Scanner geometry (BlocksOnCylindrical/Cylindrical/Generic)", "Scanner geometry")
#: what a scanner STIR does not know must state
_REQUIRED_FOR_USER_DEFINED = (
    "num_rings",
    "num_detectors_per_ring",
    "inner_ring_radius",
    "average_depth_of_interaction",
    "ring_spacing",
)


def _first_key(hdr: InterfileHeader, keys) -> str | None:
    for k in keys:
        if hdr.has(k):
            return k
    return None


def scanner_from_header(hdr: InterfileHeader) -> Scanner:
    """The scanner a projection-data header describes (see the module docstring)."""
    name = hdr.get_str("Scanner type", default="").strip()
    origin_sys = hdr.get_str("originating system", default="").strip()
    base = None
    for candidate in (name, origin_sys):
        if candidate and Scanner.is_known(candidate):
            base = Scanner.from_name(candidate)
            break
    given: dict[str, Any] = {}  # Scanner keyword arguments: int, float or str by field
    for field, (keys, factor, kind) in _SCANNER_KEYS.items():
        k = _first_key(hdr, keys)
        if k is None:
            continue
        if kind == "count":
            v = hdr.get_int(k)
            if v > 0:
                given[field] = v
        else:
            v = hdr.get_float(k)
            if kind == "angle" or v >= 0:
                given[field] = v * factor
    gk = _first_key(hdr, _GEOMETRY_KEYS)
    if gk is not None:
        geom = hdr.get_str(gk).strip()
        if geom:
            given["scanner_geometry"] = geom
    if base is None:
        label = name or origin_sys or "(none)"
        for field in _REQUIRED_FOR_USER_DEFINED:
            if field not in given:
                key = _SCANNER_KEYS[field][0][0]
                raise hdr.error(
                    f"required for a scanner STIR does not know (Scanner type "
                    f"{label!r}); give it a positive value in 'Scanner parameters'",
                    key,
                )
        try:
            return Scanner(name=name or origin_sys or "user-defined", **given)
        except GeometryError as exc:
            raise hdr.error(str(exc), "Scanner parameters") from None
    # Known scanner: keys present override, but only where they really differ (a header
    # stores STIR's float32 values in decimal; that must not turn it into another scanner).
    changes = {}
    for field, v in given.items():
        old = getattr(base, field)
        if isinstance(old, float):
            factor = _SCANNER_KEYS[field][1] if field in _SCANNER_KEYS else 1.0
            if not same_as_written_by_stir(float(v) / factor, old / factor):
                changes[field] = float(v)
        elif isinstance(old, str):
            if v.lower() != old.lower():
                changes[field] = v
        elif v != old:
            changes[field] = v
    if not changes:
        return base
    try:
        return base.replace(**changes)
    except GeometryError as exc:
        raise hdr.error(str(exc), "Scanner parameters") from None


@dataclasses.dataclass(frozen=True)
class ProjDataHeader:
    """Everything a projection-data header says, as stirgpu types."""

    path: Path | None  #: the header file
    proj_data_info: ProjDataInfo
    storage_order: StorageOrder
    dtype: np.dtype  #: number format with byte order
    data_file_name: str | None  #: as written in the header (None if absent)
    data_path: Path | None  #: resolved against the header's folder
    data_offset: int  #: bytes before the data
    scale_factor: float  #: ``image scaling factor[1]``: value = stored * factor
    segment_sequence: tuple[int, ...]  #: segment numbers in file order
    tof_mash_factor: int = 1
    originating_system: str = ""

    @property
    def data_nbytes(self) -> int:
        """Bytes of data the header describes (from ``data_offset``)."""
        return self.proj_data_info.total_num_bins * self.dtype.itemsize


_LABEL_TANG = "tangentialcoordinate"
_LABEL_SEG = "segment"
_LABEL_VIEW = "view"
_LABEL_AXIAL = "axialcoordinate"
_LABELS_TOF = ("timingpositions", "timingposition")


def read_projdata_header(path) -> ProjDataHeader:
    """Read a ``.hs`` file (the data file is not opened)."""
    return projdata_header_from_interfile(read_header(path))


def projdata_header_from_interfile(hdr: InterfileHeader) -> ProjDataHeader:
    """Interpret a parsed header as projection data (every problem is a FormatError naming
    the file and key)."""
    _check_emission_data(hdr)
    ndim, order, view_dim, axial_dim = _axes(hdr)

    def single(dim: int) -> int:
        values = hdr.get_int_list("matrix size", dim)
        if len(values) != 1 or values[0] < 1:
            raise hdr.error(f"must be one positive number, got {values}", "matrix size", dim)
        return values[0]

    num_tang = single(1)
    num_views = single(view_dim)
    num_tof = single(5) if ndim == 5 else 1
    segments = _Segments.from_header(hdr, single(4), axial_dim)
    scanner = scanner_from_header(hdr)
    arc_corrected, tang_sampling = _tangential_sampling(hdr, scanner)
    tof_mash = _tof_mash_factor(hdr, scanner, num_tof)

    # STIR takes the axial positions as the header gives them (its construction rule is only a
    # default), so a header's counts are the geometry's; ProjDataInfo applies STIR's own checks.
    try:
        pdi = ProjDataInfo(
            scanner,
            segments.min_ring_diff,
            segments.max_ring_diff,
            num_views=num_views,
            num_tangential_poss=num_tang,
            arc_corrected=arc_corrected,
            tangential_sampling=tang_sampling,
            num_tof_poss=num_tof,
            tof_mash_factor=tof_mash if num_tof > 1 else 0,
            num_axial_poss=segments.num_axial_poss,
        )
    except GeometryError as exc:
        if "axial position" in str(exc):
            raise hdr.error(str(exc), "matrix size", axial_dim) from None
        raise hdr.error(str(exc), _RING_DIFFERENCE_KEYS[0]) from None

    dtype = dtype_from_keys(hdr)
    offset, scale_factor = _offset_and_scale_factor(hdr)
    data_name = hdr.get_str("name of data file", default=None)
    return ProjDataHeader(
        path=hdr.path,
        proj_data_info=pdi,
        storage_order=order,
        dtype=dtype,
        data_file_name=data_name or None,
        data_path=hdr.get_path("name of data file", default=None),
        data_offset=offset,
        scale_factor=scale_factor,
        segment_sequence=segments.sequence,
        tof_mash_factor=tof_mash,
        originating_system=hdr.get_str("originating system", default=""),
    )


def _check_emission_data(hdr: InterfileHeader) -> None:
    """PET emission data of one time frame, or a clear error."""
    tod = hdr.get_str("type of data", default="PET").strip()
    if key_id(tod) != "pet":
        raise hdr.error(f"expected PET projection data, got {tod!r}", "type of data")
    pdt = hdr.get_str("PET data type", default=None)
    if pdt is None:
        raise hdr.error("required key is missing (projection data must say 'Emission')", "PET data type")
    if key_id(pdt) != "emission":
        raise hdr.error(f"expected 'Emission' projection data, got {pdt!r}", "PET data type")
    frames = hdr.get_int("number of time frames", default=1)
    if frames != 1:
        raise hdr.error(
            f"{frames} time frames: only single-frame projection data are supported", "number of time frames"
        )


def _axes(hdr: InterfileHeader) -> tuple[int, StorageOrder, int, int]:
    """(number of dimensions, storage order, the view axis, the axial axis) from the
    ``matrix axis label``s: tangential first, segments fourth, TOF (if any) fifth."""
    ndim = hdr.get_int("number of dimensions")
    if ndim not in (4, 5):
        raise hdr.error(f"projection data have 4 dimensions (5 with TOF), not {ndim}", "number of dimensions")
    labels = {i: key_id(hdr.get_str("matrix axis label", i, default="")) for i in range(1, ndim + 1)}
    if labels[1] != _LABEL_TANG:
        raise hdr.error("must be 'tangential coordinate'", "matrix axis label", 1)
    if labels[4] != _LABEL_SEG:
        raise hdr.error("must be 'segment'", "matrix axis label", 4)
    if labels[2] == _LABEL_AXIAL and labels[3] == _LABEL_VIEW:
        order, view_dim, axial_dim = StorageOrder.VIEW, 3, 2
    elif labels[2] == _LABEL_VIEW and labels[3] == _LABEL_AXIAL:
        order, view_dim, axial_dim = StorageOrder.SINOGRAM, 2, 3
    else:
        raise hdr.error(
            "axes [2] and [3] must be 'axial coordinate' and 'view' (view order) or "
            "'view' and 'axial coordinate' (sinogram order)",
            "matrix axis label",
            2,
        )
    if ndim == 5 and labels[5] not in _LABELS_TOF:
        raise hdr.error("must be 'timing positions'", "matrix axis label", 5)
    return ndim, order, view_dim, axial_dim


_RING_DIFFERENCE_KEYS = ("minimum ring difference per segment", "maximum ring difference per segment")


@dataclasses.dataclass(frozen=True)
class _Segments:
    """A header's segments in ascending ring-difference order (as ``ProjDataInfo`` takes them),
    and the segment number of each in file order."""

    min_ring_diff: list[int]
    max_ring_diff: list[int]
    num_axial_poss: list[int]
    sequence: tuple[int, ...]

    @classmethod
    def from_header(cls, hdr: InterfileHeader, num_segments: int, axial_dim: int) -> _Segments:
        axial = hdr.get_int_list("matrix size", axial_dim)
        if len(axial) != num_segments:
            raise hdr.error(
                f"lists {len(axial)} axial sizes but 'matrix size [4]' says {num_segments} segments",
                "matrix size",
                axial_dim,
            )
        if min(axial) < 1:
            raise hdr.error(f"axial sizes must be positive, got {axial}", "matrix size", axial_dim)
        rd_keys = _RING_DIFFERENCE_KEYS
        rd_min, rd_max = (hdr.get_int_list(k) for k in rd_keys)
        for k, lst in zip(rd_keys, (rd_min, rd_max), strict=True):
            if len(lst) != num_segments:
                raise hdr.error(f"lists {len(lst)} segments but 'matrix size [4]' says {num_segments}", k)

        # Segment numbers: sort by ring difference (STIR sorts by min+max); 0 holds difference 0.
        file_pos = sorted(range(num_segments), key=lambda i: (rd_min[i] + rd_max[i], rd_min[i]))
        s_min = [rd_min[i] for i in file_pos]
        s_max = [rd_max[i] for i in file_pos]
        for a, b in zip(s_min, s_max, strict=True):
            if a > b:
                raise hdr.error(f"minimum {a} > maximum {b} for a segment", rd_keys[0])
        for (a0, b0), (a1, b1) in itertools.pairwise(zip(s_min, s_max, strict=True)):
            if a1 != b0 + 1:
                raise hdr.error(
                    "ring-difference ranges must be contiguous and not overlap: "
                    f"[{a0}, {b0}] is followed by [{a1}, {b1}]",
                    rd_keys[0],
                )
        zero = [k for k, (a, b) in enumerate(zip(s_min, s_max, strict=True)) if a <= 0 <= b]
        if not zero:
            raise hdr.error("no segment contains ring difference 0", rd_keys[0])
        seg_num_of_file_pos = {i: k - zero[0] for k, i in enumerate(file_pos)}
        sequence = tuple(seg_num_of_file_pos[i] for i in range(num_segments))
        return cls(s_min, s_max, [axial[i] for i in file_pos], sequence)


def _tangential_sampling(hdr: InterfileHeader, scanner: Scanner) -> tuple[bool, float | None]:
    """(arc-corrected, its bin size in mm or None for the scanner's default) from ``applied
    corrections`` and ``effective central bin size (cm)``."""
    corrections = hdr.get_list("applied corrections", default=None)
    if corrections is None:
        arc_corrected = True  # STIR: no 'applied corrections' key means arc-corrected
    else:
        arc_corrected = any(key_id(c) in ("arccorrection", "arccorrected") for c in corrections)
    tang_sampling = None
    if arc_corrected:
        ecbs = hdr.get_float("effective central bin size (cm)", default=-1.0)
        if ecbs > 0:
            # the scanner's default bin size as STIR writes it (6 digits) is that bin size
            default_cm = scanner.default_bin_size / 10
            tang_sampling = scanner.default_bin_size if same_as_written_by_stir(ecbs, default_cm) else ecbs * 10
    return arc_corrected, tang_sampling


def _tof_mash_factor(hdr: InterfileHeader, scanner: Scanner, num_tof: int) -> int:
    """``TOF mashing factor`` (default 1), checked against the timing positions of the data."""
    tof_mash = hdr.get_int("TOF mashing factor", default=1)
    if tof_mash < 1:
        raise hdr.error(f"must be >= 1, got {tof_mash}", "TOF mashing factor")
    if num_tof > 1:
        max_tof = scanner.max_num_timing_poss
        if max_tof <= 1:
            raise hdr.error(
                f"{num_tof} timing positions but the scanner has no TOF ('Maximum number "
                "of (unmashed) TOF time bins' missing)",
                "matrix size",
                5,
            )
        if max_tof // tof_mash != num_tof:
            raise hdr.error(
                f"{num_tof} timing positions, but the scanner's {max_tof} TOF bins mashed "
                f"by {tof_mash} give {max_tof // tof_mash}",
                "matrix size",
                5,
            )
    return tof_mash


def _offset_and_scale_factor(hdr: InterfileHeader) -> tuple[int, float]:
    """``data offset in bytes`` and the one ``image scaling factor`` of all data."""
    offset_key = "data offset in bytes"
    offset_idx = 1 if hdr.has(offset_key, 1) else None
    offset = hdr.get_int(offset_key, offset_idx, default=0)
    if offset < 0:
        raise hdr.error(f"must be >= 0, got {offset}", offset_key, offset_idx)
    sf_key = "image scaling factor"
    sf_idx = 1 if hdr.has(sf_key, 1) else None
    factors = hdr.get_float_list(sf_key, sf_idx, default=[1.0])
    if not factors or any(f != factors[0] for f in factors):
        raise hdr.error(f"one scaling factor for all data is supported, got {factors}", sf_key, sf_idx)
    if factors[0] == 0:
        raise hdr.error("must not be 0", sf_key, sf_idx)
    return offset, factors[0]


# -- writing ---------------------------------------------------------------------------------


def _scanner_lines(w: HeaderWriter, sc: Scanner) -> None:
    w.add_raw("Scanner parameters:=")
    w.add("Scanner type", sc.name, indent=2)
    for field, (keys, factor, kind) in _SCANNER_KEYS.items():
        v = getattr(sc, field)
        if field in ("max_num_timing_poss", "size_of_timing_pos", "timing_resolution") and sc.max_num_timing_poss <= 1:
            continue  # STIR writes the TOF keys for TOF scanners only
        if field.endswith("_spacing") and field != "ring_spacing" and v < 0:
            continue  # unset crystal/block spacings are not written (as STIR)
        if kind == "count":
            w.add(keys[0], int(v), indent=2)
        else:
            w.add(keys[0], format_f32(v / factor), indent=2)
    w.add(_GEOMETRY_KEYS[0], sc.scanner_geometry, indent=2)
    w.add_raw("End scanner parameters:=")


def format_projdata_header(
    proj_data_info: ProjDataInfo,
    data_file_name: str,
    storage_order: StorageOrder = StorageOrder.VIEW,
    dtype=np.float32,
    data_offset: int = 0,
    scale_factor: float = 1.0,
    originating_system: str | None = None,
) -> str:
    """Header text for data laid out as stirgpu's disk store writes it: segments in
    ascending ring-difference order, TOF outermost, ``storage_order`` inside a segment."""
    pdi = proj_data_info
    sc = pdi.get_scanner()
    fmt, nbytes, byte_order = keys_from_dtype(dtype)
    ntof = pdi.get_num_tof_poss()
    segs = pdi.segment_nums
    w = HeaderWriter()
    w.add("!imaging modality", "PT")
    w.add("name of data file", data_file_name)
    w.add("originating system", originating_system or sc.name)
    w.add("!version of keys", "STIR6.0")
    w.add("!GENERAL DATA")
    w.add("!GENERAL IMAGE DATA")
    w.add("!type of data", "PET")
    w.add("imagedata byte order", byte_order)
    w.add("number of radionuclides", 1)
    w.add("!PET STUDY (General)")
    w.add("!PET data type", "Emission")
    w.add("applied corrections", "{arc correction}" if pdi.is_arc_corrected() else "{None}")
    w.add("!number format", fmt)
    w.add("!number of bytes per pixel", nbytes)
    w.add("number of dimensions", 5 if ntof > 1 else 4)
    if ntof > 1:
        w.add("matrix axis label", "timing positions", index=5)
        w.add("!matrix size", ntof, index=5)
    w.add("matrix axis label", "segment", index=4)
    w.add("!matrix size", len(segs), index=4)
    axial_sizes = format_value([pdi.get_num_axial_poss(s) for s in segs])
    if storage_order is StorageOrder.VIEW:
        w.add("matrix axis label", "view", index=3)
        w.add("!matrix size", pdi.get_num_views(), index=3)
        w.add("matrix axis label", "axial coordinate", index=2)
        w.add("!matrix size", axial_sizes, index=2)
    else:
        w.add("matrix axis label", "axial coordinate", index=3)
        w.add("!matrix size", axial_sizes, index=3)
        w.add("matrix axis label", "view", index=2)
        w.add("!matrix size", pdi.get_num_views(), index=2)
    w.add("matrix axis label", "tangential coordinate", index=1)
    w.add("!matrix size", pdi.get_num_tangential_poss(), index=1)
    if pdi.get_min_tangential_pos_num() != -(pdi.get_num_tangential_poss() // 2):
        raise FormatError(
            "Interfile cannot store a tangential range not centred as STIR's "
            f"(min tangential position {pdi.get_min_tangential_pos_num()})",
            path=data_file_name,
        )
    w.add("minimum ring difference per segment", [pdi.get_min_ring_difference(s) for s in segs])
    w.add("maximum ring difference per segment", [pdi.get_max_ring_difference(s) for s in segs])
    _scanner_lines(w, sc)
    if pdi.is_arc_corrected():
        w.add("effective central bin size (cm)", format_f32(pdi.get_tangential_sampling() / 10))
    if ntof > 1:
        w.add("TOF mashing factor", pdi.get_tof_mash_factor())
    if scale_factor != 1.0:
        w.add("image scaling factor", float(scale_factor), index=1)
    if data_offset:
        w.add("data offset in bytes", int(data_offset), index=1)
    w.add("number of time frames", 1)
    w.add("start vertical bed position (mm)", 0)
    w.add("start horizontal bed position (mm)", 0)
    return w.text()
