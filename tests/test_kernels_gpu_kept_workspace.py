"""Workspaces kept across chunks (what the streaming projectors do on a GPU).

A projector sweeping many small chunks (a subset's views, one segment at a time) keeps
the input image prepared for the tiled kernels (``prepare_image``) and the back
projection's accumulators (``prepare_back_accumulator`` + ``finish``) for the whole call,
so every chunk gets the tiled kernels.  The identity checked: the sum over chunks through
the kept workspace equals the sum of independent per-chunk calls (each of which decides
on its own, and for small chunks takes the one-LOR-per-thread kernels).  Both families
compute the same line integrals to float32 rounding; the accumulations differ only in
float32 summation order, so rtol 1e-5 of the maximum is far above rounding and far
below a lost or doubled chunk (which changes voxels by >= 1e-2 relative).
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, stir_scaled_geometry

pytestmark = pytest.mark.gpu


def _setup():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128)
    info = ImageInfo.default_for(pdi)
    g = stir_scaled_geometry(info)
    rng = np.random.default_rng(5)
    image = rng.uniform(0.5, 2.0, size=info.shape).astype(np.float32)
    chunks = [(seg, list(range(v, v + 2))) for seg in pdi.segment_nums for v in (0, 31, 64, 94)]
    return pdi, info, g, image, chunks


def test_prepared_image_forward_equals_plain(cp):
    from stirgpu.kernels.cuda_backend import PreparedImage, prepare_image

    pdi, info, g, image, chunks = _setup()
    img = cp.asarray(image)
    prepared = prepare_image(img)
    assert isinstance(prepared, PreparedImage)
    for seg, views in chunks:
        t = pdi.chunk_tables(seg, views)
        ref = cp.asnumpy(forward_chunk(t, img, g.origin, g.voxel_size, scale=g.scale))
        got = cp.asnumpy(forward_chunk(t, prepared, g.origin, g.voxel_size, scale=g.scale))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5 * float(ref.max()))


def test_back_accumulator_over_chunks_equals_plain(cp):
    from stirgpu.kernels.cuda_backend import BackAccumulator, prepare_back_accumulator

    pdi, info, g, _, chunks = _setup()
    rng = np.random.default_rng(9)
    ref = cp.zeros(info.shape, dtype=cp.float32)
    out = cp.full(info.shape, 3.0, dtype=cp.float32)  # accumulates into existing content
    acc = prepare_back_accumulator(out)
    assert isinstance(acc, BackAccumulator) and acc.a is not None
    for seg, views in chunks:
        t = pdi.chunk_tables(seg, views)
        vals = cp.asarray(rng.uniform(0, 1, size=t.shape).astype(np.float32))
        back_chunk(t, vals, ref, g.origin, g.voxel_size, scale=g.scale)
        assert back_chunk(t, vals, acc, g.origin, g.voxel_size, scale=g.scale) is acc
    acc.finish()
    ref_h = cp.asnumpy(ref) + 3.0
    np.testing.assert_allclose(cp.asnumpy(out), ref_h, rtol=0, atol=1e-5 * float(ref_h.max()))
    # finish() zeroed the accumulators: finishing again adds nothing
    before = cp.asnumpy(out)
    acc.finish()
    np.testing.assert_array_equal(cp.asnumpy(out), before)


def test_finish_without_reuse_releases_the_accumulators(cp):
    from stirgpu.kernels.cuda_backend import prepare_back_accumulator

    pdi, info, g, _, chunks = _setup()
    seg, views = chunks[0]
    t = pdi.chunk_tables(seg, views)
    vals = cp.ones(t.shape, dtype=cp.float32)
    ref = back_chunk(t, vals, cp.zeros(info.shape, dtype=cp.float32), g.origin, g.voxel_size, scale=g.scale)
    acc = prepare_back_accumulator(cp.zeros(info.shape, dtype=cp.float32))
    back_chunk(t, vals, acc, g.origin, g.voxel_size, scale=g.scale)
    acc.finish(reuse=False)
    assert acc.a is None and acc.b is None
    np.testing.assert_allclose(cp.asnumpy(acc.image), cp.asnumpy(ref), rtol=0, atol=1e-5 * float(ref.max()))


def _device_chunks(cp, pdi, chunks):
    """Multi-part chunks (two segments each) as DeviceTables, like the engine's."""
    from stirgpu.kernels.cuda_backend import upload_tables

    return [upload_tables([pdi.chunk_tables(seg, views) for seg in (-1, 1)]) for _, views in chunks[:4]]


@pytest.mark.parametrize("index64", [False, True])
def test_chunk_launcher_forward_is_forward_chunk(cp, index64):
    """The launcher's forward projections (straight through the driver, from its kept
    argument block) are forward_chunk's (cupy's launch), bit for bit, with either index type."""
    from stirgpu.kernels import cuda_backend as cb
    from stirgpu.kernels.cuda_backend import ChunkLauncher, KernelOptions, prepare_image

    pdi, info, g, image, chunks = _setup()
    options = KernelOptions(index64=index64)
    prepared = prepare_image(cp.asarray(image), options)
    launch = ChunkLauncher(prepared, g.origin, g.voxel_size, g.scale, options=options)
    assert launch.tiled and not launch.back
    assert launch.kernel_set_up.argument_block is not None  # this cupy has the driver launch: the path under test
    for dt in _device_chunks(cp, pdi, chunks):
        want = cb.forward_chunk(dt, prepared, g.origin, g.voxel_size, scale=g.scale, options=options)
        got = cp.full(dt.num_lors, -1.0, dtype=cp.float32)
        launch(dt, got)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))


def test_chunk_launcher_back_is_back_chunk(cp):
    """Back projections through the launcher equal back_chunk through the same kind of
    accumulator (summation order aside); the ``simple`` variant takes the checked path."""
    from stirgpu.kernels.cuda_backend import ChunkLauncher, KernelOptions, back_chunk, prepare_back_accumulator

    pdi, info, g, _, chunks = _setup()
    rng = np.random.default_rng(4)
    tables = _device_chunks(cp, pdi, chunks)
    values = [cp.asarray(rng.uniform(0, 1, dt.num_lors).astype(np.float32)) for dt in tables]
    results = []
    for options in (None, KernelOptions(variant="simple")):
        ref = prepare_back_accumulator(cp.zeros(info.shape, dtype=cp.float32), options)
        acc = prepare_back_accumulator(cp.zeros(info.shape, dtype=cp.float32), options)
        launch = ChunkLauncher(acc, g.origin, g.voxel_size, g.scale, options=options)
        assert launch.back and launch.tiled == (options is None)
        assert (launch.kernel_set_up.argument_block is not None) == launch.tiled
        for dt, v in zip(tables, values, strict=True):
            back_chunk(dt, v, ref, g.origin, g.voxel_size, scale=g.scale, options=options)
            launch(dt, v)
        ref.finish(options)
        acc.finish(options)
        want = cp.asnumpy(ref.image)
        np.testing.assert_allclose(cp.asnumpy(acc.image), want, rtol=0, atol=1e-5 * float(want.max()))
        results.append(want)
    np.testing.assert_allclose(results[1], results[0], rtol=0, atol=1e-4 * float(results[0].max()))


def test_chunk_launcher_refuses_values_that_do_not_fit(cp):
    from stirgpu.errors import StirGpuError
    from stirgpu.kernels.cuda_backend import ChunkLauncher, prepare_image

    pdi, info, g, image, chunks = _setup()
    launch = ChunkLauncher(prepare_image(cp.asarray(image)), g.origin, g.voxel_size, g.scale)
    dt = _device_chunks(cp, pdi, chunks)[0]
    for bad in (
        cp.zeros(dt.num_lors - 1, cp.float32),
        cp.zeros(dt.num_lors, cp.float64),
        cp.zeros(2 * dt.num_lors, cp.float32)[::2],
    ):
        with pytest.raises(StirGpuError, match="ChunkLauncher"):
            launch(dt, bad)
    with pytest.raises(StirGpuError, match="PreparedImage or a BackAccumulator"):
        ChunkLauncher(cp.asarray(image), g.origin, g.voxel_size)


def test_chunk_launcher_set_up_is_shared_where_it_fits(cp):
    """for_target shares a launcher's kernel set-up with another target of the same kind,
    device, shape and geometry (and launches the same numbers), and makes a new one when
    the geometry differs; without_target keeps no array."""
    from stirgpu.kernels.cuda_backend import ChunkLauncher, prepare_image

    pdi, info, g, image, chunks = _setup()
    first = ChunkLauncher(prepare_image(cp.asarray(image)), g.origin, g.voxel_size, g.scale)
    kept = first.without_target()
    assert kept.target is None
    other = prepare_image(cp.asarray(2 * image))
    twin = kept.for_target(other, g.origin, g.voxel_size, g.scale)
    assert twin.target is other and twin.kernel_set_up.kernel is first.kernel_set_up.kernel and kept.target is None
    assert twin.setup_id is first.setup_id and twin.kernel_set_up.argument_block is first.kernel_set_up.argument_block
    # twins share one argument block, written afresh by every launch: interleaved launches
    # of the two targets (and of chunks of different sizes) each project their own image
    tables = _device_chunks(cp, pdi, chunks)
    for dt in tables[:2]:
        got, got_first = cp.empty(dt.num_lors, cp.float32), cp.empty(dt.num_lors, cp.float32)
        twin(dt, got)
        first(dt, got_first)
        want = forward_chunk(dt, other, g.origin, g.voxel_size, scale=g.scale)
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(want))
        want_first = forward_chunk(dt, first.target, g.origin, g.voxel_size, scale=g.scale)
        np.testing.assert_array_equal(cp.asnumpy(got_first), cp.asnumpy(want_first))
    moved = kept.for_target(other, tuple(o + 1.0 for o in g.origin), g.voxel_size, g.scale)
    assert moved.kernel_set_up.grid_args != first.kernel_set_up.grid_args and moved.origin != first.origin
    assert moved.setup_id is not first.setup_id
    assert moved.kernel_set_up.argument_block is not first.kernel_set_up.argument_block


def test_back_accumulator_finish_adds_or_overwrites(cp):
    """finish() adds the accumulators into the image; finish(overwrite=True) replaces the
    image's values (it is not read: NaN there does not matter) -- the same numbers (to the
    float32 summation order of the accumulators' atomics)."""
    from stirgpu.kernels.cuda_backend import ChunkLauncher, prepare_back_accumulator

    pdi, info, g, _, chunks = _setup()
    rng = np.random.default_rng(5)
    tables = _device_chunks(cp, pdi, chunks)
    values = [cp.asarray(rng.uniform(0, 1, dt.num_lors).astype(np.float32)) for dt in tables]
    results = {}
    for start, overwrite in ((0.0, False), (3.0, False), (np.nan, True)):
        acc = prepare_back_accumulator(cp.full(info.shape, start, dtype=cp.float32))
        launch = ChunkLauncher(acc, g.origin, g.voxel_size, g.scale)
        for dt, v in zip(tables, values, strict=True):
            launch(dt, v)
        acc.finish(overwrite=overwrite)
        results[(start, overwrite)] = cp.asnumpy(acc.image)
    base = results[(0.0, False)]
    assert np.all(np.isfinite(base)) and base.max() > 0
    tol = 1e-5 * float(base.max())
    np.testing.assert_allclose(results[(np.nan, True)], base, rtol=0, atol=tol)
    np.testing.assert_allclose(results[(3.0, False)], base + 3.0, rtol=0, atol=tol + 1e-6)
