"""What a GPU lane keeps between calls, and the prepared image (what the engine's GPU lanes do).

A lane's kernels (:class:`stirgpu.kernels.backends.CudaLaneKernels`) keep from call to call the
geometry's transaxial tables, packed on the device once, and each chunk's
:class:`~stirgpu.kernels.joseph.JosephChunk` by the engine's kept tables of the chunk (a
``ChunkParts``, held weakly): :class:`~stirgpu.kernels.backends.CudaKept`.  Every call starts by
zeroing the accumulation image and making a transposed accumulator for walks along x, which
``finish`` folds in.  The input image is prepared once (:func:`stirgpu.kernels.cuda.images.
prepare_image`): the image and its zero-framed copies, which the forward walks read.

Identities: the framed copies are the image in a frame of zeros; forward projections through
the lane's kernels, of a prepared image or not, equal the CPU kernels' bit for bit; a back
projection accumulated over many small chunks through the lane's kernels equals the CPU's sum of
the chunks' back projections to float32 summation order (``BACK_RTOL`` of the maximum: a lost or
doubled chunk changes voxels by >= 1e-2 relative); the kept objects are the very ones of the
previous call, and go with the geometry, the chunk's tables, or ``release``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers import BACK_RTOL

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, kernel_geometry

pytestmark = pytest.mark.gpu


def _setup():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128)
    info = ImageInfo.default_for(pdi)
    rng = np.random.default_rng(5)
    image = rng.uniform(0.5, 2.0, size=info.shape).astype(np.float32)
    chunks = [(seg, list(range(v, v + 2))) for seg in pdi.segment_nums for v in (0, 31, 64, 94)]
    return pdi, info, image, chunks


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(np.abs(want))))


def test_framed_copies_are_the_image_in_a_zero_frame(cp):
    """prepare_image's copies: A (z, y, x) and B (z, x, y), each the image inside a one-voxel
    frame of zeros, exactly (an image of several of the copy kernel's 32 x 32 tiles, ny != nx);
    a prepared image carries the image's shape and dtype, is taken as it is by prepare_image,
    and its copies are a snapshot (prepare again after changing the image).  Guards the copy
    kernel's tiles, its transpose and its frame."""
    from stirgpu.kernels.cuda.images import PreparedImage, framed_shapes, prepare_image

    image = np.random.default_rng(1).uniform(0.5, 2.0, (5, 40, 70)).astype(np.float32)
    img = cp.asarray(image)
    prep = prepare_image(img)
    assert isinstance(prep, PreparedImage) and prepare_image(prep) is prep
    assert prep.shape == img.shape and prep.dtype == img.dtype and prep.device_id == img.device.id
    a, b = prep.framed
    assert (a.shape, b.shape) == framed_shapes(image.shape)
    want_a, want_b = np.pad(image, 1), np.pad(image.transpose(0, 2, 1), 1)
    np.testing.assert_array_equal(cp.asnumpy(a), want_a)
    np.testing.assert_array_equal(cp.asnumpy(b), want_b)
    img *= 2
    np.testing.assert_array_equal(cp.asnumpy(a), want_a)


@pytest.mark.parametrize("framed", [True, False], ids=["framed-copies", "too-large-for-copies"])
def test_prepared_image_forward_equals_plain_and_cpu(cp, monkeypatch, framed):
    """Forward projections of a prepared image over small chunks (two views of one segment)
    equal those of the plain image and the CPU kernels', bit for bit; an image too large for
    framed copies (``framed_copies_fit`` false) is prepared without them and projects the same."""
    from stirgpu.kernels.cuda import images
    from stirgpu.kernels.joseph.lors import stir_image_frame

    if not framed:
        monkeypatch.setattr(images, "framed_copies_fit", lambda shape: False)
    pdi, info, image, chunks = _setup()
    frame = stir_image_frame(info)
    img = cp.asarray(image)
    prepared = images.prepare_image(img)
    assert (prepared.framed is not None) == framed
    for seg, views in chunks:
        t = pdi.chunk_tables(seg, views)
        want = forward_chunk(t, pdi, image, frame)
        np.testing.assert_array_equal(cp.asnumpy(forward_chunk(t, pdi, prepared, frame)), want)
        np.testing.assert_array_equal(cp.asnumpy(forward_chunk(t, pdi, img, frame)), want)


def _call(cp, lane, geometry, image, tables, values):
    """One call of a lane's kernels as the engine makes it: start (into an accumulation image
    full of NaN, which start zeroes), every chunk's forward projection and back projection, and
    finish; returns (the forward projections, the accumulation image)."""
    accum = cp.full(image.shape, np.nan, cp.float32)
    kernels = lane.start(geometry, image, accum)
    forwards = []
    for t, v in zip(tables, values, strict=True):
        out = cp.full(v.shape, -1.0, cp.float32)
        kernels.forward(t, out)
        kernels.accumulate(t, v)
        forwards.append(cp.asnumpy(out))
    kernels.finish()
    return forwards, cp.asnumpy(accum)


def _cpu(cp, pdi, frame, image, tables, values):
    """The CPU kernels' forward projections of the chunks, and the sum of their back projections."""
    back = np.zeros(image.shape, np.float32)
    forwards = []
    for t, v in zip(tables, values, strict=True):
        forwards.append(forward_chunk(list(t), pdi, image, frame))
        back_chunk(list(t), pdi, cp.asnumpy(v), back, frame)
    return forwards, back


def test_lane_kernels_keep_tables_and_give_the_cpus_numbers(cp):
    """Two calls of a lane's kernels over multi-part chunks (two segments each, as the engine's
    kept ``ChunkParts``): forward projections equal the CPU's bit for bit, the back projection
    accumulated over the chunks (into an image full of NaN, zeroed by ``start``) the CPU's sum to
    summation order; a call with no chunk leaves the accumulation image zero.  The second call
    uses the very transaxial packing and JosephChunks of the first (packed and uploaded once);
    a chunk's goes when its tables go, all of them with another geometry object, and ``release``
    keeps nothing."""
    from stirgpu.execution.chunk_tables import ChunkParts
    from stirgpu.kernels.backends import CudaLaneKernels

    pdi, info, image, chunks = _setup()
    geometry = kernel_geometry(info, pdi)
    dev = cp.cuda.Device().id
    lane = CudaLaneKernels(dev)
    assert lane.kept.is_empty() and lane.kept_bytes() == 0
    rng = np.random.default_rng(4)
    tables = [ChunkParts(pdi.chunk_tables(seg, views) for seg in (-1, 1)) for _, views in chunks[:4]]
    values = [cp.asarray(rng.uniform(0, 1, sum(p.num_lors for p in t)).astype(np.float32)) for t in tables]

    prepared = lane.prepare_image(cp.asarray(image))
    _, empty = _call(cp, lane, geometry, prepared, [], [])
    assert np.all(empty == 0)
    fwd, back = _call(cp, lane, geometry, prepared, tables, values)
    want_fwd, want_back = _cpu(cp, pdi, geometry.frame, image, tables, values)
    for got, want in zip(fwd, want_fwd, strict=True):
        np.testing.assert_array_equal(got, want)
    _close(back, want_back)

    kept = lane.kept
    transaxial = kept.transaxial
    packing = transaxial.device_packings[dev]
    chunks_kept = {id(t): kept.chunks[t] for t in tables}
    assert len(kept.chunks) == len(tables)
    assert all(c.transaxial is transaxial and c.device(dev).X is packing.X for c in chunks_kept.values())
    assert lane.kept_bytes() == packing.X.nbytes + packing.H.nbytes > 0

    image2 = (2.0 * image + 1.0).astype(np.float32)
    fwd, back = _call(cp, lane, geometry, lane.prepare_image(cp.asarray(image2)), tables, values)
    want_fwd, want_back = _cpu(cp, pdi, geometry.frame, image2, tables, values)
    for got, want in zip(fwd, want_fwd, strict=True):
        np.testing.assert_array_equal(got, want)
    _close(back, want_back)
    assert lane.kept is kept and kept.transaxial is transaxial and transaxial.device_packings[dev] is packing
    assert all(kept.chunks[t] is chunks_kept[id(t)] for t in tables)

    tables.pop()
    gc.collect()
    assert len(kept.chunks) == len(tables)

    other = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128)  # equal, another object
    assert other == pdi and other is not pdi
    fwd, _ = _call(cp, lane, kernel_geometry(info, other), prepared, tables, values[: len(tables)])
    assert kept.transaxial is not transaxial and kept.transaxial.proj_data_info is other
    assert all(kept.chunks[t] is not chunks_kept[id(t)] for t in tables)
    np.testing.assert_array_equal(fwd[0], forward_chunk(list(tables[0]), pdi, image, geometry.frame))

    lane.release()
    assert lane.kept.is_empty() and lane.kept_bytes() == 0
