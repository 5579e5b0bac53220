"""TOF chunk projections (``docs/tof.md``): what STIR's Parallelproj projector computes for TOF
projection data (libparallelproj 2.0.7's TOF sinogram projector on STIR's endpoints).

:func:`forward_chunk_tof` and :func:`back_chunk_tof` take what
:func:`stirgpu.kernels.forward_chunk` takes (a chunk's ChunkTables or
:class:`~stirgpu.kernels.joseph.chunk.JosephChunk`, the projection-data geometry, the image and
its frame) and project every TOF bin of the chunk's LORs in one walk per LOR: on the CPU through
:mod:`.cpu`, CUDA arrays through :mod:`.cuda`.  A part's values are ``(num TOF bins, nv, na,
nt)``: TOF outermost, as STIR stores them; several parts' values follow one another, flat.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...arrays import import_cupy, on_cuda
from ...errors import GeometryError
from ..joseph.api import checked_frame, checked_image, checked_out
from ..joseph.chunk import JosephChunk, as_chunk

__all__ = ["forward_chunk_tof", "back_chunk_tof", "stir_tof_tables", "window_size", "N_SIGMAS"]

#: STIR's Parallelproj projector truncates the TOF kernel at 4 sigmas (its ``n_sigmas``)
N_SIGMAS = 4.0
#: libparallelproj's most TOF bins in one image plane's window (2.0.7 clamps wider ones to it)
MAX_NUM_TOF_WEIGHTS = 64


def stir_tof_tables(proj_data_info, rescale, timing_poss: Sequence[int] | None = None) -> tuple[np.ndarray, int, int]:
    """The TOF tables of :mod:`.cpu` as ``ParallelprojHelper`` makes them: ``(width,
    sigma, n_sigmas, c0)`` in STIR's units (``get_sampling_in_k(0) * rescale``,
    ``tof_delta_time_to_mm(resolution) / 2.355 * rescale``, 4, and the centre of the data's
    first bin, ``-(N - 1) / 2`` widths from the LOR's midpoint), the first of the chunk's bins
    (``timing_poss``, default all; consecutive, ascending) counted from the data's first, and
    their number."""
    if not proj_data_info.is_tof_data():
        raise GeometryError("TOF projection: the projection data are not TOF data")
    tof = proj_data_info.tof
    lo, hi = tof.min_pos, tof.max_pos
    poss = np.arange(lo, hi + 1) if timing_poss is None else np.asarray(list(timing_poss), dtype=np.int64)
    if poss.size == 0 or poss.min() < lo or poss.max() > hi or np.any(np.diff(poss) != 1):
        raise GeometryError(
            f"timing_poss: expected consecutive ascending positions in [{lo}, {hi}], got {poss.tolist()}"
        )
    r = np.float32(rescale)
    width = np.float32(np.float32(tof.sampling_in_k(0)) * r)
    sigma = np.float32(tof.sigma_mm() * np.float64(r))
    # bin j of the data (STIR's timing position j + min) is centred c0 + j widths from the midpoint
    c0 = -(tof.num_poss - 1) / 2
    return np.array([width, sigma, N_SIGMAS, c0], np.float32), int(poss[0] - lo), int(poss.size)


def window_size(tof) -> int:
    """An upper bound on the TOF bins one image plane touches, from a TOF table: the Gaussian
    window's ``ceil(2 n_sigmas sigma / width) + 3``, at most libparallelproj's 64
    (``MAX_NUM_TOF_WEIGHTS``: 2.0.7 clamps a wider window to the 64 bins around the plane's TOF
    coordinate); the CPU kernels size their buffers to it."""
    width, sigma, n_sigmas = (float(v) for v in tof[:3])
    return min(int(math.ceil(2 * n_sigmas * sigma / width)) + 3, MAX_NUM_TOF_WEIGHTS)


def forward_chunk_tof(tables, proj_data_info, image, frame, timing_poss=None, out=None, cancel=None):
    """STIR's TOF forward projection of ``image`` over the chunk's LORs and TOF bins
    (``timing_poss``, default all): ``(nb, nv, na, nt)`` float32 for one part, flat for several.
    ``cancel``: as for :func:`stirgpu.kernels.forward_chunk` (CPU only)."""
    chunk = as_chunk(tables, proj_data_info)
    checked_image("image", image)
    org, vs, rescale = checked_frame(frame)
    tof, first, nb = stir_tof_tables(proj_data_info, rescale, timing_poss)
    shape = (nb, *chunk.single_shape) if chunk.single_shape is not None else (nb * chunk.num_lors,)
    cuda = on_cuda(image)
    if out is None:
        out = import_cupy().empty(shape, np.float32) if cuda else np.empty(shape, np.float32)
    else:
        checked_out(out, nb * chunk.num_lors, shape, cuda)
    if cuda:
        from . import cuda as cuda_tof

        cp = import_cupy()
        image = cp.asarray(image)
        parts = chunk.device(image.device.id)
        flat_out = cp.asarray(out).reshape(-1)
        cuda_tof.forward(parts, image, org, vs, rescale, tof, first, nb, flat_out)
        return out
    from ..joseph.workers import lor_ranges
    from . import cpu as cpu_tof

    flat, o = out.reshape(-1), 0
    dims = np.array(image.shape, np.int64)
    nbuf = window_size(tof)
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        part = flat[o : o + nb * k]
        for lo, hi in lor_ranges(k, cancel):
            cpu_tof.forward_tof(t, tof, first, nb, nbuf, image.reshape(-1), dims, org, vs, rescale, part, lo, hi)
        o += nb * k
    return out


def back_chunk_tof(tables, proj_data_info, values, out_image, frame, timing_poss=None, cancel=None, along_x=None):
    """Add STIR's TOF back projection of ``values`` (shaped like :func:`forward_chunk_tof`'s
    result) into ``out_image``; returns ``out_image``.  ``cancel``: as for
    :func:`stirgpu.kernels.back_chunk` (CPU only); ``along_x``: as for
    :func:`~stirgpu.kernels.back_chunk` (GPU only)."""
    chunk: JosephChunk = as_chunk(tables, proj_data_info)
    checked_image("out_image", out_image, writable=True)
    org, vs, rescale = checked_frame(frame)
    tof, first, nb = stir_tof_tables(proj_data_info, rescale, timing_poss)
    if int(np.prod(values.shape)) != nb * chunk.num_lors or str(values.dtype) != "float32":
        raise GeometryError(
            f"values: expected {nb} x {chunk.num_lors} float32 values, got shape {values.shape} {values.dtype}"
        )
    if on_cuda(values) != on_cuda(out_image):
        raise GeometryError("values and out_image must both be on the host or both on one GPU")
    if on_cuda(out_image):
        from . import cuda as cuda_tof

        cp = import_cupy()
        image = cp.asarray(out_image)
        flat_values = cp.ascontiguousarray(cp.asarray(values)).reshape(-1)
        parts = chunk.device(image.device.id)
        cuda_tof.back(parts, flat_values, image, org, vs, rescale, tof, first, nb, along_x=along_x)
        return out_image
    from ..joseph.workers import back_project
    from . import cpu as cpu_tof

    flat, o = np.ascontiguousarray(values).reshape(-1), 0
    dims = np.array(out_image.shape, np.int64)
    target = out_image.reshape(-1)
    nbuf = window_size(tof)
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        if k:
            before, after = (t, tof, first, nb, nbuf, flat[o : o + nb * k]), (dims, org, vs, rescale)
            back_project(cpu_tof.back_tof, before, target, k, after, cancel=cancel)
        o += nb * k
    return out_image
