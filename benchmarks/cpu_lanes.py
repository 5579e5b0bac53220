"""CPU lanes: one lane on all cores, two lanes sharing them, two lanes with a core each.

    python3 benchmarks/cpu_lanes.py [--views 21] [--zoom 0.25] [--repeat 5]

In-memory forward and back projection of Siemens mMR span-11 data (``benchmarks/streaming.py
--quick``'s geometry: ``--views`` views, STIR's default image times ``--zoom``) through
``ProjectorPair`` on the CPU, three ways, in rounds that go through all of them in turn (so
that a change in the machine's other load reaches every figure alike):

* ``one lane`` -- the default (``devices=None``): one CPU worker whose numba kernels run every
  chunk on all cores;
* ``two lanes`` -- ``devices=[0, 1]``: two workers whose parallel kernels take turns under the
  CPU lanes' compute lock (what the default was before);
* ``two lanes, a core each`` -- ``devices=[0, 1]`` with each lane's kernels on one numba thread
  (``numba.set_num_threads`` is per thread) and no compute lock, so that both lanes compute at
  once, each on its own core with its own accumulation image.  The projectors have no such
  mode: the script replaces ``CpuLane.compute`` for these calls only, which is only safe with a
  thread-safe numba threading layer (``omp`` or ``tbb``; ``workqueue`` aborts the process when
  entered by two threads), so the script refuses to measure it on another layer.

Each figure is the best and the median of ``--repeat`` rounds after a warm-up; the load average
is reported with them.  Output: JSON, then one readable line per way.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
from timing import Device, rounds  # noqa: E402

WAYS = ("one lane", "two lanes", "two lanes, a core each")


def _one_core_compute(lane, fn):
    """``CpuLane.compute`` without the lock, the kernels on one numba thread of this lane's."""
    import numba

    numba.set_num_threads(1)
    t0 = time.perf_counter()
    fn()
    return t0, time.perf_counter()


def _threading_layer() -> str:
    """numba's threading layer, chosen by running a parallel loop once."""
    import numba

    @numba.njit(parallel=True)
    def touch(a):
        for i in numba.prange(a.shape[0]):
            a[i] += 1.0

    touch(np.zeros(4))
    return str(numba.threading_layer())


def run(args) -> dict:
    from stirgpu.execution import devices as lanes_module
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
    from stirgpu.projectors import ProjectorPair

    layer = _threading_layer()
    ways = WAYS if layer in ("omp", "tbb") else WAYS[:2]
    pdi = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), span=11, max_ring_diff=60, num_views=args.views)
    info = ImageInfo.default_for(pdi, zoom=args.zoom)
    rng = np.random.default_rng(1)
    img = rng.random(info.shape, dtype=np.float32)
    plain_compute = lanes_module.CpuLane.compute
    computes = {"one lane": plain_compute, "two lanes": plain_compute, "two lanes, a core each": _one_core_compute}
    pairs = {w: ProjectorPair(backend="cpu", devices=None if w == "one lane" else [0, 1]) for w in ways}
    data = ProjDataInMemory(pdi)
    backs: dict[str, np.ndarray] = {}

    def in_way(w, project):
        """``project`` with way ``w``'s lane compute in place (set before each call: the rounds
        go through the ways in turn)."""

        def call():
            lanes_module.CpuLane.compute = computes[w]
            return project()

        return call

    def back(w):
        backs[w] = pairs[w].back_project(None, data)  # (the last round's image, for the agreement)

    calls = {}
    for w in ways:
        calls[w, "forward"] = in_way(w, lambda w=w: pairs[w].forward_project(data, img))
        calls[w, "back"] = in_way(w, lambda w=w: back(w))
    try:
        for w in ways:
            lanes_module.CpuLane.compute = computes[w]
            pairs[w].set_up(pdi, info)
        times = rounds(Device(np), calls, args.repeat)  # the warm-up compiles numba's kernels
    finally:
        lanes_module.CpuLane.compute = plain_compute
    first = backs[ways[0]]
    return {
        "config": {
            "views": pdi.get_num_views(),
            "image_shape": list(info.shape),
            "bins": int(pdi.total_num_bins),
            "repeat": args.repeat,
            "threading_layer": layer,
            "cpus": len(os.sched_getaffinity(0)),
        },
        "load_average": list(os.getloadavg()),
        "ways": {
            w: {
                **{f"{k}_best_s": min(times[w, k]) for k in ("forward", "back")},
                **{f"{k}_median_s": statistics.median(times[w, k]) for k in ("forward", "back")},
                "back_max_difference_to_one_lane": float(np.max(np.abs(backs[w] - first)) / np.max(np.abs(first))),
            }
            for w in ways
        },
    }


def readable(res: dict) -> str:
    c = res["config"]
    head = (
        f"cpu lanes ({c['cpus']} CPUs, numba layer {c['threading_layer']}, "
        f"{c['bins']} bins, image {tuple(c['image_shape'])}, load {res['load_average'][0]:.1f}):"
    )
    lines = [head]
    for w, r in res["ways"].items():
        lines.append(
            f"  {w}: forward {r['forward_best_s']:.3f} s (median {r['forward_median_s']:.3f}), "
            f"back {r['back_best_s']:.3f} s (median {r['back_median_s']:.3f})"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--views", type=arguments.positive_int, default=21)
    p.add_argument("--zoom", type=arguments.positive_float, default=0.25)
    p.add_argument("--repeat", type=arguments.positive_int, default=5)
    p.add_argument("--json", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    res = run(args)
    arguments.emit_json(res, args.json)
    print(readable(res))
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
