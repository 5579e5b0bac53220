"""The Joseph kernels against libparallelproj: stirgpu's chunk kernels and the library STIR's
Parallelproj projector calls, same run, same LORs, same image, data resident where the backend computes.

    python3 benchmarks/kernels.py                              # GPU: mmr, dmi, dmi-tof; the anchors' CUDA build
    python3 benchmarks/kernels.py --cases dmi-tof --repeat 9   # one case
    python3 benchmarks/kernels.py --backend cpu --views 8      # CPU: 8 views of every segment; the OpenMP build
    python3 benchmarks/kernels.py --backend cpu --views 8 --stir   # the reference STIR's libparallelproj
    python3 benchmarks/kernels.py --no-baseline                # stirgpu alone

Cases (``--cases``, comma-separated; default all three), each with STIR's default image for it
(``stir_default_image_info``) holding an elliptic cylinder of smoothly varying values:

* ``mmr`` -- Siemens mMR, span 11, maximum ring difference 60 (11 segments), STIR's default 252
  views and 344 tangential positions: 72.6 M LORs, image 127 x 285 x 285;
* ``dmi`` -- GE Discovery MI 4 rings, span 1, all ring differences (71 segments), 272 views, 415
  tangential positions, non-TOF: 146 M LORs, image 71 x 323 x 323;
* ``dmi-tof`` -- the same with TOF mashing 29: 13 TOF bins per LOR.

``--views N`` projects N of a case's views (spread evenly over the view range, first and last
included) of every segment instead of all (to keep CPU runs short); ``--max-ring-difference``
(fewer segments) and ``--tangential`` (the central N tangential positions) replace the cases'
own, for smoke runs.

The two sides, on one chunk of all segments (one part per segment):

* ``stirgpu`` -- ``forward_chunk`` / ``back_chunk`` (``forward_chunk_tof`` / ``back_chunk_tof``
  for TOF) on a :class:`~stirgpu.kernels.JosephChunk` (the kernels compute every LOR's endpoints
  from per-view tables), the image as the engine hands it to the kernels: on a GPU prepared once
  (``stirgpu.kernels.cuda.images.prepare_image``: its zero-framed copies, which the forward walk
  reads), a numpy array on the CPU;
* ``libparallelproj`` (the baseline) -- ``joseph3d_fwd`` / ``joseph3d_back``
  (``joseph3d_tof_sino_fwd`` / ``joseph3d_tof_sino_back`` for TOF, with STIR's bin width, sigma
  and 4 sigmas) of the library through ctypes, one call for all LORs, 64 threads per block as
  STIR calls it, on STIR's float32 endpoints of the same LORs in the same order, precomputed
  where the library computes (``stirgpu.kernels.joseph.cuda.endpoints`` on the GPU,
  ``stirgpu.kernels.joseph.cpu.endpoints_array`` on the CPU), times STIR's rescale, start and end
  swapped for TOF as STIR's Parallelproj projector passes them; its TOF values are
  [LOR][TOF bin], stirgpu's [TOF bin][LOR] per part (the back projection is handed stirgpu's
  forward values transposed to its layout).

The library (``--lib PATH``): by default ``shared/anchors/libparallelproj-2.0.7-cuda-sm90.so``
(``--backend cuda``) or ``shared/anchors/libparallelproj-2.0.7-cpu.so`` (``--backend cpu``)
beside the checkout (``../shared/anchors`` from the repository); ``--stir [PREFIX]`` takes
``lib/libparallelproj.so`` of a STIR build instead (without PREFIX the reference STIR, found as
tests/reference_stir.py finds it); ``--no-baseline`` times stirgpu alone.

Timing (``timing.py``): one untimed call of each of the four calls (compilation, first touch),
then ``--repeat`` rounds, each timing stirgpu's and the library's forward and back projections
in turn (the GPU synchronised before and after each call); figures are medians.  A back
projection's time includes zeroing its image (both sides alike).  On the CPU ``--threads``
(default: the CPUs this process may run on) sets numba's threads and the library's OpenMP threads.

Reported per case: seconds and LOR/s (LOR-bins/s for TOF: LORs x TOF bins per second) of each
side, the speed-up of stirgpu (the library's seconds over stirgpu's) forward and back, and their
agreement, max |stirgpu - libparallelproj| / max |libparallelproj|, of the forward projections
and of the back projections of the same values (stirgpu's forward projection).  stirgpu computes
libparallelproj 2.0.7's float32 arithmetic (its GPU kernels contract no multiply-adds, so its GPU
forward projection is its CPU one bit for bit): against the OpenMP build the forward agreement is
0; the CUDA build lets the compiler contract multiply-adds, so on a GPU the two may differ by
float32 rounding.  Back projections differ by the order of float32 additions.  On a GPU also:
the device, the kernels launched and their LOR order, and ``prepare_image``'s seconds (paid once
per image by the engine, not in the forward figure).

Output: one JSON document (``--json FILE`` also writes it), then one readable line per case.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, Path(__file__).resolve().parent):  # the checkout (not installed) and the helpers beside us,
    if str(p) not in sys.path:  # also when a test loads this file as a module
        sys.path.insert(0, str(p))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
from timing import Device, median_seconds, rounds  # noqa: E402

#: case -> (scanner, span, maximum ring difference (None: all), TOF mashing factor (None: non-TOF))
CASES = {
    "mmr": ("Siemens mMR", 11, 60, None),
    "dmi": ("GE Discovery MI 4 rings", 1, None, None),
    "dmi-tof": ("GE Discovery MI 4 rings", 1, None, 29),
}
#: the default library of each backend, beside the checkout
DEFAULT_LIBS = {
    "cuda": REPO.parent / "shared" / "anchors" / "libparallelproj-2.0.7-cuda-sm90.so",
    "cpu": REPO.parent / "shared" / "anchors" / "libparallelproj-2.0.7-cpu.so",
}
#: threads per block STIR's Parallelproj projector asks libparallelproj for (ignored by the OpenMP build)
THREADS_PER_BLOCK = 64
#: the four timed calls of a case
CALLS = ("stirgpu forward", "libparallelproj forward", "stirgpu back", "libparallelproj back")


class Libparallelproj:
    """libparallelproj 2's ``joseph3d_fwd`` / ``_back`` and ``joseph3d_tof_sino_fwd`` / ``_back``
    through ctypes.  Pointers are host arrays (the OpenMP build) or device arrays (the CUDA build,
    on GPU ``device_id``), as the library takes either."""

    FUNCTIONS = ("joseph3d_fwd", "joseph3d_back", "joseph3d_tof_sino_fwd", "joseph3d_tof_sino_back")

    def __init__(self, path: Path, origin: str, device_id: int = 0):
        try:
            self.lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise arguments.BadArgument(f"{origin}: cannot load {path} ({exc})") from None
        missing = [name for name in self.FUNCTIONS if not hasattr(self.lib, name)]
        if missing:
            raise arguments.BadArgument(f"{origin}: {path} has no {', '.join(missing)} (not libparallelproj 2?)")
        for name in ("joseph3d_fwd", "joseph3d_back"):
            fn = getattr(self.lib, name)
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        for name in ("joseph3d_tof_sino_fwd", "joseph3d_tof_sino_back"):
            fn = getattr(self.lib, name)
            fn.restype = None
            fn.argtypes = (
                [ctypes.c_void_p] * 6
                + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
                + [ctypes.c_float, ctypes.c_short, ctypes.c_ubyte, ctypes.c_ubyte, ctypes.c_int, ctypes.c_int]
            )
        self.path, self.origin, self.device_id = str(path), origin, int(device_id)

    def project(self, back: bool, xs, xe, image, origin, voxel_size, values, dims) -> None:
        """``joseph3d_fwd`` (``values`` = the projection of ``image``) or ``joseph3d_back``
        (``values`` added into ``image``) of the LORs ``xs[i] -> xe[i]``."""
        fn = self.lib.joseph3d_back if back else self.lib.joseph3d_fwd
        n = xs.shape[0]
        pointers = (_ptr(a) for a in (xs, xe, image, origin, voxel_size, values))
        fn(*pointers, n, _ptr(dims), self.device_id, THREADS_PER_BLOCK)

    def project_tof(self, back: bool, xs, xe, image, origin, voxel_size, values, dims, tof) -> None:
        """``joseph3d_tof_sino_fwd`` / ``_back``: ``values`` (LORs, TOF bins) in C order; ``tof``
        is a :class:`TofArguments`."""
        fn = self.lib.joseph3d_tof_sino_back if back else self.lib.joseph3d_tof_sino_fwd
        n = xs.shape[0]
        pointers = (_ptr(a) for a in (xs, xe, image, origin, voxel_size, values))
        per_lor = (0, 0)  # sigma and centre offset: one value for all LORs, not one per LOR
        tof_args = (tof.width, _ptr(tof.sigma), _ptr(tof.offset), tof.n_sigmas, tof.num_bins, *per_lor)
        fn(*pointers, n, _ptr(dims), *tof_args, self.device_id, THREADS_PER_BLOCK)


class TofArguments:
    """libparallelproj's TOF arguments from stirgpu's TOF table (``stir_tof_tables``): bin width,
    sigma and centre offset (arrays of one value where the library computes: not LOR-dependent),
    the number of sigmas, the number of TOF bins."""

    def __init__(self, xp, table, num_bins: int):
        width, sigma, n_sigmas, _ = (float(v) for v in table)
        self.width, self.n_sigmas, self.num_bins = width, n_sigmas, int(num_bins)
        self.sigma = xp.asarray(np.array([sigma], np.float32))
        self.offset = xp.zeros(1, np.float32)


def _ptr(a) -> int:
    """The address of a numpy or cupy array's data."""
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data.ptr


def case_geometry(name: str, args):
    """(ProjDataInfo, views projected: None for all) of case ``name`` with the run's options."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    scanner_name, span, mrd, mash = CASES[name]
    sc = Scanner.from_name(scanner_name)
    if args.max_ring_difference is not None:
        mrd = args.max_ring_difference
    elif mrd is None:
        mrd = sc.num_rings - 1
    pdi = ProjDataInfo.construct(sc, span, mrd, num_tangential_poss=args.tangential, tof_mash_factor=mash)
    views = None
    if args.views is not None:
        nv = pdi.get_num_views()
        if args.views > nv:
            raise arguments.BadArgument(f"--views {args.views}: case {name!r} has {nv} views")
        views = np.unique(np.linspace(0, nv - 1, args.views).round().astype(np.int64))
    return pdi, views


def phantom(shape) -> np.ndarray:
    """An elliptic cylinder of smoothly varying positive values, float32 (the values do not change
    the work; a realistic image keeps the agreement figures meaningful)."""
    nz, ny, nx = shape
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in (nz, ny, nx)), indexing="ij")
    inside = (x / 0.7) ** 2 + (y / 0.6) ** 2 <= 1
    return (inside * (1 + 0.5 * np.cos(3 * x) * np.sin(2 * y) + 0.2 * z)).astype(np.float32)


def library_endpoints(device: Device, chunk, rescale):
    """STIR's float32 endpoints of every LOR of ``chunk``, times ``rescale``, in the chunk's bin
    order: (start, end), each (n, 3) float32 (z, y, x), where the backend computes."""
    if device.name == "cuda":
        from stirgpu.kernels.joseph.cuda import endpoints

        dev = device.xp.cuda.Device().id
        return endpoints(chunk.device(dev), rescale, dev)
    from stirgpu.kernels.joseph.cpu import endpoints_array

    ends = [endpoints_array(t) for t in chunk.host]  # mm, (nv, na, nt, 3) per part
    return tuple(
        np.ascontiguousarray(np.concatenate([e[i].reshape(-1, 3) for e in ends]) * np.float32(rescale)) for i in (0, 1)
    )


def lor_major(xp, flat, chunk, nb: int):
    """stirgpu's TOF values of a chunk (per part [TOF bin][LOR], the parts one after the other) as
    libparallelproj lays them out: (LORs, TOF bins), C order."""
    out = xp.empty((chunk.num_lors, nb), np.float32)
    o = 0
    for nv, na, nt in chunk.shapes:
        k = nv * na * nt
        out[o : o + k] = flat[nb * o : nb * (o + k)].reshape(nb, k).T
        o += k
    return out


def relative_difference(xp, a, b) -> float:
    """max |a - b| / max |b| where the arrays are (no host copies of GPU data)."""
    scale = float(xp.abs(b).max())
    return float(xp.abs(a.reshape(-1) - b.reshape(-1)).max()) / max(scale, 1e-30)


def _rates(n_bins: int, tof: bool, forward_s: float, back_s: float) -> dict:
    unit = "lor_bins_per_s" if tof else "lor_per_s"
    return {
        "forward_s": forward_s,
        "back_s": back_s,
        f"forward_{unit}": n_bins / forward_s,
        f"back_{unit}": n_bins / back_s,
    }


def bench_case(device: Device, name: str, pdi, views, repeat: int, lib: Libparallelproj | None) -> dict:
    """One case's figures (the module docstring says which)."""
    from stirgpu.kernels import JosephChunk, back_chunk, back_chunk_tof, forward_chunk, forward_chunk_tof
    from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
    from stirgpu.kernels.tof.api import stir_tof_tables

    xp = device.xp
    tof = pdi.is_tof_data()
    info = stir_default_image_info(pdi)
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s) if views is None else pdi.chunk_tables(s, views=views) for s in pdi.segment_nums]
    chunk = JosephChunk(parts, pdi)
    n = chunk.num_lors
    table, _, nb = stir_tof_tables(pdi, frame[2]) if tof else (None, 0, 1)
    img = xp.asarray(phantom(info.shape))
    res = {
        "scanner": pdi.get_scanner().name,
        "span": CASES[name][1],
        "max_ring_difference": pdi.get_max_ring_difference_overall(),
        "segments": pdi.get_num_segments(),
        "views": pdi.get_num_views() if views is None else views.tolist(),
        "views_of": pdi.get_num_views(),
        "tangential": pdi.get_num_tangential_poss(),
        "tof_bins": nb,
        "tof_mash_factor": CASES[name][3],
        "lors": n,
        "lor_bins": n * nb,
        "image": list(info.shape),
        "voxel_size": [float(v) for v in info.voxel_size],
    }
    image = img  # as the engine hands it to the kernels
    if device.name == "cuda":
        from stirgpu.kernels.cuda.images import prepare_image

        res["gpu"] = gpu_facts(img, tof, table)
        res["gpu"]["prepare_image_s"] = median_seconds(device, lambda: prepare_image(img), repeat)
        image = prepare_image(img)
    ours_fwd = xp.zeros(nb * n, np.float32)
    ours_back = xp.zeros(info.shape, np.float32)
    if tof:
        fwd = lambda: forward_chunk_tof(chunk, pdi, image, frame, out=ours_fwd)  # noqa: E731
        bck = lambda: back_chunk_tof(chunk, pdi, ours_fwd, ours_back, frame)  # noqa: E731
    else:
        fwd = lambda: forward_chunk(chunk, pdi, image, frame, out=ours_fwd)  # noqa: E731
        bck = lambda: back_chunk(chunk, pdi, ours_fwd, ours_back, frame)  # noqa: E731

    def ours_back_call():
        ours_back.fill(0)
        bck()

    calls = {"stirgpu forward": fwd, "stirgpu back": ours_back_call}
    if lib is not None:
        fwd()  # stirgpu's forward values, which both sides back project
        theirs, ours_values = library_calls(device, lib, chunk, frame, img, ours_fwd, table, nb)
        calls |= theirs
    timed = rounds(device, {k: calls[k] for k in CALLS if k in calls}, repeat)
    times = {k: statistics.median(v) for k, v in timed.items()}
    res["stirgpu"] = _rates(n * nb, tof, times["stirgpu forward"], times["stirgpu back"])
    if lib is not None:
        lib_fwd, lib_back = calls["libparallelproj forward"].result, calls["libparallelproj back"].result
        res["libparallelproj"] = _rates(n * nb, tof, times["libparallelproj forward"], times["libparallelproj back"])
        res["speed_up"] = {
            "forward": times["libparallelproj forward"] / times["stirgpu forward"],
            "back": times["libparallelproj back"] / times["stirgpu back"],
        }
        res["agreement"] = {
            "forward": relative_difference(xp, ours_values, lib_fwd),
            "back": relative_difference(xp, ours_back, lib_back),
        }
    return res


class _Call:
    """A timed call and the array it writes (its result, read after the timing)."""

    def __init__(self, call, result):
        self.call, self.result = call, result

    def __call__(self):
        return self.call()


def library_calls(device: Device, lib: Libparallelproj, chunk, frame, img, ours_fwd, table, nb: int):
    """(the library's forward and back calls on the chunk's LORs where the backend computes, by
    name; stirgpu's forward values ``ours_fwd`` in the library's layout, which its back projection
    is handed)."""
    xp = device.xp
    xs, xe = library_endpoints(device, chunk, frame[2])
    origin, vox = (xp.asarray(np.asarray(v, np.float32)) for v in frame[:2])
    dims = xp.asarray(np.array(img.shape, np.int32))
    values = xp.zeros(nb * chunk.num_lors, np.float32)  # the library leaves LORs that miss the image untouched
    acc = xp.zeros(img.shape, np.float32)
    if table is not None:  # TOF
        tof = TofArguments(xp, table, nb)
        given = lor_major(xp, ours_fwd, chunk, nb)  # stirgpu's values in the library's layout

        # STIR passes the LORs' ends as their starts for TOF (docs/tof.md)
        def fwd():
            lib.project_tof(False, xe, xs, img, origin, vox, values, dims, tof)

        def back():
            acc.fill(0)
            lib.project_tof(True, xe, xs, acc, origin, vox, given, dims, tof)
    else:
        given = ours_fwd

        def fwd():
            lib.project(False, xs, xe, img, origin, vox, values, dims)

        def back():
            acc.fill(0)
            lib.project(True, xs, xe, acc, origin, vox, given, dims)

    return {"libparallelproj forward": _Call(fwd, values), "libparallelproj back": _Call(back, acc)}, given


def gpu_facts(img, tof: bool, table) -> dict:
    """The kernels a projection of the cupy image ``img`` launches and their LOR order."""
    from stirgpu.kernels.joseph import cuda as joseph_cuda

    order = {kind: joseph_cuda.lor_order(kind, img, tof) for kind in ("fwd", "back")}
    if tof:
        from stirgpu.kernels.tof.cuda import kernel_name, plane_window

        window = plane_window(table)
        names = {kind: kernel_name(kind, window) for kind in ("fwd", "back")}
    else:
        window = None
        names = {"fwd": "fwd_stir", "back": "back_stir" if img.size < 2**31 else "back_stir_wide"}
    return {
        "forward_kernel": names["fwd"],
        "back_kernel": names["back"],
        "tof_window_bins": window,
        "axial_major": {"forward": order["fwd"], "back": order["back"]},
    }


def device_facts(device: Device) -> dict:
    if device.name != "cuda":
        return {}
    from stirgpu.kernels.cuda.compile import device_arch

    cp = device.xp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "arch": device_arch(),
        "sm_count": int(props["multiProcessorCount"]),
    }


def library(args, device: Device) -> Libparallelproj | None:
    """The baseline the options name (None with ``--no-baseline``)."""
    if args.no_baseline:
        return None
    device_id = device.xp.cuda.Device().id if device.name == "cuda" else 0
    if args.stir is not None:
        from vs_stir import find_stir

        given = f"--stir {args.stir}".rstrip()
        try:
            ref = find_stir(args.stir or None)
        except arguments.BadArgument as exc:
            raise arguments.BadArgument(f"{exc} (--no-baseline times stirgpu alone)") from None
        if ref.bin_dir is None:
            raise arguments.BadArgument(f"{given}: the STIR found ({ref.origin}) has no known library folder")
        path = ref.bin_dir.parent / "lib" / "libparallelproj.so"
        if not path.is_file():
            raise arguments.BadArgument(f"{given}: no {path} ({ref.origin})")
        return Libparallelproj(path, f"{given} ({ref.origin})", device_id)
    if args.lib is None:
        path = DEFAULT_LIBS[args.backend]
        if not path.is_file():
            raise arguments.BadArgument(
                f"--lib: the default {path} is not there (give --lib PATH, --stir [PREFIX] or --no-baseline)"
            )
        return Libparallelproj(path, "--lib (default)", device_id)
    path = Path(args.lib)
    if not path.is_file():
        raise arguments.BadArgument(f"--lib {args.lib}: no such file")
    return Libparallelproj(path, f"--lib {args.lib}", device_id)


def cpu_threads(args) -> int:
    """Set numba's threads and OpenMP's (before libgomp is loaded, by numba or the library)."""
    threads = args.threads or len(os.sched_getaffinity(0))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import numba

    if threads > numba.config.NUMBA_NUM_THREADS:
        raise arguments.BadArgument(
            f"--threads {threads}: numba was started with at most {numba.config.NUMBA_NUM_THREADS} "
            "threads (NUMBA_NUM_THREADS)"
        )
    numba.set_num_threads(threads)
    try:  # numba's OpenMP layer set OpenMP's threads to all of numba's when it started its pool
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(threads)
    except (OSError, AttributeError):
        pass
    return threads


def _openmp_threads() -> int | None:
    """What libgomp (loaded by the library) will use, or None where it cannot be asked."""
    try:
        return int(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())
    except (OSError, AttributeError):
        return None


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms" if seconds < 1 else f"{seconds:.4g} s"


def readable(name: str, case: dict, backend: str) -> str:
    tof = case["tof_bins"] > 1
    unit, key = ("LOR-bins/s", "lor_bins_per_s") if tof else ("LOR/s", "lor_per_s")
    views = case["views"] if isinstance(case["views"], int) else f"{len(case['views'])} of {case['views_of']}"
    bins = f" x {case['tof_bins']} TOF bins" if tof else ""
    head = (
        f"{name} ({backend}; {case['scanner']} span {case['span']}, {case['segments']} segments, {views} views, "
        f"{case['lors']:.3g} LORs{bins}, image {' x '.join(map(str, case['image']))}):"
    )
    parts = []
    for way in ("forward", "back"):
        s = case["stirgpu"]
        text = f"{way} stirgpu {_duration(s[f'{way}_s'])} ({s[f'{way}_{key}']:.3g} {unit})"
        if "libparallelproj" in case:
            b = case["libparallelproj"]
            text += (
                f", libparallelproj {_duration(b[f'{way}_s'])} ({b[f'{way}_{key}']:.3g} {unit}): "
                f"speed-up {case['speed_up'][way]:.2f}x, max |diff| / max {case['agreement'][way]:.2g}"
            )
        parts.append(text)
    return f"{head} {'; '.join(parts)}"


def parse_args(argv=None):
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--cases",
        type=arguments.name_list(tuple(CASES)),
        default=list(CASES),
        help=f"comma-separated, of {', '.join(CASES)} (default: all)",
    )
    ap.add_argument("--repeat", type=arguments.positive_int, default=5, help="timed rounds (median)")
    ap.add_argument("--views", type=arguments.positive_int, help="views of every segment (default: all)")
    ap.add_argument(
        "--max-ring-difference", type=arguments.non_negative_int, help="instead of the cases' own (smoke runs)"
    )
    ap.add_argument(
        "--tangential", type=arguments.positive_int, help="tangential positions (default: STIR's; smoke runs)"
    )
    ap.add_argument(
        "--threads",
        type=arguments.positive_int,
        help="CPU only: numba's and OpenMP's threads (default: the CPUs this process may run on)",
    )
    base = ap.add_mutually_exclusive_group()
    base.add_argument(
        "--lib",
        help="libparallelproj 2 to compare with (default: ../shared/anchors/libparallelproj-2.0.7-cuda-sm90.so "
        "with --backend cuda, ../shared/anchors/libparallelproj-2.0.7-cpu.so with --backend cpu, from the "
        "repository)",
    )
    base.add_argument(
        "--stir",
        nargs="?",
        const="",
        metavar="PREFIX",
        help="take lib/libparallelproj.so of the STIR build PREFIX (without PREFIX: of the reference STIR, "
        "found as tests/reference_stir.py finds it)",
    )
    base.add_argument("--no-baseline", action="store_true", help="time stirgpu alone")
    ap.add_argument("--json", help="also write the JSON document to this file")
    args = ap.parse_args(argv)
    if args.threads is not None and args.backend != "cpu":
        ap.error("--threads: only for --backend cpu")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = cpu_threads(args) if args.backend == "cpu" else None
    if args.backend == "cuda":
        from stirgpu.execution import resolve_backend

        resolve_backend("cuda")  # one clear line where cupy or a GPU is missing
    device = Device.of(args.backend)
    geometries = {name: case_geometry(name, args) for name in args.cases}  # bad options refused before any work
    lib = library(args, device)
    doc = {
        "backend": args.backend,
        **device_facts(device),
        "threads": threads,
        "openmp_threads": _openmp_threads() if lib is not None and args.backend == "cpu" else None,
        "library": None if lib is None else {"path": lib.path, "origin": lib.origin},
        "repeat": args.repeat,
        "cases": {},
    }
    for name, (pdi, views) in geometries.items():
        doc["cases"][name] = bench_case(device, name, pdi, views, args.repeat, lib)
        if device.name == "cuda":
            device.xp.get_default_memory_pool().free_all_blocks()
    arguments.emit_cases(doc, args.json, lambda name, case: readable(name, case, args.backend))
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
