"""What STIR's numerics cost: the same projector with ``numerics="stir"`` against ``"exact"``.

    python3 benchmarks/numerics.py                        # GPU: Siemens mMR span 11, 252 views
    python3 benchmarks/numerics.py --backend cpu --quick  # CPU smoke run (views mashed, small image)

``"stir"`` gives STIR's numbers (its float32 LOR endpoints, libparallelproj 2.0.3's float32
Joseph arithmetic; forward projections equal STIR's bit for bit); ``"exact"`` is the float64
geometry with the tuned kernels (docs/joseph.md, "Precision"; docs/kernel-tuning.md).  Both
run in the same process on the same in-memory data and image, alternating, best of
``--repeat``: forward and back projection of all views, and of subset 0 of ``--subsets``.
The agreement of the two (max |stir - exact| / max) is printed too.

Output: one JSON document, then one readable line per measurement.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402

from stirgpu.execution import resolve_backend  # noqa: E402
from stirgpu.formats import ProjDataInMemory  # noqa: E402
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner  # noqa: E402
from stirgpu.projectors import ProjectorPair  # noqa: E402


def _sync(backend: str) -> None:
    if backend == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


def timed(fn, backend: str) -> float:
    _sync(backend)
    t = time.perf_counter()
    fn()
    _sync(backend)
    return time.perf_counter() - t


def run(args) -> dict:
    backend = resolve_backend(args.backend)
    views = 252 // (12 if args.quick else 1)
    pdi = ProjDataInfo.construct(
        Scanner.from_name("Siemens mMR"), 11, 60 if not args.quick else 16, views, 344 if not args.quick else 128, False
    )
    info = ImageInfo.default_for(pdi) if not args.quick else ImageInfo.default_for(pdi, xy_size=101)
    rng = np.random.default_rng(0)
    image = rng.uniform(0, 1, info.shape).astype(np.float32)
    data = ProjDataInMemory(pdi)
    data.fill(rng.uniform(0.5, 1.5, data.shape).astype(np.float32))
    pairs = {}
    for numerics in ("stir", "exact"):
        pp = ProjectorPair(backend=backend, numerics=numerics)
        pp.set_up(pdi, info)
        pp.set_input(image)
        out = ProjDataInMemory(pdi)
        pairs[numerics] = (pp, out)
        pp.forward_project(out, None)  # warm-up: compilation, page-locking, kept plans
        pp.back_project(None, data)
    calls = {
        "forward": lambda pp, out: pp.forward_project(out, None),
        "back": lambda pp, out: pp.back_project(None, data),
        "subset forward": lambda pp, out: pp.forward_project(out, None, subset_num=0, num_subsets=args.subsets),
        "subset back": lambda pp, out: pp.back_project(None, data, subset_num=0, num_subsets=args.subsets),
    }
    times = {k: {"stir": np.inf, "exact": np.inf} for k in calls}
    for _ in range(args.repeat):
        for name, call in calls.items():
            for numerics, (pp, out) in pairs.items():
                times[name][numerics] = min(times[name][numerics], timed(functools.partial(call, pp, out), backend))
    fwd = {n: pairs[n][1].as_array() for n in pairs}
    back = {n: np.asarray(pairs[n][0].back_project(None, data)) for n in pairs}
    agreement = {
        "forward": float(np.max(np.abs(fwd["stir"] - fwd["exact"])) / np.max(fwd["stir"])),
        "back": float(np.max(np.abs(back["stir"] - back["exact"])) / np.max(back["stir"])),
    }
    return {
        "backend": backend,
        "geometry": f"Siemens mMR span 11, {views} views, {pdi.get_num_tangential_poss()} "
        f"tangential, image {info.shape}",
        "lors": int(np.prod(data.shape)),
        "repeat": args.repeat,
        "seconds": times,
        "ratio_stir_over_exact": {k: v["stir"] / v["exact"] for k, v in times.items()},
        "max_difference_stir_vs_exact": agreement,
    }


def readable(res: dict) -> str:
    lines = [f"{res['geometry']}, {res['lors']:.3g} LORs, backend {res['backend']}"]
    for k, v in res["seconds"].items():
        lines.append(
            f"  {k:15s} stir {v['stir'] * 1e3:9.2f} ms   exact {v['exact'] * 1e3:9.2f} ms   "
            f"stir/exact {res['ratio_stir_over_exact'][k]:.2f}"
        )
    a = res["max_difference_stir_vs_exact"]
    lines.append(f"  stir vs exact: forward {a['forward']:.2e}, back {a['back']:.2e} of the maximum")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--quick", action="store_true", help="small geometry (CPU smoke run)")
    ap.add_argument("--repeat", type=arguments.positive_int, default=3)
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    args = ap.parse_args(argv)
    res = run(args)
    print(json.dumps(res, indent=1))
    print(readable(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
