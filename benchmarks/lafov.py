"""Long axial FOV: Siemens Biograph Vision Quadra projections from disk and in memory, a subset, OSEM.

    python3 benchmarks/lafov.py                              # Quadra span 1, max ring difference 85 (39.8 GB)
    python3 benchmarks/lafov.py --max-ring-diff 20 --views 133 --dir /scratch
    python3 benchmarks/lafov.py --backend cpu --rings 4 --max-ring-diff 2 --views 21 --tangential 32

Geometry: STIR's ``Siemens Quadra`` (323 rings of 798 detectors, 520 tangential positions),
span 1, ``--max-ring-diff`` (85 by default: 171 segments, 9.94e9 bins, 39.8 GB float32),
``--views`` (399: no mashing; fewer mash views), ``--tangential``, ``--rings`` (fewer than 323
make a Quadra-like scanner, not one STIR names).  Image: STIR's default image for the data
(``stir_default_image_info``, what STIR's ``back_project`` writes: 645 x 447 x 447 at full size)
holding a phantom (a uniform cylinder with two hot spheres).

Each run is a fresh process (workers import numpy and stirgpu; the parent does not, because
Linux carries a process's peak RSS over fork + exec into its children), after the page cache
of the data file is dropped (``posix_fadvise(DONTNEED)``):

* ``forward_disk`` -- forward projection into a new Interfile file in ``--dir`` (with its fsync);
* ``plain_read`` -- the disk's read rate on that same file (64 MiB ``readinto``, no stirgpu);
* ``back_disk`` -- back projection of all views from the file;
* ``subset_back_disk`` -- back projection of subset 0 of ``--subsets`` (STIR's views
  v % 21 == 0) from the file;
* ``back_disk_gpu_image`` / ``subset_back_disk_gpu_image`` (GPU backends) -- the same two
  into a GPU image (a cupy ``image_out``, filled in place), which leaves out the image's copy
  to the host and its host-side finish (515 MB for the Quadra's default image);
* ``osem_disk`` -- one full OSEM iteration (``--subsets`` subiterations of
  ``ProjectorPair.forward_back_ratio`` on the file, the estimate on the device), after the
  subset sensitivities, which are not timed;
* ``memory`` -- forward projection into host memory (``ProjDataInMemory``) and back
  projection from it, then one full OSEM iteration of the data in memory (needs the data's size
  in RAM; ``--no-memory`` skips it);
* ``plain_write`` -- the disk's write rate (with fsync): the data file replaced by a plain
  file of the same name and size, written in 64 MiB blocks.

Before its timed calls, each projecting worker pays its process's one-time costs (the kernels'
compilation or loading from their caches -- on GPUs also those of an OSEM subiteration with the
estimate on the device --, the devices' start) on a tiny Quadra-like geometry
(``warm_up_seconds``; ``--no-warm-up`` times the calls cold instead), so the calls and their
set-up are those of the run's geometry.  ``--cold-caches`` starts every run with empty on-disk
kernel caches (cupy's ``CUPY_CACHE_DIR``, stirgpu's ``STIRGPU_CACHE_DIR``), as the first process
on a fresh machine: with the warm-up, it shows whether the warm-up pays every compilation.
Per run: seconds, GB/s, LOR/s, peak RSS (``ru_maxrss``), the call's ``RunStats``, and its
set-up: the projector's ``set_up``, the input image's upload (``set_input``), the engine's
set-up (``RunStats.setup_seconds``) and ``to_first_chunk_seconds``, from the call's start to the
first stage of its first chunk (the upload, the projector's work around the engine's run, and
the first event of ``RunStats.events``).  Figures against the same run's baselines: the
projector's disk rates over the plain ones (target: back from disk >= 90 % of the plain
read), the subset's share of the full back projection (target <= 1.2 / 21), and the OSEM
iteration over the larger of the time to read the data once at the plain rate and the
kernels' time (the compute stage's busy seconds; target <= 1.2).

``--sweep 10,40,85`` runs only ``memory`` at each of those maximum ring differences and reports
how each call's seconds grow with the bins (``lafov_sweep.py``: linear calls have equal slopes).

``--setup-only`` times each call's set-up alone, at the run's geometry, on a sparse data file
(no room needed but the image's): ``lafov_setup.py``.

The data never sit in this script's memory except in ``memory``.  The data size is checked
against ``--dir``'s free space (and ``MemAvailable`` for ``memory``) before anything is
written.  Output: a JSON document (``--json FILE`` also writes it), then readable lines.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arguments
from page_cache import drop_cache

REPO = Path(__file__).resolve().parent.parent
SCANNER = "Siemens Quadra"
BLOCK = 64 * 1024 * 1024
#: the in-memory run may use at most this fraction of MemAvailable for the data
MEMORY_FRACTION = 0.8
#: room kept free in --dir beyond the data and the image
DISK_MARGIN_BYTES = 256 * 1024 * 1024
#: the performance targets: back projection from disk at 90 % of the plain read, a subset within 1.2/21
TARGET_BACK_OF_READ = 0.9
TARGET_SUBSET_SHARE = 1.155  # x 1 / subsets: 0.055 of the full back projection for 21 subsets
TARGET_SUBSET_SHARE_GPU_IMAGE = 1.092  # 0.052 for 21 subsets, into a GPU image
TARGET_OSEM_RATIO = 1.1
TARGET_OSEM_MEMORY_SECONDS = 20.0  # the Quadra's, span 1, maximum ring difference 85
TARGET_BACK_LOR_PER_S = 8e8  # the back projection's kernels
TARGET_FORWARD_LOR_PER_S = 1.6e9


def note(*parts) -> None:
    """A progress line on stderr, so a run cut short still says how far it got."""
    print("[lafov]", *parts, file=sys.stderr, flush=True)


# -- what the workers share (numpy and stirgpu imported here, in the workers only) -----------


def _stirgpu():
    if str(REPO) not in sys.path:  # run from a checkout without installing
        sys.path.insert(0, str(REPO))
    import numpy as np

    import stirgpu

    return np, stirgpu


def template(args):
    """The projection-data geometry of the run: STIR's Quadra (or a Quadra-like scanner of
    ``--rings`` rings), span ``--span``, ``--max-ring-diff``, ``--views``, ``--tangential``."""
    _stirgpu()
    from stirgpu.geometry import ProjDataInfo, Scanner

    scanner = Scanner.from_name(SCANNER)
    if args.rings is not None and args.rings != scanner.num_rings:
        scanner = scanner.replace(name=f"Quadra-like ({args.rings} rings)", num_rings=args.rings)
    return ProjDataInfo.construct(
        scanner, args.span, args.max_ring_diff, num_views=args.views, num_tangential_poss=args.tangential
    )


def default_image(pdi):
    """STIR's default image for ``pdi``, to the last bit (what STIR's ``back_project`` writes)."""
    from stirgpu.kernels.joseph.lors import stir_default_image_info

    return stir_default_image_info(pdi)


def phantom(info):
    """A uniform cylinder (radius 0.8 of the image's half width, all planes) with two hot
    spheres; built plane by plane (no image-sized temporaries beyond the image)."""
    np, _ = _stirgpu()
    nz, ny, nx = info.shape
    vz, vy, vx = info.voxel_size
    y = (np.arange(ny) - (ny - 1) / 2) * vy
    x = (np.arange(nx) - (nx - 1) / 2) * vx
    r2 = y[:, None] ** 2 + x[None, :] ** 2
    img = np.zeros(info.shape, np.float32)
    img[:] = (r2 < (0.8 * min(ny * vy, nx * vx) / 2) ** 2).astype(np.float32)
    half_z = nz * vz / 2
    for cz, cy, cx, rad, value in ((0.0, 0.3, -0.2, 0.12, 4.0), (0.5, -0.25, 0.25, 0.08, 8.0)):
        rr = rad * nx * vx / 2
        zc = cz * half_z
        for k in range(nz):
            dz = (k - (nz - 1) / 2) * vz - zc
            if abs(dz) < rr:
                d2 = (y[:, None] - cy * ny * vy / 2) ** 2 + (x[None, :] - cx * nx * vx / 2) ** 2
                img[k][d2 < rr * rr - dz * dz] = value
    return img


def _paths(folder: str) -> dict:
    f = Path(folder)
    return {"image": f / "phantom.hv", "data": f / "prompts.hs", "data_file": f / "prompts.s"}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def kernel_seconds(stats) -> float:
    """The compute stage's busy seconds of a call: summed over CPU lanes (they share the
    cores), the busiest GPU's otherwise."""
    busy = [b.get("compute", 0.0) for b in stats.busy.values()]
    return sum(busy) if stats.shared_compute else max(busy, default=0.0)


def call_figures(seconds: float, stats, nbytes: int, before: float = 0.0) -> dict:
    """What one projector call took: ``seconds`` (timed around it), its statistics and set-up
    (``before``: the input image's upload, done by ``set_input`` just before the call)."""
    first = min((e.start for e in stats.events), default=0.0)
    outside = max(seconds - stats.wall_seconds, 0.0)  # planning, checks, the image's finish
    return {
        "seconds": seconds,
        "GBps": nbytes / seconds / 1e9,
        "lor_per_s": stats.bins / seconds,
        "kernel_seconds": kernel_seconds(stats),
        "setup": {
            "input_seconds": before,
            "engine_setup_seconds": stats.setup_seconds,
            "outside_engine_seconds": outside,
            "first_stage_start_seconds": first,
            "to_first_chunk_seconds": before + outside + first,
        },
        "stats": stats.as_dict(),
    }


def _best(calls: list[dict]) -> dict:
    """The fastest of a worker's repeated calls, with the first (cold) call's set-up."""
    best = dict(min(calls, key=lambda c: c["seconds"]))
    best["setup"] = calls[0]["setup"]
    best["all_seconds"] = [c["seconds"] for c in calls]
    return best


def _configured(args):
    _, stirgpu = _stirgpu()
    return stirgpu.config(backend=args.backend)


def warm_up(args) -> float:
    """The process's one-time costs (the kernels' compilation or loading from their caches,
    the devices' start), paid on a tiny Quadra-like geometry before the timed calls, so those
    time the run's geometry alone; returns the seconds (0 with ``--no-warm-up``)."""
    if args.no_warm_up:
        return 0.0
    np, _ = _stirgpu()
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import ProjectorPair

    t0 = time.perf_counter()
    pdi = warm_up_template(args)
    info = default_image(pdi)
    with _configured(args):
        pp = ProjectorPair()
        pp.set_up(pdi, info)
        image = np.ones(info.shape, np.float32)
        store = ProjDataInMemory(pdi)
        pp.forward_project(store, image)
        for subset in (0, 1), (0, 2):  # all views; a subset (chunks of several segments)
            pp.back_project(None, store, *subset)
            pp.sensitivity(None, *subset)
            pp.forward_back_ratio(image, store, *subset)
        if pp.backend == "cuda":  # the OSEM run's path: the estimate and the ratio on the GPU
            _osem_subiteration(pp, store, 0, 2, *_device_estimate(image, pp.sensitivity(None, 0, 2)))
    return time.perf_counter() - t0


#: rings of the warm-up's scanner (at most): its viewgrams are then as long as the run's
WARM_UP_RINGS = 8


def warm_up_template(args):
    """The warm-up's geometry: 2 views, maximum ring difference 1 of a Quadra-like scanner of
    ``min(WARM_UP_RINGS, the run's rings)`` rings, and the run's tangential positions: a few
    ten thousand bins whose viewgrams are as long as the run's (4,160 and 3,640 bins against the
    Quadra's 123,760 or more).  That length matters on GPUs: cupy sums and maximises along a
    viewgram (STIR's threshold in the OSEM quotient) with one compiled kernel per CUB block size,
    which follows the length -- 32 threads up to 128 bins, 512 from 1,025 bins on; the earlier
    warm-up's 8 and 16 bins left the run's kernel to its first subiteration (docs/execution.md)."""
    _stirgpu()
    from stirgpu.geometry import ProjDataInfo, Scanner

    scanner = Scanner.from_name(SCANNER)
    rings = min(WARM_UP_RINGS, args.rings or scanner.num_rings)
    tiny = scanner.replace(name=f"Quadra-like ({rings} rings)", num_rings=rings)
    return ProjDataInfo.construct(tiny, 1, 1, num_views=2, num_tangential_poss=args.tangential)


def _device_estimate(x, sensitivity):
    """(estimate, sensitivity) on the GPU, as ``stirgpu.recon.OSEM`` keeps them."""
    import cupy

    return cupy.asarray(x), cupy.asarray(sensitivity)


def _osem_subiteration(pp, store, k: int, n: int, x, sensitivity) -> float:
    """One OSEM subiteration in place: the estimate ``x`` set as the input, the fused
    forward-ratio-back step of subset ``k`` of ``n``, ``x *= ratio / sensitivity``; returns the
    seconds of its step (the input's upload excluded)."""
    from stirgpu.arrays import array_module
    from stirgpu.recon.arrays import stir_divide

    pp.set_input(x)
    t0 = time.perf_counter()
    ratio = pp.forward_back_ratio(None, store, k, n, out_image=array_module(x).zeros_like(x))
    x *= stir_divide(ratio, sensitivity)
    return time.perf_counter() - t0


# -- the workers -----------------------------------------------------------------------------


def describe(args) -> dict:
    """The run's geometry and sizes, the backend resolved; writes nothing."""
    from stirgpu.execution import resolve_backend

    pdi = template(args)
    info = default_image(pdi)
    sc = pdi.get_scanner()
    return {
        "scanner": sc.name,
        "rings": sc.num_rings,
        "span": args.span,
        "max_ring_diff": args.max_ring_diff,
        "segments": pdi.get_num_segments(),
        "views": pdi.get_num_views(),
        "tangential_poss": pdi.get_num_tangential_poss(),
        "bins": pdi.total_num_bins,
        "data_bytes": 4 * pdi.total_num_bins,
        "image": list(info.shape),
        "voxel_size": list(info.voxel_size),
        "image_bytes": 4 * info.shape[0] * info.shape[1] * info.shape[2],
        "backend": resolve_backend(args.backend),
        "mem_available_bytes": mem_available_bytes(),
        "peak_rss_mb": peak_rss_mb(),
    }


def make(args) -> dict:
    """The phantom image, written into the run's folder."""
    from stirgpu.formats import VoxelsOnCartesianGrid, write_image

    info = default_image(template(args))
    t0 = time.perf_counter()
    write_image(_paths(args.dir)["image"], VoxelsOnCartesianGrid(info, fill=phantom(info)))
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def _seconds(call, *args) -> float:
    """The seconds ``call(*args)`` takes (a projector's set-up, its input's upload)."""
    t0 = time.perf_counter()
    call(*args)
    return time.perf_counter() - t0


def forward_disk(args) -> dict:
    from stirgpu.formats import ProjDataFromFile, read_image
    from stirgpu.projectors import ForwardProjector

    warm = warm_up(args)
    p = _paths(args.dir)
    pdi = template(args)
    image = read_image(p["image"])
    calls = []
    with _configured(args):
        fp = ForwardProjector()
        set_up = _seconds(fp.set_up, pdi, image.info)
        upload = _seconds(fp.set_input, image.as_array())
        for r in range(args.repeat):
            t0 = time.perf_counter()
            with ProjDataFromFile.create(p["data"], pdi, overwrite=True) as out:  # its close: fsync, commit
                fp.forward_project(out)
            seconds = time.perf_counter() - t0
            calls.append(call_figures(seconds, fp.last_stats, 4 * pdi.total_num_bins, upload if r == 0 else 0.0))
    return {**_best(calls), "set_up_seconds": set_up, "warm_up_seconds": warm, "peak_rss_mb": peak_rss_mb()}


def back_disk(args, subset: bool = False, gpu_image: bool = False) -> dict:
    """Back projection from the file into a new host image, or with ``gpu_image`` into a GPU
    image (a cupy array, filled in place: no image copied to the host)."""
    from stirgpu.formats import read_from_file, read_image
    from stirgpu.projectors import BackProjector

    warm = warm_up(args)
    p = _paths(args.dir)
    info = read_image(p["image"]).info
    k, n = (0, args.subsets) if subset else (0, 1)
    calls = []
    with _configured(args), read_from_file(p["data"]) as store:
        pdi = store.get_proj_data_info()
        bp = BackProjector()
        set_up = _seconds(bp.set_up, pdi, info)
        nbytes = 4 * sum(pdi.get_num_axial_poss(s) for s in pdi.segment_nums)
        nbytes *= len(pdi.subset_views(k, n)) * pdi.get_num_tangential_poss()
        target, synchronise = _image_target(info, gpu_image)
        for _ in range(args.repeat):
            drop_cache(p["data_file"])
            t0 = time.perf_counter()
            image = bp.back_project(target, store, subset_num=k, num_subsets=n)
            synchronise()
            seconds = time.perf_counter() - t0
            calls.append(call_figures(seconds, bp.last_stats, nbytes))
            calls[-1]["checksum"] = float(image.sum(dtype="float64"))
    return {
        **_best(calls),
        "set_up_seconds": set_up,
        "warm_up_seconds": warm,
        "subset": [k, n],
        "peak_rss_mb": peak_rss_mb(),
    }


def _image_target(info, gpu_image: bool):
    """(the back projection's ``image_out``, a call that waits for its GPU work): None (a new
    host image) and nothing, or a zeroed GPU image and its device's synchronisation."""
    if not gpu_image:
        return None, lambda: None
    import cupy

    return cupy.zeros(info.shape, dtype="float32"), cupy.cuda.Device().synchronize


def _busy_of_stages(stats: dict) -> dict:
    """A call's busy seconds per stage, the busiest lane's (where an OSEM subiteration's time
    went: reading its subset, or its kernels)."""
    busy = stats["busy_seconds"].values()
    return {stage: max((b.get(stage, 0.0) for b in busy), default=0.0) for stage in ("read", "h2d", "compute")}


def osem_iteration(pp, store, info, subsets: int, before=lambda: None) -> dict:
    """One full OSEM iteration of ``store`` with the set-up projector ``pp``: per subset the fused
    step (forward, quotient, back per chunk), then ``x *= ratio / sensitivity`` on the device;
    the subset sensitivities first (untimed), then ``before()`` (the data file's page cache
    dropped)."""
    np, _ = _stirgpu()
    from stirgpu.recon.arrays import to_numpy

    K = subsets
    xp = np
    if pp.backend == "cuda":
        import cupy as xp  # the estimate stays on the GPU, as in stirgpu.recon.OSEM
    t0 = time.perf_counter()
    # (each moved to the device as it comes: 21 host images of a Quadra are 10.8 GB)
    sens = [xp.asarray(pp.sensitivity(None, k, K)) for k in range(K)]
    sens_seconds = time.perf_counter() - t0
    x = xp.ones(info.shape, dtype=np.float32)
    before()
    subiterations = []
    t_iter = time.perf_counter()
    for k in range(K):
        t0 = time.perf_counter()
        seconds = _osem_subiteration(pp, store, k, K, x, sens[k])
        upload = time.perf_counter() - t0 - seconds
        subiterations.append(call_figures(seconds + upload, pp.last_stats, 0, upload))
    x = to_numpy(x)
    iteration = time.perf_counter() - t_iter
    return {
        "seconds": iteration,
        "subsets": K,
        "sensitivity_seconds": sens_seconds,
        "kernel_seconds": sum(s["kernel_seconds"] for s in subiterations),
        "subiteration_seconds": [s["seconds"] for s in subiterations],
        "subiteration_busy_seconds": [_busy_of_stages(s["stats"]) for s in subiterations],
        "setup": subiterations[0]["setup"],
        "subiteration_setup_seconds": [s["setup"]["to_first_chunk_seconds"] for s in subiterations],
        "first_subiteration_stats": subiterations[0]["stats"],
        "estimate_max": float(x.max()),
    }


def osem_disk(args) -> dict:
    """One full OSEM iteration from the file (:func:`osem_iteration`)."""
    from stirgpu.formats import read_from_file, read_image
    from stirgpu.projectors import ProjectorPair

    warm = warm_up(args)
    p = _paths(args.dir)
    info = read_image(p["image"]).info
    with _configured(args), read_from_file(p["data"]) as store:
        pp = ProjectorPair()
        pp.set_up(store.get_proj_data_info(), info)
        run = osem_iteration(pp, store, info, args.subsets, lambda: drop_cache(p["data_file"]))
    return {**run, "warm_up_seconds": warm, "peak_rss_mb": peak_rss_mb()}


def memory(args) -> dict:
    """Forward projection into host memory and back projection from it, ``--repeat`` times each,
    then one full OSEM iteration of the data in memory (:func:`osem_iteration`)."""
    from stirgpu.formats import ProjDataInMemory, read_image
    from stirgpu.projectors import ProjectorPair

    warm = warm_up(args)
    p = _paths(args.dir)
    pdi = template(args)
    image = read_image(p["image"])
    nbytes = 4 * pdi.total_num_bins
    fwd, back = [], []
    with _configured(args):
        pp = ProjectorPair()
        set_up = _seconds(pp.set_up, pdi, image.info)
        upload = _seconds(pp.set_input, image.as_array())
        store = ProjDataInMemory(pdi)
        for r in range(args.repeat):
            t0 = time.perf_counter()
            pp.forward_project(store)
            fwd.append(call_figures(time.perf_counter() - t0, pp.last_stats, nbytes, upload if r == 0 else 0.0))
            t0 = time.perf_counter()
            pp.back_project(None, store)
            back.append(call_figures(time.perf_counter() - t0, pp.last_stats, nbytes))
        osem = osem_iteration(pp, store, image.info, args.subsets)
    return {
        "forward": {**_best(fwd), "set_up_seconds": set_up},
        "back": {**_best(back), "set_up_seconds": 0.0},
        "osem": osem,
        "warm_up_seconds": warm,
        "peak_rss_mb": peak_rss_mb(),
    }


def plain_read(args) -> dict:
    """The disk's sequential read rate on the data file itself (no numpy, no stirgpu)."""
    path = _paths(args.dir)["data_file"]
    drop_cache(path)
    buf = bytearray(BLOCK)
    n = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while got := f.readinto(buf):
            n += got
    seconds = time.perf_counter() - t0
    return {"bytes": n, "seconds": seconds, "GBps": n / seconds / 1e9, "peak_rss_mb": peak_rss_mb()}


def plain_write(args) -> dict:
    """The disk's sequential write rate (with fsync): the data file replaced by a plain file of
    its name and size (the last run: nothing reads the data afterwards)."""
    p = _paths(args.dir)
    path = p["data_file"]
    nbytes = path.stat().st_size
    p["data"].unlink()
    path.unlink()
    block = memoryview(os.urandom(BLOCK))
    t0 = time.perf_counter()
    with open(path, "xb", buffering=0) as f:
        left = nbytes
        while left > 0:
            left -= f.write(block[: min(left, BLOCK)])
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    path.unlink()
    return {"bytes": nbytes, "seconds": seconds, "GBps": nbytes / seconds / 1e9, "peak_rss_mb": peak_rss_mb()}


def _setup_workers() -> dict:
    """``--setup-only``'s workers (:mod:`lafov_setup`)."""
    import lafov_setup

    def common():  # this module (looked up when a worker runs: a script is "__main__")
        return sys.modules[__name__]

    workers = {"setup_make": lambda args: lafov_setup.make(args, common())}
    for call in lafov_setup.CALLS:
        workers[f"setup_{call}"] = lambda args, call=call: lafov_setup.run(args, call, common())
    return workers


WORKERS = {
    "describe": describe,
    "make": make,
    "forward_disk": forward_disk,
    "plain_read": plain_read,
    "back_disk": back_disk,
    "subset_back_disk": lambda args: back_disk(args, subset=True),
    "back_disk_gpu_image": lambda args: back_disk(args, gpu_image=True),
    "subset_back_disk_gpu_image": lambda args: back_disk(args, subset=True, gpu_image=True),
    "osem_disk": osem_disk,
    "memory": memory,
    "plain_write": plain_write,
    **_setup_workers(),
}


# -- the parent ------------------------------------------------------------------------------


def _worker_argv(args, mode: str, folder: str | None) -> list[str]:
    argv = [sys.executable, __file__, "--worker", mode, "--backend", args.backend]
    argv += ["--span", str(args.span), "--max-ring-diff", str(args.max_ring_diff), "--subsets", str(args.subsets)]
    argv += ["--repeat", str(args.repeat)] + (["--no-warm-up"] if args.no_warm_up else [])
    argv += ["--setup-only"] if args.setup_only else []
    for flag, value in (
        ("--views", args.views),
        ("--tangential", args.tangential),
        ("--rings", args.rings),
        ("--dir", folder),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return argv


#: the on-disk kernel caches a worker starts without under ``--cold-caches``: cupy's compiled
#: CUDA kernels, stirgpu's (numba's CPU kernels, the STIR plugin)
CACHE_VARIABLES = ("CUPY_CACHE_DIR", "STIRGPU_CACHE_DIR")


def worker_environment(args, caches: str) -> dict:
    """The environment of a worker: this one's, and with ``--cold-caches`` empty kernel caches
    of its own in the folder ``caches`` (as the first process on a fresh machine has)."""
    env = dict(os.environ)
    if args.cold_caches:
        for name in CACHE_VARIABLES:
            env[name] = tempfile.mkdtemp(prefix=f"{name.lower()}-", dir=caches)
    return env


def _kernel_caches(args) -> str:
    return "cold: empty for each run" if args.cold_caches else "kept between runs"


def run_worker(args, mode: str, folder: str | None = None) -> dict:
    """``mode`` in a fresh process; a refusal there (exit code 2) is this script's refusal."""
    if mode != "describe":  # (nothing on stderr before the checks: a refusal is its one line)
        note(f"{mode} ...")
    with tempfile.TemporaryDirectory(prefix="stirgpu-lafov-caches-") as caches:
        env = worker_environment(args, caches)
        r = subprocess.run(_worker_argv(args, mode, folder), capture_output=True, text=True, env=env)
    if r.returncode == arguments.EXIT_BAD_ARGUMENT and r.stderr.startswith(f"{Path(__file__).name}: error: "):
        raise arguments.BadArgument(r.stderr.strip().split(": error: ", 1)[1])
    if r.returncode:
        raise SystemExit(f"worker {mode} failed:\n{r.stderr}")
    return json.loads(r.stdout)


def check_room(args, geometry: dict) -> None:
    """Refuse before writing anything: ``--dir`` must hold the data and the image, and host
    memory the data for the in-memory runs."""
    gb = 1e9
    if args.subsets > geometry["views"]:
        raise arguments.BadArgument(f"--subsets {args.subsets}: more subsets than the {geometry['views']} views")
    data, image = geometry["data_bytes"], geometry["image_bytes"]
    folder = args.dir or tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    need = (0 if args.setup_only else data) + image + DISK_MARGIN_BYTES  # (--setup-only: a sparse file)
    if free < need:
        raise arguments.BadArgument(
            f"--dir {folder}: {free / gb:.1f} GB free, the run needs {need / gb:.1f} GB (data {data / gb:.2f} GB, "
            f"image {image / gb:.2f} GB); give a --dir with more room or a smaller --max-ring-diff / --views / --rings"
        )
    avail = geometry["mem_available_bytes"]
    if not (args.no_memory or args.setup_only) and avail is not None and data > MEMORY_FRACTION * avail:
        raise arguments.BadArgument(
            f"the in-memory runs need the data ({data / gb:.2f} GB) in host memory, and MemAvailable is "
            f"{avail / gb:.1f} GB; give --no-memory or a smaller --max-ring-diff / --views / --rings"
        )


def summarise(geometry: dict, runs: dict, subsets: int) -> dict:
    """The ratios against the same run's baselines, and the performance targets."""
    read, write = runs["plain_read"], runs["plain_write"]
    back, sub, osem = runs["back_disk"], runs["subset_back_disk"], runs["osem_disk"]
    read_once = geometry["data_bytes"] / (read["GBps"] * 1e9)
    bound = max(read_once, osem["kernel_seconds"])
    s = {
        "forward_disk_of_plain_write": runs["forward_disk"]["GBps"] / write["GBps"],
        "back_disk_of_plain_read": back["GBps"] / read["GBps"],
        "subset_fraction_of_back": sub["seconds"] / back["seconds"],
        "subset_fraction_of_back_gpu_image": (
            runs["subset_back_disk_gpu_image"]["seconds"] / runs["back_disk_gpu_image"]["seconds"]
            if "back_disk_gpu_image" in runs
            else None
        ),
        "read_once_seconds": read_once,
        "osem_kernel_seconds": osem["kernel_seconds"],
        "osem_over_bound": osem["seconds"] / bound,
        "setup_to_first_chunk_seconds": {
            name: runs[name]["setup"]["to_first_chunk_seconds"]
            for name in ("forward_disk", "back_disk", "subset_back_disk", "osem_disk")
        },
        "peak_rss_mb": {name: run["peak_rss_mb"] for name, run in runs.items()},
    }
    if "memory" in runs:
        for op in ("forward", "back"):
            s["setup_to_first_chunk_seconds"][f"{op}_memory"] = runs["memory"][op]["setup"]["to_first_chunk_seconds"]
    s["targets"] = {
        "back_disk_of_plain_read": {"value": s["back_disk_of_plain_read"], "target": f">= {TARGET_BACK_OF_READ}"},
        "subset_fraction_of_back": {
            "value": s["subset_fraction_of_back"],
            "target": f"<= {TARGET_SUBSET_SHARE}/{subsets} = {TARGET_SUBSET_SHARE / subsets:.4f}",
        },
        "osem_over_bound": {"value": s["osem_over_bound"], "target": f"<= {TARGET_OSEM_RATIO}"},
    }
    s["targets"]["back_disk_of_plain_read"]["met"] = s["back_disk_of_plain_read"] >= TARGET_BACK_OF_READ
    s["targets"]["subset_fraction_of_back"]["met"] = s["subset_fraction_of_back"] <= TARGET_SUBSET_SHARE / subsets
    s["targets"]["osem_over_bound"]["met"] = s["osem_over_bound"] <= TARGET_OSEM_RATIO
    s["targets"].update(_more_targets(geometry, runs, s, subsets))
    return s


def _target(value: float, at_most: float | None = None, at_least: float | None = None) -> dict:
    limit = f"<= {at_most:.4g}" if at_most is not None else f">= {at_least:.4g}"
    met = value <= at_most if at_most is not None else value >= at_least
    return {"value": value, "target": limit, "met": bool(met)}


def _more_targets(geometry: dict, runs: dict, s: dict, subsets: int) -> dict:
    """The kernel rates, the subset into a GPU image and the OSEM iteration in memory."""
    bins = geometry["bins"]
    targets = {
        "back_kernels_lor_per_s": _target(bins / runs["back_disk"]["kernel_seconds"], at_least=TARGET_BACK_LOR_PER_S)
    }
    if s["subset_fraction_of_back_gpu_image"] is not None:
        share = TARGET_SUBSET_SHARE_GPU_IMAGE / subsets
        targets["subset_fraction_of_back_gpu_image"] = _target(s["subset_fraction_of_back_gpu_image"], at_most=share)
    if "memory" in runs:
        mem = runs["memory"]
        targets["forward_kernels_lor_per_s"] = _target(
            bins / mem["forward"]["kernel_seconds"], at_least=TARGET_FORWARD_LOR_PER_S
        )
        targets["osem_memory_seconds"] = _target(mem["osem"]["seconds"], at_most=TARGET_OSEM_MEMORY_SECONDS)
    return targets


def readable(result: dict) -> str:
    g, runs, s = result["geometry"], result["runs"], result["summary"]
    lines = [
        f"{g['scanner']} span {g['span']}, max ring difference {g['max_ring_diff']}: {g['segments']} segments x "
        f"{g['views']} views x {g['tangential_poss']} tangential, {g['bins']:.3e} bins "
        f"({g['data_bytes'] / 1e9:.2f} GB); "
        f"image {' x '.join(map(str, g['image']))}; backend {g['backend']}",
        f"disk: plain write {runs['plain_write']['GBps']:.2f} GB/s, plain read {runs['plain_read']['GBps']:.2f} GB/s",
    ]

    def line(name, run, rate_of=None):
        rss = run.get("peak_rss_mb")
        text = (
            f"{name}: {run['seconds']:.2f} s, {run['GBps']:.2f} GB/s, {run['lor_per_s']:.2e} LOR/s, "
            f"kernels {run['kernel_seconds']:.2f} s, "
            f"set-up to the first chunk {run['setup']['to_first_chunk_seconds']:.2f} s"
        )
        if rate_of is not None:
            text += f", {rate_of}"
        return text + (f", peak RSS {rss:.0f} MB" if rss is not None else "")

    lines.append(
        line("forward to disk", runs["forward_disk"], f"{s['forward_disk_of_plain_write']:.0%} of plain write")
    )
    lines.append(line("back from disk", runs["back_disk"], f"{s['back_disk_of_plain_read']:.0%} of plain read"))
    lines.append(
        line(
            f"subset 1/{result['subsets']} back from disk",
            runs["subset_back_disk"],
            f"{s['subset_fraction_of_back']:.4f} of the full back projection",
        )
    )
    if s["subset_fraction_of_back_gpu_image"] is not None:
        lines.append(line("back from disk into a GPU image", runs["back_disk_gpu_image"]))
        lines.append(
            line(
                f"subset 1/{result['subsets']} back from disk into a GPU image",
                runs["subset_back_disk_gpu_image"],
                f"{s['subset_fraction_of_back_gpu_image']:.4f} of the full one",
            )
        )
    if "memory" in runs:
        mem = runs["memory"]
        lines.append(line("forward in memory", {**mem["forward"], "peak_rss_mb": mem["peak_rss_mb"]}))
        lines.append(line("back in memory", {**mem["back"], "peak_rss_mb": mem["peak_rss_mb"]}))
        lines.append(
            f"OSEM iteration ({mem['osem']['subsets']} subsets) in memory: {mem['osem']['seconds']:.2f} s "
            f"(kernels {mem['osem']['kernel_seconds']:.2f} s)"
        )
    o = runs["osem_disk"]
    lines.append(
        f"OSEM iteration ({o['subsets']} subsets) from disk: {o['seconds']:.2f} s "
        f"(kernels {o['kernel_seconds']:.2f} s, "
        f"reading the data once {s['read_once_seconds']:.2f} s: {s['osem_over_bound']:.2f} x the larger), "
        f"set-up to the first chunk {o['setup']['to_first_chunk_seconds']:.2f} s, peak RSS {o['peak_rss_mb']:.0f} MB"
    )
    lines.append(
        "targets: "
        + "; ".join(
            f"{k} {v['value']:.3f} ({v['target']}: {'met' if v['met'] else 'not met'})" for k, v in s["targets"].items()
        )
    )
    return "\n".join(lines)


def setup_only(args, geometry: dict) -> int:
    """``--setup-only``: each call's set-up on a sparse data file (:mod:`lafov_setup`)."""
    import lafov_setup

    with tempfile.TemporaryDirectory(prefix="stirgpu-lafov-", dir=args.dir) as folder:
        run_worker(args, "setup_make", folder)
        setup = {call: run_worker(args, f"setup_{call}", folder) for call in lafov_setup.CALLS}
    result = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "geometry": geometry,
        "subsets": args.subsets,
        "kernel_caches": _kernel_caches(args),
        "setup": setup,
    }
    arguments.emit_json(result, args.json)
    print(lafov_setup.readable(result))
    return 0


def run_sweep(args) -> int:
    """``--sweep``: the in-memory calls at each maximum ring difference (:mod:`lafov_sweep`)."""
    import lafov_sweep

    args.max_ring_diff = min(args.sweep)  # (the backend resolved on the sweep's own geometry)
    args.backend = run_worker(args, "describe")["backend"]
    result = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "subsets": args.subsets,
        "kernel_caches": _kernel_caches(args),
        "sweep": lafov_sweep.sweep(args, run_worker, check_room),
    }
    arguments.emit_json(result, args.json)
    print(lafov_sweep.readable(result["sweep"]))
    return 0


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--max-ring-diff", type=arguments.non_negative_int, default=85)
    ap.add_argument("--span", type=arguments.positive_int, default=1)
    ap.add_argument("--views", type=arguments.positive_int, default=None, help="399 for the Quadra; fewer mash views")
    ap.add_argument("--tangential", type=arguments.positive_int, default=None, help="520 for the Quadra")
    ap.add_argument("--rings", type=arguments.positive_int, default=None, help="323 for the Quadra")
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--repeat", type=arguments.positive_int, default=1, help="calls per run (best kept)")
    ap.add_argument("--dir", default=None, help="folder for the data and image files (default: the temp folder)")
    ap.add_argument(
        "--no-warm-up",
        action="store_true",
        help="time each process's first calls cold (kernel compilation and device start included)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the in-memory runs (they hold the data in RAM)")
    ap.add_argument(
        "--cold-caches",
        action="store_true",
        help="each run starts with empty kernel caches (cupy's, stirgpu's), as on a fresh machine",
    )
    ap.add_argument(
        "--setup-only",
        action="store_true",
        help="time each call's set-up to its first chunk on a sparse data file, projecting nothing",
    )
    ap.add_argument(
        "--sweep",
        type=arguments.int_list,
        default=None,
        help="maximum ring differences (e.g. 10,40,85): time the in-memory calls at each instead (lafov_sweep.py)",
    )
    ap.add_argument("--json", default=None, help="also write the JSON result here")
    ap.add_argument("--worker", default=None, choices=sorted(WORKERS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(WORKERS[args.worker](args)))
        return 0
    if args.dir is not None and not Path(args.dir).is_dir():
        raise arguments.BadArgument(f"--dir {args.dir}: not a folder")

    if args.sweep:
        return run_sweep(args)
    geometry = run_worker(args, "describe")
    check_room(args, geometry)  # (a refusal names the sizes)
    note(
        f"data: {geometry['bins']:.3e} bins, {geometry['data_bytes'] / 1e9:.2f} GB float32; "
        f"image {geometry['image']}, {geometry['image_bytes'] / 1e9:.2f} GB"
    )
    args.backend = geometry["backend"]
    if args.setup_only:
        return setup_only(args, geometry)
    with tempfile.TemporaryDirectory(prefix="stirgpu-lafov-", dir=args.dir) as folder:
        made = run_worker(args, "make", folder)
        runs = {}
        for mode in ("forward_disk", "plain_read", "back_disk", "subset_back_disk", "osem_disk"):
            runs[mode] = run_worker(args, mode, folder)
        if args.backend == "cuda":
            for mode in ("back_disk_gpu_image", "subset_back_disk_gpu_image"):
                runs[mode] = run_worker(args, mode, folder)
        if not args.no_memory:
            runs["memory"] = run_worker(args, "memory", folder)
        runs["plain_write"] = run_worker(args, "plain_write", folder)
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "parent_peak_rss_mb": peak_rss_mb(),
            "baseline_peak_rss_mb": geometry["peak_rss_mb"],
        },
        "geometry": geometry,
        "subsets": args.subsets,
        "repeat": args.repeat,
        "kernel_caches": _kernel_caches(args),
        "page_cache_dropped": True,
        "phantom_seconds": made["seconds"],
        "runs": runs,
        "summary": summarise(geometry, runs, args.subsets),
    }
    arguments.emit_json(result, args.json)
    print(readable(result))
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
