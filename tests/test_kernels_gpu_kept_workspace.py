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
