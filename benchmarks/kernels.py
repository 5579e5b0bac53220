"""Joseph kernel benchmark: LOR/s of the forward and back projection, GPU and CPU.

    python3 benchmarks/kernels.py [--cases mmr,dmi] [--variants tiled,simple,...]
                                  [--repeats 5] [--cpu-views 2] [--explicit] [--json FILE]
    python3 benchmarks/kernels.py --backend cpu [--cases mmr,dmi] [--cpu-views 2] [--threads N]
                                  [--stir PREFIX | --no-baseline] [--json FILE]

Cases (full data, all segments, all views, data resident on the device):

* ``mmr``: Siemens mMR, span 11, max ring difference 60, 252 views, 344 tangential
  positions, STIR's default image (``ImageInfo.default_for``).
* ``dmi``: GE Discovery MI 4 rings (36 rings, 544 detectors, R = 380.5 mm), span 1, all
  ring differences, 272 views (STIR's default: detectors / 2), 415 tangential positions,
  image 71 x 215 x 215 of 2.78 mm voxels: parallelproj's published benchmark geometry.
* ``small``: ECAT 953, span 3, max ring difference 4, 48 views, 96 tangential positions,
  STIR's default image (smoke runs).

``--backend cpu`` times the numba kernels (both numerics) against libparallelproj 2.0.3's
OpenMP build in the same run, on ``--cpu-views`` views of two segments: see
``benchmarks/kernels_cpu.py``.  The options below that name the GPU are refused there.

GPU (``--backend cuda``, the default): the geometry-aware path (``forward_chunk`` /
``back_chunk``), one call per segment with the tables uploaded once, the image prepared once (``prepare_image``; the
forward figure without it, re-copying the image in every call, is reported too) and the
back projection's accumulators kept across segments (``prepare_back_accumulator``); each
figure covers every segment, timed with CUDA events
after a warm-up (which also compiles), median of ``--repeats``.  ``--explicit`` also
times ``joseph_forward`` / ``joseph_back`` on precomputed float32 endpoints of the same
LORs (what libparallelproj is given).  CPU: the numba backend on ``--cpu-views`` views
of the most direct and the most oblique segment (compiled before timing).

Variants are ``+``-joined tokens applied, left to right, to the tuned defaults
(:class:`stirgpu.kernels.cuda_backend.KernelOptions`): ``tiled`` | ``simple``
(family), ``plain`` (the tiled kernels before tuning: no ILP, no merging, no register
cap, 8 warps per block), ``lerp``, ``ilpN`` (branch-free forward unrolled N times),
``merge`` (merged atomics), ``segsum`` / ``nosegsum`` (shuffle-only exact
aggregation of equal footprints, the default: ``back_segsum``; ``nosegsum`` leaves the
merged atomics), ``nofmad``, ``wN`` / ``bwN`` (warps per block of the forward / back),
``tN`` (threads per block of 1-D kernels), ``rN`` (register cap of the forward), ``i64``
(64-bit offsets), ``axial`` / ``viewmajor`` / ``autoorder`` and ``baxial`` / ``bviewmajor`` /
``bautoorder`` (block order of the forward / back chunk kernels); ``default`` is
:data:`stirgpu.kernels.cuda_backend.DEFAULT_OPTIONS`.

``--subsets K`` also times one subset of K (its views spread over the data, every segment)
against the same number of consecutive views, with the first variant.

Besides LOR/s the script counts Joseph steps (principal-axis planes sampled, summed over
LORs, computed on the GPU with the kernels' clipping rule) to report steps/s, the
quantity the limit estimates in docs/kernel-tuning.md are made for.

Output: one JSON document, then one readable line per case and variant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, Path(__file__).resolve().parent):  # the checkout (not installed) and the helpers beside us,
    if str(p) not in sys.path:  # also when a test loads this file as a module
        sys.path.insert(0, str(p))

import arguments  # noqa: E402
import kernels_cpu  # noqa: E402
import timing  # noqa: E402

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner  # noqa: E402
from stirgpu.kernels import stir_scaled_geometry  # noqa: E402

CASES = ("mmr", "dmi", "small")
#: options of the GPU run only (refused with --backend cpu), with their GPU defaults
GPU_DEFAULTS = {
    "variants": "default,simple",
    "explicit": False,
    "explicit_variants": "default,simple",
    "no_steps": False,
    "subsets": 21,
}
#: options of the CPU run only (refused with --backend cuda)
CPU_ONLY = ("threads", "stir", "no_baseline")


def make_case(name: str):
    if name == "mmr":
        sc = Scanner.from_name("Siemens mMR")
        pdi = ProjDataInfo.construct(sc, span=11, max_ring_diff=60, num_views=252, num_tangential_poss=344)
        ii = ImageInfo.default_for(pdi)
    elif name == "dmi":
        sc = Scanner.from_name("GE Discovery MI 4 rings")
        pdi = ProjDataInfo.construct(sc, span=1, max_ring_diff=sc.num_rings - 1, num_views=272, num_tangential_poss=415)
        ii = ImageInfo((71, 215, 215), (2.78, 2.78, 2.78))
    elif name == "small":
        pdi = ProjDataInfo.construct(
            Scanner.from_name("ECAT 953"), span=3, max_ring_diff=4, num_views=48, num_tangential_poss=96
        )
        ii = ImageInfo.default_for(pdi)
    else:
        raise arguments.BadArgument(f"--cases: unknown case {name!r} (known: {', '.join(CASES)})")
    return pdi, ii


def case_list(text: str) -> list[str]:
    """argparse type of --cases: comma-separated names of CASES."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in CASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown case {', '.join(map(repr, bad)) or repr(text)} (known: {', '.join(CASES)})"
        )
    return names


def parse_variant(cb, text: str):
    kw = {}
    for tok in text.split("+"):
        if tok == "default":
            continue
        if tok in ("tiled", "simple", "auto"):
            kw["variant"] = tok
        elif tok == "plain":  # the tiled kernels before tuning
            kw.update(fwd_ilp=0, back_merge=False, back_segsum=False, maxrregcount=None, warps_per_block=8)
        elif tok == "lerp":
            kw["lerp"] = True
        elif tok == "merge":
            kw["back_merge"] = True
        elif tok == "segsum":
            kw["back_segsum"] = True
        elif tok == "nosegsum":
            kw["back_segsum"] = False
        elif tok.startswith("ilp") and tok[3:].isdigit():
            kw["fwd_ilp"] = int(tok[3:])
        elif tok == "nofmad":
            kw["fmad"] = False
        elif tok == "i64":
            kw["index64"] = True
        elif tok.lstrip("b") in ("axial", "viewmajor", "autoorder"):
            order = {"axial": "axial", "viewmajor": "view", "autoorder": "auto"}[tok.lstrip("b")]
            kw["back_block_order" if tok.startswith("b") else "block_order"] = order
        elif tok.startswith("bw") and tok[2:].isdigit():
            kw["back_warps_per_block"] = int(tok[2:])
        elif tok[0] in "wtr" and tok[1:].isdigit():
            kw[{"w": "warps_per_block", "t": "threads_per_block", "r": "maxrregcount"}[tok[0]]] = int(tok[1:])
        else:
            raise arguments.BadArgument(f"--variants: unknown token {tok!r} in {text!r}")
    if text.split("+")[0] != "default":
        kw.setdefault("variant", "tiled")
    return cb.KernelOptions(**kw)


def phantom(ii, xp):
    """A cylinder of 1 with a hot and a cold ellipsoid (values do not change the work, but
    a realistic image keeps the numbers meaningful)."""
    nz, ny, nx = ii.shape
    z, y, x = np.meshgrid(np.linspace(-1, 1, nz), np.linspace(-1, 1, ny), np.linspace(-1, 1, nx), indexing="ij")
    img = (x * x + y * y < 0.8).astype(np.float32)
    img += 3.0 * (((x - 0.3) / 0.2) ** 2 + (y / 0.3) ** 2 + (z / 0.5) ** 2 < 1)
    img -= 0.8 * (((x + 0.3) / 0.2) ** 2 + (y / 0.2) ** 2 + (z / 0.5) ** 2 < 1)
    return xp.asarray(img.astype(np.float32))


def count_steps(cp, pdi, ii, kg) -> int:
    """Sum over all LORs of the planes Joseph samples (the kernels' clipping rule, float64;
    ties of the principal axis may go another way than in the kernels: a statistic)."""
    org = cp.asarray(np.array(kg.origin))
    vox = cp.asarray(np.array(kg.voxel_size))
    lo = org - 0.5 * vox
    hi = lo + cp.asarray(np.array(ii.shape, dtype=np.float64)) * vox
    total = 0
    for seg in pdi.segment_nums:
        p0, p1 = _endpoints(cp, pdi.chunk_tables(seg), cp.float64)
        d = p1 - p0
        t1 = (lo - p0) / d
        t2 = (hi - p0) / d
        inside = (p0 > lo) & (p0 < hi)
        tmin = cp.where(d != 0, cp.minimum(t1, t2), -cp.inf).max(-1).clip(0, None)
        tmax = cp.where(d != 0, cp.maximum(t1, t2), cp.inf).min(-1).clip(None, 1)
        ok = (tmax >= tmin) & cp.all((d != 0) | inside, -1) & cp.any(d != 0, -1)
        ax = cp.argmax(d * d, -1)[..., None]
        dd = cp.take_along_axis(d, ax, -1)[..., 0]
        pd = cp.take_along_axis(p0, ax, -1)[..., 0]
        od, vd = org[ax[..., 0]], vox[ax[..., 0]]
        f1 = (pd + tmin * dd - od) / vd
        f2 = (pd + tmax * dd - od) / vd
        steps = cp.abs(cp.floor(f2) - cp.floor(f1))
        total += int(cp.where(ok, steps, 0).sum())
        del p0, p1, d, t1, t2
    return total


def _endpoints(cp, t, dtype):
    """(nv, na, nt, 3) start and end points of the LORs of ChunkTables ``t`` on the GPU."""
    c, s_, sv, h, tt, m = (
        cp.asarray(getattr(t, k)) for k in ("cos_phi", "sin_phi", "s", "half_chord", "tantheta", "m")
    )
    c, s_ = c[:, None, None], s_[:, None, None]
    sv, h, tt, m = sv[None, None, :], h[None, None, :], tt[None, None, :], m[None, :, None]
    p0 = cp.stack(cp.broadcast_arrays(m + h * tt, sv * s_ + h * c, sv * c - h * s_), -1).astype(dtype)
    p1 = cp.stack(cp.broadcast_arrays(m - h * tt, sv * s_ - h * c, sv * c + h * s_), -1).astype(dtype)
    return p0, p1


def time_gpu(cp, fn, repeats: int) -> float:
    """This script's figure: the median of ``repeats`` CUDA-event timings of ``fn()``, after a warm-up."""
    return timing.median_seconds(timing.Device(cp, events=True), fn, repeats)


def _sweeps(cb, kg, opts, tables, outs, back_img):
    """(forward(image), back()): one call per chunk of ``tables``, the back projection's
    accumulators kept across the chunks and folded in once, as the projectors do."""

    def fwd(image):
        for t, o in zip(tables, outs, strict=True):
            cb.forward_chunk(t, image, kg.origin, kg.voxel_size, out=o, scale=kg.scale, options=opts)

    def back():
        acc = cb.prepare_back_accumulator(back_img, opts)
        for t, o in zip(tables, outs, strict=True):
            cb.back_chunk(t, o, acc, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
        acc.finish(opts)

    return fwd, back


def _forward_preparing(cb, fwd, img, opts):
    """A call of ``fwd`` that prepares ``img`` first, once per call, as the projectors do."""
    return lambda: fwd(cb.prepare_image(img, opts))


def bench_gpu(cp, cb, pdi, ii, kg, opts, repeats, tables, img):
    """(forward s with the image prepared once, forward s preparing per call, back s)."""
    outs = [cp.empty(t.shape, cp.float32) for t in tables]
    fwd, back = _sweeps(cb, kg, opts, tables, outs, cp.zeros(ii.shape, cp.float32))
    prepared = cb.prepare_image(img, opts)
    tf = time_gpu(cp, lambda: fwd(prepared), repeats)
    tf_plain = time_gpu(cp, lambda: fwd(img), repeats)
    tb = time_gpu(cp, back, repeats)
    return tf, tf_plain, tb


def bench_subset(cp, cb, pdi, ii, kg, opts, repeats, img, num_subsets: int) -> dict:
    """Kernel seconds (forward, back) of one subset's views (every segment, workspaces kept
    as the projectors keep them): one call per segment (``subset``), and all segments as
    the parts of one call (``subset_one_launch``, how the planner packs a subset: one
    launch tail instead of one per segment); and of as many *consecutive* views, one call
    per segment: tells whether a subset costs its share of the full data, and whether the
    spread of its views (cache locality) or the launch tails are what costs more."""
    spread = pdi.subset_views(0, num_subsets)
    out = {}
    for label, views, one in (
        ("subset", spread, False),
        ("subset_one_launch", spread, True),
        ("consecutive", np.arange(len(spread)), False),
    ):
        parts = [pdi.chunk_tables(s, views) for s in pdi.segment_nums]
        tables = [cb.upload_tables(parts)] if one else [cb.upload_tables(t) for t in parts]
        outs = [cp.empty((t.num_lors,) if one else t.shape, cp.float32) for t in tables]
        fwd, back = _sweeps(cb, kg, opts, tables, outs, cp.zeros(ii.shape, cp.float32))
        out[label] = {
            "views": int(len(views)),
            "launches": len(tables),
            "forward_s": time_gpu(cp, _forward_preparing(cb, fwd, img, opts), repeats),
            "back_s": time_gpu(cp, back, repeats),
        }
    return out


def tiled_overhead(cp, cb, ii, img, repeats: int) -> tuple[float, float]:
    """Per-call seconds of the tiled path's image copies (forward) and of its accumulators
    and their combining (back), default options."""
    from stirgpu.kernels import cuda_workspaces as ws

    o = cb.DEFAULT_OPTIONS
    dev = cp.cuda.Device().id
    t_pad = time_gpu(cp, lambda: ws.padded_copies(cp, dev, o, img), repeats)
    acc_img = cp.zeros(ii.shape, cp.float32)
    t_acc = time_gpu(
        cp, lambda: ws.combine_accumulators(dev, o, acc_img, *ws.scratch_accumulators(cp, ii.shape)), repeats
    )
    return t_pad, t_acc


def explicit_endpoints(cp, pdi, tables):
    """float32 (N, 3) start/end arrays of all LORs, in the chunk order of ``tables``."""
    xs, xe = [], []
    for t in tables:
        p0, p1 = _endpoints(cp, t, cp.float32)
        xs.append(p0.reshape(-1, 3))
        xe.append(p1.reshape(-1, 3))
    return cp.concatenate(xs), cp.concatenate(xe)


def bench_explicit(cp, cb, kg, opts, repeats, xs, xe, img, shape):
    out = cp.empty(xs.shape[0], cp.float32)
    back_img = cp.zeros(shape, cp.float32)
    vox = kg.voxel_size

    def fwd():
        cb.joseph_forward(xs, xe, img, kg.origin, vox, out=out, options=opts)

    def back():
        cb.joseph_back(xs, xe, out, back_img, kg.origin, vox, options=opts)

    return time_gpu(cp, fwd, repeats), time_gpu(cp, back, repeats)


def _progress(lines, line):
    lines.append(line)
    print(line, file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--backend",
        default="cuda",
        choices=("cuda", "cpu"),
        help="cuda: the CUDA kernels (default); cpu: the numba kernels against libparallelproj's CPU build",
    )
    ap.add_argument("--cases", type=case_list, default="mmr,dmi", help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--repeats", type=arguments.positive_int, default=5)
    ap.add_argument(
        "--cpu-views",
        type=arguments.non_negative_int,
        default=2,
        help="views per segment for the CPU figures (GPU run: 0 skips its CPU figure)",
    )
    ap.add_argument("--json", help="also write the JSON document to this file")
    gpu = ap.add_argument_group("GPU run only")
    gpu.add_argument("--variants", help=f"kernel variants (default {GPU_DEFAULTS['variants']})")
    gpu.add_argument("--explicit", action="store_true", default=None, help="also time the explicit-endpoint path")
    gpu.add_argument(
        "--explicit-variants", help=f"variants timed on the explicit path (default {GPU_DEFAULTS['explicit_variants']})"
    )
    gpu.add_argument("--no-steps", action="store_true", default=None, help="skip counting Joseph steps")
    gpu.add_argument(
        "--subsets",
        type=arguments.non_negative_int,
        help=f"also time one subset of this many with the first variant (default "
        f"{GPU_DEFAULTS['subsets']}; 0 or 1: skip)",
    )
    cpu = ap.add_argument_group("CPU run only")
    cpu.add_argument(
        "--threads",
        type=arguments.positive_int,
        help="numba and OpenMP threads (default: the CPUs this process may run on)",
    )
    cpu.add_argument(
        "--stir",
        help="prefix of the STIR build whose lib/libparallelproj.so is the baseline "
        "(default: found as tests/reference_stir.py finds STIR)",
    )
    cpu.add_argument("--no-baseline", action="store_true", default=None, help="time stirgpu's kernels alone")
    args = ap.parse_args(argv)
    other, theirs = (GPU_DEFAULTS, "cuda") if args.backend == "cpu" else (CPU_ONLY, "cpu")
    given = [name for name in other if getattr(args, name) is not None]
    if given:
        ap.error(f"{', '.join('--' + n.replace('_', '-') for n in given)}: only for --backend {theirs}")
    if args.backend == "cpu" and args.cpu_views == 0:
        ap.error("--cpu-views: the CPU run needs at least 1 view")
    for name, default in GPU_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.no_baseline = bool(args.no_baseline)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.backend == "cpu":
        result, lines = kernels_cpu.run(args, make_case, phantom)
    else:
        result, lines = run_gpu(args)
    arguments.emit_json(result, args.json)
    for line in lines:
        print(line)
    return 0


def run_gpu(args) -> tuple[dict, list[str]]:
    """The GPU run: (JSON document, readable lines; each line is also printed to stderr as it comes)."""
    from stirgpu.execution import resolve_backend

    resolve_backend("cuda")  # one clear line where cupy or a GPU is missing
    import cupy as cp

    from stirgpu.kernels import cuda_backend as cb

    variants = {v: parse_variant(cb, v) for v in args.variants.split(",")}
    explicit_variants = {v: parse_variant(cb, v) for v in args.explicit_variants.split(",")} if args.explicit else {}
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    result = {
        "device": props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        "arch": cb.device_arch(),
        "sm_count": props["multiProcessorCount"],
        "cases": {},
    }
    lines = []
    for case in args.cases:
        pdi, ii = make_case(case)
        kg = stir_scaled_geometry(ii)
        nlors = (
            sum(pdi.get_num_axial_poss(s) for s in pdi.segment_nums)
            * pdi.get_num_views()
            * pdi.get_num_tangential_poss()
        )
        img = phantom(ii, cp)
        tables = [cb.upload_tables(pdi.chunk_tables(s)) for s in pdi.segment_nums]
        entry = {
            "lors": nlors,
            "image_shape": list(ii.shape),
            "voxel_size": list(ii.voxel_size),
            "segments": len(pdi.segment_nums),
            "views": pdi.get_num_views(),
            "tangential": pdi.get_num_tangential_poss(),
            "gpu": {},
        }
        t_pad, t_acc = tiled_overhead(cp, cb, ii, img, args.repeats)
        entry["tiled_overhead_per_call_s"] = {"forward_copies": t_pad, "back_accumulators": t_acc}
        _progress(
            lines,
            f"{case}: tiled overhead per call: copies {t_pad * 1e6:.0f} us, accumulators+combine {t_acc * 1e6:.0f} us",
        )
        if not args.no_steps:
            entry["joseph_steps"] = count_steps(cp, pdi, ii, kg)
            _progress(
                lines,
                f"{case}: {nlors} LORs, {entry['joseph_steps']} Joseph steps "
                f"({entry['joseph_steps'] / nlors:.1f} per LOR), image {ii.shape}",
            )
        for v, opts in variants.items():
            tf, tf_plain, tb = bench_gpu(cp, cb, pdi, ii, kg, opts, args.repeats, tables, img)
            r = {
                "options": repr(opts),
                "forward_s": tf,
                "forward_per_call_copies_s": tf_plain,
                "back_s": tb,
                "forward_lor_per_s": nlors / tf,
                "forward_per_call_copies_lor_per_s": nlors / tf_plain,
                "back_lor_per_s": nlors / tb,
            }
            if "joseph_steps" in entry:
                r["forward_steps_per_s"] = entry["joseph_steps"] / tf
                r["back_steps_per_s"] = entry["joseph_steps"] / tb
            entry["gpu"][v] = r
            _progress(
                lines,
                f"{case} {v}: forward {nlors / tf:.3g} LOR/s ({tf * 1e3:.1f} ms; "
                f"{nlors / tf_plain:.3g} copying the image per call), "
                f"back {nlors / tb:.3g} LOR/s ({tb * 1e3:.1f} ms), {nlors} LORs",
            )
        if args.subsets > 1:
            opts = next(iter(variants.values()))
            sub = bench_subset(cp, cb, pdi, ii, kg, opts, args.repeats, img, args.subsets)
            full = entry["gpu"][next(iter(variants))]
            for label in sub:
                sub[label]["fraction_of_full"] = (sub[label]["forward_s"] + sub[label]["back_s"]) / (
                    full["forward_s"] + full["back_s"]
                )
            entry["subset"] = sub
            _progress(
                lines,
                f"{case} 1 subset of {args.subsets} (kernels, workspaces kept): forward "
                f"{sub['subset']['forward_s'] * 1e3:.2f} ms, back {sub['subset']['back_s'] * 1e3:.2f} ms "
                f"= {sub['subset']['fraction_of_full']:.3f} of full (ideal {1 / args.subsets:.3f}); "
                f"in one launch: {sub['subset_one_launch']['fraction_of_full']:.3f}; "
                f"{sub['consecutive']['views']} consecutive views: "
                f"{sub['consecutive']['fraction_of_full']:.3f}",
            )
        if args.explicit:
            xs, xe = explicit_endpoints(cp, pdi, tables)
            entry["explicit"] = {}
            for v, opts in explicit_variants.items():
                tf, tb = bench_explicit(cp, cb, kg, opts, args.repeats, xs, xe, img, ii.shape)
                entry["explicit"][v] = {
                    "forward_lor_per_s": nlors / tf,
                    "back_lor_per_s": nlors / tb,
                    "forward_s": tf,
                    "back_s": tb,
                }
                _progress(lines, f"{case} explicit {v}: forward {nlors / tf:.3g} LOR/s, back {nlors / tb:.3g} LOR/s")
            del xs, xe
        if args.cpu_views > 0:
            c = kernels_cpu.bench_exact(pdi, ii, kg, phantom(ii, np), args.cpu_views, max(1, min(args.repeats, 3)))
            entry["cpu"] = c
            _progress(
                lines,
                f"{case} cpu ({c['threads']} threads, {c['lors']} LORs): forward "
                f"{c['forward_lor_per_s']:.3g} LOR/s, back {c['back_lor_per_s']:.3g} LOR/s",
            )
        result["cases"][case] = entry
        del tables, img
        cp.get_default_memory_pool().free_all_blocks()
    return result, lines


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
