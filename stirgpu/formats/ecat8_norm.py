"""Siemens ECAT8 component-based normalisation files (``norm.n.hdr`` + ``norm.n``), read as STIR's
``BinNormalisationFromECAT8`` reads them (``InterfileNormHeaderSiemens`` for the header).

The header is Interfile-like; what is used of it:

* ``originating system`` -- the scanner (STIR's name table: ``2008`` is the Siemens mMR);
* ``name of data file`` -- the components, relative to the header's folder;
* ``%number of normalization components`` (at least 4), ``data offset in bytes [1..4]``;
* ``%matrix size [1..4]`` -- checked against the scanner, since STIR sizes the components from the
  scanner, not from the header (a file of another scanner would be read as garbage);
* ``%axial compression`` (default 11, as STIR) and ``%maximum ring difference`` -- the span and
  ring differences of the Siemens sinograms the axial effects are given for.

The binary components, little-endian float32 (STIR reads them so whatever the header says; a
header saying otherwise is refused here), each starting at its ``data offset in bytes``:

1. geometric factors ``[2 * rings - 1][tangential]``, indexed by ``ring1 + ring2``;
2. crystal interference ``[tangential][transaxial crystals per block]``;
3. crystal efficiencies ``[ring][detector]``;
4. axial effects, one per Siemens sinogram (segments 0, -1, +1, ...; axial positions within).

Components 5-8 (dead-time parameters, additional axial effects) are not used by STIR and are not
read.  As STIR does on reading: for the mMR the efficiencies of each ring are rotated by one
crystal (the last to the first), and with ``use_gaps`` the virtual crystals of STIR's scanners that
have them get efficiency 0.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from ..errors import FormatError, GeometryError
from ..geometry import ProjDataInfo, Scanner
from .interfile import InterfileHeader, read_header

__all__ = ["Ecat8Norm", "read_ecat8_norm"]

#: STIR's ``Scanner::get_num_virtual_transaxial_crystals_per_block`` / ``..._axial_...``: the
#: scanners with a virtual crystal per block (STIR's list, by its scanner names)
_VIRTUAL_TRANSAXIAL = frozenset(
    {"ecat 1080", "siemens mct", "siemens vision 600", "siemens quadra", "siemens mmr", "upenn_5rings", "upenn_6rings"}
)
_VIRTUAL_AXIAL = frozenset({"ecat 1080", "siemens mct", "siemens quadra"})
#: STIR's default span of Siemens norm files (``InterfileNormHeaderSiemens``)
_DEFAULT_AXIAL_COMPRESSION = 11


@dataclasses.dataclass(frozen=True, eq=False)
class Ecat8Norm:
    """The four components STIR uses, as float32 arrays (read-only), with their scanner and the
    geometry of the Siemens sinograms the axial effects belong to."""

    path: Path  #: the header
    scanner: Scanner
    #: the Siemens sinograms of the norm file (span, ring differences, views, tangential positions)
    norm_proj_data_info: ProjDataInfo
    geometric: np.ndarray  #: [ring1 + ring2, tangential]
    interference: np.ndarray  #: [tangential, crystal in block]
    efficiencies: np.ndarray  #: [ring, detector] (mMR rotation and gaps applied as STIR applies them)
    axial_effects: np.ndarray  #: [Siemens sinogram]
    calibration_factor: float  #: '%scanner quantification factor' (STIR reads it but uses 1)

    @property
    def min_tangential_pos_num(self) -> int:
        """The tangential position of column 0 of :attr:`geometric` (STIR: -(bins // 2))."""
        return -(self.scanner.max_num_non_arccorrected_bins // 2)


def _matrix_size(hdr: InterfileHeader, index: int, expected: tuple[int, ...]) -> None:
    got = tuple(hdr.get_int_list("%matrix size", index))
    if got != expected:
        raise hdr.error(
            f"is {{{','.join(map(str, got))}}} but the scanner {hdr.get_str('originating system')!r} "
            f"needs {{{','.join(map(str, expected))}}}",
            "%matrix size",
            index,
        )


def _scanner(hdr: InterfileHeader) -> Scanner:
    # STIR drops white space from the name (mMR files end lines with \r\r)
    name = "".join(hdr.get_str("originating system").split())
    try:
        return Scanner.from_name(name)
    except GeometryError as exc:
        raise hdr.error(f"scanner {name!r} not known to STIR ({exc})", "originating system") from None


def _check_number_format(hdr: InterfileHeader) -> None:
    fmt = hdr.get_str("number format", default="float")
    if fmt.strip().lower() != "float":
        raise hdr.error(f"must be 'float' (STIR reads the components as float32), got {fmt!r}", "number format")
    nbytes = hdr.get_int("number of bytes per pixel", default=4)
    if nbytes != 4:
        raise hdr.error(f"must be 4 (STIR reads the components as float32), got {nbytes}", "number of bytes per pixel")
    order = hdr.get_str("image data byte order", default="LITTLEENDIAN")
    if "".join(order.split()).upper() != "LITTLEENDIAN":
        raise hdr.error(
            f"must be LITTLEENDIAN (STIR reads the components little-endian), got {order!r}", "image data byte order"
        )


def _norm_geometry(hdr: InterfileHeader, scanner: Scanner) -> ProjDataInfo:
    span = hdr.get_int("%axial compression", default=_DEFAULT_AXIAL_COMPRESSION)
    max_rd = hdr.get_int("%maximum ring difference")
    num_rings = hdr.get_int("number of rings", default=scanner.num_rings)
    if num_rings != scanner.num_rings:
        raise hdr.error(f"is {num_rings} but {scanner.name} has {scanner.num_rings} rings", "number of rings")
    try:
        return ProjDataInfo.construct(scanner, span, max_rd, arc_corrected=False)
    except GeometryError as exc:
        raise hdr.error(f"with '%axial compression := {span}': {exc}", "%maximum ring difference") from None


def _virtual_gaps(efficiencies: np.ndarray, scanner: Scanner) -> None:
    """Efficiency 0 for the virtual crystals (STIR: the first crystal(s) of each transaxial block;
    the last axial one(s) of each axial block), in place."""
    name = scanner.name.lower()
    if name in _VIRTUAL_TRANSAXIAL:
        efficiencies[:, :: scanner.num_transaxial_crystals_per_block] = 0.0
    if name in _VIRTUAL_AXIAL:
        per_block = scanner.num_axial_crystals_per_block
        efficiencies[per_block - 1 :: per_block, :] = 0.0


def _read_components(hdr: InterfileHeader, data: Path, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    offsets = [hdr.get_int("data offset in bytes", i + 1) for i in range(len(shapes))]
    try:
        size = os.path.getsize(data)
    except OSError as exc:
        raise FormatError(f"cannot read the normalisation data ({exc.strerror})", path=data) from None
    parts = []
    with open(data, "rb") as f:
        for i, (offset, shape) in enumerate(zip(offsets, shapes, strict=True)):
            nbytes = 4 * int(np.prod(shape))
            # STIR checks that each component ends where the next starts
            end = offsets[i + 1] if i + 1 < len(offsets) else offset + nbytes
            if end != offset + nbytes:
                raise hdr.error(
                    f"is {end} but component {i + 1} of shape {shape} starting at byte {offset} ends at "
                    f"{offset + nbytes}",
                    "data offset in bytes",
                    i + 2,
                )
            if offset + nbytes > size:
                raise FormatError(
                    f"truncated: component {i + 1} needs bytes {offset}..{offset + nbytes} but the file has {size}",
                    path=data,
                )
            f.seek(offset)
            a = np.frombuffer(f.read(nbytes), dtype="<f4").astype(np.float32).reshape(shape)
            parts.append(a)
    return parts


def read_ecat8_norm(path: str | os.PathLike, use_gaps: bool = True) -> Ecat8Norm:
    """Read ``path`` (the ``.n.hdr`` header) and its components; see the module docstring.
    ``use_gaps``: STIR's key of that name (efficiency 0 for virtual crystals)."""
    hdr = read_header(path)
    scanner = _scanner(hdr)
    _check_number_format(hdr)
    num_components = hdr.get_int("%number of normalization components")
    if num_components < 4:
        raise hdr.error(f"is {num_components} but should be at least 4", "%number of normalization components")
    norm_pdi = _norm_geometry(hdr, scanner)
    n_rings, n_det = scanner.num_rings, scanner.num_detectors_per_ring
    n_tang = scanner.max_num_non_arccorrected_bins
    n_block = scanner.num_transaxial_crystals_per_block
    n_sino = norm_pdi.get_num_non_tof_sinograms()
    shapes = [(2 * n_rings - 1, n_tang), (n_tang, n_block), (n_rings, n_det), (n_sino,)]
    for i, shape in enumerate(shapes):
        _matrix_size(hdr, i + 1, tuple(reversed(shape)))  # Interfile lists the fastest index first
    geometric, interference, efficiencies, axial = _read_components(hdr, hdr.get_path("name of data file"), shapes)
    efficiencies = efficiencies.copy()
    if scanner.name.lower() == "siemens mmr":
        # STIR: "for mMR, we need to shift the efficiencies for 1 crystal"
        efficiencies = np.roll(efficiencies, 1, axis=1)
    if use_gaps:
        _virtual_gaps(efficiencies, scanner)
    for a in (geometric, interference, efficiencies, axial):
        a.flags.writeable = False
    return Ecat8Norm(
        path=Path(path),
        scanner=scanner,
        norm_proj_data_info=norm_pdi,
        geometric=geometric,
        interference=interference,
        efficiencies=efficiencies,
        axial_effects=axial,
        calibration_factor=hdr.get_float("%scanner quantification factor (Bq*s/ECAT counts)", default=1.0),
    )
