"""STIR's geometry objects -> stirgpu's (duck-typed; ``stir`` is never imported here).

* :func:`proj_data_info_from_stir` -- a STIR ``ProjDataInfoCylindrical`` (arc-corrected or not)
  as a :class:`stirgpu.geometry.ProjDataInfo`, then *checked*: STIR's own ``get_phi``,
  ``get_s``, ``get_m`` and ``get_tantheta`` at the corner bins of every segment must equal
  stirgpu's, so an object with something stirgpu cannot represent (reduced axial ranges,
  per-view ring radii, a changed ring spacing, ...) is refused instead of projected wrongly.
  A view offset set with ``set_azimuthal_angle_offset`` is represented exactly (as the
  scanner's intrinsic tilt), as are asymmetric tangential ranges.
* :func:`image_info_from_stir` -- a ``stir.FloatVoxelsOnCartesianGrid`` as an
  :class:`stirgpu.geometry.ImageInfo` with the numbers STIR's Parallelproj projector gives
  for it (see the function for its z index rule).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

from ..arrays import library_of
from ..errors import GeometryError, StirGpuError
from .images import coordinate_triple

__all__ = [
    "scanner_from_stir",
    "proj_data_info_from_stir",
    "image_info_from_stir",
    "is_stir_proj_data_info",
    "is_stir_image",
]

# STIR keeps its geometry in float32: values read back from it match stirgpu's float64 ones
# to float32 rounding of numbers of a few hundred mm.
_MM_TOL = 1e-3
_ANGLE_TOL = 1e-6


def is_stir_proj_data_info(obj: Any) -> bool:
    """True for objects with STIR's ProjDataInfo API (not stirgpu's own class)."""
    from ..geometry import ProjDataInfo

    return (
        not isinstance(obj, ProjDataInfo)
        and hasattr(obj, "get_scanner")
        and hasattr(obj, "get_min_ring_difference")
        and hasattr(obj, "get_num_views")
    )


def is_stir_image(obj: Any) -> bool:
    """True for objects with the geometry accessors of a STIR ``VoxelsOnCartesianGrid``."""
    return all(hasattr(obj, n) for n in ("get_voxel_size", "get_origin", "get_lengths", "get_min_indices", "as_array"))


def _stir_module(obj: Any):
    """The module the STIR object comes from (already imported by its user), for ``Bin``."""
    return sys.modules.get(library_of(obj))


def scanner_from_stir(stir_scanner: Any):
    """A :class:`stirgpu.geometry.Scanner` with the parameters of a STIR ``Scanner``.

    A scanner STIR knows by name starts from stirgpu's copy of it; every parameter the STIR
    object has a ``get_<name>()`` for is then taken from the object (STIR's getters are named
    after its parameters), so user-defined scanners come through too.
    """
    from ..geometry import Scanner

    try:
        name = str(stir_scanner.get_name())
    except AttributeError as e:
        raise StirGpuError(f"cannot read the scanner from a STIR object: {e}") from None
    kw: dict = {}
    for f in dataclasses.fields(Scanner):
        if f.name in ("name", "all_names", "scanner_geometry"):
            continue
        getter = getattr(stir_scanner, f"get_{f.name}", None)
        if getter is not None:
            kw[f.name] = getter()
    geometry = getattr(stir_scanner, "get_scanner_geometry", None)
    if geometry is not None and str(geometry()).lower() != "cylindrical":
        raise GeometryError(f"scanner {name!r} has geometry {geometry()!r}; stirgpu projects cylindrical scanners only")
    if Scanner.is_known(name):
        return Scanner.from_name(name).replace(**kw)
    needed = (
        "num_rings",
        "num_detectors_per_ring",
        "inner_ring_radius",
        "average_depth_of_interaction",
        "ring_spacing",
    )
    missing = [n for n in needed if n not in kw]
    if missing:
        raise StirGpuError(f"cannot read scanner {name!r} from a STIR object: no get_{missing[0]}()")
    return Scanner(name=name, **kw)


def proj_data_info_from_stir(stir_pdi: Any, name: str = "proj_data_info"):
    """A :class:`stirgpu.geometry.ProjDataInfo` equal to a STIR ``ProjDataInfoCylindrical``
    (see the module docstring); ``name`` is the argument named in errors."""
    from ..geometry import ProjDataInfo

    cls = type(stir_pdi).__name__
    if "Blocks" in cls or "Generic" in cls:
        raise GeometryError(
            f"{name}: STIR {cls} is not a cylindrical geometry; stirgpu projects "
            "ProjDataInfoCylindricalArcCorr / NoArcCorr data only"
        )
    try:
        scanner = scanner_from_stir(stir_pdi.get_scanner())
        segs = range(int(stir_pdi.get_min_segment_num()), int(stir_pdi.get_max_segment_num()) + 1)
        lo = [int(stir_pdi.get_min_ring_difference(s)) for s in segs]
        hi = [int(stir_pdi.get_max_ring_difference(s)) for s in segs]
        num_views = int(stir_pdi.get_num_views())
        num_tang = int(stir_pdi.get_num_tangential_poss())
        min_tang = int(stir_pdi.get_min_tangential_pos_num())
        num_axial = [int(_optional(stir_pdi, "get_num_axial_poss", s, default=-1)) for s in segs]
    except AttributeError as e:
        raise StirGpuError(f"{name}: cannot read the projection-data geometry from a STIR object ({e})") from None
    if "NoArcCorr" in cls or hasattr(stir_pdi, "get_angular_increment"):
        arc, sampling = False, None
    elif "ArcCorr" in cls or hasattr(stir_pdi, "get_tangential_sampling"):
        arc, sampling = True, float(stir_pdi.get_tangential_sampling())
    else:
        raise StirGpuError(f"{name}: cannot tell whether STIR projection data ({cls}) are arc-corrected")
    ntof = int(_optional(stir_pdi, "get_num_tof_poss", default=1))
    tof_mash = int(_optional(stir_pdi, "get_tof_mash_factor", default=0))
    try:
        pdi = ProjDataInfo(
            scanner,
            lo,
            hi,
            num_views,
            num_tang,
            arc,
            tangential_sampling=sampling,
            min_tangential_pos_num=min_tang,
            num_tof_poss=ntof,
            tof_mash_factor=tof_mash if tof_mash > 0 else None,
            num_axial_poss=None if -1 in num_axial else num_axial,
        )
        offset = _optional(stir_pdi, "get_azimuthal_angle_offset")
        if offset is not None and abs(float(offset) - pdi.get_azimuthal_angle_offset()) > _ANGLE_TOL:
            # a view offset STIR was given explicitly: stirgpu's offset is the scanner's tilt plus
            # half a mash, so the tilt carries the difference
            tilt = scanner.intrinsic_azimuthal_tilt + float(offset) - pdi.get_azimuthal_angle_offset()
            pdi = pdi.replace(scanner=scanner.replace(intrinsic_azimuthal_tilt=tilt))
    except GeometryError as e:
        raise GeometryError(f"{name}: {e}") from None
    _check_same_geometry(stir_pdi, pdi, name)
    return pdi


def _optional(obj: Any, getter: str, *args, default=None):
    f = getattr(obj, getter, None)
    return default if f is None else f(*args)


def _check_same_geometry(stir_pdi: Any, pdi, name: str) -> None:
    """STIR's own coordinates of ``stir_pdi`` must be stirgpu's (module docstring)."""

    def differ(what, theirs, ours, tol):
        if not abs(float(theirs) - float(ours)) <= tol:
            raise GeometryError(
                f"{name}: stirgpu cannot represent this STIR geometry exactly: STIR's {what} is "
                f"{float(theirs)!r}, stirgpu's {float(ours)!r}"
            )

    if _optional(stir_pdi, "get_min_view_num", default=0) != 0:
        raise GeometryError(f"{name}: STIR views start at {stir_pdi.get_min_view_num()}; stirgpu needs 0")
    R = _optional(stir_pdi, "get_ring_radius")
    if R is not None:
        differ("ring radius", R, pdi.get_scanner().effective_ring_radius, _MM_TOL)
    radii = _optional(stir_pdi, "get_ring_radii_for_all_views")
    if radii is not None and any(abs(float(r) - float(R)) > _MM_TOL for r in radii):
        raise GeometryError(f"{name}: STIR's ring radius differs between views; stirgpu needs one radius")
    spacing = _optional(stir_pdi, "get_ring_spacing")
    if spacing is not None:
        differ("ring spacing", spacing, pdi.get_scanner().ring_spacing, _MM_TOL)
    for seg in pdi.segment_nums:
        if _optional(stir_pdi, "get_min_axial_pos_num", seg, default=0) != 0:
            raise GeometryError(
                f"{name}: segment {seg}'s axial positions start at "
                f"{stir_pdi.get_min_axial_pos_num(seg)}; stirgpu needs 0"
            )
    stir = _stir_module(stir_pdi)
    Bin = getattr(stir, "Bin", None)
    if Bin is None or not hasattr(stir_pdi, "get_phi"):
        return  # no STIR Bin class to ask STIR with (a look-alike object)
    views = (0, pdi.get_num_views() - 1)
    tangs = sorted(
        {pdi.get_min_tangential_pos_num(), 0, pdi.get_max_tangential_pos_num()}
        & set(range(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1))
    )
    for seg in pdi.segment_nums:
        for ax in (0, pdi.get_num_axial_poss(seg) - 1):
            for v in views:
                for t in tangs:
                    b = Bin(seg, v, ax, t)
                    where = f"(segment {seg}, view {v}, axial {ax}, tangential {t})"
                    differ(f"phi {where}", stir_pdi.get_phi(b), pdi.get_phi(v), _ANGLE_TOL)
                    differ(f"s {where}", stir_pdi.get_s(b), pdi.get_s(t), _MM_TOL)
                    differ(f"m {where}", stir_pdi.get_m(b), pdi.get_m(seg, ax), _MM_TOL)
                    differ(f"tan(theta) {where}", stir_pdi.get_tantheta(b), pdi.get_tantheta(seg, t), _ANGLE_TOL)


def image_info_from_stir(image: Any, name: str = "image"):
    """The :class:`~stirgpu.geometry.ImageInfo` of a STIR ``VoxelsOnCartesianGrid``.

    Origin, voxel sizes and the y/x index offsets are STIR's.  In z, STIR's Parallelproj
    projector centres the image's *index range* on the scanner (it subtracts
    ``(min + max) / 2`` z indices from the first voxel's position), so the z index offset
    does not move the image there; stirgpu centres index 0 (see ``ImageInfo.gantry_origin``).
    To give STIR's numbers, the image's z indices are renumbered from 0 -- a no-op for every
    image STIR makes itself (headers, ``VoxelsOnCartesianGrid(proj_data_info, zoom)``).
    """
    from ..geometry import ImageInfo

    try:
        shape = coordinate_triple(image.get_lengths(), int)
        voxel = coordinate_triple(image.get_voxel_size(), float)
        origin = coordinate_triple(image.get_origin(), float)
        mi = coordinate_triple(image.get_min_indices(), int)
    except (AttributeError, TypeError, GeometryError) as e:
        raise GeometryError(f"{name}: cannot read the geometry of a STIR image ({e})") from None
    if not all(math.isfinite(v) for v in voxel + origin):
        raise GeometryError(f"{name}: STIR image has voxel size {voxel} and origin {origin}")
    try:
        return ImageInfo(shape, voxel, origin, (0, mi[1], mi[2]))
    except GeometryError as e:
        raise GeometryError(f"{name}: {e}") from None
