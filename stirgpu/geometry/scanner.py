"""Cylindrical PET scanners, with STIR's parameters and STIR's predefined scanners.

Lengths are in mm and angles in radians, as STIR reports them (Interfile headers
store several lengths in cm and the view offset in degrees; the formats layer
converts).  The predefined scanners and their values come from STIR 6.5 itself
(``data/stir_scanners.json``, one entry per ``Scanner::Type``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from importlib import resources

from ..errors import GeometryError

__all__ = ["Scanner"]


def _norm_name(name: str) -> str:
    # STIR compares scanner names case-insensitively, ignoring spaces and underscores
    return "".join(ch for ch in name.lower() if ch not in " _-")


@dataclasses.dataclass(frozen=True, eq=False)
class Scanner:
    """A cylindrical PET scanner (STIR's ``Scanner``).

    Only ``name``, ``num_rings``, ``num_detectors_per_ring``, ``inner_ring_radius``,
    ``average_depth_of_interaction`` and ``ring_spacing`` are required; the others
    default as STIR does for a user-defined scanner.
    """

    name: str
    num_rings: int
    num_detectors_per_ring: int
    inner_ring_radius: float
    average_depth_of_interaction: float
    ring_spacing: float
    default_bin_size: float = -1.0
    intrinsic_azimuthal_tilt: float = 0.0
    max_num_non_arccorrected_bins: int = 0
    default_num_arccorrected_bins: int = 0
    max_FOV_radius: float = -1.0
    energy_resolution: float = -1.0
    reference_energy: float = -1.0
    max_num_timing_poss: int = 1
    size_of_timing_pos: float = 0.0
    timing_resolution: float = 0.0
    num_axial_blocks_per_bucket: int = 1
    num_transaxial_blocks_per_bucket: int = 1
    num_axial_crystals_per_block: int = 1
    num_transaxial_crystals_per_block: int = 1
    num_axial_crystals_per_singles_unit: int = 1
    num_transaxial_crystals_per_singles_unit: int = 1
    num_detector_layers: int = 1
    axial_crystal_spacing: float = -1.0
    transaxial_crystal_spacing: float = -1.0
    axial_block_spacing: float = -1.0
    transaxial_block_spacing: float = -1.0
    scanner_geometry: str = "Cylindrical"
    all_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        for k in (
            "num_rings",
            "num_detectors_per_ring",
            "max_num_non_arccorrected_bins",
            "default_num_arccorrected_bins",
            "max_num_timing_poss",
            "num_axial_blocks_per_bucket",
            "num_transaxial_blocks_per_bucket",
            "num_axial_crystals_per_block",
            "num_transaxial_crystals_per_block",
            "num_axial_crystals_per_singles_unit",
            "num_transaxial_crystals_per_singles_unit",
            "num_detector_layers",
        ):
            set_(k, int(getattr(self, k)))
        for f in dataclasses.fields(self):
            if f.type == "float":
                v = float(getattr(self, f.name))
                if not math.isfinite(v):
                    raise GeometryError(f"Scanner {self.name!r}: {f.name} must be finite, not {v}")
                set_(f.name, v)
        set_("all_names", tuple(self.all_names) or (self.name,))
        if self.num_rings < 1 or self.num_detectors_per_ring < 2:
            raise GeometryError(
                f"Scanner {self.name!r}: needs num_rings >= 1 and "
                f"num_detectors_per_ring >= 2 (got {self.num_rings}, "
                f"{self.num_detectors_per_ring})"
            )
        if self.num_detectors_per_ring % 2:
            raise GeometryError(
                f"Scanner {self.name!r}: num_detectors_per_ring must be even (got {self.num_detectors_per_ring})"
            )
        if self.inner_ring_radius <= 0 or self.ring_spacing <= 0:
            raise GeometryError(
                f"Scanner {self.name!r}: inner_ring_radius and ring_spacing must "
                f"be positive (got {self.inner_ring_radius}, {self.ring_spacing})"
            )
        if self.average_depth_of_interaction < 0:
            raise GeometryError(f"Scanner {self.name!r}: average_depth_of_interaction must be >= 0")
        # STIR: the default FOV is the inner ring (a cylinder of the inner radius)
        if self.max_FOV_radius <= 0:
            set_("max_FOV_radius", self.inner_ring_radius)
        if self.default_bin_size <= 0:
            # STIR keeps an unset bin size invalid and, where it needs one (the default image,
            # VoxelsOnCartesianGrid.cxx), takes the central non-arc-corrected bin's sampling in
            # s, R sin(pi / N): the same number here
            set_("default_bin_size", self.effective_ring_radius * math.sin(math.pi / self.num_detectors_per_ring))
        if self.max_num_non_arccorrected_bins <= 0:
            set_("max_num_non_arccorrected_bins", self.num_detectors_per_ring // 2)
        if self.default_num_arccorrected_bins <= 0:
            set_("default_num_arccorrected_bins", self.max_num_non_arccorrected_bins)

    # -- comparison: tolerant, like tomosipo's geometries --------------------------------
    def __eq__(self, other: object) -> bool:
        """Same geometry: integers equal, lengths/angles equal to float32 precision.

        Names are not compared (a header's ``Scanner parameters`` block describing an
        mMR equals ``Scanner.from_name("mMR")`` even if it calls it something else),
        and the values STIR stores as float32 compare equal to their decimal form.
        """
        if not isinstance(other, Scanner):
            return NotImplemented
        for f in dataclasses.fields(self):
            if f.name in ("name", "all_names"):
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, float):
                if not math.isclose(a, b, rel_tol=2e-6, abs_tol=1e-6):
                    return False
            elif a != b:
                return False
        return True

    def __hash__(self) -> int:
        return hash((self.num_rings, self.num_detectors_per_ring, self.scanner_geometry))

    # -- derived -------------------------------------------------------------------------
    @property
    def effective_ring_radius(self) -> float:
        """Inner ring radius plus the average depth of interaction (STIR's R)."""
        return self.inner_ring_radius + self.average_depth_of_interaction

    @property
    def num_views_unmashed(self) -> int:
        return self.num_detectors_per_ring // 2

    # STIR's accessor names, so code written for stir.Scanner works
    def get_name(self) -> str:
        return self.name

    def get_num_rings(self) -> int:
        return self.num_rings

    def get_num_detectors_per_ring(self) -> int:
        return self.num_detectors_per_ring

    def get_inner_ring_radius(self) -> float:
        return self.inner_ring_radius

    def get_average_depth_of_interaction(self) -> float:
        return self.average_depth_of_interaction

    def get_effective_ring_radius(self) -> float:
        return self.effective_ring_radius

    def get_ring_spacing(self) -> float:
        return self.ring_spacing

    def get_default_bin_size(self) -> float:
        return self.default_bin_size

    def get_intrinsic_azimuthal_tilt(self) -> float:
        return self.intrinsic_azimuthal_tilt

    def get_max_num_views(self) -> int:
        return self.num_views_unmashed

    def get_max_num_non_arccorrected_bins(self) -> int:
        return self.max_num_non_arccorrected_bins

    def get_default_num_arccorrected_bins(self) -> int:
        return self.default_num_arccorrected_bins

    def get_max_FOV_radius(self) -> float:
        return self.max_FOV_radius

    def get_max_num_timing_poss(self) -> int:
        return self.max_num_timing_poss

    def get_size_of_timing_pos(self) -> float:
        """Size of an unmashed TOF time bin (ps)."""
        return self.size_of_timing_pos

    def get_timing_resolution(self) -> float:
        """TOF timing resolution, FWHM (ps)."""
        return self.timing_resolution

    def is_tof_ready(self) -> bool:
        """STIR's rule: TOF bins, their size and the timing resolution all positive."""
        return self.max_num_timing_poss > 0 and self.size_of_timing_pos > 0 and self.timing_resolution > 0

    def replace(self, **changes) -> Scanner:
        """A copy with some parameters changed (a user-defined scanner)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["all_names"] = list(self.all_names)
        d["effective_ring_radius"] = self.effective_ring_radius
        return d

    # -- STIR's predefined scanners ---------------------------------------------------
    @classmethod
    def from_name(cls, name: str) -> Scanner:
        """STIR's predefined scanner called ``name`` (any of its aliases, case-insensitive)."""
        table = _predefined()
        key = _norm_name(name)
        if key not in table and key in _unsupported():
            raise GeometryError(f"STIR's scanner {name!r} is not a cylindrical ring scanner; stirgpu cannot use it")
        if key not in table:
            raise GeometryError(f"unknown scanner {name!r}; STIR's scanners are: " + ", ".join(cls.names()))
        return table[key]

    @staticmethod
    def names() -> list[str]:
        """The primary names of STIR's predefined scanners."""
        return list(_raw_table())

    @staticmethod
    def all_names_of_predefined() -> list[tuple[str, ...]]:
        """Each of STIR's predefined scanners' names (primary first), in STIR's order, including
        those stirgpu cannot project (what STIR's ``Scanner::list_all_names`` lists)."""
        return [tuple(p.get("all_names", (primary,))) for primary, p in _raw_table().items()]

    @staticmethod
    def is_known(name: str) -> bool:
        return _norm_name(name) in _predefined()


@functools.lru_cache(maxsize=1)
def _raw_table() -> dict:
    text = resources.files(__package__).joinpath("data/stir_scanners.json").read_text()
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _unsupported() -> frozenset[str]:
    return frozenset(_norm_name(a) for p in _raw_table().values() if p["num_rings"] < 1 for a in p.get("all_names", ()))


@functools.lru_cache(maxsize=1)
def _predefined() -> dict[str, Scanner]:
    """Alias -> Scanner.  An alias shared by several scanners (STIR's 'Discovery MI')
    maps to the first, as STIR's name lookup does."""
    fields = {f.name for f in dataclasses.fields(Scanner)}
    out: dict[str, Scanner] = {}
    for primary, params in _raw_table().items():
        kw = {k: v for k, v in params.items() if k in fields}
        kw["name"] = primary
        kw["all_names"] = tuple(params.get("all_names", (primary,)))
        if kw["num_rings"] < 1:  # STIR's placeholder entries (e.g. HiDAC) are not cylindrical
            continue
        sc = Scanner(**kw)
        for alias in sc.all_names:
            out.setdefault(_norm_name(alias), sc)
    return out
