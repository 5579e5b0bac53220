"""The streaming projectors: same numbers whatever the chunk plan, lanes or memory budget;
equal to the kernels called on whole segments; adjoint; subsets touch only their views.

Every correctness test runs on the CPU backend (CI) and on CUDA where a GPU is present
(``backend`` fixture).  Forward projection computes each bin independently of the others,
so its results must be *bitwise* identical across plans.  Back projection sums
contributions of many bins per voxel; a different chunk plan or lane assignment changes the
float32 summation order, so those comparisons allow a few float32 ulps of the image maximum
(2e-6 relative).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    BACK_RTOL,
    all_views,
    assert_same_back,
    cuda_device_count,
    phantom,
    random_proj_data,
    same_data,
    small_geometry,
)

from stirgpu.errors import GeometryError, StirGpuError
from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk, StorageOrder, VoxelsOnCartesianGrid, read_from_file
from stirgpu.geometry import ImageInfo
from stirgpu.kernels import (
    apply_cylindrical_fov,
    back_chunk,
    cylindrical_fov_mask,
    forward_chunk,
    kernel_geometry,
)
from stirgpu.projectors import BackProjector, ForwardProjector, ProjectorPair


def projector(cls, backend, **kw):
    kw.setdefault("restrict_to_cylindrical_fov", False)
    p = cls(backend=backend, **kw)
    return p


@pytest.fixture
def geo():
    pdi, info = small_geometry()
    return pdi, info, phantom(info)


# --------------------------------------------------------------------------------------
# the engine's guardians: any plan, any number of lanes, any budget -> same numbers
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [
        dict(max_views_per_chunk=1),
        dict(max_views_per_chunk=5, num_slots=3),
        dict(host_memory_budget=80_000, gpu_memory_budget=300_000),  # a few views per chunk
        dict(num_slots=1, max_views_per_chunk=7),
    ],
)
def test_forward_is_bitwise_identical_for_any_plan(backend, geo, options):
    """Forward projection with 1 view per chunk, odd chunk sizes, a budget that forces tiny
    chunks, or a single slot equals the one-chunk run (all segments as parts of one chunk,
    one launch) bit for bit (each bin's line integral is computed independently of the
    chunking)."""
    pdi, info, img = geo
    ref = ProjDataInMemory(pdi)
    fp = projector(ForwardProjector, backend, devices=[0])
    fp.set_up(pdi, info)
    fp.forward_project(ref, img)
    assert [len(c.parts) for c in fp.last_plan.chunks] == [pdi.get_num_segments()]
    out = ProjDataInMemory(pdi)
    fp2 = projector(ForwardProjector, backend, devices=[0], **options)
    fp2.set_up(pdi, info)
    fp2.forward_project(out, img)
    assert len(fp2.last_plan.chunks) > pdi.get_num_segments()
    assert same_data(ref, out, pdi)


@pytest.mark.parametrize(
    "options", [dict(max_views_per_chunk=1), dict(host_memory_budget=150_000, gpu_memory_budget=300_000)]
)
def test_back_projection_independent_of_plan(backend, geo, options):
    """Back projection of the same data with another chunk plan differs only by float32
    summation order."""
    pdi, info, _ = geo
    data = random_proj_data(pdi)
    bp = projector(BackProjector, backend, devices=[0])
    bp.set_up(pdi, info)
    ref = bp.back_project(None, data)
    bp2 = projector(BackProjector, backend, devices=[0], **options)
    bp2.set_up(pdi, info)
    got = bp2.back_project(None, data)
    assert len(bp2.last_plan.chunks) > pdi.get_num_segments()
    np.testing.assert_allclose(got, ref, rtol=0, atol=BACK_RTOL * ref.max())


def _lanes_case(backend, geo, many):
    pdi, info, img = geo
    data = random_proj_data(pdi)
    results = []
    for devices in ([0], many):
        pp = projector(ProjectorPair, backend, devices=devices, max_views_per_chunk=2)
        pp.set_up(pdi, info)
        out = ProjDataInMemory(pdi)
        pp.forward_project(out, img)
        results.append((out, pp.back_project(None, data), pp.last_stats))
    (f1, b1, _), (fn, bn, stats) = results
    assert same_data(f1, fn, pdi)
    np.testing.assert_allclose(bn, b1, rtol=0, atol=BACK_RTOL * b1.max())
    assert len(stats.lanes) == len(many)
    assert sum(stats.chunks_per_lane.values()) == stats.chunks


def test_one_versus_three_cpu_workers(geo):
    """1 CPU worker and 3 CPU workers give bitwise equal forward and (to summation order)
    equal back projections; every chunk is done exactly once."""
    _lanes_case("cpu", geo, [0, 1, 2])


def test_cpu_back_projection_reproducible_with_several_workers(geo):
    """Several CPU workers take the chunks round-robin (they share one compute lock, so there
    is nothing to balance): repeated back projections sum the same chunks in the same order
    and are bitwise equal run to run -- STIR users rely on reproducible reconstructions.
    Small chunks make many of them, so a dynamic assignment would differ between runs."""
    pdi, info, _ = geo
    data = random_proj_data(pdi)
    bp = projector(BackProjector, "cpu", devices=[0, 1, 2], max_views_per_chunk=1)
    bp.set_up(pdi, info)
    first = bp.back_project(None, data)
    for _ in range(3):
        np.testing.assert_array_equal(bp.back_project(None, data), first)


@pytest.mark.multi_gpu
def test_one_versus_two_gpus(geo):
    """1 GPU and 2 GPUs give bitwise equal forward and (to summation order) equal back
    projections."""
    _lanes_case("cuda", geo, [0, 1])


# --------------------------------------------------------------------------------------
# equal to the kernels, adjoint, units, FOV
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("units", ["stir", "mm"])
def test_projectors_equal_direct_kernel_calls(backend, geo, units):
    """The streamed projections equal the chunk kernels (forward_chunk / back_chunk) called on
    whole segments (all views at once) with the projector's frame (``kernel_geometry`` of its
    units): forward bitwise, back to float32 summation order.  The kernels are called on the
    host (numpy); on CUDA the comparison also checks CPU-vs-GPU agreement: forward bit for bit
    (the same float32 operations), back to atomics' summation order (1e-5 of the maximum).
    Guards against the streaming engine projecting with another frame, other LORs or other
    views than the kernels it schedules."""
    pdi, info, img = geo
    g = kernel_geometry(info, pdi, units)
    pp = projector(ProjectorPair, backend, units=units)
    pp.set_up(pdi, info)
    out = ProjDataInMemory(pdi)
    pp.forward_project(out, img)
    data = random_proj_data(pdi)
    back = pp.back_project(None, data)
    ref_back = np.zeros(info.shape, np.float32)
    for s in pdi.segment_nums:
        t = pdi.chunk_tables(s)
        ref = forward_chunk(t, pdi, img, g.frame)
        back_chunk(t, pdi, all_views(data, s), ref_back, g.frame)
        assert np.array_equal(all_views(out, s), ref)
    np.testing.assert_allclose(back, ref_back, rtol=0, atol=(BACK_RTOL if backend == "cpu" else 1e-5) * ref_back.max())


def test_pair_is_adjoint(backend, geo):
    """<A x, y> == <x, B y> for random x, y, with the FOV restriction on (it is part of both
    operators); float32 sums over ~10^5 bins give ~1e-6 relative error."""
    pdi, info, _ = geo
    pp = ProjectorPair(backend=backend)
    pp.set_up(pdi, info)
    assert pp.adjointness_test(seed=3) < 1e-5


def test_units_mm_are_stir_units_times_vx(geo):
    """units='mm' gives line integrals in mm: STIR's x-voxel units times vx, forward and back, to
    float32 rounding.  Both run the same float32 kernels, mm on the unscaled frame, STIR's units
    on the frame and LOR endpoints times 1/vx (rounded to float32), so interpolation weights and
    step lengths differ in their last bits: measured 1.1e-6 (forward) and 3.4e-6 (back) of the
    maximum here, bar 1e-5 (back projections into larger images add more such differences per
    voxel: 1.3e-5 measured on an mMR segment with STIR's default image).  Guards against the mm
    frame losing a factor (vx = 5 here), its origin or voxel size left in x-voxel units, or the
    units not reaching the back projection."""
    pdi, info, img = geo
    data = random_proj_data(pdi)
    fwd, back = {}, {}
    for units in ("stir", "mm"):
        pp = projector(ProjectorPair, "cpu", units=units)
        pp.set_up(pdi, info)
        out = ProjDataInMemory(pdi)
        pp.forward_project(out, img)
        fwd[units] = np.concatenate([all_views(out, s).ravel() for s in pdi.segment_nums]).astype(np.float64)
        back[units] = np.asarray(pp.back_project(None, data), np.float64)
    vx = info.voxel_size[2]
    assert vx == 5.0
    for got in (fwd, back):
        want = got["stir"] * vx
        assert np.abs(got["mm"] - want).max() <= 1e-5 * want.max()


def test_cylindrical_fov_restriction(backend, geo):
    """With restrict_to_cylindrical_fov (STIR's default) forward projection sees the image
    zeroed outside STIR's cylinder (the caller's image untouched) and back projections are zero
    outside it."""
    pdi, info, img = geo
    before = img.copy()
    mask = cylindrical_fov_mask(info)
    assert 0 < mask.sum() < mask.size
    on = ProjectorPair(backend=backend, restrict_to_cylindrical_fov=True)
    on.set_up(pdi, info)
    off = projector(ProjectorPair, backend)
    off.set_up(pdi, info)
    a, b = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
    on.forward_project(a, img)
    off.forward_project(b, apply_cylindrical_fov(img, mask))
    assert np.array_equal(img, before)
    assert same_data(a, b, pdi)
    back = on.back_project(None, a)
    assert np.all(back[:, ~mask] == 0) and back[:, mask].max() > 0


# --------------------------------------------------------------------------------------
# subsets, segments, storage orders, disk
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("order", [StorageOrder.VIEW, StorageOrder.SINOGRAM])
def test_subset_forward_into_disk_file_touches_only_its_views(backend, geo, tmp_path, order):
    """Forward projecting subset 2 of 5 into an existing disk file (opened 'r+') changes exactly
    the bytes of that subset's views, in both storage orders; the rest of the file keeps its
    previous (random) bytes."""
    pdi, info, img = geo
    filler = random_proj_data(pdi, seed=7, low=5.0)
    path = tmp_path / "out.hs"
    ProjDataOnDisk.create(path, pdi, storage_order=order, fill=filler).close()
    before = path.with_suffix(".s").read_bytes()
    fp = projector(ForwardProjector, backend, max_views_per_chunk=2)
    fp.set_up(pdi, info)
    with read_from_file(path, "r+") as store:
        fp.forward_project(store, img, subset_num=2, num_subsets=5)
    after = path.with_suffix(".s").read_bytes()
    # which bytes may change: those of subset views, located via a memory model of the file
    views = pdi.subset_views(2, 5)
    expected = ProjDataInMemory(pdi, fill=filler)
    full = ProjDataInMemory(pdi)
    ref_fp = projector(ForwardProjector, backend)
    ref_fp.set_up(pdi, info)
    ref_fp.forward_project(full, img)
    for s in pdi.segment_nums:
        expected.write_views(full.read_views(s, views), s, views)
    exp_path = tmp_path / "expected.hs"
    ProjDataOnDisk.create(exp_path, pdi, storage_order=order, fill=expected).close()
    assert after == exp_path.with_suffix(".s").read_bytes()
    changed = np.frombuffer(after, np.uint8) != np.frombuffer(before, np.uint8)
    assert changed.any()
    # nothing outside the subset changed: compare the non-subset views directly
    with read_from_file(path) as got:
        others = np.setdiff1d(np.arange(pdi.get_num_views()), views)
        for s in pdi.segment_nums:
            assert np.array_equal(got.read_views(s, others), filler.read_views(s, others))


def test_subset_views_only_and_chunks_follow_subset(backend, geo):
    """A subset projection writes only its views (others stay 0), and its plan holds exactly
    that subset's views, so the work is 1/num_subsets of the full projection."""
    pdi, info, img = geo
    fp = projector(ForwardProjector, backend)
    fp.set_up(pdi, info)
    out = ProjDataInMemory(pdi)
    fp.forward_project(out, img, subset_num=1, num_subsets=4)
    views = pdi.subset_views(1, 4)
    planned = sorted({v for c in fp.last_plan.chunks for _, v in c.viewgrams()})
    assert planned == views.tolist()
    assert fp.last_stats.bins == pdi.total_num_bins // 4
    for s in pdi.segment_nums:
        a = all_views(out, s)
        assert np.all(a[np.setdiff1d(np.arange(24), views)] == 0)
        assert np.all(a[views].max(axis=(1, 2)) > 0)


def test_max_segment_num_to_process(geo):
    """max_segment_num_to_process=1 projects segments -1..1 only; segments +-2 of the output are
    not touched, and back projection ignores them."""
    pdi, info, img = geo
    fp = projector(ForwardProjector, "cpu", max_segment_num_to_process=1)
    fp.set_up(pdi, info)
    out = random_proj_data(pdi, seed=4)
    keep = {s: all_views(out, s) for s in (-2, 2)}
    fp.forward_project(out, img)
    assert fp.segments_to_process() == (-1, 0, 1)
    for s in (-2, 2):
        assert np.array_equal(all_views(out, s), keep[s])
    data = random_proj_data(pdi, seed=5)
    bp = projector(BackProjector, "cpu", max_segment_num_to_process=1)
    bp.set_up(pdi, info)
    zeroed = ProjDataInMemory(pdi, fill=data)
    for s in (-2, 2):
        zeroed.write_views(np.zeros_like(all_views(data, s)), s, range(24))
    full = projector(BackProjector, "cpu")
    full.set_up(pdi, info)
    np.testing.assert_allclose(
        bp.back_project(None, data),
        full.back_project(None, zeroed),
        rtol=0,
        atol=BACK_RTOL * full.back_project(None, zeroed).max(),
    )


def test_both_storage_orders_give_same_back_projection(backend, geo, tmp_path):
    """The same data stored in view order and in sinogram order on disk back-project to the
    same image (identical plans: bitwise on the CPU, to atomics' summation order on CUDA)."""
    pdi, info, _ = geo
    data = random_proj_data(pdi, seed=8)
    res = []
    for order in (StorageOrder.VIEW, StorageOrder.SINOGRAM):
        p = tmp_path / f"{order.name}.hs"
        ProjDataOnDisk.create(p, pdi, storage_order=order, fill=data).close()
        bp = projector(BackProjector, backend, devices=[0], max_views_per_chunk=3)
        bp.set_up(pdi, info)
        with read_from_file(p) as store:
            res.append(bp.back_project(None, store))
    assert_same_back(res[0], res[1], backend)


# --------------------------------------------------------------------------------------
# images in and out, the cached input
# --------------------------------------------------------------------------------------
def test_images_in_and_out(geo):
    """stirgpu images work as input (live array) and output (written in place); accumulate adds;
    a wrong image shape is refused.  One CPU worker: repeated back projections sum in the same
    order, so they compare bitwise."""
    pdi, info, img = geo
    pp = projector(ProjectorPair, "cpu", devices=[0])
    pp.set_up(pdi, info)
    a, b = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
    pp.forward_project(a, img)
    pp.forward_project(b, VoxelsOnCartesianGrid(info, fill=img))
    assert same_data(a, b, pdi)
    out = VoxelsOnCartesianGrid(info, fill=1.0)
    pp.back_project(out, a)
    ref = pp.back_project(None, a)
    assert np.array_equal(out.array, ref)
    arr = np.ones(info.shape, np.float32)
    pp.back_project(arr, a, accumulate=True)
    np.testing.assert_allclose(arr, ref + 1, rtol=1e-6)
    with pytest.raises(GeometryError, match="shape"):
        pp.forward_project(a, np.zeros((3, 4, 5), np.float32))


def test_auto_set_up_from_stirgpu_objects(geo):
    """Without set_up, a stirgpu store and a stirgpu image give the geometry; a bare array
    without set_up is an error that says what to do."""
    pdi, info, img = geo
    fp = projector(ForwardProjector, "cpu")
    out = ProjDataInMemory(pdi)
    fp.forward_project(out, VoxelsOnCartesianGrid(info, fill=img))
    assert fp.get_image_info() == info
    with pytest.raises(StirGpuError, match="set_up"):
        projector(ForwardProjector, "cpu").forward_project(ProjDataInMemory(pdi), img)


def test_set_input_is_reused_until_replaced(geo):
    """set_input uploads once; forward_project(image=None) uses that upload even if the caller
    changes the array in place afterwards (documented: only set_input or image= re-upload);
    passing image= uploads the new values."""
    pdi, info, img = geo
    fp = projector(ForwardProjector, "cpu")
    fp.set_up(pdi, info)
    with pytest.raises(StirGpuError, match="set_input"):
        fp.forward_project(ProjDataInMemory(pdi))
    x = img.copy()
    fp.set_input(x)
    a = ProjDataInMemory(pdi)
    fp.forward_project(a)
    x *= 2
    b = ProjDataInMemory(pdi)
    fp.forward_project(b)
    assert same_data(a, b, pdi)
    c = ProjDataInMemory(pdi)
    fp.forward_project(c, x)
    np.testing.assert_allclose(all_views(c, 0), 2 * all_views(a, 0), rtol=1e-6)


def test_geometry_mismatch_is_refused(geo):
    """Projection data of another geometry are refused before any work."""
    pdi, info, img = geo
    fp = projector(ForwardProjector, "cpu")
    fp.set_up(pdi, info)
    other = ProjDataInMemory(pdi.replace(num_views=48))
    with pytest.raises(GeometryError, match="geometry differs"):
        fp.forward_project(other, img)


def test_options_are_validated():
    """Bad constructor options are StirGpuErrors naming the option."""
    with pytest.raises(StirGpuError, match="units"):
        ForwardProjector(units="cm")
    with pytest.raises(StirGpuError, match="backend"):
        ForwardProjector(backend="tpu")
    with pytest.raises(StirGpuError, match="max_views_per_chunk"):
        ForwardProjector(max_views_per_chunk=0)


def test_cpu_only_machine_refuses_cuda():
    """Asking for CUDA where cupy sees no GPU is a DeviceError at set-up, not a crash."""
    if cuda_device_count() > 0:
        pytest.skip("this machine has a GPU")
    pdi, info = small_geometry()
    with pytest.raises(StirGpuError, match="CUDA|cupy"):
        ForwardProjector(backend="cuda").set_up(pdi, info)


# --------------------------------------------------------------------------------------
# device-resident images (CUDA only)
# --------------------------------------------------------------------------------------
def _cupy_round_trip(devices, out_device):
    import cupy

    pdi, info = small_geometry()
    img = phantom(info)
    data = random_proj_data(pdi)
    pp = ProjectorPair(backend="cuda", devices=devices, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    ref_f, got_f = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
    pp.forward_project(ref_f, img)
    with cupy.cuda.Device(out_device):
        dimg = cupy.asarray(img)
        out = cupy.full(info.shape, 7.0, dtype=cupy.float32)
    pp.forward_project(got_f, dimg)
    assert same_data(ref_f, got_f, pdi)
    ref_b = pp.back_project(None, data)
    res = pp.back_project(out, data)
    assert res is out and int(out.device.id) == out_device
    np.testing.assert_allclose(cupy.asnumpy(out), ref_b, rtol=0, atol=BACK_RTOL * ref_b.max())
    ratio = pp.forward_back_ratio(dimg, data, out_image=out)
    np.testing.assert_allclose(
        cupy.asnumpy(ratio), pp.forward_back_ratio(img, data), rtol=0, atol=BACK_RTOL * float(cupy.asnumpy(ratio).max())
    )


@pytest.mark.gpu
def test_cupy_images_in_and_out():
    """A cupy input image is used on its GPU (no host copy) and a cupy output image receives the
    back projection reduced on the GPU; numbers equal the numpy path (forward bitwise)."""
    _cupy_round_trip([0], 0)


@pytest.mark.multi_gpu
def test_cupy_output_on_second_gpu():
    """With two GPUs and the output on GPU 1, lanes' images are reduced on GPU 1 (peer copies)
    and the input image on GPU 1 is copied to GPU 0 device-to-device."""
    _cupy_round_trip([0, 1], 1)


def test_explicit_views_project_exactly_those_views():
    """views= (the STIR plugin's batches): the views given and nothing else, with the numbers
    of the subset call that covers them."""
    import numpy as np
    import pytest

    from stirgpu.errors import GeometryError, StirGpuError
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.formats.testing import small_proj_data_info
    from stirgpu.projectors import ProjectorPair

    pdi = small_proj_data_info()
    info = ImageInfo((9, 16, 16), (4.0, 4.0, 4.0), (0.0, 0.0, 0.0), (0, -8, -8))
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    image = np.random.default_rng(1).random(info.shape, dtype=np.float32)
    by_subset, by_views = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
    pp.forward_project(by_subset, image, subset_num=1, num_subsets=4)
    pp.forward_project(by_views, image, views=[1, 5, 9])
    for s in pdi.segment_nums:
        assert np.array_equal(by_views.get_segment_by_view(s), by_subset.get_segment_by_view(s))
    back = pp.back_project(None, by_subset, views=[5])
    only5 = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        only5.write_views(by_subset.read_views(s, [5]), s, [5])
    assert np.allclose(back, pp.back_project(None, only5), rtol=1e-6, atol=1e-6 * float(np.abs(back).max()))
    for bad, err in (([5, 1], GeometryError), ([], GeometryError), ([12], GeometryError)):
        with pytest.raises(err):
            pp.forward_project(ProjDataInMemory(pdi), image, views=bad)
    with pytest.raises(StirGpuError, match="not both"):
        pp.forward_project(ProjDataInMemory(pdi), image, subset_num=1, num_subsets=4, views=[1])
