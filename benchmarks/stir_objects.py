"""Projecting through STIR's own Python objects vs through stirgpu's own stores, same run.

    python3 benchmarks/stir_objects.py                  # CPU backend, reduced mMR span 11
    python3 benchmarks/stir_objects.py --stir PREFIX    # a STIR build elsewhere

One view-order Interfile file (written by stirgpu, random values) is projected through

* **stir**: ``stir.ProjData.read_from_file`` (back projection) and a new
  ``stir.ProjDataInterfile`` (forward projection), with ``stir.FloatVoxelsOnCartesianGrid``
  images -- what a STIR Python user passes;
* **own**: stirgpu's disk store (``read_from_file``, ``ProjDataOnDisk.create``) of the same
  file, with numpy images,

(both outputs created once, then updated in place) by the same ``ProjectorPair``
(``--backend``), for all views and for one subset of ``--subsets``.  The two paths run in
turn, their order swapped every round, ``--repeat`` rounds; the ratio reported is the median
of the rounds' ratios (robust to other work on the machine), the seconds the best of each.
Also timed, for context: reading every viewgram alone through STIR
(``get_viewgram(v, s).as_array()``) and through stirgpu's store (``read_views``).  The results
of both paths are compared (identical on the CPU).

Output: one JSON document, then one readable line: the time ratios stir / own (target <= 1.5),
plus the seconds the lanes spent reading/writing chunks (the transport itself).
STIR is found as tests/reference_stir.py finds it (``--stir`` overrides).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO, Path(__file__).resolve().parent):
    if str(p) not in sys.path:  # run from a checkout without installing
        sys.path.insert(0, str(p))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
from vs_stir import find_stir  # noqa: E402

from stirgpu.formats import ProjDataFromFile, ProjDataOnDisk, StorageOrder, read_from_file  # noqa: E402
from stirgpu.geometry import ProjDataInfo, Scanner  # noqa: E402
from stirgpu.projectors import ProjectorPair  # noqa: E402


def make_file(path: Path, pdi: ProjDataInfo) -> None:
    rng = np.random.default_rng(0)
    with ProjDataFromFile.create(path, pdi, StorageOrder.VIEW) as pd:
        for s in pdi.segment_nums:
            shape = (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
            pd.write_views(rng.random(shape, dtype=np.float32), s, np.arange(pdi.get_num_views()))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _io_seconds(stats) -> float:
    """Seconds the call's lanes spent reading and writing chunks (from its RunStats)."""
    return float(sum(b.get("read", 0.0) + b.get("write", 0.0) for b in stats.busy.values()))


def read_all_stir(stir_pd, pdi) -> None:
    for s in pdi.segment_nums:
        for v in range(pdi.get_num_views()):
            stir_pd.get_viewgram(v, s).as_array()


def read_all_own(store, pdi) -> None:
    for s in pdi.segment_nums:  # into a new array, as as_array() makes one per viewgram
        store.read_views(
            s,
            range(pdi.get_num_views()),
            out=np.empty((pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), np.float32),
        )


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--stir", default=None, help="prefix of a STIR build (bin/, python/, share/STIR-*/config)")
    ap.add_argument(
        "--max-ring-difference", type=arguments.non_negative_int, default=16, help="mMR span 11: 16 keeps 3 segments"
    )
    ap.add_argument("--views", type=arguments.positive_int, default=126, help="252 for the mMR; 126 mashes by 2")
    ap.add_argument(
        "--tangential", type=arguments.positive_int, default=172, help="344 for the mMR; 172 keeps the central half"
    )
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--repeat", type=arguments.positive_int, default=3)
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args(argv)

    ref = find_stir(args.stir)
    stir = ref.module()
    pdi = ProjDataInfo.construct(
        Scanner.from_name("Siemens mMR"),
        11,
        args.max_ring_difference,
        num_views=args.views,
        num_tangential_poss=args.tangential,
    )
    with tempfile.TemporaryDirectory(prefix="stirgpu-stir-objects-", dir=args.tmpdir) as tmp:
        data_path = Path(tmp) / "data.hs"
        make_file(data_path, pdi)
        stir_data = stir.ProjData.read_from_file(str(data_path))
        spdi = stir_data.get_proj_data_info()
        image = stir.FloatVoxelsOnCartesianGrid(stir_data.get_exam_info(), spdi, 1.0)
        values = np.random.default_rng(1).random(image.as_array().shape, dtype=np.float32)
        image.fill(values)
        pp = ProjectorPair(backend=args.backend)
        pp.set_up(spdi, image)
        own_data = read_from_file(data_path)
        K, k = args.subsets, 1
        mode = stir.ios.trunc | stir.ios.ios_base_in | stir.ios.out
        stir_out = stir.ProjDataInterfile(stir_data.get_exam_info(), spdi, str(Path(tmp) / "stir_out.hs"), mode)
        stir_img = image.get_empty_copy()

        with ProjDataOnDisk.create(Path(tmp) / "own_out.hs", pdi):
            pass  # then updated in place, as the STIR output is
        own_out = read_from_file(Path(tmp) / "own_out.hs", mode="r+")

        def own_forward(subset):
            pp.forward_project(own_out, values, *subset)

        calls = {
            "back_all": (lambda: pp.back_project(stir_img, stir_data), lambda: pp.back_project(None, own_data)),
            "back_subset": (
                lambda: pp.back_project(stir_img, stir_data, k, K),
                lambda: pp.back_project(None, own_data, k, K),
            ),
            "forward_all": (lambda: pp.forward_project(stir_out, image), lambda: own_forward((0, 1))),
            "forward_subset": (lambda: pp.forward_project(stir_out, image, k, K), lambda: own_forward((k, K))),
            "read_all": (lambda: read_all_stir(stir_data, pdi), lambda: read_all_own(own_data, pdi)),
        }
        for stir_call, own_call in calls.values():  # warm-up: JIT compilation, page cache
            stir_call(), own_call()
        best = {name: {"stir": float("inf"), "own": float("inf")} for name in calls}
        round_ratios: dict = {name: [] for name in calls}
        transport = {}
        for r in range(args.repeat):
            for name, (stir_call, own_call) in calls.items():
                # the two paths in turn, their order swapped every round: a load that drifts
                # during a round weighs on both the same way over two rounds
                pair = [("stir", stir_call), ("own", own_call)]
                t = {}
                for who, call in pair if r % 2 == 0 else pair[::-1]:
                    t[who] = timed(call)
                    best[name][who] = min(best[name][who], t[who])
                    if name.endswith("_all") and name != "read_all":
                        transport.setdefault(name, {})[who] = _io_seconds(pp.last_stats)
                round_ratios[name].append(t["stir"] / t["own"])
        # the two paths' numbers
        back_diff = float(
            np.abs(pp.back_project(stir_img, stir_data).as_array() - pp.back_project(None, own_data)).max()
        )
        pp.forward_project(stir_out, image)
        own_forward((0, 1))
        fwd_diff = max(
            float(
                np.abs(
                    np.stack([stir_out.get_viewgram(v, s).as_array() for v in range(pdi.get_num_views())])
                    - own_out.read_views(s, range(pdi.get_num_views()))
                ).max()
            )
            for s in pdi.segment_nums
        )
        own_data.close()
        own_out.close()
    ratios = {name: float(np.median(v)) for name, v in round_ratios.items()}
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "backend": pp.backend,
            "stir": ref.origin,
            "stir_threads": ref.num_threads,
        },
        "geometry": {
            "scanner": "Siemens mMR",
            "span": 11,
            "segments": pdi.get_num_segments(),
            "max_ring_difference": args.max_ring_difference,
            "views": pdi.get_num_views(),
            "tangential_poss": pdi.get_num_tangential_poss(),
            "bytes": pdi.total_num_bins * 4,
            "image": list(pp.get_image_info().shape),
        },
        "subset": [k, K],
        "repeat": args.repeat,
        "seconds_best": best,
        "ratio_stir_over_own_median": ratios,
        "ratio_stir_over_own_rounds": round_ratios,
        "io_busy_seconds_last_round": transport,
        "max_abs_diff": {"back_all": back_diff, "forward_all": fwd_diff},
    }
    print(json.dumps(result, indent=1))
    print(
        f"STIR objects vs stirgpu's disk store ({pdi.total_num_bins * 4 / 1e6:.0f} MB, {pp.backend}): "
        + ", ".join(
            f"{n} {best[n]['stir']:.3f} s / {best[n]['own']:.3f} s (median ratio {ratios[n]:.2f} x)" for n in calls
        )
        + f" | max |diff| back {back_diff:.3g}, forward {fwd_diff:.3g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
