"""What SIRF's one-array memory storage costs the projector: the same projections into and out of
the two in-memory stores, in one run.

    python3 benchmarks/sirf_memory.py                         # GPU (or CPU), Siemens mMR span 11
    python3 benchmarks/sirf_memory.py --backend cpu --quick   # a small CPU case (CI smoke test)

``stirgpu.sirf``'s memory ``AcquisitionData`` hold their bins in one array in SIRF's order
(``formats.ProjDataInOneArray``), so that ``asarray(copy=False)`` is a view, as in SIRF.  A
segment of that array is strided, so the engine copies chunks in and out of it; stirgpu's own
``ProjDataInMemory`` (one array per segment) lends its segments to the engine directly (on a
GPU: page-locked, copied straight to the device).  Each call is timed in rounds that alternate
the two stores (``timing.rounds``: one untimed call of each first, then ``--repeat`` rounds; the
median is reported), and the ratio is one array / per segment:

* ``forward`` -- a forward projection of an image into the store;
* ``back`` -- a back projection of the store's data (the same values in both).

Output: a JSON document (``--json FILE`` also writes it), then one readable line per call.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
import timing  # noqa: E402
from non_finite import add_geometry_arguments, described, geometry  # noqa: E402


def compared(device, calls: dict, repeat: int) -> dict:
    """Median seconds of the two stores' calls, in alternating rounds, and their ratio."""
    times = timing.rounds(device, calls, repeat)
    one, per = statistics.median(times["one_array"]), statistics.median(times["per_segment"])
    return {"one_array_s": one, "per_segment_s": per, "ratio": one / per}


def run(args) -> dict:
    from stirgpu.formats import ProjDataInMemory, ProjDataInOneArray
    from stirgpu.projectors import ProjectorPair

    device = timing.Device.of(args.backend)
    pdi, info = geometry(args)
    rng = np.random.default_rng(3)
    image = rng.uniform(0.5, 1.5, info.shape).astype(np.float32)
    pair = ProjectorPair(backend=args.backend)
    pair.set_up(pdi, info)
    per_segment, one_array = ProjDataInMemory(pdi), ProjDataInOneArray(pdi)
    pair.forward_project(per_segment, image)
    one_array.fill(per_segment)
    cases = {
        "forward": compared(
            device,
            {
                "one_array": lambda: pair.forward_project(one_array, image),
                "per_segment": lambda: pair.forward_project(per_segment, image),
            },
            args.repeat,
        ),
        "back": compared(
            device,
            {
                "one_array": lambda: pair.back_project(None, one_array),
                "per_segment": lambda: pair.back_project(None, per_segment),
            },
            args.repeat,
        ),
    }
    return {
        "backend": pair.backend,
        "devices": list(pair.devices or ()),
        "geometry": described(pdi, info),
        "repeat": args.repeat,
        "cases": cases,
    }


def readable(name: str, case: dict) -> str:
    return (
        f"{name}: {case['one_array_s']:.4f} s with SIRF's one-array store, {case['per_segment_s']:.4f} s with "
        f"stirgpu's per-segment store (x{case['ratio']:.3f})"
    )


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    add_geometry_arguments(p)
    p.add_argument("--repeat", type=arguments.positive_int, default=3, help="timed rounds (default 3)")
    p.add_argument("--quick", action="store_true", help="a small case for CPU smoke runs")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the JSON document here")
    args = p.parse_args(argv)
    if args.backend == "auto":
        from stirgpu.execution import resolve_backend

        args.backend = resolve_backend("auto")
    arguments.emit_cases(run(args), args.json, readable)
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
