"""``lafov.py --sweep``: how each in-memory call's seconds grow with the data, over maximum ring
differences (10, 40, 85 by default) of the same scanner and image.

For each maximum ring difference, in fresh processes: the phantom image (``make``) and the
``memory`` run (forward projection into host memory, back projection from it, one full OSEM
iteration of the data in memory).  Per call, its seconds at each size and the slopes between
neighbouring sizes (seconds per 1e9 bins): a call whose cost is linear in the data has equal
slopes; the figure is the largest slope over the smallest (target: within 10 %)."""

from __future__ import annotations

import copy
import tempfile

CALLS = {
    "forward": lambda run: run["forward"]["seconds"],
    "back": lambda run: run["back"]["seconds"],
    "osem": lambda run: run["osem"]["seconds"],
    "back_kernels": lambda run: run["back"]["kernel_seconds"],
    "osem_kernels": lambda run: run["osem"]["kernel_seconds"],
}
#: the slopes of a linear call agree within this
TARGET_SLOPE_SPREAD = 0.10


def sweep(args, run_worker, check_room) -> dict:
    """The sweep over ``args.sweep`` (maximum ring differences, ascending)."""
    points = []
    for mrd in sorted(args.sweep):
        one = copy.copy(args)
        one.max_ring_diff = mrd
        geometry = run_worker(one, "describe")
        check_room(one, geometry)
        with tempfile.TemporaryDirectory(prefix="stirgpu-lafov-sweep-", dir=args.dir) as folder:
            run_worker(one, "make", folder)
            run = run_worker(one, "memory", folder)
        points.append({"max_ring_diff": mrd, "bins": geometry["bins"], "run": run})
    return {"points": points, "calls": {name: linearity(points, of) for name, of in CALLS.items()}}


def linearity(points: list[dict], seconds_of) -> dict:
    """A call's seconds at each point, its slopes (seconds per 1e9 bins) between neighbours and
    their spread (largest over smallest, minus 1)."""
    seconds = [seconds_of(p["run"]) for p in points]
    bins = [p["bins"] for p in points]
    slopes = [1e9 * (seconds[k + 1] - seconds[k]) / (bins[k + 1] - bins[k]) for k in range(len(points) - 1)]
    spread = max(slopes) / min(slopes) - 1 if slopes and min(slopes) > 0 else None
    return {
        "seconds": seconds,
        "slopes_s_per_1e9_bins": slopes,
        "spread": spread,
        "met": spread is not None and spread <= TARGET_SLOPE_SPREAD,
    }


def readable(result: dict) -> str:
    sizes = ", ".join(f"MRD {p['max_ring_diff']}: {p['bins']:.3e} bins" for p in result["points"])
    lines = [f"sweep ({sizes})"]
    for name, c in result["calls"].items():
        seconds = ", ".join(f"{t:.2f}" for t in c["seconds"])
        slopes = ", ".join(f"{t:.3f}" for t in c["slopes_s_per_1e9_bins"])
        spread = "n/a" if c["spread"] is None else f"{c['spread']:.1%}"
        lines.append(
            f"{name}: {seconds} s; slopes {slopes} s per 1e9 bins; spread {spread} ({'met' if c['met'] else 'not met'})"
        )
    return "\n".join(lines)
