"""I/O benchmark: reading one subset of a multi-GB projection-data file vs reading all of it.

    python3 benchmarks/io.py [--size-gb 2] [--subsets 21] [--small-gb SIZE] [--tmpdir DIR]

Creates a float32, view-order Interfile file of about ``--size-gb`` GB in a temporary
folder (Siemens mMR geometry, span 1, with the maximum ring difference -- and beyond
64 rings, the number of rings -- scaled to reach the size), then measures, each in a
fresh subprocess:

* ``baseline``: import stirgpu and open the file (the interpreter's own footprint);
* ``subset``: the views of subset 0 of ``--subsets`` (STIR's rule) of every segment,
  through ``read_views`` into one reused buffer, chunk by chunk;
* ``all``: every view of every segment the same way;
* ``as_array``: everything at once (what a non-streaming reader needs);
* ``subset`` again on a second, smaller file (``--small-gb``) to show that the subset's
  peak RSS does not grow with the file;
* ``osem_order``: every subset in turn, as an OSEM iteration reads them, through the store:
  each subset's views announced first (``prefetch_views``, as the execution engine announces a
  chunk), then read; ``osem_order_plain``: the same bytes in the same order by plain
  ``preadv`` calls, one per view, without announcements.  Both report each subset's seconds:
  without the announcements the system's readahead takes a subset's views (every
  ``--subsets``-th) for a sequential read and fetches the views in between, which belong to the
  next subsets, so the first subsets read most of the file and the later ones almost nothing
  (``docs/execution.md``, "Reading a subset's views from disk").

Each worker reports wall seconds, peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``), the
bytes it asked for, and the bytes the kernel read for it (``/proc/self/io``: ``rchar``
= through read calls, ``read_bytes`` = from the storage device; ``read_bytes`` well
below ``rchar`` means the page cache served it).  Before each measurement the file's
cached pages are dropped with ``posix_fadvise(DONTNEED)`` (works without root for
clean pages; ``--keep-cache`` skips it), so timings are comparable.

Output: one JSON document, then one readable line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import arguments

REPO = Path(__file__).resolve().parent.parent
CHUNK_BYTES = 64 * 1024 * 1024

# numpy, stirgpu and timing (which imports numpy) are imported inside the functions that run in
# worker processes: the parent must stay small, because Linux carries a process's peak RSS
# (ru_maxrss) over fork + exec into the child, which would hide the workers' own peaks.


def _import_stirgpu():
    if str(REPO) not in sys.path:  # run from a checkout without installing
        sys.path.insert(0, str(REPO))
    import numpy as np

    from stirgpu import formats, geometry

    return np, formats, geometry


def mmr_like(target_bytes: int):
    """Siemens mMR, span 1, all views and tangential positions; the smallest maximum ring
    difference (then number of rings) whose data reach ``target_bytes``."""
    _, _, geometry = _import_stirgpu()
    ProjDataInfo, Scanner = geometry.ProjDataInfo, geometry.Scanner
    base = Scanner.from_name("Siemens mMR")
    per_sino = base.num_detectors_per_ring // 2 * base.max_num_non_arccorrected_bins * 4
    rings = base.num_rings
    while True:
        sc = base if rings == base.num_rings else base.replace(name=f"mMR-like ({rings} rings)", num_rings=rings)
        for d in range(rings):
            sinos = rings * (2 * d + 1) - d * (d + 1)
            if sinos * per_sino >= target_bytes:
                return ProjDataInfo.construct(sc, span=1, max_ring_diff=d)
        rings += 1


def make_file(path: Path, size_gb: float) -> dict:
    """Write real (non-zero) data chunk by chunk, so reading it later has to touch the disk."""
    np, formats, _ = _import_stirgpu()
    from timing import Device

    ProjDataFromFile, StorageOrder = formats.ProjDataFromFile, formats.StorageOrder
    pdi = mmr_like(int(size_gb * 1e9))

    def write():
        with ProjDataFromFile.create(path, pdi, StorageOrder.VIEW) as pd:
            for seg in pdi.segment_nums:
                for views in pd.view_chunks(seg, CHUNK_BYTES):
                    shape = (len(views), pdi.get_num_axial_poss(seg), pdi.get_num_tangential_poss())
                    block = np.empty(shape, np.float32)
                    block[...] = np.arange(len(views), dtype=np.float32)[:, None, None] + seg
                    pd.write_views(block, seg, views)

    seconds, _ = Device(np).timed(write)
    return {
        "path": str(path),
        "bytes": path.with_suffix(".s").stat().st_size,
        "segments": pdi.get_num_segments(),
        "rings": pdi.get_scanner().num_rings,
        "max_ring_diff": pdi.get_max_ring_difference_overall(),
        "views": pdi.get_num_views(),
        "tangential_poss": pdi.get_num_tangential_poss(),
        "write_seconds": seconds,
    }


def drop_cache(data_path: Path) -> None:
    fd = os.open(data_path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def proc_io() -> dict:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:  # not Linux: report what we asked for only
        return {}


# -- worker (runs in a fresh process) ---------------------------------------------------------


def vm_hwm_mb() -> float | None:
    """Peak RSS of this process's memory map (Linux VmHWM; starts afresh at exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def read(mode: str, path: str, subsets: int) -> tuple[int, float]:
    """(bytes asked for, checksum) of reading ``path`` as ``mode`` says (see the module docstring)."""
    np, formats, _ = _import_stirgpu()
    requested = 0
    checksum = 0.0
    with formats.read_from_file(path) as pd:
        pdi = pd.get_proj_data_info()
        if mode == "as_array":
            a = pd.as_array()
            requested = a.nbytes
            checksum = float(a[:, :, 0].sum(dtype=np.float64))
        elif mode in ("subset", "all"):
            views_all = pdi.subset_views(0, subsets) if mode == "subset" else np.arange(pdi.get_num_views())
            nt = pdi.get_num_tangential_poss()
            max_na = max(pdi.get_num_axial_poss(s) for s in pdi.segment_nums)
            per_view = max_na * nt
            step = max(1, CHUNK_BYTES // (4 * per_view))
            buf = np.empty(min(step, len(views_all)) * per_view, np.float32)  # one reused (pinnable) buffer
            for seg in pdi.segment_nums:
                na = pdi.get_num_axial_poss(seg)
                for i in range(0, len(views_all), step):
                    views = views_all[i : i + step]
                    out = buf[: len(views) * na * nt].reshape(len(views), na, nt)
                    pd.read_views(seg, views, out=out)
                    requested += out.nbytes
                    checksum += float(out[:, 0, 0].sum(dtype=np.float64))
        elif mode != "baseline":
            raise SystemExit(f"unknown mode {mode!r}")
    return requested, checksum


def read_in_osem_order(path: str, subsets: int, announced: bool) -> tuple[int, float, list[float]]:
    """(bytes asked for, checksum, seconds per subset) of reading every subset in turn: through
    the store with each subset announced first, or (``announced=False``) by one plain ``preadv``
    per view of the same bytes (a float32 view-order file)."""
    np, formats, _ = _import_stirgpu()
    import time

    requested, checksum, seconds = 0, 0.0, []
    with formats.read_from_file(path) as pd:
        pdi = pd.get_proj_data_info()
        nt, nv = pdi.get_num_tangential_poss(), pdi.get_num_views()
        view_bytes = {s: 4 * pdi.get_num_axial_poss(s) * nt for s in pdi.segment_nums}
        starts, offset = {}, 0
        for s in pd.header.segment_sequence:
            starts[s], offset = offset, offset + nv * view_bytes[s]
        buf = np.empty(max(view_bytes.values()) // 4 * nv, np.float32)
        fd = os.open(pd.data_path, os.O_RDONLY)
        try:
            for k in range(subsets):
                t0 = time.perf_counter()
                views = pdi.subset_views(k, subsets)
                if announced:
                    for s in pdi.segment_nums:
                        pd.prefetch_views(s, views)
                for s in pdi.segment_nums:
                    out = buf[: len(views) * view_bytes[s] // 4].reshape(len(views), -1)
                    if announced:
                        pd.read_views(s, views, out=out.reshape(len(views), -1, nt))
                    else:
                        for i, v in enumerate(views):
                            os.preadv(fd, [out[i]], starts[s] + int(v) * view_bytes[s])
                    requested += out.nbytes
                    checksum += float(out[:, 0].sum(dtype=np.float64))
                seconds.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
    return requested, checksum, seconds


def worker(mode: str, path: str, subsets: int) -> dict:
    np, _, _ = _import_stirgpu()
    from timing import Device

    io0 = proc_io()
    per_subset = None
    if mode in ("osem_order", "osem_order_plain"):
        seconds, (requested, checksum, per_subset) = Device(np).timed(
            lambda: read_in_osem_order(path, subsets, announced=mode == "osem_order")
        )
    else:
        seconds, (requested, checksum) = Device(np).timed(lambda: read(mode, path, subsets))
    io1 = proc_io()
    return {
        "mode": mode,
        "subset_seconds": per_subset,
        "seconds": seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "vm_hwm_mb": vm_hwm_mb(),
        "bytes_requested": requested,
        "rchar": io1.get("rchar", 0) - io0.get("rchar", 0),
        "read_bytes_from_device": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
        "checksum": checksum,
    }


def _run_worker(*args: str) -> dict:
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"worker {args} failed:\n{r.stderr}")
    return json.loads(r.stdout)


def measure(mode: str, path: Path, subsets: int, keep_cache: bool) -> dict:
    if not keep_cache:
        drop_cache(path.with_suffix(".s"))
    return _run_worker("--worker", mode, str(path), "--subsets", str(subsets))


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--size-gb", type=arguments.positive_float, default=2.0, help="size of the main file (GB, 1e9 bytes)"
    )
    ap.add_argument(
        "--small-gb", type=arguments.positive_float, default=None, help="size of the second file (default size/4)"
    )
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--tmpdir", default=None, help="folder for the temporary files")
    ap.add_argument("--keep-cache", action="store_true", help="do not drop the page cache between runs")
    ap.add_argument("--skip-as-array", action="store_true", help="do not load the whole file at once")
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--make", nargs=2, metavar=("PATH", "GB"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.subsets)))
        return 0
    if args.make:
        print(json.dumps(make_file(Path(args.make[0]), float(args.make[1]))))
        return 0

    small_gb = args.small_gb if args.small_gb is not None else args.size_gb / 4
    with tempfile.TemporaryDirectory(prefix="stirgpu-io-", dir=args.tmpdir) as tmp:
        big = _run_worker("--make", str(Path(tmp) / "big.hs"), str(args.size_gb))
        small = _run_worker("--make", str(Path(tmp) / "small.hs"), str(small_gb))
        p_big, p_small = Path(big["path"]), Path(small["path"])
        runs = {
            "baseline": measure("baseline", p_big, args.subsets, args.keep_cache),
            "subset": measure("subset", p_big, args.subsets, args.keep_cache),
            "all": measure("all", p_big, args.subsets, args.keep_cache),
        }
        if not args.skip_as_array:
            runs["as_array"] = measure("as_array", p_big, args.subsets, args.keep_cache)
        runs["subset_small_file"] = measure("subset", p_small, args.subsets, args.keep_cache)
        for mode in ("osem_order", "osem_order_plain"):
            runs[mode] = measure(mode, p_big, args.subsets, args.keep_cache)
    base = runs["baseline"]["peak_rss_mb"]
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "parent_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        },
        "subsets": args.subsets,
        "page_cache_dropped": not args.keep_cache,
        "big_file": big,
        "small_file": small,
        "runs": runs,
        "summary": {
            "subset_over_all_time": runs["subset"]["seconds"] / runs["all"]["seconds"],
            "subset_peak_rss_mb_big_file": runs["subset"]["peak_rss_mb"],
            "subset_peak_rss_mb_small_file": runs["subset_small_file"]["peak_rss_mb"],
            "baseline_rss_mb": base,
            "osem_order_seconds": runs["osem_order"]["seconds"],
            "osem_order_plain_seconds": runs["osem_order_plain"]["seconds"],
            "osem_order_slowest_subset_over_median": _spread(runs["osem_order"]["subset_seconds"]),
            "osem_order_plain_slowest_subset_over_median": _spread(runs["osem_order_plain"]["subset_seconds"]),
        },
    }
    print(json.dumps(result, indent=1))
    gb = 1e9
    line = (
        f"{big['bytes'] / gb:.2f} GB view-order file ({big['segments']} segments, {big['views']} views): "
        f"subset 1/{args.subsets}: {runs['subset']['seconds']:.2f} s, "
        f"{runs['subset']['bytes_requested'] / gb:.3f} GB read, peak RSS {runs['subset']['peak_rss_mb']:.0f} MB | "
        f"all (chunked): {runs['all']['seconds']:.2f} s, {runs['all']['bytes_requested'] / gb:.2f} GB, "
        f"peak RSS {runs['all']['peak_rss_mb']:.0f} MB"
    )
    if "as_array" in runs:
        line += f" | as_array: {runs['as_array']['seconds']:.2f} s, peak RSS {runs['as_array']['peak_rss_mb']:.0f} MB"
    line += (
        f" | subset peak RSS on a {small['bytes'] / gb:.2f} GB file: "
        f"{runs['subset_small_file']['peak_rss_mb']:.0f} MB (interpreter baseline {base:.0f} MB)"
    )
    line += " | " + _osem_order_line(runs, args.subsets)
    print(line)
    return 0


def _spread(seconds: list[float]) -> float:
    """The slowest subset's seconds over the median subset's."""
    ordered = sorted(seconds)
    return ordered[-1] / ordered[len(ordered) // 2]


def _osem_order_line(runs: dict, subsets: int) -> str:
    parts = []
    for mode, what in (("osem_order", "announced"), ("osem_order_plain", "plain preads")):
        s = runs[mode]["subset_seconds"]
        parts.append(f"{what} {runs[mode]['seconds']:.2f} s (a subset {min(s):.3f}-{max(s):.3f} s)")
    return f"all {subsets} subsets in turn: " + ", ".join(parts)


if __name__ == "__main__":
    sys.exit(arguments.run(main))
