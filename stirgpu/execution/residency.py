"""What stays on the devices between calls: the input image (uploaded, masked and prepared
once per image), each lane's kept workspaces, and the way an accumulated image comes back
(reduced peer to peer on one GPU, downloaded through the pinned image buffer).

* **Upload** (:meth:`Residency.set_image`): a numpy image goes up in z slabs, each copied into
  one pinned buffer by the I/O threads while the previous slab's DMA runs; the call returns
  once the host copy is done, and each lane's compute stream waits for its upload (CUDA
  events), so the last DMAs overlap the next call's start.  A numpy image whose own memory is
  page-locked (by the engine's store policy, from its second upload) goes up by DMA straight
  from it instead, and the call waits for that DMA (a third of the staged path's time for
  the mMR's 41 MB image: ``docs/execution.md``).  A cupy image is copied device to
  device (peer to peer for other GPUs).  CPU lanes share one host copy.
* **Prepare**: the tiled forward kernels' layouts of each lane's image, made once per image
  (on the compute stream, after the upload) rather than once per call.
* **Accumulation images**: per lane, the engine's own accumulation image, kept from call to
  call (what the kernels keep belongs to the lane's kernel backend, ``lane.kernels``).
* **Download / reduce**: lanes' accumulated images summed on one GPU in lane order
  (:func:`reduce_on_device`), a numpy copy of a device image through the pinned image buffer
  and a host copy split over the I/O threads (:meth:`Residency.download`).

Imports: numpy, :mod:`.hostio`, ``stirgpu.kernels`` (``apply_cylindrical_fov``; the layouts are
made by each lane's ``kernels.prepare_image``); cupy/cupyx only on GPU paths.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .hostio import DaemonPool, parallel_copy

__all__ = ["Residency", "reduce_on_device"]

#: z slabs of a pipelined image upload (measured on an H200 host: 1, 2 and 4 about equal, 8 slower)
UPLOAD_SLABS = 2


class Residency:
    """The device-resident state of an engine of ``lanes`` lanes on ``backend``."""

    def __init__(self, backend: str, lanes: int):
        self.backend = backend
        self.n_lanes = int(lanes)
        self._images: dict[int, Any] = {}  # per lane: the input image
        self._prepared: dict[int, Any] = {}  # per GPU lane: the input image in the tiled kernels' layouts
        # per GPU lane: the engine's own accumulation image, kept from call to call
        self._accumulation: dict[int, Any] = {}
        self._staging: np.ndarray | None = None  # pinned copy of the input image (GPU)
        self._uploads: list = []  # CUDA events: the last upload's DMAs out of _staging

    def clear(self) -> None:
        """Drop every image and workspace (GPU memory returns to cupy's pool); waits for a
        pending upload first."""
        self.wait_uploads()
        self._images.clear()
        self._prepared.clear()
        self._accumulation.clear()
        self._staging = None

    def drop_accumulation(self) -> None:
        """Drop every lane's kept accumulation image (not the input images): a call that ran out
        of memory is retried with what it needs made again, for its smaller chunks."""
        self._accumulation.clear()

    def has_image(self) -> bool:
        return len(self._images) == self.n_lanes

    def input_image(self, k: int):
        """Lane ``k``'s input image as the kernels take it: its prepared layouts where made,
        else the image itself (None when no image was set)."""
        return self._prepared.get(k, self._images.get(k))

    def kept_accumulation(self, k: int):
        """Lane ``k``'s kept accumulation image (None before its first call that kept one)."""
        return self._accumulation.get(k)

    def keep_accumulation(self, k: int, image) -> None:
        """Keep ``image`` as lane ``k``'s accumulation image for the next calls."""
        self._accumulation[k] = image

    def device_bytes(self, k: int) -> int:
        """Device memory held for lane ``k``: its image, prepared layouts and accumulation image
        (the lane's kernels count their own: ``lane.kernels.kept_bytes()``)."""
        img = self._images.get(k)
        prep = self._prepared.get(k)
        layouts = sum(int(x.nbytes) for x in (prep.a, prep.b) if x is not None) if prep is not None else 0
        acc = self._accumulation.get(k)
        return layouts + (int(acc.nbytes) if acc is not None else 0) + (int(img.nbytes) if img is not None else 0)

    # -- the input image -----------------------------------------------------------------
    def set_image(
        self,
        image,
        fov_mask: np.ndarray | None,
        lanes: Sequence = (),
        io_pool: DaemonPool | None = None,
        in_place: bool = False,
    ) -> int:
        """Put ``image`` on every lane (see :meth:`stirgpu.execution.Engine.set_image`); returns
        the bytes uploaded.  ``lanes`` (the GPU lanes) and ``io_pool`` are used on GPUs only;
        ``in_place``: a numpy image's own memory is page-locked (C-contiguous float32), so it
        goes up by DMA straight from it."""
        from ..kernels import apply_cylindrical_fov

        uploaded = 0
        self.wait_uploads()  # the lanes' images may still receive the last upload's DMAs
        if self.backend == "cpu":
            host = self._host_copy(image)
            if fov_mask is not None:
                apply_cylindrical_fov(host, fov_mask, out=host)
            for k in range(self.n_lanes):
                self._images[k] = host  # CPU lanes share one read-only copy
        elif isinstance(image, np.ndarray):
            uploaded = self._upload_host_image(lanes, image, fov_mask, io_pool, in_place)
        else:
            for k, lane in enumerate(lanes):
                dst = lane.upload_image(image, self._images.get(k), pinned=True)
                if fov_mask is not None:
                    with lane.device:
                        apply_cylindrical_fov(dst, fov_mask, out=dst)
                        lane.device.synchronize()
                self._images[k] = dst
                uploaded += int(dst.nbytes)
        if self.backend == "cuda":
            self._prepare_images(lanes)
        return uploaded

    def _host_copy(self, image) -> np.ndarray:
        """The CPU lanes' copy of ``image`` (float32, C order), written into the last image's
        copy when the shapes match: no call runs meanwhile, and a fresh image-sized array
        costs a page fault per page on every upload (a forward projection, an OSEM
        subiteration).  If the copy fails the old image is dropped, never left half
        overwritten."""
        src = np.asarray(image)
        host = self._images.get(0)
        if not isinstance(host, np.ndarray) or host.shape != src.shape:
            return np.array(src, dtype=np.float32, copy=True, order="C")
        try:
            np.copyto(host, src, casting="unsafe")
        except BaseException:
            self._images.clear()
            raise
        return host

    def _prepare_images(self, lanes: Sequence) -> None:
        """The kernels' layouts of each lane's image (``lane.kernels.prepare_image``: the tiled
        forward kernels' padded copies), made once per image (on the compute stream, after the
        upload) rather than once per call: repeated projections of one image -- a subset after
        another -- skip the copies."""
        self._prepared.clear()  # the old layouts go back to the pool before the new ones are made
        for k, lane in enumerate(lanes):
            with lane.device, lane.s_compute:
                self._prepared[k] = lane.kernels.prepare_image(self._images[k])

    def _pinned_image_buffer(self, shape):
        """The pinned image buffer, of ``shape`` (made again for another shape)."""
        import cupyx

        if self._staging is None or self._staging.shape != shape:
            self._staging = None
            self._staging = cupyx.empty_pinned(shape, dtype=np.float32)
        return self._staging

    def _upload_host_image(
        self, lanes: Sequence, image: np.ndarray, fov_mask, io_pool: DaemonPool | None, in_place: bool
    ) -> int:
        from ..kernels import apply_cylindrical_fov

        dsts = []
        for k, lane in enumerate(lanes):
            dst = self._images.get(k)
            if dst is None or tuple(dst.shape) != tuple(image.shape):
                with lane.device:  # no memset: the copy-in stream does not wait for other streams
                    dst = lane.cp.empty(image.shape, dtype=lane.cp.float32)
            dsts.append(dst)
            with lane.device:  # the last image's FOV masking and layouts (compute stream) read it first
                lane.s_in.wait_event(lane.record(lane.s_compute))
        if in_place:
            for lane, dst in zip(lanes, dsts, strict=True):
                with lane.device:
                    lane.to_device(dst, image, image.nbytes)
        else:
            self._upload_staged(lanes, dsts, image, io_pool)
        self._uploads = []
        for k, (lane, dst) in enumerate(zip(lanes, dsts, strict=True)):
            with lane.device:
                done = lane.record(lane.s_in)
                lane.s_compute.wait_event(done)
                if fov_mask is not None:
                    with lane.s_compute:
                        apply_cylindrical_fov(dst, fov_mask, out=dst)
            self._uploads.append(done)
            self._images[k] = dst
        if in_place:  # the caller owns the image again once the call returns
            self.wait_uploads()
        return int(image.nbytes) * len(lanes)

    def _upload_staged(self, lanes: Sequence, dsts: list, image: np.ndarray, io_pool: DaemonPool | None) -> None:
        """Queue the upload of ``image`` into ``dsts`` (one per lane) through the pinned image
        buffer, z slab after z slab: each slab's host copy (over the I/O threads) overlaps the
        previous slab's DMA; returns once the last host copy is done."""
        staging = self._pinned_image_buffer(image.shape)
        edges = np.linspace(0, image.shape[0], min(UPLOAD_SLABS, max(image.shape[0], 1)) + 1).round()
        for a, b in itertools.pairwise(edges.astype(int)):
            if b <= a:
                continue
            parallel_copy(io_pool, staging[a:b], image[a:b])
            for lane, dst in zip(lanes, dsts, strict=True):
                with lane.device:
                    lane.to_device(dst[a:b], staging[a:b], staging[a:b].nbytes)

    def wait_uploads(self) -> None:
        for ev in self._uploads:
            ev.synchronize()
        self._uploads = []

    # -- results -------------------------------------------------------------------------
    def download(self, lane, image, io_pool: DaemonPool | None) -> np.ndarray:
        """A new numpy copy of a device image: DMA into the pinned image buffer (the one uploads
        use; no upload is pending at the end of a call), then a host copy split over the I/O
        threads -- a pageable download is driver-staged at a few GB/s."""
        self.wait_uploads()
        staging = self._pinned_image_buffer(image.shape)
        lane.to_host(staging, image, image.nbytes)
        lane.s_out.synchronize()
        out = np.empty(image.shape, dtype=np.float32)
        parallel_copy(io_pool, out, staging)
        return out


def reduce_on_device(lanes: list, accum: dict, device_id: int):
    """Sum the lanes' images ``accum[k]`` on GPU ``device_id`` (others copied over peer to
    peer), in lane order like the host reduction."""
    home = next(k for k, lane in enumerate(lanes) if lane.device_id == device_id)
    cp = lanes[home].cp
    with lanes[home].device:
        out = None
        tmp = None
        for k, lane in enumerate(lanes):
            part = accum[k]
            if k != home:
                if tmp is None:
                    tmp = cp.empty_like(accum[home])
                cp.cuda.runtime.memcpyPeer(tmp.data.ptr, device_id, part.data.ptr, lane.device_id, part.nbytes)
                part = tmp
            if out is None:
                out = part.copy() if k != home else part
            else:
                out += part
        if len(lanes) > 1:  # one lane: nothing was queued here (its streams are synchronised)
            lanes[home].device.synchronize()
    return out
