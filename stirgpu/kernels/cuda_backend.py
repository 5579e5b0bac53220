"""CUDA backend of the Joseph projector (cupy + NVRTC).

Same four entry points and semantics as :mod:`stirgpu.kernels.api` (which dispatches
CUDA arrays here): :func:`joseph_forward`, :func:`joseph_back` (explicit endpoints) and
:func:`forward_chunk`, :func:`back_chunk` (endpoints computed inside the kernel from the
:class:`stirgpu.geometry.ChunkTables` of a chunk's parts, all parts in one launch).
``docs/joseph.md`` is the specification, ``cpu.py`` the reference; ``docs/kernel-tuning.md``
says how the kernels were tuned.

* The kernels are ``cuda/joseph.cu`` + ``cuda/joseph_common.cuh`` (package data),
  compiled on first use by :class:`cupy.RawModule` (NVRTC; cupy passes
  ``-arch=sm_XX`` for the compute capability of the current device), memoised per
  (device, compile options).  Nothing happens at import; cupy is imported on the first
  call.
* Arrays: cupy arrays, torch CUDA tensors, or anything with
  ``__cuda_array_interface__`` / CUDA DLPack, used in place (no copy).  Results live on
  the inputs' device; a torch input gives a torch output.  Kernels run on cupy's
  current stream of that device.
* Forward results overwrite ``out``; back projections accumulate into ``out_image``.

Two kernel families (:class:`KernelOptions`, ``variant``): ``"simple"`` (one thread
per LOR in libparallelproj's manner, no extra memory) and ``"tiled"`` (warp-coherent
stepping through zero-framed copies of the image, two extra padded images of scratch);
``"auto"`` takes ``tiled`` when there are enough LORs to amortise the copies, or always
when the caller keeps them across chunks (:func:`prepare_image` for forward,
:func:`prepare_back_accumulator` for back projection), as the streaming projectors do.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.resources
import types
from typing import Any, NamedTuple

import numpy as np

from ..arrays import DLPACK_CUDA
from ..arrays import import_cupy as _cupy
from ..errors import DeviceError, GeometryError, StirGpuError
from . import tables as _tables
from .frames import checked_triple as _triple

__all__ = [
    "BackAccumulator",
    "ChunkLauncher",
    "LaunchSetUp",
    "prepare_back_accumulator",
    "joseph_forward",
    "joseph_back",
    "forward_chunk",
    "back_chunk",
    "upload_tables",
    "DeviceTables",
    "prepare_image",
    "PreparedImage",
    "KernelOptions",
    "DEFAULT_OPTIONS",
    "device_arch",
]

_INT32_LIMIT = 2**31 - 1
_GRID_YZ_LIMIT = 65535


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """How the kernels are compiled and launched (docs/kernel-tuning.md).

    The defaults are the configuration tuned on an H200.  ``variant``: ``"auto"``,
    ``"tiled"`` or ``"simple"``.  ``warps_per_block`` / ``back_warps_per_block``: axial
    positions per block of the tiled forward / back chunk kernels (each warp takes 32
    tangential bins).  ``threads_per_block``: 1-D kernels.  ``lerp``: bilinear
    interpolation as two lerps (fewer operations, different float32 rounding).
    ``fwd_ilp``: branch-free forward steps unrolled this many times (0: off).
    ``back_merge``: neighbouring lanes merge back-projection atomics that hit the same
    voxel.  ``back_vec``: sm_90 float4 atomics for the two floats of a footprint row
    (slower: measured, kept for the record).  ``back_segsum`` (on by default): lanes
    hitting the same voxels sum their footprints exactly with register shuffles (a
    segmented scan over runs of equal offsets), then one lane adds each sum -- one global
    atomic per touched voxel and warp step; supersedes ``back_merge`` and ``back_vec``
    (+65 % back projection on an H200 for GE DMI, docs/kernel-tuning.md).  ``back_smem``:
    a warp whose 32 lanes are all on one plane sums its footprints in shared memory
    instead (the previous default; when on, it replaces ``back_segsum``).
    ``back_smem_partial`` (needs ``back_smem``): the shared-memory sums also when only
    some lanes are active (measured slower).  ``fmad``: let NVRTC contract multiply-adds
    in the inner loop.
    ``maxrregcount`` / ``back_maxrregcount``: register cap of the forward / back kernels
    (they are compiled as two modules; None: the compiler's choice).
    ``auto_min_lors_per_voxel``: ``auto`` uses ``tiled`` when LORs >= this fraction of
    the image's voxels.  ``index64``: 64-bit voxel offsets even where 32 bits suffice
    (they are used automatically for images of 2^31 voxels or more; the option exists to
    test that path).  ``block_order`` / ``back_block_order``: the order of a chunk part's
    blocks in the tiled forward / back chunk kernels (a launch argument, not compiled in)
    -- ``"view"`` (each view's planes in turn), ``"axial"`` (each slab of planes across all
    the part's views in turn: the blocks in flight touch a thinner slab of the image) or
    ``"auto"`` (axial when a part's views are spread out -- a subset's --, view when they
    are consecutive).  Measured on an H200 (docs/kernel-tuning.md): axial forward +4 to +5 %
    on mMR span 11 (all views and a subset of 21) and +2 % on GE DMI; axial back -3 % on all
    views but +4 % on a subset; hence axial forward, auto back.
    """

    def axial_blocks(self, tables: DeviceTables, back: bool) -> int:
        """1 when a launch over ``tables`` orders its blocks axial-major (see ``block_order``)."""
        order = self.back_block_order if back else self.block_order
        return int(order == "axial" or (order == "auto" and tables.spread))

    variant: str = "auto"
    warps_per_block: int = 4
    back_warps_per_block: int = 8
    threads_per_block: int = 256
    lerp: bool = False
    fwd_ilp: int = 2
    back_merge: bool = True
    back_vec: bool = False
    back_smem: bool = False
    back_smem_partial: bool = False
    back_segsum: bool = True
    fmad: bool = True
    maxrregcount: int | None = 64
    back_maxrregcount: int | None = None
    auto_min_lors_per_voxel: float = 1.0 / 16.0
    index64: bool = False
    block_order: str = "axial"
    back_block_order: str = "auto"

    def __post_init__(self) -> None:
        if self.variant not in ("auto", "tiled", "simple"):
            raise StirGpuError(f"KernelOptions: variant must be 'auto', 'tiled' or 'simple', not {self.variant!r}")
        for name in ("warps_per_block", "back_warps_per_block"):
            if not 1 <= int(getattr(self, name)) <= 32:
                raise StirGpuError(f"KernelOptions: {name} must be in 1..32, not {getattr(self, name)}")
        if int(self.threads_per_block) % 32 or not 32 <= int(self.threads_per_block) <= 1024:
            raise StirGpuError(
                f"KernelOptions: threads_per_block must be a multiple of 32 in 32..1024, not {self.threads_per_block}"
            )
        if not 0 <= int(self.fwd_ilp) <= 16:
            raise StirGpuError(f"KernelOptions: fwd_ilp must be in 0..16, not {self.fwd_ilp}")
        for name in ("maxrregcount", "back_maxrregcount"):
            v = getattr(self, name)
            if v is not None and not 16 <= int(v) <= 255:
                raise StirGpuError(f"KernelOptions: {name} must be in 16..255, not {v}")
        for name in ("block_order", "back_block_order"):
            if getattr(self, name) not in ("view", "axial", "auto"):
                raise StirGpuError(
                    f"KernelOptions: {name} must be 'view', 'axial' or 'auto', not {getattr(self, name)!r}"
                )
        if self.back_smem_partial and not self.back_smem:
            raise StirGpuError("KernelOptions: back_smem_partial=True needs back_smem=True")

    def compile_options(self, back: bool = False) -> tuple[str, ...]:
        """NVRTC options of the forward (and layout) module, or of the back module."""
        opts = ["--std=c++17", f"--fmad={'true' if self.fmad else 'false'}"]
        if self.lerp:
            opts.append("-DSG_LERP")
        if self.fwd_ilp:
            opts.append(f"-DSG_FWD_ILP={int(self.fwd_ilp)}")
        if self.back_merge:
            opts.append("-DSG_BACK_MERGE")
        if self.back_vec:
            opts.append("-DSG_BACK_VEC")
        if self.back_smem:
            opts.append("-DSG_BACK_SMEM")
        if self.back_smem_partial:
            opts.append("-DSG_BACK_SMEM_PARTIAL")
        if self.back_segsum and not self.back_smem:  # back_smem replaces it
            opts.append("-DSG_BACK_SEGSUM")
        cap = self.back_maxrregcount if back else self.maxrregcount
        if cap is not None:
            opts.append(f"--maxrregcount={int(cap)}")
        return tuple(opts)


#: the configuration chosen on an H200 (docs/kernel-tuning.md)
DEFAULT_OPTIONS = KernelOptions()


# --------------------------------------------------------------------------------------
# compilation (lazy, memoised per device and options)
# --------------------------------------------------------------------------------------
_E_TYPES = ("float", "double")
_I_TYPES = ("int", "long long")


def _name_expressions() -> tuple[str, ...]:
    names = []
    for k in ("fwd_explicit_simple", "back_explicit_simple", "fwd_explicit_tiled", "back_explicit_tiled"):
        names += [f"{k}<{e}, {i}>" for e in _E_TYPES for i in _I_TYPES]
    for k in ("fwd_chunk_simple", "back_chunk_simple", "fwd_chunk_tiled", "back_chunk_tiled"):
        names += [f"{k}<{i}>" for i in _I_TYPES]
    return tuple(names)


@functools.lru_cache(maxsize=1)
def _source() -> str:
    """joseph.cu with joseph_common.cuh inlined, so that cupy's on-disk kernel cache,
    keyed by the source text, sees every change of either file."""
    d = importlib.resources.files("stirgpu.kernels").joinpath("cuda")
    header = d.joinpath("joseph_common.cuh").read_text(encoding="utf-8")
    body = d.joinpath("joseph.cu").read_text(encoding="utf-8")
    include = '#include "joseph_common.cuh"'
    if include not in body:
        raise StirGpuError("stirgpu/kernels/cuda/joseph.cu does not include joseph_common.cuh")
    return body.replace(include, header, 1)


@functools.lru_cache(maxsize=16)
def _module(device_id: int, compile_options: tuple[str, ...]):
    """The compiled RawModule for one device (cupy picks -arch=sm_XX of that device)."""
    cp = _cupy()
    with cp.cuda.Device(device_id):
        mod = cp.RawModule(code=_source(), options=compile_options, name_expressions=_name_expressions())
        try:
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            raise DeviceError(f"compiling the Joseph kernels for CUDA device {device_id} failed:\n{e}") from e
    return mod


@functools.lru_cache(maxsize=512)
def _kernel(device_id: int, options: KernelOptions, name: str):
    """One kernel (cached: get_function costs more than a launch).  Back-projection
    kernels come from the module compiled with the back options, the others from the
    forward one: a register cap that speeds up the forward slows the atomics down."""
    back = name.startswith("back_") or name == "combine_back"
    mod = _module(device_id, options.compile_options(back=back))
    return mod.get_function(name)


def device_arch(device_id: int | None = None) -> str:
    """``sm_XY`` of a CUDA device (default: the current one): what the kernels are built for."""
    cp = _cupy()
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    return f"sm_{dev.compute_capability}"


# --------------------------------------------------------------------------------------
# arrays
# --------------------------------------------------------------------------------------
def _is_torch(a: Any) -> bool:
    return type(a).__module__.split(".")[0] == "torch"


def _as_cupy(cp, name: str, a: Any):
    """View ``a`` as a cupy array without copying."""
    if isinstance(a, cp.ndarray):
        return a
    if _is_torch(a):
        if getattr(a, "requires_grad", False):
            raise StirGpuError(f"{name}: torch tensor requires grad; pass tensor.detach()")
        if not getattr(a, "is_cuda", False):
            raise DeviceError(f"{name}: torch tensor is on {a.device}, not on a CUDA device")
        return cp.from_dlpack(a)
    if hasattr(a, "__cuda_array_interface__"):
        return cp.asarray(a)
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None and int(dev()[0]) in DLPACK_CUDA:
        return cp.from_dlpack(a)
    if isinstance(a, np.ndarray):
        raise DeviceError(
            f"{name}: numpy array given to the CUDA backend (use stirgpu.kernels, "
            f"which projects numpy arrays on the CPU, or move it to the GPU)"
        )
    raise StirGpuError(
        f"{name}: expected a CUDA array (cupy, torch, __cuda_array_interface__ or DLPack), not {type(a).__name__}"
    )


def _check(name: str, a, dtypes=(np.float32,), shape=None, ndim=None) -> None:
    if a.dtype not in [np.dtype(d) for d in dtypes]:
        want = " or ".join(np.dtype(d).name for d in dtypes)
        raise StirGpuError(f"{name}: expected dtype {want}, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise GeometryError(f"{name}: expected a {ndim}-D array, got shape {a.shape}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise GeometryError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise StirGpuError(f"{name}: must be C-contiguous")


def _one_device(named: dict) -> int:
    ids = {name: int(a.device.id) for name, a in named.items()}
    first = next(iter(ids))
    for name, d in ids.items():
        if d != ids[first]:
            raise DeviceError(
                f"{name} is on CUDA device {d} but {first} on device {ids[first]}; "
                f"all arrays of one projection must be on the same device"
            )
    return ids[first]


def _like_input(result, reference):
    """Return ``result`` (cupy) as the kind of object ``reference`` is (torch -> torch)."""
    if _is_torch(reference):
        import torch

        return torch.from_dlpack(result)
    return result


# --------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------
class DeviceTables:
    """The tables of a chunk's parts (:class:`~stirgpu.geometry.ChunkTables`, one per
    segment) packed (:mod:`stirgpu.kernels.tables`) and uploaded to one device, reusable for
    many kernel calls.  ``parts`` are the host tables, ``shapes`` their (nv, na, nt),
    ``data`` the packed float64 device array.  With one part, ``shape`` and every
    attribute of that ChunkTables stay readable, so it can be passed wherever ChunkTables
    are accepted."""

    def __init__(self, parts, data, device_id: int):
        #: made from one ChunkTables (results shaped (nv, na, nt)) rather than a sequence
        self.single = not isinstance(parts, (list, tuple))
        self.parts = (parts,) if self.single else tuple(parts)
        self.shapes = _tables.parts_shapes(self.parts)
        self.data = data
        self.device_id = int(device_id)
        #: some part's views are not one run of consecutive views (a subset's): see
        #: KernelOptions.block_order
        self.spread = _tables.views_spread(self.parts)
        self.num_lors = sum(nv * na * nt for nv, na, nt in self.shapes)
        self._blocks: dict[int, int] = {}

    def blocks(self, warps: int) -> int:
        """Blocks of a tiled launch over all parts with ``warps`` warps per block (see
        ``_parts_grid``), counted once per size."""
        n = self._blocks.get(warps)
        if n is None:
            n = self._blocks[warps] = _parts_grid(self.shapes, warps)[0][0]
        return n

    def __getattr__(self, name):
        if name in (
            "parts",
            "shapes",
            "single",
            "spread",
            "num_lors",
            "_blocks",
        ):  # not yet set (unpickling): avoid recursion
            raise AttributeError(name)
        if len(self.parts) != 1:
            raise AttributeError(f"DeviceTables of {len(self.parts)} parts has no single {name!r}")
        return getattr(self.parts[0], name)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(nv, na, nt) of a one-part chunk."""
        if len(self.shapes) != 1:
            raise GeometryError(f"DeviceTables of {len(self.shapes)} parts has no single shape")
        return self.shapes[0]


def upload_tables(tables, device: int | None = None) -> DeviceTables:
    """Pack and copy the tables of one chunk -- a ChunkTables, or a sequence of them (the
    parts of a multi-segment chunk) -- to a CUDA device (default: the current one).  A
    :class:`DeviceTables` is returned unchanged if it is already on that device."""
    cp = _cupy()
    dev = int(cp.cuda.Device().id if device is None else device)
    if isinstance(tables, DeviceTables) and tables.device_id == dev:
        return tables
    parts, single = _tables.chunk_parts(tables)  # from another device: its host parts again
    host = _tables.pack_tables([_host_tables(t) for t in parts])
    with cp.cuda.Device(dev):
        data = cp.asarray(host)
    return DeviceTables(parts[0] if single else parts, data, dev)


def _host_tables(t):
    """``t`` with its arrays on the host (tables built from cupy arrays are accepted)."""
    if all(isinstance(getattr(t, n, None), np.ndarray) for n in _tables.FIELDS):
        return t
    try:
        return types.SimpleNamespace(**{n: _cupy().asnumpy(getattr(t, n)) for n in _tables.FIELDS})
    except AttributeError as e:
        raise GeometryError(f"tables: expected stirgpu.geometry.ChunkTables ({e})") from None


class _ImageWithWorkspace:
    """A device image (``image``) plus two padded workspaces (``a``, ``b``) of the tiled
    kernels.  It carries the image's ``__cuda_array_interface__``, shape and dtype, so it can
    be passed wherever the image can."""

    def __init__(self, image, a, b, device_id: int):
        self.image = image
        self.a = a
        self.b = b
        self.device_id = device_id

    @property
    def __cuda_array_interface__(self):
        return self.image.__cuda_array_interface__

    @property
    def shape(self):
        return self.image.shape

    @property
    def dtype(self):
        return self.image.dtype


class PreparedImage(_ImageWithWorkspace):
    """An image on a device plus the zero-framed copies that the tiled kernels read,
    made once (:func:`prepare_image`) and reused by every forward projection of that
    image -- a projector sweeping many chunks saves one copy per chunk.

    It carries the image's ``__cuda_array_interface__``, so it can be passed wherever the
    image can (including :func:`stirgpu.kernels.forward_chunk`).  It is a snapshot:
    prepare again after changing the image.
    """

    def __init__(self, source, image, a, b, device_id: int):
        super().__init__(image, a, b, device_id)
        self.source = source


def prepare_image(image, options: KernelOptions | None = None) -> PreparedImage:
    """Copy ``image`` ((nz, ny, nx) float32 on a CUDA device) into the layouts of the tiled
    forward kernels (two images of (n+2)^3-ish float32 of device memory)."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    if isinstance(image, PreparedImage):
        return image
    img = _as_cupy(cp, "image", image)
    _check("image", img, ndim=3)
    dev = int(img.device.id)
    with cp.cuda.Device(dev):
        a, b = _padded_copies(cp, dev, options, img)
    return PreparedImage(image, img, a, b, dev)


class BackAccumulator(_ImageWithWorkspace):
    """A device image plus the two zero-framed accumulators of the tiled back projection,
    kept across many :func:`back_chunk` calls (:func:`prepare_back_accumulator`).

    Without it, each tiled back projection allocates, zeroes and folds two image-sized
    accumulators, which only pays for large chunks (``auto`` then picks the slower one-LOR-
    per-thread kernels for small ones).  A projector sweeping many chunks keeps one of these
    per device and calls :meth:`finish` once: every chunk gets the tiled kernels.  It carries
    the image's ``__cuda_array_interface__``, so it can be passed wherever ``out_image`` can.
    Until :meth:`finish`, the image does not yet hold what was added through the accumulators.
    """

    def finish(self, options: KernelOptions | None = None, reuse: bool = True, overwrite: bool = False) -> None:
        """Add the accumulators into the image (on the current stream) -- or, with
        ``overwrite``, replace the image's values by them (the image need not have been
        initialised; without accumulators, i.e. ``a`` None, the chunks added into the image
        itself, which is then left as it is); then, with ``reuse``, zero them for more
        chunks, else let them go back to the memory pool (the last use)."""
        if self.a is None:
            return
        cp = _cupy()
        with cp.cuda.Device(self.device_id):
            _combine(self.device_id, options or DEFAULT_OPTIONS, self.image, self.a, self.b, add=not overwrite)
            if reuse:
                self.a.fill(0)
                self.b.fill(0)
            else:
                self.a = self.b = None  # back to the memory pool; the image is complete


def prepare_back_accumulator(out_image, options: KernelOptions | None = None, scratch=None) -> BackAccumulator:
    """Wrap ``out_image`` ((nz, ny, nx) float32 on a CUDA device) with the accumulators of the
    tiled back projection (two zeroed images of (n+2)^3-ish float32 of device memory; none
    when the options or the image's size rule the tiled kernels out).  ``scratch``: the
    ``(a, b)`` of an earlier accumulator of an image of this shape on this device, zeroed
    (on the current stream) and used again instead of new memory -- a caller running many
    back projections keeps them; anything else is ignored."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    if isinstance(out_image, BackAccumulator):
        return out_image
    img = _as_cupy(cp, "out_image", out_image)
    _check("out_image", img, ndim=3)
    dev = int(img.device.id)
    a = b = None
    if options.variant != "simple" and _tiled_possible(img.shape):
        with cp.cuda.Device(dev):
            if _fits_accumulators(scratch, img.shape, dev):
                a, b = scratch
                stream = cp.cuda.get_current_stream()
                for x in (a, b):
                    x.data.memset_async(0, x.nbytes, stream)
            else:
                a, b = _scratch_accumulators(cp, img.shape)
    return BackAccumulator(img, a, b, dev)


def _fits_accumulators(pair, shape, device_id: int) -> bool:
    """Whether ``pair`` is the two accumulators of an image of ``shape`` on that device."""
    if not (isinstance(pair, tuple) and len(pair) == 2):
        return False
    return all(
        getattr(x, "shape", None) == w
        and getattr(x, "dtype", None) == np.float32
        and x.flags.c_contiguous
        and x.device.id == device_id
        for x, w in zip(pair, _padded_shapes(shape), strict=True)
    )


def _image_arg(cp, image):
    """(cupy image, prepared copies or None, the object whose kind the result takes)."""
    if isinstance(image, PreparedImage):
        return image.image, (image.a, image.b), image.source
    img = _as_cupy(cp, "image", image)
    return img, None, image


# --------------------------------------------------------------------------------------
# launch helpers
# --------------------------------------------------------------------------------------
def _grid_args(origin, voxel_size, shape):
    o, v = origin, voxel_size
    return (
        np.float64(o[0]),
        np.float64(o[1]),
        np.float64(o[2]),
        np.float64(v[0]),
        np.float64(v[1]),
        np.float64(v[2]),
        np.int32(shape[0]),
        np.int32(shape[1]),
        np.int32(shape[2]),
    )


def _padded_voxels(shape) -> int:
    return (shape[0] + 2) * (shape[1] + 2) * (shape[2] + 2)


def _index_type(shape, options: KernelOptions) -> str:
    return "int" if _padded_voxels(shape) <= _INT32_LIMIT and not options.index64 else "long long"


def _tiled_possible(shape) -> bool:
    return shape[0] + 2 <= _GRID_YZ_LIMIT and (shape[1] + 31) // 32 + 1 <= _GRID_YZ_LIMIT


def _use_tiled(options: KernelOptions, num_lors: int, shape) -> bool:
    tiled_possible = _tiled_possible(shape)
    if options.variant == "simple":
        return False
    if options.variant == "tiled":
        if not tiled_possible:
            raise StirGpuError(f"tiled kernels: image shape {shape} exceeds the CUDA grid limits")
        return True
    nvox = shape[0] * shape[1] * shape[2]
    return tiled_possible and num_lors >= options.auto_min_lors_per_voxel * nvox


def _back_smem(options: KernelOptions, threads: int) -> int:
    """Dynamic shared memory of a tiled back-projection launch (4 KiB per warp)."""
    return (threads // 32) * 4096 if options.back_smem else 0


def _blocks_1d(n: int, threads: int) -> int:
    return max(1, (n + threads - 1) // threads)


def _tile_grid(nz: int, ny: int, nx: int) -> tuple[int, int, int]:
    return ((nx + 31) // 32, (ny + 31) // 32, nz)


def _padded_copies(cp, dev: int, options: KernelOptions, image):
    """Layouts A (z, y, x) and B (z, x, y) of ``image`` with a one-voxel zero frame."""
    nz, ny, nx = image.shape
    a, b = (cp.empty(s, dtype=cp.float32) for s in _padded_shapes(image.shape))
    dims = (np.int32(nz), np.int32(ny), np.int32(nx))
    _kernel(dev, options, "pad_ab")(_tile_grid(nz + 2, ny + 2, nx + 2), (32, 8), (image, a, b) + dims)
    return a, b


def _padded_shapes(shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Shapes of the tiled kernels' layouts A (z, y, x) and B (z, x, y), each with a one-voxel frame."""
    nz, ny, nx = (int(n) for n in shape)
    return (nz + 2, ny + 2, nx + 2), (nz + 2, nx + 2, ny + 2)


def _scratch_accumulators(cp, shape):
    return tuple(cp.zeros(s, dtype=cp.float32) for s in _padded_shapes(shape))


def _combine(dev: int, options: KernelOptions, out_image, acc_a, acc_b, add: bool = True) -> None:
    """``out_image`` += (``add``) or = the two accumulators, in the image's layout."""
    nz, ny, nx = out_image.shape
    _kernel(dev, options, "combine_back")(
        _tile_grid(nz, ny, nx),
        (32, 8),
        (out_image, acc_a, acc_b, np.int32(nz), np.int32(ny), np.int32(nx), np.int32(bool(add))),
    )


def _try_scratch(cp, make, options: KernelOptions):
    """Allocate the tiled path's scratch; in ``auto`` mode fall back to ``simple`` (None)
    when the device is out of memory."""
    try:
        return make()
    except cp.cuda.memory.OutOfMemoryError:
        if options.variant == "tiled":
            raise
        return None


# --------------------------------------------------------------------------------------
# explicit endpoints
# --------------------------------------------------------------------------------------
def _explicit_args(cp, xstart, xend):
    xs = _as_cupy(cp, "xstart", xstart)
    xe = _as_cupy(cp, "xend", xend)
    for name, a in (("xstart", xs), ("xend", xe)):
        _check(name, a, dtypes=(np.float32, np.float64))
        if a.ndim != 2 or a.shape[1] != 3:
            raise GeometryError(f"{name}: expected shape (N, 3) with (z, y, x) columns, got {a.shape}")
    if xs.shape != xe.shape or xs.dtype != xe.dtype:
        raise GeometryError(
            f"xstart {xs.shape} {xs.dtype} and xend {xe.shape} {xe.dtype} must have the same shape and dtype"
        )
    return xs, xe


def joseph_forward(xstart, xend, image, origin, voxel_size, out=None, *, options: KernelOptions | None = None):
    """Joseph line integrals of the LORs ``xstart[i] -> xend[i]`` ((N, 3), (z, y, x),
    float32 or float64) through ``image`` ((nz, ny, nx) float32); ``origin`` = centre of
    voxel [0,0,0], ``voxel_size`` (z, y, x).  Returns (N,) float32 (``out`` if given,
    overwritten) on the inputs' device."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    xs, xe = _explicit_args(cp, xstart, xend)
    img, prepared, kind = _image_arg(cp, image)
    _check("image", img, ndim=3)
    n = xs.shape[0]
    named = {"xstart": xs, "xend": xe, "image": img}
    if out is not None:
        res = _as_cupy(cp, "out", out)
        _check("out", res, shape=(n,))
        named["out"] = res
    dev = _one_device(named)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    with cp.cuda.Device(dev):
        if out is None:
            res = cp.empty(n, dtype=cp.float32)
        if n:
            etype = "float" if xs.dtype == np.float32 else "double"
            idx = _index_type(img.shape, options)
            tpb = int(options.threads_per_block)
            args_tail = (np.int64(n),) + _grid_args(org, vox, img.shape)
            copies = None
            if prepared is not None and options.variant != "simple":
                copies = prepared  # made already: the tiled kernels cost nothing extra
            elif _use_tiled(options, n, img.shape):
                copies = _try_scratch(cp, lambda: _padded_copies(cp, dev, options, img), options)
            if copies is not None:
                k = _kernel(dev, options, f"fwd_explicit_tiled<{etype}, {idx}>")
                k((_blocks_1d(n, tpb),), (tpb,), (xs, xe, img, copies[0], copies[1], res) + args_tail)
            else:
                k = _kernel(dev, options, f"fwd_explicit_simple<{etype}, {idx}>")
                k((_blocks_1d(n, tpb),), (tpb,), (xs, xe, img, res) + args_tail)
    return out if out is not None else _like_input(res, kind)


def joseph_back(xstart, xend, values, out_image, origin, voxel_size, *, options: KernelOptions | None = None):
    """Add the Joseph back projection of ``values`` ((N,) float32) along the LORs
    ``xstart -> xend`` into ``out_image`` ((nz, ny, nx) float32, accumulated): the
    adjoint of :func:`joseph_forward`.  Returns ``out_image``."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    xs, xe = _explicit_args(cp, xstart, xend)
    n = xs.shape[0]
    vals = _as_cupy(cp, "values", values)
    _check("values", vals, shape=(n,))
    img = _as_cupy(cp, "out_image", out_image)
    _check("out_image", img, ndim=3)
    dev = _one_device({"xstart": xs, "xend": xe, "values": vals, "out_image": img})
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    if n == 0:
        return out_image
    with cp.cuda.Device(dev):
        etype = "float" if xs.dtype == np.float32 else "double"
        idx = _index_type(img.shape, options)
        tpb = int(options.threads_per_block)
        args_tail = (np.int64(n),) + _grid_args(org, vox, img.shape)
        acc = None
        if _use_tiled(options, n, img.shape):
            acc = _try_scratch(cp, lambda: _scratch_accumulators(cp, img.shape), options)
        if acc is not None:
            k = _kernel(dev, options, f"back_explicit_tiled<{etype}, {idx}>")
            k(
                (_blocks_1d(n, tpb),),
                (tpb,),
                (xs, xe, vals, img, acc[0], acc[1]) + args_tail,
                shared_mem=_back_smem(options, tpb),
            )
            _combine(dev, options, img, acc[0], acc[1])
        else:
            k = _kernel(dev, options, f"back_explicit_simple<{etype}, {idx}>")
            k((_blocks_1d(n, tpb),), (tpb,), (xs, xe, vals, img) + args_tail)
    return out_image


# --------------------------------------------------------------------------------------
# geometry-aware chunks
# --------------------------------------------------------------------------------------
def _parts_grid(shapes, w: int):
    """Grid and block of a tiled chunk launch over all parts (see ``part_of_block``)."""
    blocks = sum(nv * ((na + w - 1) // w) * ((nt + 31) // 32) for nv, na, nt in shapes)
    return (blocks,), (32, w)


def _launch_tiled(
    kernel, back: bool, warps: int, smem: int, tables: DeviceTables, axial: int, values, image, a, b, sc, g
) -> None:
    """One tiled chunk launch over all parts of ``tables`` (forward: ``values`` written from
    the image's layouts ``a``/``b``; back: ``values`` added into the accumulators ``a``/``b``)."""
    shapes = tables.shapes
    grid, block = _parts_grid(shapes, warps)
    head = (tables.data, np.int32(len(shapes)), np.int32(shapes[0][2]), np.int32(axial))
    if back:
        kernel(grid, block, head + (values, image, a, b, sc) + g, shared_mem=smem)
    else:
        kernel(grid, block, head + (image, a, b, values, sc) + g)


def _chunk_shape(tables):
    """Shapes of the parts, and the shape of a one-part result (None for several parts)."""
    if isinstance(tables, DeviceTables):  # shapes checked when it was made
        return tables.shapes, (tables.shapes[0] if tables.single else None)
    parts, single = _tables.chunk_parts(tables)
    shapes = _tables.parts_shapes(parts)
    return shapes, (shapes[0] if single else None)


def forward_chunk(tables, image, origin, voxel_size, out=None, scale=1.0, *, options: KernelOptions | None = None):
    """Forward project one chunk: ``tables`` (ChunkTables, a sequence of them -- the parts of a
    multi-segment chunk -- or :class:`DeviceTables`) give the LORs, whose endpoints (mm,
    gantry frame) are computed in the kernel; ``image`` (nz, ny, nx) float32 on the device;
    every line integral is multiplied by ``scale``.  One launch covers all parts.  Returns
    (nv, na, nt) float32 in [view][axial][tangential] order for one ChunkTables, else the
    parts' bins one after the other, (N,) float32 (``out`` if given, overwritten)."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    img, prepared, kind = _image_arg(cp, image)
    _check("image", img, ndim=3)
    named = {"image": img}
    shapes, single = _chunk_shape(tables)
    n = sum(a * b * c for a, b, c in shapes)
    shape = single if single is not None else (n,)
    if out is not None:
        res = _as_cupy(cp, "out", out)
        _check("out", res, shape=shape)
        named["out"] = res
    dev = _one_device(named)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    sc = np.float32(scale)
    with cp.cuda.Device(dev):
        if out is None:
            res = cp.empty(shape, dtype=cp.float32)
        if n:
            dt = upload_tables(tables, dev)
            idx = _index_type(img.shape, options)
            head = (dt.data, np.int32(len(shapes)), np.int32(shapes[0][2]))
            g = _grid_args(org, vox, img.shape)
            copies = None
            if prepared is not None and options.variant != "simple":
                copies = prepared  # made already: the tiled kernels cost nothing extra
            elif _use_tiled(options, n, img.shape):
                copies = _try_scratch(cp, lambda: _padded_copies(cp, dev, options, img), options)
            if copies is not None:
                _launch_tiled(
                    _kernel(dev, options, f"fwd_chunk_tiled<{idx}>"),
                    False,
                    int(options.warps_per_block),
                    0,
                    dt,
                    options.axial_blocks(dt, back=False),
                    res,
                    img,
                    copies[0],
                    copies[1],
                    sc,
                    g,
                )
            else:
                tpb = int(options.threads_per_block)
                k = _kernel(dev, options, f"fwd_chunk_simple<{idx}>")
                k((_blocks_1d(n, tpb),), (tpb,), head + (np.int64(n), img, res, sc) + g)
    return out if out is not None else _like_input(res, kind)


def back_chunk(tables, values, out_image, origin, voxel_size, scale=1.0, *, options: KernelOptions | None = None):
    """Add the back projection of one chunk's ``values`` into ``out_image`` (accumulated);
    the adjoint of :func:`forward_chunk` with the same arguments (``values`` shaped like its
    result).  Returns ``out_image``.  With a :class:`BackAccumulator` as ``out_image`` the
    tiled kernels add into its accumulators, and :meth:`BackAccumulator.finish` completes
    the image."""
    cp = _cupy()
    options = options or DEFAULT_OPTIONS
    shapes, single = _chunk_shape(tables)
    n = sum(a * b * c for a, b, c in shapes)
    vals = _as_cupy(cp, "values", values)
    _check("values", vals, shape=single if single is not None else (n,))
    held = out_image if isinstance(out_image, BackAccumulator) else None
    img = held.image if held is not None else _as_cupy(cp, "out_image", out_image)
    _check("out_image", img, ndim=3)
    dev = _one_device({"values": vals, "out_image": img})
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    sc = np.float32(scale)
    if n == 0:
        return out_image
    with cp.cuda.Device(dev):
        dt = upload_tables(tables, dev)
        idx = _index_type(img.shape, options)
        head = (dt.data, np.int32(len(shapes)), np.int32(shapes[0][2]))
        g = _grid_args(org, vox, img.shape)
        acc = None
        if held is not None and held.a is not None and options.variant != "simple":
            acc = (held.a, held.b)  # kept across chunks: folded in once by held.finish()
        elif _use_tiled(options, n, img.shape):
            acc = _try_scratch(cp, lambda: _scratch_accumulators(cp, img.shape), options)
        if acc is not None:
            w = int(options.back_warps_per_block)
            _launch_tiled(
                _kernel(dev, options, f"back_chunk_tiled<{idx}>"),
                True,
                w,
                _back_smem(options, 32 * w),
                dt,
                options.axial_blocks(dt, back=True),
                vals,
                img,
                acc[0],
                acc[1],
                sc,
                g,
            )
            if held is None:
                _combine(dev, options, img, acc[0], acc[1])
        else:
            tpb = int(options.threads_per_block)
            k = _kernel(dev, options, f"back_chunk_simple<{idx}>")
            k((_blocks_1d(n, tpb),), (tpb,), head + (np.int64(n), vals, img, sc) + g)
    return out_image


def _same_args(a, b) -> bool:
    """Equal geometry arguments (numbers, tuples or arrays of them), without raising; the
    very same objects (a projector's geometry, call after call) are equal at once."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x is y:
            continue
        try:
            if np.shape(x) != np.shape(y) or not bool(
                np.all(np.asarray(x, dtype=np.float64) == np.asarray(y, dtype=np.float64))
            ):
                return False
        except (TypeError, ValueError):
            return False
    return True


class LaunchSetUp(NamedTuple):
    """What a :class:`ChunkLauncher` launches with, shared by the twins :meth:`~ChunkLauncher.for_target`
    makes: the compiled tiled kernel, its geometry arguments (origin and voxel size, image shape),
    and the argument block it launches from straight through the driver (None where this cupy
    has no driver launch).  All None where the tiled kernels do not apply."""

    kernel: Any
    grid_args: tuple | None
    argument_block: Any


class ChunkLauncher:
    """Launches the chunk kernels of one device for a sweep over many chunks, with the
    per-sweep Python work done once: argument checks, kernel look-up, geometry arguments.

    ``target`` is a :class:`PreparedImage` (forward projections of it) or a
    :class:`BackAccumulator` (back projections into it).  Each call takes the chunk's
    :class:`DeviceTables` (on the target's device) and its values: flat (N,) float32 on that
    device, written by a forward launch, read by a back one.  :func:`forward_chunk` and
    :func:`back_chunk` check every argument of every call (~80 us of Python a chunk, as much
    as a subset chunk's launch gap); a projector's engine, whose buffers and tables are made
    to fit, uses this instead.  Where the tiled kernels do not apply (the ``simple``
    variant, no accumulators, tables of another device) it calls those functions.
    """

    def __init__(self, target, origin, voxel_size, scale=1.0, *, options: KernelOptions | None = None):
        cp = _cupy()
        if not isinstance(target, (PreparedImage, BackAccumulator)):
            raise StirGpuError(
                f"ChunkLauncher: target must be a PreparedImage or a BackAccumulator, not {type(target).__name__}"
            )
        self.options = options = options or DEFAULT_OPTIONS
        #: None between calls (:meth:`without_target`)
        self.target: PreparedImage | BackAccumulator | None = target
        self.back = isinstance(target, BackAccumulator)
        self.origin = _triple("origin", origin, positive=False)
        self.voxel_size = _triple("voxel_size", voxel_size, positive=True)
        self.scale = np.float32(scale)
        self._given = (origin, voxel_size, scale)
        self._device = cp.cuda.Device(target.device_id)
        self.device_id = target.device_id
        self.shape = shape = tuple(target.image.shape)
        self.tiled = target.a is not None and options.variant != "simple"
        self.setup_id = object()  # shared by the twins of for_target / without_target
        self._kernel = self._grid = self._raw = None
        if self.tiled:
            idx = _index_type(shape, options)
            self._kernel = _kernel(
                target.device_id, options, f"back_chunk_tiled<{idx}>" if self.back else f"fwd_chunk_tiled<{idx}>"
            )
            self._warps = int(options.back_warps_per_block if self.back else options.warps_per_block)
            self._smem = _back_smem(options, 32 * self._warps) if self.back else 0
            self._grid = _grid_args(self.origin, self.voxel_size, shape)
            with self._device:
                self._raw = _RawLaunch.make(cp, self._kernel, self.scale, self._grid)

    @property
    def kernel_set_up(self) -> LaunchSetUp:
        """The kernel set-up this launcher launches with (read-only; for tests and diagnostics)."""
        return LaunchSetUp(self._kernel, self._grid, self._raw)

    def for_target(self, target, origin, voxel_size, scale=1.0) -> ChunkLauncher:
        """A launcher for another ``target`` with these arguments: this one's kernel set-up
        shared when it fits (same kind of target, device, image shape, geometry and tiling),
        else a new one.  (A projector keeps one, with no target, from call to call.)"""
        same = (
            isinstance(target, BackAccumulator) == self.back
            and isinstance(target, _ImageWithWorkspace)
            and target.device_id == self.device_id
            and tuple(target.image.shape) == self.shape
            and (target.a is not None and self.options.variant != "simple") == self.tiled
            and _same_args((origin, voxel_size, scale), self._given)
        )
        if not same:
            return ChunkLauncher(target, origin, voxel_size, scale, options=self.options)
        twin = copy.copy(self)
        twin.target = target
        return twin

    def without_target(self) -> ChunkLauncher:
        """This launcher's set-up, holding no device array (to be kept between calls)."""
        twin = copy.copy(self)
        twin.target = None
        return twin

    def __call__(self, tables, values) -> None:
        t = self.target
        if t is None:
            raise StirGpuError("ChunkLauncher: no target (a launcher kept between calls needs one set)")
        if not (self.tiled and isinstance(tables, DeviceTables) and tables.device_id == t.device_id):
            if self.back:
                back_chunk(tables, values, t, self.origin, self.voxel_size, self.scale, options=self.options)
            else:
                forward_chunk(
                    tables, t, self.origin, self.voxel_size, out=values, scale=self.scale, options=self.options
                )
            return
        # the one check kept: a wrong size would make the kernel read or write out of bounds
        if (
            values.dtype != np.float32
            or values.size != tables.num_lors
            or values.data.device_id != t.device_id
            or not values.flags.c_contiguous
        ):
            raise StirGpuError(
                f"ChunkLauncher: values must be {tables.num_lors} contiguous float32 on device "
                f"{t.device_id}, not {values.size} {values.dtype} on device {values.data.device_id}"
            )
        axial = self.options.axial_blocks(tables, self.back)
        with self._device:
            if self._raw is None:
                _launch_tiled(
                    self._kernel,
                    self.back,
                    self._warps,
                    self._smem,
                    tables,
                    axial,
                    values,
                    t.image,
                    t.a,
                    t.b,
                    self.scale,
                    self._grid,
                )
                return
            # the kernels' argument order (joseph.cu): forward (image, A, B, out), back (values, image, A, B)
            arrays = (values, t.image, t.a, t.b) if self.back else (t.image, t.a, t.b, values)
            self._raw(tables, self._warps, axial, arrays, self._smem)


class _RawLaunch:
    """One tiled chunk kernel launched straight through the driver (``cuLaunchKernel``) from
    a kept argument block: cupy's generic launch converts every one of the 18 arguments on
    every call, ~20-30 us of Python per chunk, on the critical path before a subset's first
    kernel.  The block holds one 8-byte slot per argument in the kernel's order (joseph.cu:
    tables, nparts, nt, axial, four arrays, scale, origin and voxel size (double), image
    shape (int)); the driver copies the values at the launch, so the block is rewritten for
    the next one.  A launcher and the twins sharing its block (``for_target``) are used by
    one thread at a time (one GPU lane's)."""

    _N_ARGS = 18

    def __init__(self, function, launch, stream_ptr, scale, grid):
        self._function = function  # keeps the module loaded
        self._ptr = int(function.ptr)
        self._launch = launch
        self._stream_ptr = stream_ptr
        self._slots = np.zeros(self._N_ARGS, dtype=np.uint64)
        self._i32 = self._slots.view(np.int32)
        self._f32 = self._slots.view(np.float32)
        self._f64 = self._slots.view(np.float64)
        base = self._slots.ctypes.data
        self._params = np.array([base + 8 * i for i in range(self._N_ARGS)], dtype=np.uint64)
        self._params_ptr = self._params.ctypes.data
        self._f32[2 * 8] = scale
        for i, v in enumerate(grid[:6]):
            self._f64[9 + i] = float(v)
        for i, v in enumerate(grid[6:]):
            self._i32[2 * (15 + i)] = int(v)

    @classmethod
    def make(cls, cp, kernel, scale, grid) -> _RawLaunch | None:
        """The raw launch of ``kernel`` (a cupy RawKernel, on the current device), or None where
        this cupy offers no driver launch (cupy's own launch is then used)."""
        launch = getattr(getattr(cp.cuda, "driver", None), "launchKernel", None)
        function = getattr(kernel, "kernel", None)
        if launch is None or function is None or not hasattr(function, "ptr"):
            return None
        return cls(function, launch, lambda: cp.cuda.get_current_stream().ptr, scale, grid)

    def __call__(self, tables, warps: int, axial: int, arrays, smem: int) -> None:
        blocks = tables.blocks(warps)
        slots, i32 = self._slots, self._i32
        slots[0] = tables.data.data.ptr
        i32[2] = len(tables.shapes)
        i32[4] = tables.shapes[0][2]
        i32[6] = axial
        slots[4] = arrays[0].data.ptr
        slots[5] = arrays[1].data.ptr
        slots[6] = arrays[2].data.ptr
        slots[7] = arrays[3].data.ptr
        self._launch(self._ptr, blocks, 1, 1, 32, warps, 1, smem, self._stream_ptr(), self._params_ptr, 0)
