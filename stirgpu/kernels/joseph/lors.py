"""STIR's own float32 LOR endpoints, bit for bit (host side; numba).

STIR's Parallelproj projector hands libparallelproj the endpoints its ``ParallelprojHelper``
computes: ``ProjDataInfoCylindrical::get_LOR`` (phi, s, m, tan(theta) in float32), the
conversion to two points on the detector cylinder (``LORInCylinderCoordinates``,
``LORAs2Points``) and ``find_LOR_intersections_with_cylinder`` with the FOV radius, all in
``float`` with a few steps in ``double`` (STIR's ``LORCoordinates.inl``,
``ProjDataInfoCylindrical*.{cxx,inl}``, ``modulo.h``).  Where a LOR's x and y components are
equal (views at 45 / 135 degrees) or a LOR lies on an image face, those roundings decide the
projection (``docs/joseph.md``, "Precision"), so reproducing STIR's numbers there needs its
float32 endpoints exactly.

This module reproduces them: ``tests/stir_differential/test_stir_lors.py`` checks STIR's
accessors bit for bit, and that libparallelproj fed with these endpoints gives STIR's own
forward projections bit for bit.  What that took, found against the reference STIR 6.5 build
(none of it can be read from STIR's sources alone; the build is compiled with ``-ffast-math``):

* float trigonometry is glibc's ``sinf`` / ``asinf`` (numba's ``math.sin`` on float32 calls
  them; numpy's float32 ufuncs do not: about 1 value in 10 differs by an ulp), except for the
  two points on the detector cylinder, which come from double ``sin`` / ``cos`` of the float
  angle, rounded once;
* the second detector angle is ``(phi + pi) - beta``, rounded in that order (the header
  writes ``phi - beta + pi``: fast-math reassociates);
* ``get_tantheta`` divides by the square root through the x86 ``rsqrtss`` approximation and
  one Newton step (``0.5 * ring_spacing * (delta * (-0.5 y) (x y y - 3))``), so tan(theta)
  depends on the CPU's ``rsqrtss`` (Intel and AMD differ): :func:`rsqrt_newton` issues the
  same instruction on this CPU, as STIR does on it.  On CPUs without it, the correctly
  rounded reciprocal square root is used and tan(theta) may differ from STIR's by an ulp.

Nothing here runs at import; functions compile on first call (machine code kept in stirgpu's cache folder, :mod:`.jit`).
"""

from __future__ import annotations

import math
import platform
import threading
from typing import Any

import numpy as np
from numba import types
from numba.extending import intrinsic

from ..jit import cached_njit

__all__ = [
    "StirFloatGeometry",
    "stir_float_geometry",
    "stir_lor_endpoints",
    "stir_chunk_tables",
    "TransaxialTables",
    "stir_part_geometry",
    "axial_tables",
    "geometry_tables",
    "stir_image_frame",
    "stir_default_image_info",
    "rsqrt_newton",
    "divide_newton",
    "divide_newton_each",
]

_F = np.float32
_TWO_PI = _F(2 * math.pi)
_PI = _F(math.pi)
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _x86_scalar(llvm_name: str, doc: str):
    """A numba intrinsic issuing the x86 SSE instruction ``llvm_name`` on one float32 (lane 0)."""

    def typer(typingctx, x):
        if x != types.float32:
            return None

        def codegen(context, builder, signature, args):
            from llvmlite import ir

            v4 = ir.VectorType(ir.FloatType(), 4)
            fn = builder.module.declare_intrinsic(llvm_name, fnty=ir.FunctionType(v4, [v4]))
            vec = builder.insert_element(ir.Constant(v4, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
            return builder.extract_element(builder.call(fn, [vec]), ir.Constant(ir.IntType(32), 0))

        return types.float32(types.float32), codegen

    typer.__doc__ = doc
    return intrinsic(typer)


_rsqrtss = _x86_scalar("llvm.x86.sse.rsqrt.ss", "``rsqrtss``: a ~12-bit reciprocal square root estimate")
_rcpss = _x86_scalar("llvm.x86.sse.rcp.ss", "``rcpss``: a ~12-bit reciprocal estimate (``rcpps`` per lane)")


if _X86:

    @cached_njit()
    def divide_newton(a, b):
        """a / b as GCC's fast-math code computes it in STIR's packed loops: ``rcpps`` and one
        Newton step, ``a * ((r + r) - (b r) r)``."""
        r = _rcpss(b)
        return np.float32(a * np.float32(np.float32(r + r) - np.float32(np.float32(b * r) * r)))

    @cached_njit()
    def rsqrt_newton(x):
        """1/sqrt(x) as GCC's fast-math code computes it: ``rsqrtss`` and one Newton step."""
        y = _rsqrtss(x)
        t = np.float32(np.float32(np.float32(x * y) * y) + np.float32(-3.0))
        return np.float32(t * np.float32(y * np.float32(-0.5)))
else:

    @cached_njit()
    def divide_newton(a, b):
        """a / b, correctly rounded (no ``rcpps`` on this CPU)."""
        return np.float32(a / b)

    @cached_njit()
    def rsqrt_newton(x):
        """1/sqrt(x), correctly rounded (no ``rsqrtss`` on this CPU)."""
        return np.float32(1.0 / math.sqrt(np.float64(x)))


@cached_njit()
def divide_newton_each(values, b):
    """:func:`divide_newton` of each float32 of ``values`` by the float32 ``b`` (a new array)."""
    out = np.empty_like(values)
    for i in range(values.shape[0]):
        out[i] = divide_newton(values[i], b)
    return out


class StirFloatGeometry:
    """STIR's float32 per-bin coordinates of one segment: ``phi[view]``, ``s[tang]``,
    ``m[axial]``, ``tantheta[tang]`` (STIR's ``get_phi``, ``get_s``, ``get_m``,
    ``get_tantheta``), ``ring_radius`` and ``fov_radius``."""

    __slots__ = ("phi", "s", "m", "tantheta", "ring_radius", "fov_radius")

    def __init__(self, phi, s, m, tantheta, ring_radius, fov_radius):
        self.phi, self.s, self.m, self.tantheta = phi, s, m, tantheta
        self.ring_radius, self.fov_radius = _F(ring_radius), float(fov_radius)


def _stir_phi(pdi, views) -> np.ndarray:
    """STIR's float32 ``get_phi`` of these views (the segment does not enter)."""
    n_det = pdi.scanner.num_detectors_per_ring
    az_sampling = _F(math.pi / pdi.get_num_views())
    mash = (n_det // 2) // pdi.get_num_views()
    az_offset = _F(pdi.scanner.intrinsic_azimuthal_tilt)
    if n_det > 2 and 2 * pdi.get_num_views() != n_det and n_det % (2 * pdi.get_num_views()) == 0:
        # STIR adds half a mash only where the views divide the unmashed ones
        az_offset = _F(az_offset + _F(math.pi / (n_det // 2) * (mash - 1) / 2.0))
    return (np.asarray(views, dtype=np.int64).astype(_F) * az_sampling + az_offset).astype(_F)


def stir_float_geometry(proj_data_info, segment_num: int, views, axial_poss, tangential_poss) -> StirFloatGeometry:
    """STIR's float32 phi, s, m and tan(theta) for these views, axial and tangential positions
    of ``segment_num``, from STIR's float constants (``ProjDataInfoCylindrical`` and its two
    flavours' constructors and inline accessors)."""
    pdi = proj_data_info
    sc = pdi.scanner
    seg = pdi.segment(segment_num)
    n_det = sc.num_detectors_per_ring
    ring_radius = _F(_F(sc.inner_ring_radius) + _F(sc.average_depth_of_interaction))
    tangs = np.asarray(tangential_poss, dtype=np.int64)
    axs = np.asarray(axial_poss, dtype=np.int64)
    phi = _stir_phi(pdi, views)
    if pdi.arc_corrected:
        s = (tangs.astype(_F) * _F(pdi.get_tangential_sampling())).astype(_F)
    else:
        s = _no_arc_s(tangs.astype(_F), ring_radius, _F(math.pi / n_det))
    spacing = _F(sc.ring_spacing)
    sampling = spacing if seg.min_ring_diff == seg.max_ring_diff else _F(spacing / _F(2))
    m_offset = _F(_F(_F(seg.num_axial_poss - 1) * sampling) / _F(2))
    m = (axs.astype(_F) * sampling - m_offset).astype(_F)
    tantheta = _tantheta(_F(seg.min_ring_diff + seg.max_ring_diff), spacing, ring_radius, s)
    return StirFloatGeometry(phi, s, m, tantheta, ring_radius, sc.max_FOV_radius)


@cached_njit()
def _tantheta(min_plus_max_ring_diff, ring_spacing, ring_radius, s):
    """STIR's ``get_tantheta`` for tangential positions with these s (see the module docstring)."""
    out = np.zeros(s.shape[0], dtype=np.float32)
    delta = np.float32(min_plus_max_ring_diff * np.float32(0.5))
    if abs(delta) < np.float32(1e-4):
        return out
    half_spacing = np.float32(np.float32(0.5) * ring_spacing)
    r2 = np.float32(ring_radius * ring_radius)
    for i in range(s.shape[0]):
        inv_root = rsqrt_newton(np.float32(r2 - np.float32(s[i] * s[i])))
        out[i] = np.float32(half_spacing * np.float32(delta * inv_root))
    return out


@cached_njit()
def _no_arc_s(t, ring_radius, angular_increment):
    out = np.empty(t.shape[0], dtype=np.float32)
    for i in range(t.shape[0]):
        out[i] = np.float32(ring_radius * np.float32(math.sin(np.float32(t[i] * angular_increment))))
    return out


@cached_njit()
def _to_0_2pi(a):
    # STIR's modulo(float, float): fmod in double, then back to float and into [0, 2 pi)
    b = np.float64(_TWO_PI)
    r = np.fmod(np.float64(a), b)
    if r < 0:
        r = r + b
    res = np.float32(r)
    if res >= _TWO_PI:
        res = np.float32(res - _TWO_PI)
    return res


@cached_njit()
def _transaxial(phi, s, ring_radius, fov_radius):
    """(hit, x1, y1, dx, dy, l1, l2): the detector points of (phi, s), their difference, and the
    parameters of the FOV-cylinder intersections along it, as STIR rounds them."""
    beta = np.float32(math.asin(np.float32(s / ring_radius)))
    phi0 = _to_0_2pi(phi)
    swapped = phi0 >= _PI
    if swapped:
        phi0 = np.float32(phi0 - _PI)
        beta = np.float32(-beta)
    psi1 = _to_0_2pi(np.float32(phi0 + beta))
    psi2 = _to_0_2pi(np.float32(np.float32(phi0 + _PI) - beta))
    r = np.float64(ring_radius)
    x1 = np.float32(r * math.sin(np.float64(psi1)))
    y1 = np.float32(-r * math.cos(np.float64(psi1)))
    x2 = np.float32(r * math.sin(np.float64(psi2)))
    y2 = np.float32(-r * math.cos(np.float64(psi2)))
    if swapped:
        x1, x2, y1, y2 = x2, x1, y2, y1
    dx = np.float32(x2 - x1)
    dy = np.float32(y2 - y1)
    a = np.float64(np.float32(np.float32(dx * dx) + np.float32(dy * dy)))
    b = np.float64(np.float32(np.float32(dx * x1) + np.float32(dy * y1)))
    e = np.float64(np.float32(np.float32(x1 * x1) + np.float32(y1 * y1))) - fov_radius * fov_radius
    arg = b * b - a * e
    if arg <= 0:
        return False, x1, y1, dx, dy, np.float32(0), np.float32(0)
    root = np.float64(np.float32(math.sqrt(arg)))
    return True, x1, y1, dx, dy, np.float32((-b - root) / a), np.float32((-b + root) / a)


def stir_lor_endpoints(geometry: StirFloatGeometry) -> tuple[np.ndarray, np.ndarray]:
    """STIR's float32 LOR endpoints (mm, gantry frame, axis order (z, y, x)), shape
    ``(views, axial, tangential, 3)`` each, clipped to the FOV cylinder; a LOR that misses it
    has both ends at 0, as STIR's ``ParallelprojHelper`` sets them.  The same arithmetic as the
    kernels (:mod:`.cpu`), from the same tables (:func:`geometry_tables`)."""
    from .cpu import endpoints_array

    return endpoints_array(geometry_tables(geometry))


def stir_image_frame(image_info, stir_units: bool = True) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """``(origin, voxel_size, rescale)`` as STIR's Parallelproj projector passes them to
    libparallelproj, float32, axis order (z, y, x): voxel sizes and the position of voxel
    [0, 0, 0] in the gantry frame (``get_physical_coordinates_for_indices`` of the minimum
    indices, z moved by ``(min + max) / 2 * vz``), both multiplied by ``rescale = 1 / vx``; with
    ``stir_units=False``, in mm (``rescale = 1``)."""
    vs = np.asarray(image_info.voxel_size, dtype=np.float64).astype(_F)
    org = np.asarray(image_info.origin, dtype=np.float64).astype(_F)
    lo = np.asarray(image_info.min_indices, dtype=np.int64)
    hi = lo + np.asarray(image_info.shape, dtype=np.int64) - 1
    first = (org + (lo.astype(_F) * vs).astype(_F)).astype(_F)
    first[0] = _F(first[0] - _F(_F(_F(lo[0] + hi[0]) / _F(2)) * vs[0]))
    rescale = _F(_F(1) / vs[2]) if stir_units else _F(1)
    return (first * rescale).astype(_F), (vs * rescale).astype(_F), rescale


@cached_njit()
def _transaxial_tables(phi, s, ring_radius, fov_radius):
    nv, nt = phi.shape[0], s.shape[0]
    x1 = np.zeros((nv, nt), np.float32)
    y1 = np.zeros((nv, nt), np.float32)
    dx = np.zeros((nv, nt), np.float32)
    dy = np.zeros((nv, nt), np.float32)
    l1 = np.zeros((nv, nt), np.float32)
    l2 = np.zeros((nv, nt), np.float32)
    hit = np.zeros((nv, nt), np.bool_)
    for i in range(nv):
        for j in range(nt):
            h, a, b, c, d, e, f = _transaxial(phi[i], s[j], ring_radius, fov_radius)
            hit[i, j] = h
            x1[i, j], y1[i, j], dx[i, j], dy[i, j], l1[i, j], l2[i, j] = a, b, c, d, e, f
    return x1, y1, dx, dy, l1, l2, hit


@cached_njit()
def _axial_offsets(s, tantheta, ring_radius):
    """STIR's ``max_a * tan(theta)`` per tangential position (float32)."""
    out = np.empty(s.shape[0], np.float32)
    for j in range(s.shape[0]):
        half = np.float32(math.sqrt(np.float32(np.float32(ring_radius * ring_radius) - np.float32(s[j] * s[j]))))
        out[j] = np.float32(half * tantheta[j])
    return out


def geometry_tables(g: StirFloatGeometry, transaxial: tuple | None = None) -> tuple:
    """The float32 tables the kernels compute endpoints from, for the bins of
    ``g``: ``(x1, y1, dx, dy, l1, l2, hit)`` per (view, tangential position), ``m`` per axial
    position, ``max_a tan(theta)`` per tangential position (``hit`` bool).  The LOR of bin
    (i, k, j) runs from ``p(l1)`` to ``p(l2)`` with ``p(l) = (z1 + dz l, y1 + dy l, x1 + dx l)``,
    ``z1 = m - mt``, ``dz = (m + mt) - z1``, each operation rounded to float32.  ``transaxial``:
    the first seven, already made (:meth:`TransaxialTables.rows`)."""
    if transaxial is None:
        phi, s = np.asarray(g.phi, _F), np.asarray(g.s, _F)
        transaxial = _transaxial_tables(phi, s, g.ring_radius, g.fov_radius)
    return (*transaxial, *axial_tables(g))


class TransaxialTables:
    """The transaxial tables ``(x1, y1, dx, dy, l1, l2, hit)`` of one projection-data geometry,
    each view's made the first time a chunk needs it and kept.  They depend on the view's phi,
    the tangential positions' s, the ring and FOV radii -- not on the segment --, so the chunks of
    all segments share them; they are most of a chunk's table work otherwise (a Quadra span-1
    call has 171 segments).  Every element is the one :func:`geometry_tables` computes alone.
    Sets of tables are kept by :meth:`key` (parts of one geometry normally share one).
    ``device_packings`` holds, per GPU, the sets packed there for the kernels
    (:func:`stirgpu.kernels.joseph.cuda.transaxial_on_device`; under :attr:`lock`).  Thread-safe."""

    def __init__(self, proj_data_info):
        self.proj_data_info = proj_data_info
        self.lock = threading.RLock()
        # key -> (the seven (views, tangential) tables, views made)
        self._kept: dict[tuple, tuple[list[np.ndarray], np.ndarray]] = {}
        self.device_packings: dict[int, Any] = {}

    @staticmethod
    def key(g: StirFloatGeometry) -> tuple:
        """What a set of tables depends on besides the views: the ring and FOV radii and s."""
        return (float(g.ring_radius), float(g.fov_radius), np.asarray(g.s, _F).tobytes())

    def _made(self, g: StirFloatGeometry, views: np.ndarray) -> list[np.ndarray]:
        """The kept set of ``g``'s key, with ``views`` made (``g.phi`` holds those views' phi)."""
        s = np.asarray(g.s, _F)
        key = self.key(g)
        kept = self._kept.get(key)
        if kept is None:
            shape = (self.proj_data_info.get_num_views(), s.shape[0])
            tables = [np.zeros(shape, _F) for _ in range(6)] + [np.zeros(shape, np.bool_)]
            kept = self._kept[key] = (tables, np.zeros(shape[0], np.bool_))
        tables, made = kept
        new = np.flatnonzero(~made[views])
        if new.size:
            phi = np.ascontiguousarray(np.asarray(g.phi, _F)[new])
            for table, part in zip(tables, _transaxial_tables(phi, s, g.ring_radius, g.fov_radius), strict=True):
                table[views[new]] = part
            made[views[new]] = True
        return tables

    def rows(self, g: StirFloatGeometry, views) -> tuple[np.ndarray, ...]:
        """The tables of ``views`` (``g``'s views, ascending; ``g`` of this geometry); for a run of
        consecutive views, views of the kept tables (never to be written)."""
        views = np.asarray(views, dtype=np.int64)
        with self.lock:
            tables = self._made(g, views)
            if views.size and np.all(np.diff(views) == 1):  # a run of views: no copy
                rows = slice(int(views[0]), int(views[-1]) + 1)
                return tuple(table[rows] for table in tables)
            return tuple(table[views] for table in tables)

    def complete(self, g: StirFloatGeometry) -> tuple[np.ndarray, ...]:
        """The whole set of ``g``'s key, every view of the geometry made (the kept arrays, never to
        be written): what the GPU kernels index by view."""
        views = np.arange(self.proj_data_info.get_num_views(), dtype=np.int64)
        with self.lock:
            made = self._kept.get(self.key(g))
            if made is None or not made[1].all():
                phi = _stir_phi(self.proj_data_info, views)
                self._made(StirFloatGeometry(phi, g.s, None, None, g.ring_radius, g.fov_radius), views)
            return tuple(self._kept[self.key(g)][0])

    def complete_sets(self) -> dict[tuple, tuple[np.ndarray, ...]]:
        """Every kept set whose views are all made (:meth:`complete`), by :meth:`key`."""
        with self.lock:
            return {key: tuple(tables) for key, (tables, made) in self._kept.items() if made.all()}


def stir_part_geometry(proj_data_info, chunk_tables) -> StirFloatGeometry:
    """:func:`stir_float_geometry` of one :class:`stirgpu.geometry.ChunkTables` part (its
    segment, views, axial and tangential positions), with its FOV radius."""
    t = chunk_tables
    g = stir_float_geometry(proj_data_info, t.segment, t.views, t.axial_poss, t.tangential_poss)
    g.fov_radius = float(t.radius)
    return g


def axial_tables(g: StirFloatGeometry) -> tuple[np.ndarray, np.ndarray]:
    """The per-axial and per-tangential tables of :func:`geometry_tables`: ``m`` and
    ``max_a tan(theta)``."""
    s, tt = np.asarray(g.s, _F), np.asarray(g.tantheta, _F)
    return np.asarray(g.m, _F), _axial_offsets(s, tt, g.ring_radius)


def stir_chunk_tables(proj_data_info, chunk_tables, transaxial: TransaxialTables | None = None) -> tuple:
    """:func:`geometry_tables` of one :class:`stirgpu.geometry.ChunkTables` part (its segment,
    views, axial and tangential positions, FOV radius); ``transaxial``: the tables of this
    geometry's views kept from part to part."""
    g = stir_part_geometry(proj_data_info, chunk_tables)
    return geometry_tables(g, None if transaxial is None else transaxial.rows(g, chunk_tables.views))


def stir_default_image_info(
    proj_data_info, zoom: float = 1.0, xy_size: int | None = None, z_size: int | None = None, origin=(0.0, 0.0, 0.0)
):
    """STIR's default image for ``proj_data_info`` to the last bit (``VoxelsOnCartesianGrid(
    proj_data_info, zoom, origin, sizes)``, STIR's ``VoxelsOnCartesianGrid.cxx``), as
    :meth:`stirgpu.geometry.ImageInfo.default_for` gives it in exact arithmetic but with STIR's
    float32 rounding: it divides ``(ring spacing / 2, default bin size, default bin size)`` by
    ``(1, zoom, zoom)``, the z and y components through ``rcpps`` and a Newton step (fast-math),
    x with a true division -- so vz is not exactly half the ring spacing and vy may differ from
    vx by an ulp -- and sizes x and y by ``2 ceil(r / v) + 1`` each with its own voxel size
    (``r`` the largest |s| in float32), so a default image may be one pixel wider than high."""
    import dataclasses

    from ...geometry import ImageInfo

    info = ImageInfo.default_for(proj_data_info, zoom=zoom, xy_size=xy_size, z_size=z_size, origin=origin)
    sc = proj_data_info.get_scanner()
    half_spacing = _F(_F(sc.ring_spacing) * _F(0.5))
    bin_size = _F(sc.default_bin_size)
    z = _F(zoom)
    vz, vy, vx = divide_newton(half_spacing, _F(1)), divide_newton(bin_size, z), _F(bin_size / z)
    nz, ny, nx = info.shape
    if xy_size is None or xy_size == -1:
        t = [proj_data_info.get_min_tangential_pos_num(), proj_data_info.get_max_tangential_pos_num()]
        s = stir_float_geometry(proj_data_info, 0, [0], [0], t).s
        radius = _F(max(abs(s[1]), abs(-s[0])))
        ny = 2 * int(math.ceil(_F(radius / vy))) + 1
        nx = 2 * int(math.ceil(_F(radius / vx))) + 1
    return dataclasses.replace(info, shape=(nz, ny, nx), voxel_size=(float(vz), float(vy), float(vx)), min_indices=None)
