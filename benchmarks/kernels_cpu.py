"""``kernels.py --backend cpu``: stirgpu's numba Joseph kernels against libparallelproj's CPU build.

Same run, same LORs, same image, same number of threads: ``--cpu-views`` views (spread over
the view range) of the most direct and the most oblique segment of the case, projected forward
and back by

* ``stirgpu stir`` -- ``forward_chunk_stir`` / ``back_chunk_stir`` (``numerics="stir"``, the
  default: STIR's float32 endpoints computed in the kernel, libparallelproj 2.0.3's float32
  arithmetic), the chunk's tables made once (``StirChunk``), as the projectors make them;
* ``stirgpu exact`` -- ``forward_chunk`` / ``back_chunk`` (``numerics="exact"``: float64
  geometry);
* ``libparallelproj`` (the baseline) -- libparallelproj 2.0.3's OpenMP ``joseph3d_fwd`` /
  ``joseph3d_back``, the library STIR's Parallelproj projector calls, on the same LORs' float32
  endpoints precomputed as STIR computes them (what STIR hands it), one call for all LORs.

The library comes from the reference STIR build (``lib/libparallelproj.so``), found as
tests/reference_stir.py finds it (``--stir PREFIX`` overrides; ``--no-baseline`` times stirgpu
alone).  stirgpu's calls take the parts of all segments in one call too.  Each figure is the
median of ``--repeats`` rounds after a warm-up (numba compiles there); each round times every
path in turn.  The agreement of each stirgpu
path with the baseline (max |diff| / max) is reported with it: ``stir`` forward projections are
libparallelproj's bit for bit.
"""

from __future__ import annotations

import ctypes
import os
import statistics

import arguments
import numpy as np
from timing import Device, rounds

__all__ = ["cpu_views", "bench_exact", "run"]


def cpu_views(pdi, cpu_views: int):
    """(segments, views) the CPU figures use: the most direct and most oblique segment,
    ``cpu_views`` views spread over the view range."""
    segs = sorted({0, pdi.segment_nums[-1]})
    views = np.unique(np.linspace(0, pdi.get_num_views() - 1, cpu_views).astype(int))
    return segs, views


def _median_seconds(calls: dict, repeats: int) -> dict:
    """Median seconds of each of ``calls`` (name -> function) over ``repeats`` rounds that time
    all of them in turn, after one warm-up call each (numba compiles there)."""
    return {name: statistics.median(t) for name, t in rounds(Device(np), calls, repeats).items()}


def _exact_calls(parts, kg, img, out, back_img):
    from stirgpu.kernels import back_chunk, forward_chunk

    return (
        lambda: forward_chunk(parts, img, out=out, **kg.as_kwargs()),
        lambda: back_chunk(parts, out, back_img, **kg.as_kwargs()),
    )


def bench_exact(pdi, ii, kg, img, cpu_views_: int, repeats: int) -> dict:
    """LOR/s of the exact-numerics numba kernels alone (the GPU run's CPU figure)."""
    from numba import get_num_threads

    segs, views = cpu_views(pdi, cpu_views_)
    parts = [pdi.chunk_tables(s, views=views) for s in segs]
    n = sum(t.num_lors for t in parts)
    out, back_img = np.empty(n, np.float32), np.zeros(ii.shape, np.float32)
    fwd, back = _exact_calls(parts, kg, img, out, back_img)
    t = _median_seconds({"forward": fwd, "back": back}, repeats)
    tf, tb = t["forward"], t["back"]
    return {
        "lors": n,
        "threads": get_num_threads(),
        "segments": segs,
        "views": views.tolist(),
        "forward_lor_per_s": n / tf,
        "back_lor_per_s": n / tb,
    }


class Libparallelproj:
    """libparallelproj's CPU ``joseph3d_fwd`` / ``joseph3d_back`` through ctypes."""

    def __init__(self, lib, origin: str):
        self.lib, self.origin = lib, origin
        for fn in (lib.joseph3d_fwd, lib.joseph3d_back):
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]

    @staticmethod
    def _p(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    def forward(self, xs, xe, img, origin, vox, out):
        dims = np.array(img.shape, np.int32)
        self.lib.joseph3d_fwd(
            self._p(xs),
            self._p(xe),
            self._p(img),
            self._p(origin),
            self._p(vox),
            self._p(out),
            len(out),
            self._p(dims),
            0,
            64,
        )

    def back(self, xs, xe, img, origin, vox, values):
        dims = np.array(img.shape, np.int32)
        self.lib.joseph3d_back(
            self._p(xs),
            self._p(xe),
            self._p(img),
            self._p(origin),
            self._p(vox),
            self._p(values),
            len(values),
            self._p(dims),
            0,
            64,
        )


def find_libparallelproj(stir_prefix: str | None) -> Libparallelproj:
    """The reference STIR's libparallelproj (``--stir`` or as tests/reference_stir.py finds it)."""
    from vs_stir import find_stir

    try:
        ref = find_stir(stir_prefix)
        return Libparallelproj(ref.library("libparallelproj.so"), ref.origin)
    except (arguments.BadArgument, OSError) as exc:
        raise arguments.BadArgument(
            f"no libparallelproj for the CPU baseline: {exc} (--no-baseline times stirgpu alone)"
        ) from None


def _openmp_threads() -> int | None:
    """What libgomp (loaded by libparallelproj) will use, or None where it cannot be asked."""
    try:
        return int(ctypes.CDLL("libgomp.so.1").omp_get_max_threads())
    except OSError:
        return None


def _relative(a, b) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))), 1e-30))


def bench_case(pdi, ii, img, cpu_views_: int, repeats: int, baseline: Libparallelproj | None) -> dict:
    """Seconds and LOR/s of each path on the case's CPU views (see the module docstring)."""
    from stirgpu.kernels import back_chunk_stir, forward_chunk_stir, stir_scaled_geometry
    from stirgpu.kernels.cpu_stir import endpoints_array
    from stirgpu.kernels.stir_api import StirChunk
    from stirgpu.kernels.stir_lors import stir_chunk_tables, stir_image_frame

    segs, views = cpu_views(pdi, cpu_views_)
    parts = [pdi.chunk_tables(s, views=views) for s in segs]
    n = sum(t.num_lors for t in parts)
    frame = stir_image_frame(ii)
    chunk = StirChunk(parts, pdi)
    # zeros: libparallelproj leaves the values of LORs that miss the image untouched (STIR hands it zeros)
    outs = {k: np.zeros(n, np.float32) for k in ("stir", "exact", "libparallelproj")}
    backs = {k: np.zeros(ii.shape, np.float32) for k in outs}
    calls = {
        "stir": (
            lambda: forward_chunk_stir(chunk, pdi, img, frame, out=outs["stir"]),
            lambda: back_chunk_stir(chunk, pdi, outs["stir"], backs["stir"], frame),
        ),
        "exact": _exact_calls(parts, stir_scaled_geometry(ii), img, outs["exact"], backs["exact"]),
    }
    if baseline is not None:
        ends = [endpoints_array(stir_chunk_tables(pdi, t)) for t in parts]  # STIR's float32 endpoints, mm
        xs, xe = (
            np.ascontiguousarray(np.concatenate([e[i].reshape(-1, 3) for e in ends]) * frame[2], np.float32)
            for i in (0, 1)
        )
        org, vox = frame[0], frame[1]
        calls["libparallelproj"] = (
            lambda: baseline.forward(xs, xe, img, org, vox, outs["libparallelproj"]),
            lambda: baseline.back(xs, xe, backs["libparallelproj"], org, vox, outs["libparallelproj"]),
        )
    res = {"lors": n, "segments": segs, "views": views.tolist(), "paths": {}}
    t = _median_seconds(
        {(name, way): fn for name, pair in calls.items() for way, fn in zip(("forward", "back"), pair, strict=True)},
        repeats,
    )
    for name in calls:
        tf, tb = t[name, "forward"], t[name, "back"]
        res["paths"][name] = {"forward_s": tf, "back_s": tb, "forward_lor_per_s": n / tf, "back_lor_per_s": n / tb}
    if baseline is not None:
        _agreement(res, calls, outs, backs)
    return res


def _agreement(res, calls, outs, backs) -> None:
    """Ratios to the baseline, and each path's forward projection and its back projection of the
    same values (the baseline's forward projection, into zeroed images) against the baseline's."""
    base = res["paths"]["libparallelproj"]
    forward = {}
    for name, (fwd, _) in calls.items():
        fwd()
        forward[name] = outs[name].copy()
    for name, (_, back) in calls.items():
        outs[name][...] = forward["libparallelproj"]
        backs[name].fill(0)
        back()
    for name in ("stir", "exact"):
        p = res["paths"][name]
        p["forward_ratio_to_baseline"] = p["forward_lor_per_s"] / base["forward_lor_per_s"]
        p["back_ratio_to_baseline"] = p["back_lor_per_s"] / base["back_lor_per_s"]
        p["forward_max_difference_to_baseline"] = _relative(forward[name], forward["libparallelproj"])
        p["back_max_difference_to_baseline"] = _relative(backs[name], backs["libparallelproj"])


def run(args, make_case, phantom) -> tuple[dict, list[str]]:
    """The CPU mode of kernels.py: (JSON document, readable lines)."""
    threads = args.threads or len(os.sched_getaffinity(0))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before libgomp is loaded (by numba or the baseline)
    import numba

    if threads > numba.config.NUMBA_NUM_THREADS:
        raise arguments.BadArgument(
            f"--threads {threads}: numba was started with at most "
            f"{numba.config.NUMBA_NUM_THREADS} threads (NUMBA_NUM_THREADS)"
        )
    numba.set_num_threads(threads)
    baseline = None if args.no_baseline else find_libparallelproj(args.stir)
    result = {
        "backend": "cpu",
        "threads": threads,
        "openmp_threads": _openmp_threads() if baseline else None,
        "baseline": baseline.origin if baseline else None,
        "cases": {},
    }
    lines = []
    for case in args.cases:
        pdi, ii = make_case(case)
        entry = bench_case(pdi, ii, phantom(ii, np), args.cpu_views, args.repeats, baseline)
        entry["image_shape"] = list(ii.shape)
        result["cases"][case] = entry
        lines.append(readable(case, entry, threads))
    return result, lines


def readable(case: str, entry: dict, threads: int) -> str:
    paths = entry["paths"]
    head = (
        f"{case} cpu ({threads} threads, {entry['lors']} LORs: views {entry['views']} of segments "
        f"{entry['segments']}): "
    )
    text = []
    for name, p in paths.items():
        part = f"{name} forward {p['forward_lor_per_s']:.3g} LOR/s, back {p['back_lor_per_s']:.3g} LOR/s"
        if "forward_ratio_to_baseline" in p:
            part += (
                f" ({p['forward_ratio_to_baseline']:.2f} x / {p['back_ratio_to_baseline']:.2f} x libparallelproj;"
                f" differs by {p['forward_max_difference_to_baseline']:.1e} / "
                f"{p['back_max_difference_to_baseline']:.1e} of the maximum)"
            )
        text.append(part)
    return head + "; ".join(text)
