"""stirgpu's projectors on STIR's own Python objects (a real STIR 6.5): ``stir.ProjData`` on disk
(``ProjDataInterfile``, ``ProjData.read_from_file``) and in memory (``ProjDataInMemory``), and
``stir.FloatVoxelsOnCartesianGrid`` images, in ``set_up``, ``forward_project`` and ``back_project``.

Identities checked:

* STIR's numbers: for STIR geometries of several kinds (arc-corrected or not, mashed views, an
  explicit view offset, an asymmetric tangential range, images with their own origin, index
  ranges and voxel sizes), stirgpu's projection of STIR's objects equals STIR's own Parallelproj
  projector on the same objects.  stirgpu's projector computes STIR's (STIR's float32 LOR
  endpoints and libparallelproj's float32 arithmetic): forward projections are equal bit for
  bit, and back projections differ by float32 summation order only (STIR adds its OpenMP
  threads' images, stirgpu its chunks': up to 2.1e-6 of the maximum measured, bar 1e-5).
  A geometry converted wrong (a view offset dropped, an image shifted by a voxel) differs by
  1e-1 or more.
* The store path: projecting through STIR's objects gives exactly (bitwise, CPU) what stirgpu's
  own stores give on the same data -- same plan, same kernels; only the transport differs.
* Subsets: only the subset's viewgrams of a STIR output are written (the others keep a sentinel),
  and only the subset's viewgrams of a STIR input are read, one ``get_viewgram`` each, with no
  whole-data accessor (``as_array``, segments) ever called.
* Bad objects are refused with an error naming the argument; inputs are never modified.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import GeometryError, StirGpuError
from stirgpu.formats import ProjDataFromFile, ProjDataInMemory, StorageOrder, read_from_file
from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir
from stirgpu.projectors import ProjectorPair

pytestmark = pytest.mark.stir

BACK_TOL = 1e-5  # float32 summation order of back projections (module docstring)


# -- STIR objects ---------------------------------------------------------------------------
def stir_pdi(stir, scanner="ECAT 953", span=3, max_delta=4, views=48, tang=64, arc=False, offset=None, tang_range=None):
    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name(scanner), span, max_delta, views, tang, arc
    )
    if offset is not None:
        spdi.set_azimuthal_angle_offset(offset)
    if tang_range is not None:
        spdi.set_min_tangential_pos_num(tang_range[0])
        spdi.set_max_tangential_pos_num(tang_range[1])
    return spdi


def stir_image(stir, spdi, grid=None, seed=0):
    """STIR's default image for ``spdi`` or, with ``grid=(min_indices, max_indices, origin, voxel)``
    (z, y, x), one of that geometry; random non-negative values."""
    if grid is None:
        img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 1.0)
    else:
        lo, hi, origin, voxel = grid
        rng3 = stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi))
        img = stir.FloatVoxelsOnCartesianGrid(
            stir.ExamInfo(), rng3, stir.FloatCartesianCoordinate3D(*origin), stir.FloatCartesianCoordinate3D(*voxel)
        )
    shape = img.as_array().shape
    img.fill(np.random.default_rng(seed).random(shape, dtype=np.float32))
    return img


def viewgrams(stir_pd, pdi, segment, views=None):
    views = range(pdi.get_num_views()) if views is None else views
    return np.stack([stir_pd.get_viewgram(int(v), segment).as_array() for v in views])


def rel_max_diff(stir_pd, ours, pdi):
    """max |STIR - ours| / max |STIR| over all bins; ``ours`` a STIR ProjData or a stirgpu store."""
    diff = top = 0.0
    for s in pdi.segment_nums:
        theirs = viewgrams(stir_pd, pdi, s)
        mine = (
            viewgrams(ours, pdi, s) if hasattr(ours, "get_viewgram") else ours.read_views(s, range(pdi.get_num_views()))
        )
        diff, top = max(diff, float(np.abs(theirs - mine).max())), max(top, float(np.abs(theirs).max()))
    return diff / top


GEOMETRIES = {
    "noarc_mashed": dict(pdi={}, grid=None),
    "arccorr": dict(pdi=dict(arc=True, views=96, tang=80), grid=None),
    "view_offset": dict(pdi=dict(views=24, offset=0.3), grid=None),
    "tangential_range": dict(pdi=dict(tang_range=(-30, 20)), grid=None),
    "mmr_span11_tilted": dict(pdi=dict(scanner="Siemens mMR", span=11, max_delta=5, views=63, tang=96), grid=None),
    "own_image_grid": dict(pdi={}, grid=((0, -20, -22), (30, 19, 22), (1.5, -3.0, 4.0), (3.375, 3.1, 3.3))),
    "image_z_indices_from_2": dict(
        pdi=dict(arc=True), grid=((2, -16, -17), (32, 16, 16), (0.0, 2.0, -1.0), (3.375, 3.5, 3.4))
    ),
}


@pytest.fixture(scope="module")
def pairs(stir):
    """A CPU projector pair of each STIR geometry, with its STIR objects."""
    out = {}
    for name, g in GEOMETRIES.items():
        spdi = stir_pdi(stir, **g["pdi"])
        img = stir_image(stir, spdi, g["grid"])
        pp = ProjectorPair(backend="cpu")
        pp.set_up(spdi, img)
        out[name] = (spdi, img, pp)
    return out


@pytest.mark.parametrize("name", GEOMETRIES)
def test_forward_project_gives_stirs_numbers(stir, pairs, name):
    """forward_project(stir ProjDataInMemory, stir image) equals STIR's ForwardProjectorByBinParallelproj
    on the same objects, bit for bit; guards against any geometry (views, view offset, tangential
    range, image origin and indices) converted wrong."""
    spdi, img, pp = pairs[name]
    theirs = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fp = stir.ForwardProjectorByBinParallelproj()
    fp.set_up(spdi, img)
    fp.forward_project(theirs, img)
    ours = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    pp.forward_project(ours, img)
    assert rel_max_diff(theirs, ours, pp.get_proj_data_info()) == 0.0


@pytest.mark.parametrize("name", ["arccorr", "view_offset", "own_image_grid", "image_z_indices_from_2"])
def test_back_project_gives_stirs_numbers(stir, pairs, name):
    """back_project(stir image, stir ProjData) equals STIR's BackProjectorByBinParallelproj into an
    image of the same geometry (module docstring's tolerances), replacing the image's values;
    STIR's image starts at 0, because STIR 6.5's Parallelproj back projector adds to it."""
    spdi, img, pp = pairs[name]
    data = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    pp.forward_project(data, img)
    theirs, ours = img.get_empty_copy(), img.get_empty_copy()
    ours.fill(123.0)  # must be replaced, not added to
    bp = stir.BackProjectorByBinParallelproj()
    # STIR 6.5's constructor leaves this flag uninitialised (the forward projector's and the
    # pair's set it): without this line STIR restricts to the FOV or not at random
    bp.set_restrict_to_cylindrical_FOV(True)
    bp.set_up(spdi, theirs)
    bp.back_project(theirs, data)
    pp.back_project(ours, data)
    t, o = theirs.as_array(), ours.as_array()
    assert np.abs(t - o).max() / np.abs(t).max() < BACK_TOL


def test_set_up_with_stir_objects_converts_exactly(stir, pairs):
    """set_up(stir ProjDataInfo, stir image) fixes the geometry proj_data_info_from_stir and
    image_info_from_stir give; a view offset is kept (as the scanner's tilt) and the tangential
    range with it; guards against the set-up silently using a default geometry."""
    spdi, img, pp = pairs["view_offset"]
    pdi = pp.get_proj_data_info()
    assert pdi == proj_data_info_from_stir(spdi) and pp.get_image_info() == image_info_from_stir(img)
    assert pdi.get_azimuthal_angle_offset() == pytest.approx(0.3, abs=1e-7)
    spdi, _, pp = pairs["tangential_range"]
    p = pp.get_proj_data_info()
    assert (p.get_min_tangential_pos_num(), p.get_max_tangential_pos_num()) == (-30, 20)
    _, img, pp = pairs["own_image_grid"]
    info = pp.get_image_info()
    assert info.shape == (31, 40, 45) and info.min_indices == (0, -20, -22)
    assert info.origin == pytest.approx((1.5, -3.0, 4.0)) and info.voxel_size == pytest.approx((3.375, 3.1, 3.3))


# -- the store path: STIR's objects against stirgpu's own stores -------------------------------
@pytest.fixture(scope="module")
def small(stir, tmp_path_factory):
    """A geometry, a STIR image, and random data in a view-order Interfile file written by stirgpu."""
    spdi = stir_pdi(stir, views=24, tang=48)
    img = stir_image(stir, spdi)
    pp = ProjectorPair(backend="cpu")
    pp.set_up(spdi, img)
    pdi = pp.get_proj_data_info()
    path = tmp_path_factory.mktemp("stir_objects") / "data.hs"
    rng = np.random.default_rng(3)
    with ProjDataFromFile.create(path, pdi, StorageOrder.VIEW) as pd:
        for s in pdi.segment_nums:
            pd.write_views(rng.random((24, pdi.get_num_axial_poss(s), 48), dtype=np.float32), s, np.arange(24))
    return spdi, img, pp, path


def test_back_project_from_interfile_equals_own_disk_store(stir, small):
    """back_project(stir image, ProjData.read_from_file(...), 1, 3) equals stirgpu's back projection
    of its own disk store of the same file, bitwise (CPU: same plan and kernels), and leaves the
    STIR data unchanged; guards against viewgrams read in the wrong order or from other views."""
    _, img, pp, path = small
    stir_data = stir.ProjData.read_from_file(str(path))
    before = stir_data.as_array()
    out = img.get_empty_copy()
    pp.back_project(out, stir_data, 1, 3)
    with read_from_file(path) as own:
        ref = pp.back_project(None, own, 1, 3)
    assert np.array_equal(out.as_array(), ref)
    assert np.array_equal(stir_data.as_array(), before)


@pytest.mark.parametrize("kind", ["interfile", "in_memory"])
def test_forward_subset_writes_only_its_viewgrams(stir, small, tmp_path, kind):
    """forward_project(stir ProjData, stir image, 2, 3) writes subset 2's viewgrams with exactly the
    numbers stirgpu's own store gets, and no other: the other views keep their sentinel; the input
    image is unchanged (the FOV restriction works on a copy).  Guards against writing whole
    segments or views of other subsets."""
    spdi, img, pp, _ = small
    pdi = pp.get_proj_data_info()
    if kind == "interfile":
        mode = stir.ios.trunc | stir.ios.ios_base_in | stir.ios.out
        out = stir.ProjDataInterfile(stir.ExamInfo(), spdi, str(tmp_path / "out.hs"), mode)
    else:
        out = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    out.fill(-7.0)
    image_before = img.as_array()
    pp.forward_project(out, img, 2, 3)
    ref = ProjDataInMemory(pdi)
    pp.forward_project(ref, image_before)
    subset = pdi.subset_views(2, 3)
    others = np.setdiff1d(np.arange(24), subset)
    for s in pdi.segment_nums:
        assert np.array_equal(viewgrams(out, pdi, s, subset), ref.read_views(s, subset))
        assert np.all(viewgrams(out, pdi, s, others) == -7.0)
    assert np.array_equal(img.as_array(), image_before)


def test_back_project_accumulates_into_a_stir_image_on_request(stir, small):
    """back_project(stir image, ..., accumulate=True) adds to the image's values (the default
    replaces them): the same float32 addition of the same numbers, so bitwise equal."""
    _, img, pp, path = small
    data = stir.ProjData.read_from_file(str(path))
    out = img.get_empty_copy()
    out.fill(2.0)
    pp.back_project(out, data, 0, 3, accumulate=True)
    assert np.array_equal(out.as_array(), np.float32(2.0) + pp.back_project(None, data, 0, 3))


class CountingProjData:
    """A real STIR ProjData behind a proxy that counts viewgram calls and fails on any accessor that
    copies more than a viewgram."""

    WHOLE = ("as_array", "to_array", "get_segment_by_view", "get_segment_by_sinogram", "get_sinogram")

    def __init__(self, real):
        self._real = real
        self.viewgrams_read = []

    def get_viewgram(self, view, segment, *args):
        self.viewgrams_read.append((segment, view))
        return self._real.get_viewgram(view, segment, *args)

    def __getattr__(self, name):
        if name in self.WHOLE:
            raise AssertionError(f"the projector called {name}(): a copy of more than a viewgram")
        return getattr(self._real, name)


def test_subset_reads_only_its_viewgrams(stir, small):
    """A subset back projection from a STIR ProjData reads each of the subset's viewgrams once and
    nothing else (no whole-data copy: module docstring)."""
    _, img, pp, path = small
    pdi = pp.get_proj_data_info()
    data = CountingProjData(stir.ProjData.read_from_file(str(path)))
    pp.back_project(img.get_empty_copy(), data, 0, 3)
    want = sorted((s, int(v)) for s in pdi.segment_nums for v in pdi.subset_views(0, 3))
    assert sorted(data.viewgrams_read) == want


def test_automatic_set_up_from_stir_objects(stir, small):
    """A projector never set up takes its geometry from the STIR objects of its first call (as with
    stirgpu's stores), and gives the set-up projector's numbers exactly."""
    spdi, img, pp, _ = small
    fresh = ProjectorPair(backend="cpu")
    a, b = stir.ProjDataInMemory(stir.ExamInfo(), spdi), stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fresh.forward_project(a, img)
    pp.forward_project(b, img)
    assert fresh.get_proj_data_info() == pp.get_proj_data_info()
    assert np.array_equal(a.as_array(), b.as_array())


# -- refusals -------------------------------------------------------------------------------
def test_bad_objects_are_refused_by_argument_name(stir, small):
    """Objects that are not geometry, or STIR objects of another geometry, are refused with an error
    naming the argument (STIR's own projectors call error() on mismatched images)."""
    spdi, img, pp, _ = small
    with pytest.raises(GeometryError, match="proj_data_info"):
        ProjectorPair(backend="cpu").set_up(object(), img)
    with pytest.raises(GeometryError, match="image_info"):
        ProjectorPair(backend="cpu").set_up(spdi, object())
    other_pdi = stir_pdi(stir, views=48, tang=48)
    with pytest.raises(GeometryError, match="proj_data_out"):
        pp.forward_project(stir.ProjDataInMemory(stir.ExamInfo(), other_pdi), img)
    with pytest.raises(GeometryError, match="proj_data.*geometry differs"):
        pp.back_project(img.get_empty_copy(), stir.ProjDataInMemory(stir.ExamInfo(), other_pdi))
    other_img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 1.0, stir.FloatCartesianCoordinate3D(0, 0, 5))
    with pytest.raises(GeometryError, match="image"):
        pp.forward_project(stir.ProjDataInMemory(stir.ExamInfo(), spdi), other_img)
    with pytest.raises(GeometryError, match="image_out"):
        pp.back_project(other_img, stir.ProjDataInMemory(stir.ExamInfo(), spdi))


def test_unrepresentable_stir_geometry_is_refused(stir):
    """A STIR ProjDataInfo changed in a way stirgpu's geometry cannot express (another ring spacing,
    axial positions not starting at 0) is refused by name, never projected with a default."""
    spdi = stir_pdi(stir)
    spdi.set_ring_spacing(7.0)
    with pytest.raises(GeometryError, match="proj_data_info.*ring spacing"):
        ProjectorPair(backend="cpu").set_up(spdi, stir_image(stir, stir_pdi(stir)))
    spdi = stir_pdi(stir)
    spdi.set_min_axial_pos_num(1, 0)
    with pytest.raises(StirGpuError, match="proj_data_info"):
        proj_data_info_from_stir(spdi)


def test_read_only_stir_output_is_a_clear_error(stir, small):
    """Forward projecting into a STIR ProjData opened read-only (read_from_file's default) fails
    with an error naming the argument and saying how to open it, not STIR's bare stream error."""
    _, img, pp, path = small
    with pytest.raises(StirGpuError, match="proj_data_out.*open for writing"):
        pp.forward_project(stir.ProjData.read_from_file(str(path)), img, 0, 3)
