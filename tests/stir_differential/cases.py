"""Seeded differential cases: one geometry (scanner, segments, views, tangential positions), one
image and one way of storing the data, built the same way in STIR and in stirgpu.

Shared by every differential test (geometry, headers, images, projections).  The lists are
drawn from fixed seeds, so a failing case has the same label (and the same numbers) on every run.

* :func:`quick_cases` -- a small, varied list, cheap enough for the quick suite (projection tests
  included): few views through mashing, few tangential positions, few segments, small images.
* :func:`every_scanner_cases` -- one tiny case for each cylindrical scanner STIR knows, for the
  tests that cost nothing per bin (geometry, headers).
* :func:`large_cases` -- every cylindrical scanner at realistic sizes; slow, marked with
  :func:`large_marks` (skipped unless ``STIRGPU_LARGE_DIFFERENTIAL=1``).

STIR's scanner list is read from stirgpu's own table (``stirgpu/geometry/data``, which holds what
STIR 6.5 reports) so cases can be listed at collection time, without STIR;
``test_geometry_vs_stir.py`` checks that table's cylindrical scanners against STIR's own list.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from importlib import resources

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

__all__ = [
    "Case",
    "quick_cases",
    "every_scanner_cases",
    "large_cases",
    "large_marks",
    "params",
    "cylindrical_scanner_names",
    "non_cylindrical_scanner_names",
    "stir_proj_data_info",
    "stirgpu_proj_data_info",
    "stir_image",
    "stirgpu_image_info",
    "stir_storage_order",
]

LARGE_ENV = "STIRGPU_LARGE_DIFFERENTIAL"
LARGE_REASON = f"large STIR differential set: set {LARGE_ENV}=1"

SPANS = (1, 3, 5, 7, 9, 11)


@dataclasses.dataclass(frozen=True)
class Case:
    """One differential case.  ``offset_xyz`` is the image origin (mm) in (x, y, z) order, as the
    name says; STIR and stirgpu take origins as (z, y, x): use :attr:`origin_zyx`."""

    scanner: str
    span: int
    max_ring_diff: int
    view_mash: int
    num_tangential_poss: int
    arc_corrected: bool
    image_xy: int | None
    image_z: int | None
    zoom: float
    offset_xyz: tuple[float, float, float]
    restrict_fov: bool
    storage_order: str
    seed: int
    label: str = ""

    def __post_init__(self) -> None:
        if self.storage_order not in ("view", "sinogram"):
            raise ValueError(
                f"Case {self.label!r}: storage_order must be 'view' or 'sinogram', not {self.storage_order!r}"
            )
        if self.scanner not in cylindrical_scanner_names():
            raise ValueError(
                f"Case {self.label!r}: {self.scanner!r} is not one of STIR's cylindrical "
                f"scanners ({', '.join(cylindrical_scanner_names())})"
            )
        n_half = _params(self.scanner)["num_detectors_per_ring"] // 2
        if self.view_mash < 1 or n_half % self.view_mash:
            raise ValueError(
                f"Case {self.label!r}: view_mash {self.view_mash} does not divide "
                f"{n_half} (the unmashed views of {self.scanner})"
            )
        if not self.label:
            object.__setattr__(self, "label", self.default_label())

    def default_label(self) -> str:
        img = f"img{self.image_xy or 'D'}x{self.image_z or 'D'}z{self.zoom:g}"
        return (
            f"{self.scanner.replace(' ', '').replace('/', '')}-s{self.span}rd{self.max_ring_diff}"
            f"-v{self.num_views}t{self.num_tangential_poss}{'arc' if self.arc_corrected else 'noarc'}"
            f"-{img}-{'fov' if self.restrict_fov else 'nofov'}-{self.storage_order[:4]}-{self.seed}"
        )

    @property
    def num_views(self) -> int:
        return _params(self.scanner)["num_detectors_per_ring"] // 2 // self.view_mash

    @property
    def num_rings(self) -> int:
        return _params(self.scanner)["num_rings"]

    @property
    def origin_zyx(self) -> tuple[float, float, float]:
        x, y, z = self.offset_xyz
        return (float(z), float(y), float(x))

    @property
    def num_bins(self) -> int:
        """Bins of the whole data, counted with STIR's construction rule (independently of the
        geometry code under test; used to keep the lists cheap)."""
        return (
            self.num_views
            * self.num_tangential_poss
            * sum(_axial_poss_per_segment(self.num_rings, self.span, self.max_ring_diff))
        )

    def rng(self, salt: int = 0) -> np.random.Generator:
        """A generator for this case's random choices in tests (sampled bins, data values)."""
        return np.random.default_rng([self.seed, salt])


# -- STIR's scanners --------------------------------------------------------------------------
@functools.cache
def _raw_table() -> dict:
    """stirgpu's published table of STIR's scanners (``stirgpu/geometry/data/stir_scanners.json``),
    every scanner with all its parameters, as STIR 6.5 reports them."""
    return json.loads(resources.files("stirgpu.geometry").joinpath("data/stir_scanners.json").read_text())


def _params(name: str) -> dict:
    return _raw_table()[name]


@functools.lru_cache(maxsize=1)
def cylindrical_scanner_names() -> tuple[str, ...]:
    """STIR's predefined scanners that are cylindrical rings of detectors (primary names)."""
    return tuple(
        n
        for n, p in _raw_table().items()
        if p["num_rings"] >= 1 and p.get("scanner_geometry", "Cylindrical") == "Cylindrical"
    )


def non_cylindrical_scanner_names() -> tuple[str, ...]:
    """STIR's predefined scanners stirgpu refuses (placeholders without rings, block geometries)."""
    return tuple(n for n in _raw_table() if n not in cylindrical_scanner_names())


def _axial_poss_per_segment(num_rings: int, span: int, max_rd: int) -> list[int]:
    """Axial positions of segments 0, 1, 2, ... (one side) by STIR's construction rule
    (ProjDataInfo.cxx, ProjDataInfoCTI): span 1 gives N - |RD|; span > 1 gives 2N - 1 for
    segment 0 and 2N - 1 - 2 RDmin otherwise, even for a clipped single-ring-difference segment."""
    if span == 1:
        return [num_rings] + [num_rings - d for d in range(1, max_rd + 1)] * 2
    half = (span - 1) // 2
    out, rd_min = [2 * num_rings - 1], half + 1
    while rd_min <= max_rd:
        out += [2 * num_rings - 1 - 2 * rd_min] * 2
        rd_min += span
    return out


# -- drawing cases ----------------------------------------------------------------------------
def _draw_case(
    rng: np.random.Generator,
    scanner: str,
    span: int,
    k: int,
    max_bins: int,
    max_voxels: int,
    seed: int,
    max_ring_diff: int | None = None,
    max_views: int = 96,
) -> Case:
    """One case for ``scanner`` and ``span``; ``k`` (the case's index) alternates the binary
    features so that every list has both values of each."""
    p = _params(scanner)
    n_rings, n_half = p["num_rings"], p["num_detectors_per_ring"] // 2
    span = min(span, 2 * n_rings - 1) | 1
    arc = k % 2 == 1
    if max_ring_diff is None:
        max_ring_diff = _draw_max_ring_diff(rng, n_rings, span, k)
    n_ax = sum(_axial_poss_per_segment(n_rings, span, max_ring_diff))
    max_tang = p["default_num_arccorrected_bins"] if arc else p["max_num_non_arccorrected_bins"]
    # odd and even tangential sizes in turn, all below the scanner's maximum
    tang = int(rng.integers(5, max(6, min(max_tang - 1, 48))))
    if tang % 2 != (k // 2) % 2:
        tang += 1 if tang + 1 < max_tang else -1
    while tang > 3 and 2 * tang * n_ax > max_bins:
        tang -= 2
    mash = _draw_mash(rng, n_half, max(2, min(max_views, max_bins // (tang * n_ax))))
    zoom = float(rng.choice([0.5, 0.8, 1.0, 1.0, 1.25, 2.0]))
    image_xy = None if k % 3 == 0 else int(rng.integers(6, 40))
    image_z = None if k % 4 != 3 else int(rng.integers(1, 2 * n_rings))
    xy_est = image_xy or int(tang * zoom) + 3
    while image_xy is not None and image_xy > 4 and (image_z or 2 * n_rings - 1) * image_xy**2 > max_voxels:
        image_xy = xy_est = image_xy // 2 + 1
    if image_z is None and (2 * n_rings - 1) * xy_est**2 > max_voxels:
        image_z = max(1, max_voxels // xy_est**2)
    # offsets up to 15 mm, axially at most a third of the scanner's length (a one-ring scanner's
    # image must still meet its LORs)
    z_max = min(15.0, p["num_rings"] * p["ring_spacing"] / 3)
    offset = tuple(0.0 if k % 5 == 0 else round(float(v), 2) for v in rng.uniform([-15, -15, -z_max], [15, 15, z_max]))
    return Case(
        scanner=scanner,
        span=span,
        max_ring_diff=max_ring_diff,
        view_mash=mash,
        num_tangential_poss=tang,
        arc_corrected=arc,
        image_xy=image_xy,
        image_z=image_z,
        zoom=zoom,
        offset_xyz=offset,
        restrict_fov=k % 3 != 1,
        storage_order="sinogram" if k % 4 in (1, 2) else "view",
        seed=seed,
    )


def _draw_max_ring_diff(rng: np.random.Generator, n_rings: int, span: int, k: int) -> int:
    """A maximum ring difference with at most two segments beyond segment 0 on each side; every
    other case one that leaves the outermost segments incomplete (not (S-1)/2 + j S)."""
    lo = (span - 1) // 2
    hi = min(n_rings - 1, lo + 2 * span)
    if span == 1:
        return int(rng.integers(0, min(n_rings - 1, 4) + 1))
    incomplete = [d for d in range(lo + 1, hi + 1) if (d - lo) % span]
    complete = [d for d in range(lo, hi + 1) if (d - lo) % span == 0]
    pool = incomplete if (k % 2 == 0 and incomplete) else complete
    return int(rng.choice(pool))


def _draw_mash(rng: np.random.Generator, n_half: int, max_views: int) -> int:
    """A view-mashing factor leaving at least 2 views (STIR's default image needs 2) and at most
    ``max_views``; the smallest mash that fits, or a random larger one half of the time."""
    mashes = [m for m in range(1, n_half + 1) if n_half % m == 0 and 2 <= n_half // m <= max_views]
    if not mashes:
        mashes = [max(m for m in range(1, n_half // 2 + 1) if n_half % m == 0)]
    return int(mashes[0] if rng.random() < 0.5 else rng.choice(mashes))


#: scanners of the quick list, each with the span it is drawn with (spans 1..11 all occur)
_QUICK_PLAN = (
    ("ECAT 953", 3),
    ("ECAT 931", 5),
    ("test_scanner", 1),
    ("RATPET", 3),
    ("PRT-1", 7),
    ("GE Advance", 9),
    ("GE Discovery ST", 11),
    ("Positron HZL/R", 5),
    ("HYPERimage", 1),
    ("Siemens mMR", 11),
    ("GE Signa PET/MR", 7),
    ("Allegro", 9),
    ("ECAT 962", 3),
    ("PANDA", 1),
    ("Siemens mCT", 5),
)


@functools.lru_cache(maxsize=1)
def quick_cases() -> tuple[Case, ...]:
    """The quick differential list: varied and cheap (a few 1e4 bins, images of a few 1e5 voxels).

    Always holds the case of a divergence once found against STIR: GE Discovery 690, span 3,
    maximum ring difference 5 (outermost segments of one ring difference)."""
    rng = np.random.default_rng(1212)
    out = [
        _draw_case(rng, name, span, k, max_bins=40_000, max_voxels=150_000, seed=1212 + k)
        for k, (name, span) in enumerate(_QUICK_PLAN)
    ]
    k = len(out)
    out.append(
        _draw_case(rng, "GE Discovery 690", 3, k, max_bins=40_000, max_voxels=150_000, seed=1212 + k, max_ring_diff=5)
    )
    return tuple(out)


@functools.lru_cache(maxsize=1)
def every_scanner_cases() -> tuple[Case, ...]:
    """One tiny case for each cylindrical scanner STIR knows (for geometry and header tests)."""
    rng = np.random.default_rng(4242)
    return tuple(
        _draw_case(rng, name, SPANS[k % len(SPANS)], k, max_bins=60_000, max_voxels=60_000, seed=4242 + k)
        for k, name in enumerate(cylindrical_scanner_names())
    )


@functools.lru_cache(maxsize=1)
def large_cases() -> tuple[Case, ...]:
    """Every cylindrical scanner at realistic sizes (up to ~1e6 bins and 4e6 voxels); slow."""
    rng = np.random.default_rng(9090)
    return tuple(
        _draw_case(
            rng, name, SPANS[(k + 2) % len(SPANS)], k + 1, max_bins=1_000_000, max_voxels=4_000_000, seed=9090 + k
        )
        for k, name in enumerate(cylindrical_scanner_names())
    )


def large_marks() -> list:
    """Marks for the large set: ``slow``, and skipped unless ``STIRGPU_LARGE_DIFFERENTIAL=1``."""
    return [pytest.mark.slow, pytest.mark.skipif(os.environ.get(LARGE_ENV) != "1", reason=LARGE_REASON)]


def params(cases, marks=()) -> list:
    """``pytest.param``s of ``cases`` with their labels as ids (and extra ``marks``)."""
    return [pytest.param(c, id=c.label, marks=list(marks)) for c in cases]


def mmr_unmashed(label: str, max_ring_diff: int, num_tangential_poss: int, restrict_fov: bool, seed: int) -> Case:
    """The Siemens mMR at span 11 with its native 252 views (no mashing, no view tilt: views 63
    and 189 are diagonal), not arc-corrected, in view order, with STIR's default image."""
    return Case(
        scanner="Siemens mMR",
        span=11,
        max_ring_diff=max_ring_diff,
        view_mash=1,
        num_tangential_poss=num_tangential_poss,
        arc_corrected=False,
        image_xy=None,
        image_z=None,
        zoom=1.0,
        offset_xyz=(0.0, 0.0, 0.0),
        restrict_fov=restrict_fov,
        storage_order="view",
        seed=seed,
        label=label,
    )


# -- the same geometry both ways --------------------------------------------------------------
def stir_proj_data_info(stir, case: Case):
    """STIR's ``ProjDataInfo`` of ``case`` (``construct_proj_data_info``; STIR takes the number
    of views and derives the mashing factor)."""
    scanner = stir.Scanner.get_scanner_from_name(case.scanner)
    return stir.ProjDataInfo.construct_proj_data_info(
        scanner, case.span, case.max_ring_diff, case.num_views, case.num_tangential_poss, case.arc_corrected
    )


def stirgpu_proj_data_info(case: Case) -> ProjDataInfo:
    """stirgpu's ``ProjDataInfo`` of ``case``, built like STIR's ``construct_proj_data_info``."""
    return ProjDataInfo.construct(
        Scanner.from_name(case.scanner),
        case.span,
        case.max_ring_diff,
        case.num_views,
        case.num_tangential_poss,
        case.arc_corrected,
    )


def stir_image(stir, case: Case, pdi):
    """STIR's image of ``case`` for STIR's ``pdi``: ``VoxelsOnCartesianGrid(pdi, zoom, origin,
    sizes)``, -1 where the case keeps STIR's default size."""
    oz, oy, ox = case.origin_zyx
    xy = -1 if case.image_xy is None else case.image_xy
    z = -1 if case.image_z is None else case.image_z
    return stir.FloatVoxelsOnCartesianGrid(
        pdi, case.zoom, stir.FloatCartesianCoordinate3D(oz, oy, ox), stir.IntCartesianCoordinate3D(z, xy, xy)
    )


def stirgpu_image_info(case: Case, pdi: ProjDataInfo) -> ImageInfo:
    """stirgpu's image geometry of ``case`` for stirgpu's ``pdi``: STIR's default image to the last
    bit (``stirgpu.kernels.joseph.lors.stir_default_image_info``: ``ImageInfo.default_for`` with
    STIR's fast-math float32 voxel sizes)."""
    from stirgpu.kernels.joseph.lors import stir_default_image_info

    return stir_default_image_info(
        pdi, zoom=case.zoom, xy_size=case.image_xy, z_size=case.image_z, origin=case.origin_zyx
    )


def stir_storage_order(case: Case) -> str:
    """The Interfile storage order name STIR writes for ``case``."""
    return "Segment_View_AxialPos_TangPos" if case.storage_order == "view" else "Segment_AxialPos_View_TangPos"
