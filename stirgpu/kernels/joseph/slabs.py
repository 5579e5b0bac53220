"""The GPU back projection in axial slabs: where the image is larger than the GPU's L2 cache, a
chunk's back projection is several launches, each adding only into a slab of image planes along z
(``stir_clip_to_slab`` in ``cuda/joseph.cu``), so that the voxels its atomics update stay in the
L2 however oblique the LORs: a single launch's walks in flight span the axial extent of the
segment's LORs (170 planes, 140 MB, for a Quadra segment of ring difference 85).

Each slab launch runs, of each part, only the LORs that may reach its planes: in the kernels'
axial-major order the LORs of a range of axial positions are a range of threads (the directory's
last two fields).  The ranges come from a bound on the axial extent of each axial position's
LORs (:func:`axial_plane_ranges`), widened so they are never too short; inside the kernel each
corner is added in the slab of its own plane only, so every corner is added exactly once and
the result is the single launch's, up to the order of float32 additions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["SLAB_L2_SHARE", "SlabLaunch", "axial_plane_ranges", "slab_directories", "slab_planes"]

#: the share of the L2 cache a slab's planes of the image and of its transposed accumulator fill
SLAB_L2_SHARE = 0.5
# planes added on each side of an axial position's bound (the corners' +1, float rounding)
_PLANE_MARGIN = 2


class SlabLaunch(NamedTuple):
    """One slab launch: its planes ``[z_lo, z_hi)``, its directory's offset in the concatenated
    directories (int64 elements) and its blocks (0: no LOR reaches the slab)."""

    z_lo: int
    z_hi: int
    offset: int
    blocks: int


def slab_planes(image_shape, l2_bytes: int, share: float = SLAB_L2_SHARE) -> int | None:
    """Planes per slab of a back projection into an image of ``image_shape`` (z, y, x) on a GPU of
    ``l2_bytes`` of L2 cache: as many as fit ``share`` of it, counting a plane of the image and
    one of the transposed accumulator (walks along x add there); None (one launch over the whole
    image) where the image itself fits the L2."""
    nz, ny, nx = (int(n) for n in image_shape)
    plane_bytes = 4 * ny * nx
    if nz * plane_bytes <= l2_bytes:
        return None
    planes = max(1, int(share * l2_bytes // (2 * plane_bytes)))
    return None if planes >= nz else planes


def axial_plane_ranges(m, mt, l1, l2, hit, z_origin: float, z_voxel: float, rescale: float):
    """Per axial position of a part, the image planes ``[lo, hi]`` (along z, inclusive; may lie
    outside the image) that its LORs' corners may touch.  ``m`` (na,) and ``mt`` (nt,): the part's
    axial tables (a LOR's endpoints lie at z = m + mt (2 l - 1), l in [l1, l2]); ``l1``, ``l2``,
    ``hit``: the part's views' transaxial tables (nv, nt); ``z_origin`` and ``z_voxel``: the image's
    first plane centre and plane spacing, and ``rescale``, as the kernels take them."""
    mt = np.abs(np.asarray(mt, np.float64))[None, :]
    reach = mt * np.maximum(
        np.abs(2.0 * np.asarray(l1, np.float64) - 1.0), np.abs(2.0 * np.asarray(l2, np.float64) - 1.0)
    )
    extent = float(reach[np.asarray(hit, bool)].max(initial=0.0))
    m = np.asarray(m, np.float64)
    lo = ((m - extent) * rescale - z_origin) / z_voxel
    hi = ((m + extent) * rescale - z_origin) / z_voxel
    return np.floor(lo).astype(np.int64) - _PLANE_MARGIN, np.floor(hi).astype(np.int64) + _PLANE_MARGIN


def slab_directories(rows, views_tail, shapes, ranges, n0: int, planes: int, threads: int):
    """The directories of the slab launches of a chunk (``planes`` image planes each, ``n0`` in
    all), one after the other, and their :class:`SlabLaunch` es.  ``rows``: the chunk's directory
    rows (parts x fields, int64: ``cuda.pack_parts``), ``views_tail`` the directory's views after
    them, ``shapes`` the parts' (nv, na, nt) and ``ranges`` their :func:`axial_plane_ranges`.  A
    slab's directory is the chunk's with each part's first block and thread range set to the
    axial positions that reach the slab: those from the first whose upper bound reaches it to the
    last whose lower bound does (every one that reaches it, and those between)."""
    z_lo = np.arange(0, n0, planes, dtype=np.int64)
    z_hi = np.minimum(z_lo + planes, n0)
    slabs = np.repeat(rows[None], z_lo.size, axis=0)  # (slabs, parts, fields)
    blocks = np.zeros((z_lo.size, len(shapes)), np.int64)
    for k, ((nv, _, nt), (lo, hi)) in enumerate(zip(shapes, ranges, strict=True)):
        reach = (hi[None, :] >= z_lo[:, None]) & (lo[None, :] < z_hi[:, None])  # (slabs, na)
        any_ = reach.any(axis=1)
        first = np.where(any_, reach.argmax(axis=1), 0)
        end = np.where(any_, reach.shape[1] - reach[:, ::-1].argmax(axis=1), 0)
        slabs[:, k, 10], slabs[:, k, 11] = first * nv * nt, end * nv * nt
        blocks[:, k] = -(-(end - first) * nv * nt // threads)
    slabs[:, :, 5] = np.cumsum(blocks, axis=1) - blocks  # each part's first block in its slab
    tail = np.broadcast_to(np.asarray(views_tail, np.int64), (z_lo.size, len(views_tail)))
    directories = np.concatenate([slabs.reshape(z_lo.size, -1), tail], axis=1)
    size = directories.shape[1]
    launches = [
        SlabLaunch(int(lo), int(hi), k * size, int(b))
        for k, (lo, hi, b) in enumerate(zip(z_lo, z_hi, blocks.sum(axis=1), strict=True))
    ]
    return directories.reshape(-1), launches
