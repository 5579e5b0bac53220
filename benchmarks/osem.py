"""Seconds per full OSEM iteration: stirgpu's fused subset step vs STIR's bridge strategy.

    python3 benchmarks/osem.py                                  # Siemens mMR span 11, 21 subsets (GPU)
    python3 benchmarks/osem.py --backend cpu --views 84 --tangential 172 --max-ring-difference 10

One full iteration = ``--subsets`` subiterations.  Both strategies run in the same process on
the same data, with the same kernels and the same STIR quotient rule, and update the same
way (``x *= ratio / sens_k``); only the work selection and data movement differ:

* **stirgpu** -- ``ProjectorPair.forward_back_ratio`` per subset: reads the subset's views of
  y, the background and the factors chunk by chunk, and per chunk forward projects,
  divides and back projects on the device (no full-size intermediate);
* **bridge** -- what STIR's Parallelproj bridge does per subset: forward project ALL views
  into a full-size array, take the subset's part, compute the quotient there, assemble a
  full-size array that is zero outside the subset, and back project ALL of it.

Data: ``y = A x`` of a uniform cylinder (noise-free: timing does not depend on the counts),
a flat background (measured units) and correction factors, all in host memory (ProjDataInMemory).
Sensitivities are computed once before timing (both strategies share them).

Output: a JSON document (``--json FILE`` also writes it), then readable lines.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402

import stirgpu  # noqa: E402
from stirgpu.formats import ProjDataInMemory  # noqa: E402
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner  # noqa: E402
from stirgpu.projectors import ProjectorPair  # noqa: E402
from stirgpu.projectors.poisson import poisson_quotient  # noqa: E402
from stirgpu.recon.arrays import array_module, stir_divide, to_numpy  # noqa: E402


def make_problem(args, projector):
    sc = Scanner.from_name(args.scanner)
    pdi = ProjDataInfo.construct(
        sc,
        args.span,
        args.max_ring_difference,
        num_views=args.views,
        num_tangential_poss=args.tangential,
        arc_corrected=False,
    )
    info = ImageInfo.default_for(pdi, xy_size=args.image_xy)
    projector.set_up(pdi, info)
    z = np.arange(info.shape[0])[:, None, None]
    yy, xx = np.meshgrid(
        np.arange(info.shape[1]) - info.shape[1] // 2, np.arange(info.shape[2]) - info.shape[2] // 2, indexing="ij"
    )
    cyl = ((yy**2 + xx**2) < (0.4 * info.shape[2]) ** 2)[None] & (z >= 0)
    truth = np.where(cyl, 1.0, 0.0).astype(np.float32)
    y = ProjDataInMemory(pdi)
    projector.forward_project(y, truth)
    f = ProjDataInMemory(pdi, fill=1.25)
    mean_y = sum(float(y.get_segment_by_view(s).sum()) for s in pdi.segment_nums) / pdi.total_num_bins
    background = ProjDataInMemory(pdi, fill=0.1 * mean_y)
    return pdi, info, y, background, f


def streaming_iteration(pp, x, y, background, f, sens, K, stats):
    for k in range(K):
        ratio = pp.forward_back_ratio(
            x, y, k, K, background=background, multiplicative=f, out_image=array_module(x).zeros_like(x)
        )
        stats.append(pp.last_stats)
        x *= stir_divide(ratio, sens[k])
    return x


def bridge_iteration(pp, pdi, x, y, background, f, sens, K, full_fwd, full_ratio):
    """STIR's bridge: full forward projection, subset quotient, full back projection."""
    nv = pdi.get_num_views()
    for k in range(K):
        views = pdi.subset_views(k, K)
        pp.forward_project(full_fwd, x)  # ALL views
        for seg in pdi.segment_nums:
            ratio = np.zeros((nv, pdi.get_num_axial_poss(seg), pdi.get_num_tangential_poss()), np.float32)
            q = poisson_quotient(
                np,
                full_fwd.read_views(seg, views),
                y.read_views(seg, views),
                background.read_views(seg, views),
                f.read_views(seg, views),
            )
            ratio[views] = q
            full_ratio.write_views(ratio, seg, np.arange(nv))  # full-size, zero outside the subset
        img = pp.back_project(array_module(x).zeros_like(x), full_ratio)  # ALL views
        x *= stir_divide(img, sens[k])
    return x


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--devices", type=arguments.int_list, default=None, help="comma-separated GPU ids (default: all)")
    p.add_argument("--scanner", default="Siemens mMR")
    p.add_argument("--span", type=arguments.positive_int, default=11)
    p.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=60)
    p.add_argument(
        "--views", type=arguments.positive_int, default=252, help="252 for the mMR; fewer mashes views (CPU)"
    )
    p.add_argument("--tangential", type=arguments.positive_int, default=344, help="344 for the mMR")
    p.add_argument("--image-xy", type=arguments.positive_int, default=None, help="image x/y size (default: STIR's)")
    p.add_argument("--subsets", type=arguments.positive_int, default=21)
    p.add_argument(
        "--iterations", type=arguments.positive_int, default=1, help="full iterations timed per strategy (best kept)"
    )
    p.add_argument("--no-bridge", action="store_true", help="time stirgpu only")
    p.add_argument("--json", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    with stirgpu.config(backend=args.backend, devices=args.devices):
        pp = ProjectorPair()
        t0 = time.perf_counter()
        pdi, info, y, background, f = make_problem(args, pp)
        K = args.subsets
        sens = [pp.sensitivity(None, k, K, multiplicative=f) for k in range(K)]
        xp = np
        if pp.backend == "cuda":
            import cupy as xp  # the estimate stays on the GPU, as in stirgpu.recon.OSEM

            sens = [xp.asarray(s) for s in sens]
        setup = time.perf_counter() - t0
        result = {
            "scanner": args.scanner,
            "span": args.span,
            "max_ring_difference": args.max_ring_difference,
            "views": args.views,
            "tangential": args.tangential,
            "segments": pdi.get_num_segments(),
            "bins": pdi.total_num_bins,
            "data_gb": 4 * pdi.total_num_bins / 1e9,
            "image": list(info.shape),
            "subsets": K,
            "backend": pp.backend,
            "devices": list(pp.devices),
            "setup_seconds": setup,
        }

        # warm-up: one subiteration each (kernel compilation, buffer allocation)
        x = xp.ones(info.shape, dtype=np.float32)
        streaming_iteration(pp, x, y, background, f, sens, 1, [])
        times, stats = [], []
        for _ in range(args.iterations):
            x = xp.ones(info.shape, dtype=np.float32)
            stats = []
            t = time.perf_counter()
            streaming_iteration(pp, x, y, background, f, sens, K, stats)
            times.append(time.perf_counter() - t)
        x_stream = to_numpy(x)
        result["stirgpu_seconds_per_iteration"] = min(times)
        result["stirgpu_overlap_efficiency"] = float(np.mean([s.overlap_efficiency for s in stats]))
        result["stirgpu_chunks_per_subset"] = float(np.mean([s.chunks for s in stats]))

        if not args.no_bridge:
            full_fwd, full_ratio = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
            btimes = []
            for _ in range(args.iterations):
                x = xp.ones(info.shape, dtype=np.float32)
                t = time.perf_counter()
                bridge_iteration(pp, pdi, x, y, background, f, sens, K, full_fwd, full_ratio)
                btimes.append(time.perf_counter() - t)
            result["bridge_seconds_per_iteration"] = min(btimes)
            result["speedup"] = result["bridge_seconds_per_iteration"] / result["stirgpu_seconds_per_iteration"]
            x_bridge = to_numpy(x)
            # same algorithm: the two estimates agree to float32 summation order
            result["max_relative_difference"] = float(np.abs(x_bridge - x_stream).max() / x_stream.max())

    arguments.emit_json(result, args.json)
    print(
        f"\n{args.scanner} span {args.span}, {pdi.get_num_segments()} segments x {args.views} views x "
        f"{args.tangential} tangential ({result['data_gb']:.2f} GB float32), image {info.shape}, "
        f"{K} subsets, backend {result['backend']} {result['devices']}"
    )
    print(
        f"stirgpu: {result['stirgpu_seconds_per_iteration']:.2f} s per full iteration "
        f"(overlap efficiency {result['stirgpu_overlap_efficiency']:.2f})"
    )
    if "bridge_seconds_per_iteration" in result:
        print(
            f"bridge:  {result['bridge_seconds_per_iteration']:.2f} s per full iteration -> "
            f"stirgpu is {result['speedup']:.1f} x faster (estimates agree to "
            f"{result['max_relative_difference']:.1e} of the maximum)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
