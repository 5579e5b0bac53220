"""What the projectors of one session share: options, set-up, the engine, the input image.

A :class:`ProjectionSession` is the state of a projection *system*; the projectors
(:class:`~stirgpu.projectors.ForwardProjector`, :class:`~stirgpu.projectors.BackProjector`,
:class:`~stirgpu.projectors.ProjectorPair`) are front ends over one, each with its own call
statistics.  A projector made without ``session=`` makes its own; those made on one session
(``ForwardProjector(session=s)``, a pair's ``.forward`` and ``.back``) share everything here:
one ``set_up`` and one ``set_input`` serve them all, their calls run on one engine (its
devices, cached plans, tables, kept GPU workspaces and the uploaded image), under one set of
options.

Options (keywords of the session and of every projector; ``None`` takes the value of
:func:`stirgpu.config.get_config` at construction):

* ``backend`` -- "auto" (CUDA when cupy sees a GPU), "cpu" or "cuda";
* ``devices`` -- GPU ids (default: all visible GPUs) or, for the CPU backend, worker ids
  (default two workers);
* ``gpu_memory_budget`` / ``host_memory_budget`` -- bytes (or "512M", "2G"); default: free GPU
  memory less a reserve, a quarter of the available host memory;
* ``max_views_per_chunk`` -- an upper bound on chunk size;
* ``restrict_to_cylindrical_fov`` -- STIR's Parallelproj behaviour (default True): the input
  image is zeroed outside STIR's cylinder before forward projection (a copy; the caller's
  image is untouched), the back projection after back projection;
* ``units`` -- "stir" (line integrals in x-voxel units, like STIR's Parallelproj projector;
  the default) or "mm".  Either way the projector is STIR's: STIR's float32 LOR endpoints and
  libparallelproj 2.0.7's float32 Joseph arithmetic, so forward projections equal STIR's bit for
  bit (docs/joseph.md);
* ``max_segment_num_to_process`` -- like STIR: only segments with ``|segment| <=`` this
  (default all); other segments of an output are not touched;
* ``comm`` -- the MPI communicator of the processes that share every call (an mpi4py
  communicator or a :class:`stirgpu.distributed.Communicator`; default ``COMM_WORLD`` when the
  process was started by an MPI launcher, else none): each rank projects its share of the
  viewgrams, balanced by bins, back projections and log-likelihoods are summed over the ranks,
  and an output holds the whole projection on every rank (a file of
  :func:`stirgpu.distributed.shared_output`: written by the ranks, each its share); ranks on
  one node split its default host memory budget (measured when the session is made);
  see docs/distributed.md;
* ``num_slots`` -- chunks in flight per lane (default 3: one being read or written, one
  computing, one queued, so per-chunk host work never leaves the GPU waiting; 2 is plain
  double buffering and uses less memory).

In-memory stores (``ProjDataInMemory``) used more than once by a GPU session are
page-locked, once, so that chunks go straight between them and the GPUs by DMA (no staging
copy); a store used once (a fresh output) is not worth it and goes through the staging
buffers.  The configuration's ``pin_host_memory`` ("reused", "always", "never") sets the
policy (see docs/execution.md, "Direct transfers").  Its ``compute_streams`` (default 2) is
the number of chunks a GPU may compute at once (their kernels overlap where one's last
blocks leave SMs idle).

The input image and its upload.  ``set_input(image)`` uploads ``image`` to every lane
now (STIR's ``set_input``); a later call with ``image=None`` uses it as uploaded.  A call
given ``image=`` re-uploads unless it is the very object of the last upload *and* that
object carries a version stamp that has not changed (torch tensors' ``_version``, objects
with a ``version`` attribute); numpy and cupy arrays carry none, since they can change in
place without trace, so passing one always uploads it.  To project one unchanged image
many times, call ``set_input`` once and pass ``image=None``.  :attr:`ProjectionSession.uploads`
counts the uploads.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import numpy as np

from ..arrays import array_module, count_non_finite
from ..config import get_config
from ..distributed import as_communicator, staging_bytes
from ..errors import GeometryError, NonFiniteError, StirGpuError
from ..execution import Engine, resolve_backend, resolve_devices
from ..execution.hostio import parallel_count_non_finite
from ..execution.plan import default_host_budget, parse_bytes
from ..geometry import ImageInfo, ProjDataInfo
from ..interop import (
    as_image_array,
    image_info_of,
    is_stir_proj_data_info,
    proj_data_info_from_stir,
    version_stamp,
)
from ..kernels import KernelGeometry, cylindrical_fov_mask, kernel_geometry, stir_rim

__all__ = ["ProjectionSession", "ProjectorOptions"]


@dataclasses.dataclass(frozen=True)
class ProjectorOptions:
    """A session's options, validated, with the configuration's defaults filled in (see the
    module docstring).  ``backend`` and ``devices`` are as requested; the session's
    :attr:`~ProjectionSession.backend` and :attr:`~ProjectionSession.devices` are what they
    resolved to."""

    backend: str
    devices: tuple[int, ...] | None
    gpu_memory_budget: int | None
    host_memory_budget: int | None
    max_views_per_chunk: int | None
    restrict_to_cylindrical_fov: bool
    units: str
    max_segment_num_to_process: int | None
    num_slots: int
    pin_host_memory: str
    compute_streams: int

    @classmethod
    def resolve(
        cls,
        *,
        backend: str | None,
        devices,
        gpu_memory_budget,
        host_memory_budget,
        max_views_per_chunk: int | None,
        restrict_to_cylindrical_fov: bool,
        units: str,
        max_segment_num_to_process: int | None,
        num_slots: int,
    ) -> ProjectorOptions:
        """The options of the session's keywords (their defaults are the session's), checked: a
        bad one is a StirGpuError naming it."""
        cfg = get_config()
        backend = cfg.backend if backend is None else str(backend)
        if backend not in ("auto", "cpu", "cuda"):
            raise StirGpuError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
        mv = cfg.max_views_per_chunk if max_views_per_chunk is None else max_views_per_chunk
        if mv is not None and int(mv) < 1:
            raise StirGpuError(f"max_views_per_chunk must be >= 1, not {mv}")
        if units not in ("stir", "mm"):
            raise StirGpuError(f"units must be 'stir' (x-voxel units, like STIR) or 'mm', not {units!r}")
        if max_segment_num_to_process is not None and int(max_segment_num_to_process) < 0:
            raise StirGpuError(f"max_segment_num_to_process must be >= 0, not {max_segment_num_to_process}")
        if int(num_slots) < 1:
            raise StirGpuError(f"num_slots must be >= 1, not {num_slots}")
        return cls(
            backend=backend,
            devices=cfg.devices if devices is None else tuple(int(d) for d in devices),
            gpu_memory_budget=_budget(
                cfg.gpu_memory_budget if gpu_memory_budget is None else gpu_memory_budget, "gpu_memory_budget"
            ),
            host_memory_budget=_budget(
                cfg.host_memory_budget if host_memory_budget is None else host_memory_budget, "host_memory_budget"
            ),
            max_views_per_chunk=None if mv is None else int(mv),
            restrict_to_cylindrical_fov=bool(restrict_to_cylindrical_fov),
            units=units,
            max_segment_num_to_process=None if max_segment_num_to_process is None else int(max_segment_num_to_process),
            num_slots=int(num_slots),
            pin_host_memory=cfg.pin_host_memory,
            compute_streams=cfg.compute_streams,
        )


def _budget(value, name: str) -> int | None:
    if value is None:
        return None
    v = parse_bytes(value)
    if v <= 0:
        raise StirGpuError(f"{name} must be positive")
    return v


@dataclasses.dataclass(frozen=True)
class _SetUp:
    """What ``set_up`` fixed: the geometry and what follows from it and the options."""

    proj_data_info: ProjDataInfo
    image_info: ImageInfo
    kernel_geometry: KernelGeometry
    fov_mask: np.ndarray | None
    max_segment_num: int | None  # the option, or None where it leaves every segment in


class ProjectionSession:
    """The state the projectors made on it share: options, set-up, the engine, the input image.

    >>> session = ProjectionSession(backend="cpu")
    >>> fp, bp = ForwardProjector(session=session), BackProjector(session=session)
    >>> fp.set_up(proj_data_info, image_info)       # bp is set up too
    >>> fp.set_input(image)                          # one upload, for every projector on it

    Keywords: the options of the module docstring.  The engine is made at the first
    ``set_up`` (the backend and devices are resolved then); a later ``set_up`` keeps it.
    """

    def __init__(
        self,
        backend: str | None = None,
        devices=None,
        gpu_memory_budget=None,
        host_memory_budget=None,
        max_views_per_chunk: int | None = None,
        restrict_to_cylindrical_fov: bool = True,
        units: str = "stir",
        max_segment_num_to_process: int | None = None,
        num_slots: int = 3,
        comm=None,
    ):
        #: :class:`ProjectorOptions`, fixed for the session's life
        self.options = ProjectorOptions.resolve(
            backend=backend,
            devices=devices,
            gpu_memory_budget=gpu_memory_budget,
            host_memory_budget=host_memory_budget,
            max_views_per_chunk=max_views_per_chunk,
            restrict_to_cylindrical_fov=restrict_to_cylindrical_fov,
            units=units,
            max_segment_num_to_process=max_segment_num_to_process,
            num_slots=num_slots,
        )
        #: the :class:`~stirgpu.distributed.Communicator` of the processes that share every call
        #: (each projects its share of the bins; back projections and sums are added up over
        #: them): ``comm`` (an mpi4py communicator or a Communicator), or None -- MPI's
        #: ``COMM_WORLD`` when run under an MPI launcher, else this process alone
        self.comm = as_communicator(comm, staging_bytes(self.options.host_memory_budget))
        if self.options.host_memory_budget is None and self.comm.ranks_on_this_node > 1:
            # the node's ranks share its memory: each takes its part of the default budget (the
            # memory available now), fixed for the session's life
            share = max(default_host_budget() // self.comm.ranks_on_this_node, 64 << 20)
            self.options = dataclasses.replace(self.options, host_memory_budget=share)
        self._set_up: _SetUp | None = None
        self._engine: Engine | None = None
        self._input_ref: Any = None  # weakref (None if the object is not weak-referenceable)
        self._input_stamp: Any = None
        self._input_valid = False
        #: how many times an input image has been put on the lanes (by ``set_input``, or by a
        #: call given an image that is not the current upload; see the module docstring)
        self.uploads = 0

    # -- set-up --------------------------------------------------------------------------
    def set_up(self, proj_data_info, image_info) -> None:
        """Fix the projection-data and image geometry (STIR's ``set_up``) for every projector
        on the session; the input image is forgotten (it must be given again).

        ``proj_data_info``: a stirgpu ``ProjDataInfo`` or a STIR ``ProjDataInfo`` (converted
        exactly, :func:`~stirgpu.interop.proj_data_info_from_stir`); ``image_info``: an
        ``ImageInfo``, or an image that knows its geometry (a ``stir.FloatVoxelsOnCartesianGrid``,
        as STIR's own ``set_up`` takes, or a stirgpu image).
        """
        pdi = _as_proj_data_info(proj_data_info)
        info = _as_image_info(image_info)
        opt = self.options
        m = opt.max_segment_num_to_process
        if m is not None and m > max(-pdi.get_min_segment_num(), pdi.get_max_segment_num()):
            m = None
        if self._engine is None:  # first, so that a set_up refused here changes nothing
            backend = resolve_backend(opt.backend)
            self._engine = Engine(
                backend,
                resolve_devices(backend, opt.devices),
                pin_host_memory=opt.pin_host_memory,
                compute_streams=opt.compute_streams,
            )
        self._set_up = _SetUp(
            proj_data_info=pdi,
            image_info=info,
            kernel_geometry=kernel_geometry(info, pdi, opt.units),
            fov_mask=(
                cylindrical_fov_mask(info, stir_rim(info.shape[2], pdi.get_scanner().inner_ring_radius))
                if opt.restrict_to_cylindrical_fov
                else None
            ),
            max_segment_num=m,
        )
        self._input_valid = False

    def is_set_up(self) -> bool:
        return self._set_up is not None

    def _fixed(self) -> _SetUp:
        if self._set_up is None:
            raise StirGpuError("the projection session is not set up: call set_up(proj_data_info, image_info) first")
        return self._set_up

    @property
    def proj_data_info(self) -> ProjDataInfo:
        """The set-up's projection-data geometry."""
        return self._fixed().proj_data_info

    @property
    def image_info(self) -> ImageInfo:
        """The set-up's image geometry."""
        return self._fixed().image_info

    @property
    def kernel_geometry(self) -> KernelGeometry:
        """The kernels' :class:`~stirgpu.kernels.KernelGeometry` of the set-up (frame, units)."""
        return self._fixed().kernel_geometry

    @property
    def fov_mask(self) -> np.ndarray | None:
        """STIR's cylindrical-FOV mask of the image ((y, x) bool), or None with
        ``restrict_to_cylindrical_fov=False``."""
        return self._fixed().fov_mask

    def segments_to_process(self) -> tuple[int, ...]:
        """The set-up's segments with ``|segment| <= max_segment_num_to_process``."""
        s = self._fixed()
        m = s.max_segment_num
        return tuple(seg for seg in s.proj_data_info.segment_nums if m is None or abs(seg) <= m)

    # -- the engine ----------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The :class:`~stirgpu.execution.Engine` every projector on the session runs on (its
        lanes, cached plans and tables, kept device workspaces, the uploaded image); the first
        ``set_up`` makes it."""
        self._fixed()
        assert self._engine is not None  # set_up makes it before it fixes anything
        return self._engine

    @property
    def backend(self) -> str | None:
        """The backend in use ("cpu" or "cuda"), known after set-up."""
        return None if self._engine is None else self._engine.backend

    @property
    def devices(self) -> tuple[int, ...] | None:
        """The lanes' device ids, known after set-up."""
        return None if self._engine is None else self._engine.devices

    # -- the input image -----------------------------------------------------------------
    def set_input(self, image) -> tuple[int, float]:
        """Upload ``image`` ((z, y, x): numpy, cupy, torch, stirgpu or stir image) to every lane
        now, zeroed outside the cylindrical FOV when that option is on (on the copy).
        Returns (bytes uploaded to GPUs, seconds).  An image holding NaN or ±Inf where it is
        projected (inside the cylindrical FOV, with that option: outside it every voxel becomes
        0) is refused (:class:`~stirgpu.errors.NonFiniteError`, naming the argument ``image``)
        before it is uploaded, unless the configuration's ``check_finite`` is off."""
        s = self._fixed()
        arr = as_image_array(image, s.image_info.shape)
        if get_config().check_finite:  # (before anything is uploaded: the last upload stays)
            _check_finite_in_fov(arr, s.fov_mask, self.engine.io_pool)
        nbytes, seconds = self.engine.set_image(arr, s.fov_mask)
        try:
            self._input_ref = weakref.ref(image)
        except TypeError:
            self._input_ref = None
        self._input_stamp = version_stamp(image)
        self._input_valid = True
        self.uploads += 1
        return nbytes, seconds

    def has_input(self) -> bool:
        """Whether an input image is on the lanes (since the last ``set_up``)."""
        return self._input_valid

    def use_input(self, image) -> tuple[int, float]:
        """Make ``image`` the lanes' input for a call: None keeps the current one (there must
        be one); an image is uploaded unless it is the current upload, unchanged (see the
        module docstring).  Returns (bytes, seconds) of what this uploaded."""
        if image is None:
            if not self._input_valid:
                raise StirGpuError("no input image; call set_input(image) or pass image=")
            return 0, 0.0
        same = self._input_ref is not None and self._input_ref() is image
        stamp = version_stamp(image)
        if self._input_valid and same and stamp is not None and stamp == self._input_stamp:
            return 0, 0.0
        return self.set_input(image)

    def __repr__(self) -> str:
        where = "not set up" if self._set_up is None else f"{self.backend} {list(self.devices or ())}"
        return f"ProjectionSession({where}, units={self.options.units!r})"


def _check_finite_in_fov(image, fov_mask: np.ndarray | None, pool) -> None:
    """Refuse an input image (numpy or cupy) with NaN or ±Inf where it is projected: everywhere,
    or inside ``fov_mask`` ((y, x)) when the image is zeroed outside it.  One sum of the image
    when it holds none (a numpy image's slabs summed by the engine's I/O threads, ``pool``); the
    values inside the FOV are counted only when it does."""
    if not parallel_count_non_finite(pool, image):
        return
    inside = image if fov_mask is None else image[:, array_module(image).asarray(fov_mask)]
    n = count_non_finite(inside)
    if n:
        raise NonFiniteError("image", n)


def _as_proj_data_info(obj) -> ProjDataInfo:
    if isinstance(obj, ProjDataInfo):
        return obj
    if is_stir_proj_data_info(obj):
        return proj_data_info_from_stir(obj, "set_up: proj_data_info")
    raise GeometryError(f"set_up: proj_data_info must be a stirgpu or STIR ProjDataInfo, not {type(obj).__name__}")


def _as_image_info(obj) -> ImageInfo:
    if isinstance(obj, ImageInfo):
        return obj
    info = image_info_of(obj, "set_up: image_info") if obj is not None else None
    if info is None:
        raise GeometryError(
            f"set_up: image_info must be a stirgpu ImageInfo or an image that knows its "
            f"geometry (a stir.FloatVoxelsOnCartesianGrid, a stirgpu image), not {type(obj).__name__}"
        )
    return info
