"""What refusing NaN and ±Inf inputs costs: the same calls with the check and without, in one run.

    python3 benchmarks/non_finite.py                         # GPU (or CPU), Siemens mMR span 11
    python3 benchmarks/non_finite.py --backend cpu --quick   # a small CPU case (CI smoke test)

stirgpu refuses inputs holding NaN or ±Inf (``stirgpu.config(check_finite=...)``, default on;
docs/execution.md, "Non-finite inputs").  Each call below is timed in rounds that alternate the
check on and off (``timing.rounds``: one untimed call of each first, then ``--repeat`` rounds;
the median is reported), on the same data, and the ratio is checked / unchecked:

* ``back_disk`` -- a back projection of projection data in a file (every chunk read by the
  engine's reader threads, which count each piece's non-finite values as they read it; the file
  is in the page cache after the first call, so the count is compared with memory-speed reads,
  its worst case);
* ``back_memory`` -- the same from an in-memory store (on a GPU: page-locked from its second use
  and copied straight to the device, where each chunk is summed after its copy);
* ``forward`` -- a forward projection of an image (the image counted before its upload);
* ``osem_set_up`` -- ``OSEM.set_up()``: the sensitivities (subset back projections of the
  normalisation), preceded, with the check, by the one read of the prompts, the additive sinogram
  and the normalisation that OSEM makes before its first subiteration; ``osem_check_s`` is that
  read alone (the median of ``--repeat`` reads), also as a fraction of one OSEM iteration
  (``--subsets`` subiterations, after one untimed subiteration) measured in the same run.

Output: a JSON document (``--json FILE`` also writes it), then one readable line per call.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
import timing  # noqa: E402

#: --quick: a reduced mMR (3 segments, 84 views, 172 tangential positions), a 31 x 61 x 61 image
QUICK = {"max_ring_diff": 1, "views": 84, "tangential": 172}


def geometry(args):
    """(ProjDataInfo, ImageInfo): the mMR at span 11 (or span 1 with --max-ring-diff), STIR's
    default image of it (61 x 61 transaxially with --quick)."""
    from stirgpu.geometry import ProjDataInfo, Scanner
    from stirgpu.kernels.joseph.lors import stir_default_image_info

    sc = Scanner.from_name("Siemens mMR")
    small = QUICK if args.quick else {}
    mrd = args.max_ring_diff if args.max_ring_diff is not None else small.get("max_ring_diff")
    span = 11 if mrd is None else 1
    mrd = sc.num_rings - 1 if mrd is None else mrd
    if mrd >= sc.num_rings:
        raise arguments.BadArgument(f"--max-ring-diff {mrd}: {sc.name} has {sc.num_rings} rings")
    views = args.views or small.get("views") or sc.num_detectors_per_ring // 2
    tangential = args.tangential or small.get("tangential") or sc.max_num_non_arccorrected_bins
    pdi = ProjDataInfo.construct(sc, span=span, max_ring_diff=mrd, num_views=views, num_tangential_poss=tangential)
    info = stir_default_image_info(pdi, xy_size=61 if args.quick else None)
    return pdi, info


def add_geometry_arguments(p) -> None:
    """The options :func:`geometry` reads (``--quick`` is each script's own)."""
    p.add_argument("--max-ring-diff", type=arguments.non_negative_int, default=None, help="span 1 up to this")
    p.add_argument("--views", type=arguments.positive_int, default=None, help="number of views (default all)")
    p.add_argument("--tangential", type=arguments.positive_int, default=None, help="tangential positions")


def described(pdi, info) -> dict:
    """The JSON's ``geometry``: scanner, segments, views, tangential positions, bins, image shape."""
    return {
        "scanner": pdi.get_scanner().name,
        "segments": pdi.get_num_segments(),
        "views": pdi.get_num_views(),
        "tangential": pdi.get_num_tangential_poss(),
        "bins": pdi.total_num_bins,
        "image": list(info.shape),
    }


def stores(pdi, folder: Path, seed: int = 1):
    """(prompts on disk, additive on disk, normalisation on disk, prompts in memory): random
    finite values, written segment by segment."""
    from stirgpu.formats import ProjDataFromFile, ProjDataInMemory

    rng = np.random.default_rng(seed)
    made = {}
    for name, low, high in (("prompts", 0.0, 10.0), ("additive", 0.05, 0.2), ("norm", 0.5, 2.0)):
        with ProjDataFromFile.create(folder / f"{name}.hs", pdi) as pd:
            for s in pdi.segment_nums:
                for views in pd.view_chunks(s):
                    shape = (len(views), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
                    pd.write_views(rng.uniform(low, high, shape).astype(np.float32), s, views)
        made[name] = ProjDataFromFile.open(folder / f"{name}.hs")
    memory = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        memory.write_views(made["prompts"].read_views(s, range(pdi.get_num_views())), s, range(pdi.get_num_views()))
    return made["prompts"], made["additive"], made["norm"], memory


def checked_and_not(device, call, repeat: int) -> dict:
    """Median seconds of ``call()`` with the check and without, in alternating rounds."""
    import stirgpu

    def with_check(on: bool):
        def run():
            with stirgpu.config(check_finite=on):
                return call()

        return run

    times = timing.rounds(device, {"checked": with_check(True), "unchecked": with_check(False)}, repeat)
    checked, unchecked = statistics.median(times["checked"]), statistics.median(times["unchecked"])
    return {"checked_s": checked, "unchecked_s": unchecked, "ratio": checked / unchecked}


def run(args) -> dict:
    import stirgpu
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import OSEM, PoissonLogLikelihood

    device = timing.Device.of(args.backend)
    pdi, info = geometry(args)
    rng = np.random.default_rng(2)
    image = rng.uniform(0.5, 1.5, info.shape).astype(np.float32)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        prompts, additive, norm, memory = stores(pdi, Path(folder))
        pair = ProjectorPair(backend=args.backend)
        pair.set_up(pdi, info)
        cases = {
            "back_disk": checked_and_not(device, lambda: pair.back_project(None, prompts), args.repeat),
            "back_memory": checked_and_not(device, lambda: pair.back_project(None, memory), args.repeat),
            "forward": checked_and_not(device, lambda: pair.forward_project(memory, image), args.repeat),
        }
        objective = PoissonLogLikelihood(prompts, additive=additive, normalisation=norm)
        osem = OSEM(objective, pair, info, num_subsets=args.subsets)
        cases["osem_set_up"] = checked_and_not(device, osem.set_up, args.repeat)
        check_s = statistics.median(timing.timings(device, objective.check_finite, args.repeat))
        x = osem.initial_image(1.0)
        with stirgpu.config(check_finite=False):
            osem.update(x, 1)  # (untimed: the first fused call compiles and allocates)
            iteration_s = device.timed(lambda: [osem.update(x, n) for n in range(1, args.subsets + 1)])[0]
        for pd in (prompts, additive, norm):
            pd.close()
    return {
        "backend": pair.backend,
        "devices": list(pair.devices or ()),
        "geometry": described(pdi, info),
        "repeat": args.repeat,
        "cases": cases,
        "osem": {
            "subsets": args.subsets,
            "check_s": check_s,
            "iteration_s": iteration_s,
            "check_of_iteration": check_s / iteration_s,
        },
    }


def readable(name: str, case: dict) -> str:
    return (
        f"{name}: {case['checked_s']:.4f} s with the non-finite check, {case['unchecked_s']:.4f} s without "
        f"(x{case['ratio']:.3f})"
    )


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    add_geometry_arguments(p)
    p.add_argument("--subsets", type=arguments.positive_int, default=21, help="OSEM subsets (default 21)")
    p.add_argument("--repeat", type=arguments.positive_int, default=3, help="timed rounds (default 3)")
    p.add_argument("--dir", default=None, help="folder for the data files (default: the temporary folder)")
    p.add_argument("--quick", action="store_true", help="a small case for CPU smoke runs")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the JSON document here")
    args = p.parse_args(argv)
    if args.dir is not None and not Path(args.dir).is_dir():
        raise arguments.BadArgument(f"--dir {args.dir}: not a folder")
    if args.backend == "auto":
        from stirgpu.execution import resolve_backend

        args.backend = resolve_backend("auto")
    doc = run(args)
    arguments.emit_cases(doc, args.json, readable)
    o = doc["osem"]
    print(
        f"OSEM's read of its inputs before the first subiteration: {o['check_s']:.4f} s, "
        f"{100 * o['check_of_iteration']:.1f} % of one iteration ({o['subsets']} subsets, {o['iteration_s']:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
