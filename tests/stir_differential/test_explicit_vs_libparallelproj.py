"""``stirgpu.kernels.joseph_forward`` / ``joseph_back`` against libparallelproj 2.0.7 itself.

The reference STIR's own CPU build of libparallelproj (``reference_stir.library``) is called
through ctypes with the very float32 endpoints, image, origin and voxel size that stirgpu gets:
``joseph3d_fwd`` / ``joseph3d_back(lor_start, lor_end, image, image_origin, voxel_size,
projection_values, num_lors, image_dim, device_id, threads_per_block)`` (device -1 and 64 threads:
ignored by the CPU build).  It runs in a process of its own with the reference STIR's environment
(``ReferenceStir.env()``: ``OMP_NUM_THREADS`` its thread count), so that OpenMP takes that count
whatever this process has loaded before.

Identities checked:

* forward projections are libparallelproj's bit for bit, every LOR: random LORs and adversarial
  ones (zero-length; lying in a face plane of the image box, or just outside it; parallel to an
  axis through voxel centres and along voxel boundaries; entering below plane 0, where the floors
  of the plane coordinates differ but their truncations do not; through the image corners and
  along its diagonals; at exactly 45 degrees, where the principal axis is a tie; very long and
  very short), on several image shapes (one plane thick, one voxel wide), origins (far from 0)
  and anisotropic voxel sizes, each LOR in both directions;
* float64 endpoints are rounded to float32 (libparallelproj's type) and then give its numbers;
* back projections are libparallelproj's up to the order of the float32 additions into a voxel
  (its OpenMP threads add atomically, in an order that varies; ours race-free per worker):
  measured at most 2.6e-7 of the maximum with 1 to 16 numba threads and the reference's 1 or 2
  OpenMP threads over repeated runs (0, bit for bit, with one thread each), hence
  :data:`BACK_BAR`;
* no LORs: an empty forward projection and an unchanged image.

LORs so long (millions of voxels) that the float32 clipping puts their walk on planes outside the
image are left out (:func:`_planes_outside`): libparallelproj reads and writes such planes without
a bounds check, so its numbers there are undefined.

Guards every step of the projector against libparallelproj's: clipping (``fminf``/``fmaxf``, the
slab test of parallel rays, faces included), the zero-length rule, the principal axis from float32
squared direction cosines and its ties, the floor guard, the plane range, the interpolation
coordinates ``i * a + b`` per plane, the bilinear weights and the order of the float32 sum.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo
from stirgpu.kernels import joseph_back, joseph_forward
from stirgpu.kernels.joseph.lors import stir_image_frame

pytestmark = pytest.mark.stir

F32 = np.float32

#: back projections against libparallelproj's, in units of its maximum: float32 summation order
#: (measured at most 2.6e-7 over the cases below, see the module docstring)
BACK_BAR = 4e-7

TESTS = Path(__file__).resolve().parent.parent

#: runs libparallelproj on the pickled cases (argv[1]) and pickles its results (argv[2])
_RUN_LIBPARALLELPROJ = """
import ctypes, pickle, sys
import numpy as np

with open(sys.argv[1], "rb") as f:
    reference_stir, cases = pickle.load(f)
lib = reference_stir.library("libparallelproj.so")
P = ctypes.c_void_p
for fn in (lib.joseph3d_fwd, lib.joseph3d_back):
    fn.argtypes = [P, P, P, P, P, P, ctypes.c_size_t, P, ctypes.c_int, ctypes.c_int]
    fn.restype = None
ptr = lambda a: a.ctypes.data_as(P)
results = {}
for name, (xstart, xend, image, origin, voxel_size, values) in cases.items():
    dims = np.array(image.shape, np.int32)
    n = len(xstart)
    frame = (ptr(origin), ptr(voxel_size))
    fwd = np.full(n, np.nan, np.float32)  # 2.0.7 writes every LOR's value, 0 for a miss
    lib.joseph3d_fwd(ptr(xstart), ptr(xend), ptr(image), *frame, ptr(fwd), n, ptr(dims), -1, 64)
    back = np.zeros(image.shape, np.float32)
    lib.joseph3d_back(ptr(xstart), ptr(xend), ptr(back), *frame, ptr(values), n, ptr(dims), -1, 64)
    results[name] = (fwd, back)
with open(sys.argv[2], "wb") as f:
    pickle.dump(results, f)
"""


@dataclasses.dataclass(frozen=True)
class Geometry:
    """An image box: shape (z, y, x), the centre of voxel [0, 0, 0] and the voxel size."""

    name: str
    shape: tuple[int, int, int]
    origin: tuple[float, float, float]
    voxel_size: tuple[float, float, float]

    @property
    def org32(self) -> np.ndarray:
        return np.array(self.origin, F32)

    @property
    def vs32(self) -> np.ndarray:
        return np.array(self.voxel_size, F32)

    def faces(self) -> tuple[np.ndarray, np.ndarray]:
        """The box's low and high faces as the kernels compute them in float32
        (``lo = origin - 0.5 vs``, ``hi = lo + n vs``), so that points put there lie exactly on
        them."""
        lo = (self.org32 - (F32(0.5) * self.vs32).astype(F32)).astype(F32)
        hi = (lo + (np.array(self.shape, F32) * self.vs32).astype(F32)).astype(F32)
        return lo, hi

    def world(self, index) -> np.ndarray:
        """Points of (fractional) voxel index coordinates (z, y, x), in float64."""
        return np.asarray(self.origin) + np.asarray(index, np.float64) * np.asarray(self.voxel_size)

    def extent(self) -> float:
        return float(np.linalg.norm(np.array(self.shape) * np.array(self.voxel_size)))


def _stir_units_geometry() -> Geometry:
    """A realistic frame: an ECAT 953-like image in STIR's x-voxel units (``stir_image_frame``)."""
    origin, voxel_size, _ = stir_image_frame(ImageInfo((31, 57, 57), (3.375, 2.5, 2.5), origin=(0.0, 2.0, -3.0)))
    return Geometry("stir-units", (31, 57, 57), tuple(map(float, origin)), tuple(map(float, voxel_size)))


GEOMETRIES = (
    Geometry("anisotropic", (9, 14, 12), (-8.0, -6.5, -8.25), (2.0, 1.0, 1.5)),
    _stir_units_geometry(),
    Geometry("one-plane", (1, 20, 17), (0.0, 3.3, -7.1), (2.5, 0.7, 1.3)),
    Geometry("far-origin", (16, 16, 16), (123.4, -56.78, 0.001), (1.0, 1.0, 1.0)),
    Geometry("thin", (5, 40, 1), (-1.0, -1.0, -1.0), (0.3, 4.0, 1.7)),
)


def _random_lors(g: Geometry, rng, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """Lines in random directions through random points of (and around) the box, of lengths
    from a thousandth of a voxel to twice the box (log-uniform): some inside, some crossing, some
    missing."""
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    centre = g.world(rng.uniform(-0.8, np.array(g.shape) - 0.2, size=(n, 3)))
    length = np.exp(rng.uniform(np.log(1e-3 * min(g.voxel_size)), np.log(2 * g.extent()), size=(n, 1)))
    t = rng.uniform(-1, 1, size=(n, 1))  # where the point lies on the LOR
    start = centre - (1 + t) * length / 2 * d
    return start, start + length * d


def _adversarial_lors(g: Geometry, rng) -> tuple[np.ndarray, np.ndarray]:
    """The LORs whose numbers turn on one float32 rounding or one rule (see the module
    docstring), in float64 world coordinates (exact float32 numbers where they lie on a face)."""
    lo, hi = (a.astype(np.float64) for a in g.faces())
    n = np.array(g.shape)
    mid = g.world((n - 1) / 2)
    far = 4 * g.extent()
    starts, ends = [], []

    def add(s, e):
        starts.append(np.asarray(s, np.float64))
        ends.append(np.asarray(e, np.float64))

    for a in range(3):
        u, w = [b for b in range(3) if b != a]
        unit = np.eye(3)[a]
        # parallel to axis a: through voxel centres, along voxel boundaries, on each face of u
        # and w (inside the slab, faces included), and just outside a face
        for fu in (0.0, 0.5, n[u] - 1.0, n[u] / 2.0 - 0.5):
            for fw in (0.0, 0.5, (n[w] - 1) / 2.0):
                p = g.world(np.where(np.arange(3) == u, fu, np.where(np.arange(3) == w, fw, 0)))
                p[a] = mid[a]
                add(p - far * unit, p + far * unit)
        for face_u in (lo[u], hi[u], np.nextafter(F32(lo[u]), F32(-np.inf)), np.nextafter(F32(hi[u]), F32(np.inf))):
            for face_w in (mid[w], lo[w], hi[w]):
                p = mid.copy()
                p[u], p[w] = face_u, face_w
                add(p - far * unit, p + far * unit)
        # lying in the face plane u = lo / hi, oblique within it
        for face in (lo[u], hi[u]):
            s, e = mid.copy(), mid.copy()
            s[u] = e[u] = face
            s[a], e[a] = mid[a] - far, mid[a] + far
            s[w], e[w] = lo[w] - 0.3 * g.voxel_size[w], hi[w] + 0.2 * g.voxel_size[w]
            add(s, e)
        # entering below plane 0 of axis a (plane coordinates between -0.5 and 0): floor -1,
        # truncation 0; from outside through the low face, and from inside the first half voxel
        for f_start, f_end in ((-7.0, 0.4), (-0.3, 0.6), (-0.45, -0.05), (-0.2, 0.0), (0.3, -3.0)):
            s, e = mid.copy(), mid.copy()
            s[a] = g.world(np.full(3, f_start))[a]
            e[a] = g.world(np.full(3, f_end))[a]
            e[u] += 0.01 * g.voxel_size[u]
            add(s, e)
            # the mirror case at the high face
            s2, e2 = s.copy(), e.copy()
            s2[a] = g.world(np.full(3, n[a] - 1 - f_start))[a]
            e2[a] = g.world(np.full(3, n[a] - 1 - f_end))[a]
            add(s2, e2)
    # zero-length LORs: inside, outside, on a face, at a corner
    for p in (mid, g.world(n + 3.0), np.where(np.arange(3) == 0, lo, mid), lo.copy()):
        add(p, p)
    # through the corners: body diagonals corner to corner (and beyond), face diagonals
    corners = [np.where([bz, by, bx], hi, lo) for bz in (0, 1) for by in (0, 1) for bx in (0, 1)]
    for c in corners:
        opposite = lo + hi - c
        add(c, opposite)
        add(c + (c - opposite), opposite + (opposite - c))  # the same line, from outside
        add(c, c + np.array([0.0, 1.0, 1.0]) * (opposite - c))  # along a face diagonal
        add(c - rng.normal(size=3) * g.extent(), c)  # ending on the corner
    # exactly 45 degrees: |d| equal on two (or three) axes in float32, a principal-axis tie
    # (endpoints on a grid of 1/64 and a power of two apart: their float32 differences are exact)
    reach = 2.0 ** np.ceil(np.log2(far))
    for d in ((0.0, 1.0, 1.0), (1.0, 0.0, 1.0), (1.0, 1.0, 0.0), (1.0, 1.0, 1.0), (0.0, 1.0, -1.0), (-1.0, 1.0, 1.0)):
        d = np.array(d)
        for shift in (0.0, 0.37, -1.5):
            p = np.round((mid + shift * np.array(g.voxel_size)) * 64) / 64
            add(p - reach * d, p + reach * d)
    # very long: endpoints 1e4 and 1e6 of the smallest voxel size away (coarse in float32: the
    # clipped entry and exit points are then up to a few hundredths of a voxel off the faces;
    # longer ones can be put outside the image, see _planes_outside) and very short
    for scale in (1e4, 1e6):
        d = rng.normal(size=(4, 3))
        for di in d / np.linalg.norm(d, axis=1, keepdims=True):
            add(mid - scale * min(g.voxel_size) * di, mid + scale * min(g.voxel_size) * di)
    for length in (1e-6, 1e-3, 0.3):
        for a in range(3):
            p = g.world(np.full(3, 1.0))
            p[a] = g.world(np.full(3, 0.0))[a] + 0.5 * g.voxel_size[a]  # on a voxel boundary
            step = np.eye(3)[a] * length * g.voxel_size[a] + 1e-3 * length
            add(p - step, p + step)
    s, e = np.array(starts), np.array(ends)
    return np.concatenate([s, e]), np.concatenate([e, s])  # each LOR both ways


def _case(g: Geometry, seed: int, adversarial: bool):
    rng = np.random.default_rng(seed)
    s, e = _adversarial_lors(g, rng) if adversarial else _random_lors(g, rng)
    image = rng.uniform(0, 1, g.shape).astype(F32)
    values = rng.uniform(0, 1, len(s)).astype(F32)
    values[rng.random(len(s)) < 0.1] = 0  # LORs of value 0 add nothing
    return s, e, image, values


def _planes_outside(g: Geometry, xstart: np.ndarray, xend: np.ndarray) -> list[int]:
    """The LORs whose walk, as the float32 clipping rounds it, reaches planes of the principal axis
    outside the image (possible only for LORs millions of voxels long).  libparallelproj reads
    those planes without a bounds check -- memory outside the image, undefined -- so the cases
    here keep clear of them: a comparison there would compare garbage."""
    from stirgpu.kernels.joseph.cpu import _setup

    dims = np.array(g.shape, np.int64)
    outside = []
    for k, (s, e) in enumerate(zip(xstart, xend, strict=True)):
        direction, istart, iend = _setup(s, e, g.org32, g.vs32, dims)[:3]
        if istart != -1 and (istart < 0 or iend >= dims[direction]):
            outside.append(k)
    return outside


CASES = {
    f"{g.name}-{kind}": (g, k, kind == "adversarial")
    for k, g in enumerate(GEOMETRIES)
    for kind in ("random", "adversarial")
}


@pytest.fixture(scope="module")
def runs(reference_stir, tmp_path_factory):
    """Per case: (float64 start, float64 end, image, values, geometry, libparallelproj's forward
    projection, libparallelproj's back projection), libparallelproj run once for all cases."""
    cases, inputs = {}, {}
    for name, (g, seed, adversarial) in CASES.items():
        s, e, image, values = _case(g, seed, adversarial)
        assert not _planes_outside(g, s.astype(F32), e.astype(F32)), name
        cases[name] = (s, e, image, values, g)
        inputs[name] = (s.astype(F32), e.astype(F32), image, g.org32, g.vs32, values)
    empty = np.zeros((0, 3), F32)
    g = GEOMETRIES[0]
    inputs["empty"] = (empty, empty, np.ones(g.shape, F32), g.org32, g.vs32, np.zeros(0, F32))
    folder = tmp_path_factory.mktemp("libparallelproj")
    with open(folder / "cases.pickle", "wb") as f:
        pickle.dump((reference_stir, inputs), f)
    env = reference_stir.env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])  # to unpickle ReferenceStir
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_LIBPARALLELPROJ, str(folder / "cases.pickle"), str(folder / "results.pickle")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(folder / "results.pickle", "rb") as f:
        results = pickle.load(f)
    return {name: (*cases[name], *results[name]) for name in cases} | {"empty": results["empty"]}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_equals_joseph3d_fwd_bit_for_bit(runs, name):
    """joseph_forward == libparallelproj's joseph3d_fwd, every LOR, bit for bit (float32
    endpoints, image, origin and voxel size: the same inputs)."""
    s, e, image, _, g, ref, _ = runs[name]
    got = joseph_forward(s.astype(F32), e.astype(F32), image, g.org32, g.vs32)
    assert np.count_nonzero(ref) > len(ref) // 8  # the LORs do cross the image
    bad = np.nonzero(got.view(np.uint32) != ref.view(np.uint32))[0]
    assert bad.size == 0, (
        f"{bad.size} of {len(ref)} LORs differ, e.g. LOR {bad[0]}: {s[bad[0]]} -> {e[bad[0]]}: "
        f"ours {got[bad[0]]!r}, libparallelproj {ref[bad[0]]!r}"
    )


@pytest.mark.parametrize("name", [n for n in CASES if n.endswith("-random")])
def test_float64_endpoints_are_rounded_to_float32(runs, name):
    """Float64 endpoints (and a float64 origin and voxel size) give libparallelproj's numbers for
    their float32 roundings, bit for bit: they are rounded, not projected in float64."""
    s, e, image, _, g, ref, _ = runs[name]
    assert not np.array_equal(s, s.astype(F32))  # float32 cannot hold them
    got = joseph_forward(s, e, image, g.origin, g.voxel_size)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("name", list(CASES))
def test_back_equals_joseph3d_back_to_summation_order(runs, name):
    """joseph_back == libparallelproj's joseph3d_back up to the order of the float32 additions
    into a voxel (:data:`BACK_BAR` of the maximum; measured in the module docstring), in the very
    voxels libparallelproj reaches (images and values are non-negative: a voxel's sum is 0 in any
    order exactly where all its terms are)."""
    s, e, image, values, g, _, ref = runs[name]
    got = joseph_back(s.astype(F32), e.astype(F32), values, np.zeros(g.shape, F32), g.org32, g.vs32)
    peak = float(np.abs(ref).max())
    assert peak > 0
    worst = float(np.abs(got - ref).max())
    print(f"{name}: back max |ours - libparallelproj| / max = {worst / peak:.2e}")
    assert worst <= BACK_BAR * peak
    # the same voxels reached (a sum of non-negative terms is 0 in any order iff all are)
    assert np.array_equal(got != 0, ref != 0)


def test_no_lors(runs):
    """No LORs: libparallelproj and joseph_forward give nothing, joseph_back leaves the image as
    it was (libparallelproj's too)."""
    ref_fwd, ref_back = runs["empty"]
    g = GEOMETRIES[0]
    empty = np.zeros((0, 3), F32)
    assert ref_fwd.shape == (0,) and joseph_forward(empty, empty, np.ones(g.shape, F32), g.org32, g.vs32).shape == (0,)
    image = np.ones(g.shape, F32)
    joseph_back(empty, empty, np.zeros(0, F32), image, g.org32, g.vs32)
    assert np.all(image == 1) and not ref_back.any()
