"""STIR's own OSMAPOSL with the stirgpu plugin against STIR's Parallelproj pair and against
``stirgpu osmaposl``, same run, same ``.par`` (only the projector pair differs).

    python3 benchmarks/stir_plugin.py /path/to/stir                     # mMR span 11, 21 subsets, CUDA
    python3 benchmarks/stir_plugin.py /path/to/stir --backend cpu --max-ring-difference 16 \\
        --views 63 --tangential 128                                     # small enough for 2 CPU cores
    python3 benchmarks/stir_plugin.py /path/to/stir --scanner dmi --tof-mash 29 \\
        --max-ring-difference 1 --subsets 17                            # DMI, 13 TOF bins, CUDA

The argument is the prefix of a STIR build (``bin/``, ``lib/cmake/STIR-*``, ``share/STIR-*/config``);
its Python module is not needed.  The plugin is built for it and this Python first
(``stirgpu stir-plugin build``; cached).  Inputs, written by stirgpu (``stir_inputs.py``): STIR's
default image of the geometry with stirgpu's demo phantom and Poisson prompts of its forward
projection (``--counts``).  The geometry is STIR's ``construct_proj_data_info`` of ``--scanner``:

* ``mmr`` (the default): Siemens mMR, span 11, ``--max-ring-difference`` (60: all 11 segments),
  ``--views`` (252), ``--tangential`` (344), non-TOF;
* ``dmi`` or any other STIR scanner name: span 1 (``--span``), all its ring differences, views
  and tangential positions unless given; TOF with ``--tof-mash`` (STIR's TOF mashing factor; 0,
  the default, is non-TOF), the prompts then TOF (every timing position).  GE Discovery MI 4
  rings with ``--tof-mash 29`` has 13 TOF bins.  A mashing factor giving an even number of TOF
  bins is refused: STIR 6.5's OSMAPOSL runs no projection in its gradient loops for those
  (``tests/stir_differential/test_stir_plugin_tof.py``).

``--subsets`` must suit STIR, which refuses subsets of very unequal numbers of viewgrams (its
message advises a divisor of a quarter of the views: 21 for the mMR's 252, 17 for the DMI's 272;
17 views and 3 subsets were refused).

Three OSMAPOSL runs of one ``.par`` (``--subsets`` subsets, subset sensitivities computed and
written, no normalisation or additive term: on TOF prompts STIR then computes the sensitivities
without TOF, and ``stirgpu osmaposl`` as well, ``docs/tof.md``), each a fresh process timed from
start to exit:

* ``stir``: STIR's ``OSMAPOSL``, ``projector pair type := Parallelproj`` (on the GPU with STIR's
  CUDA build of libparallelproj);
* ``plugin``: STIR's ``OSMAPOSL`` through ``stirgpu stir``, ``projector pair type := stirgpu``;
* ``stirgpu``: ``stirgpu osmaposl`` on the plugin's ``.par`` (it reads the same block).

Each runs ``--iterations`` full iterations (default 1 and 2): for the two STIR runs the difference
of the two walls is the cost of one full iteration (sensitivities, start-up and reading the data
cancel), the target figure; for ``stirgpu osmaposl``, whose iteration is below the noise of that
difference, it is the sum of its last iteration's subiteration times as it prints them (the
difference of walls is reported beside it).  The stirgpu runs are warmed once first (CuPy / numba kernel caches, page
cache), untimed.  Agreement: the plugin's last estimate and subset sensitivities (the first, and the
worst of all) against STIR's (max |diff| / max, 99.9th percentile).

The split of the last iteration (``split_of_the_last_iteration``) says where an iteration of
STIR's OSMAPOSL goes: STIR's gradient loops (the ``distributable_computation`` wall times STIR
prints), which hold the projections, and the rest (STIR's image updates); for the plugin, from
its trace (``STIRGPU_STIR_PLUGIN_TRACE``), the projections' seconds and the thread-seconds its
per-viewgram calls spent copying and waiting for its lock.

Output: one JSON document (``case`` and ``geometry`` say which scanner, span and TOF mashing ran),
then readable lines (ratios against the same run's baselines).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import stir_inputs  # noqa: E402

from stirgpu.parfile import ProjectorOptions, ProjectorSettings, osmaposl_par  # noqa: E402


def recon_par(who: str, args, iterations: int) -> str:
    """The run's OSMAPOSL file: STIR's Parallelproj pair for ``stir``, the plugin's ``stirgpu``
    pair (with ``--backend``) for the others; estimates saved only at the end."""
    projectors = None
    if who != "stir":
        options = ProjectorOptions(type="stirgpu", backend=args.backend)
        projectors = ProjectorSettings("pair", options, options, "stirgpu")
    n = args.subsets * iterations
    return osmaposl_par(
        "../prompts.hs",
        zero_end_planes_of_segment_0=False,
        projectors=projectors,
        subset_sensitivity_filenames="sens_%d.hv",
        output_filename_prefix="out",
        num_subsets=args.subsets,
        num_subiterations=n,
        save_interval=n,
    )


def stir_env(prefix: Path, threads: int | None) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    configs = sorted(prefix.glob("share/STIR-*/config"))
    if configs:
        env["STIR_CONFIG_DIR"] = str(configs[-1])
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def command(who: str, prefix: Path) -> list[str]:
    if who == "stir":
        return [str(prefix / "bin" / "OSMAPOSL"), "recon.par"]
    if who == "plugin":
        return [sys.executable, "-m", "stirgpu.cli.main", "stir", "--stir", str(prefix), "OSMAPOSL", "recon.par"]
    # (--overwrite: the warm-up and each iteration count write the same files, as STIR's runs do)
    return [sys.executable, "-m", "stirgpu.cli.main", "osmaposl", "recon.par", "--overwrite"]


def run(
    who: str, d: Path, prefix: Path, env: dict, args, iterations: int, folder: Path | None = None
) -> tuple[float, str]:
    """Wall seconds and standard output of one OSMAPOSL process of ``who`` in ``folder``
    (default ``d/<who>-<iterations>``; the plugin's trace in its ``trace.jsonl``)."""
    folder = folder if folder is not None else d / f"{who}-{iterations}"
    folder.mkdir(exist_ok=True)
    env = dict(env)
    if who == "plugin":
        env["STIRGPU_STIR_PLUGIN_TRACE"] = str(folder / "trace.jsonl")
    (folder / "recon.par").write_text(recon_par(who, args, iterations))
    t0 = time.perf_counter()
    r = subprocess.run(command(who, prefix), cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{who} failed ({r.returncode}) in {folder}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return seconds, r.stdout


def last_iteration_seconds(stdout: str, subsets: int) -> float:
    """The sum of the last ``subsets`` subiteration times that ``stirgpu osmaposl`` prints
    ("subiteration N (subset K): S s"): its last full iteration, measured inside the process.
    (Its iteration, ~0.4 s on an H200, is below the noise of a difference of process walls.)"""
    seconds = [float(m) for m in re.findall(r"^\s*subiteration \d+ \(subset \d+\): ([0-9.]+) s", stdout, re.M)]
    if len(seconds) < subsets:
        raise SystemExit(f"stirgpu osmaposl printed {len(seconds)} subiteration times, expected {subsets} or more")
    return sum(seconds[-subsets:])


def stir_loop_times(stdout: str) -> list[float]:
    """The wall seconds of each of STIR's ``distributable_computation`` loops, in order (STIR
    prints one per subset sensitivity and one per subiteration)."""
    return [
        float(m) for m in re.findall(r"distributable_computation, CPU [0-9.e+-]+s, wall-clock ([0-9.e+-]+)s", stdout)
    ]


def stir_loop_threads(stdout: str) -> list[int]:
    """The OpenMP team sizes STIR reports for its loops ("Starting loop with N threads"), each once,
    in order of first appearance: the plugin gives STIR's loops one thread when the GPUs project
    and ``OMP_NUM_THREADS`` is unset."""
    sizes = [int(m) for m in re.findall(r"Starting loop with (\d+) threads", stdout)]
    return list(dict.fromkeys(sizes))


def stir_loop_seconds(stdout: str, subsets: int) -> float:
    """The wall seconds of STIR's gradient loops in the last ``subsets`` subiterations: the part
    of STIR's iteration that goes through the projectors, the rest being STIR's image updates."""
    seconds = stir_loop_times(stdout)
    if len(seconds) < subsets:
        raise SystemExit(f"STIR printed {len(seconds)} distributable_computation times, expected {subsets} or more")
    return sum(seconds[-subsets:])


def trace_records(trace: Path) -> tuple[list[dict], list[dict]]:
    """The plugin's trace: its projection records and its per-viewgram call periods, in order."""
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    return [r for r in lines if r["kind"] == "projection"], [r for r in lines if r["kind"] == "viewgram calls"]


def call_costs(periods: list[dict]) -> dict:
    """Per-viewgram call periods summed: copying and lock waiting (thread-seconds, summed over
    STIR's threads, so a share of the loop's wall only with one thread) and the number of calls."""
    return {
        "copying_thread_seconds": sum(r["seconds_copying"] for r in periods),
        "lock_waiting_thread_seconds": sum(r["seconds_waiting"] for r in periods),
        "viewgram_calls": sum(r["calls"] for r in periods),
    }


def plugin_split(trace: Path, subsets: int) -> dict:
    """The plugin's seconds in the last ``subsets`` subiterations from its trace: its
    projections (one forward and one back each), and its per-viewgram calls' costs."""
    projections, periods = trace_records(trace)
    return {
        "projections": sum(r["seconds"] for r in projections[-2 * subsets :]),
        **call_costs(periods[-2 * subsets :]),
    }


def agreement(ours: Path, theirs: Path) -> dict:
    import numpy as np

    from stirgpu.formats import read_image

    a, b = read_image(ours).array.astype(np.float64), read_image(theirs).array.astype(np.float64)
    d, top = np.abs(a - b), float(np.abs(b).max())
    return {"max_rel": float(d.max()) / top, "p99_9_rel": float(np.percentile(d, 99.9)) / top}


#: ``--scanner`` shorthands
SCANNERS = {"mmr": stir_inputs.MMR, "dmi": "GE Discovery MI 4 rings"}
#: the mMR case's defaults (span, max ring difference, views, tangential positions); any other
#: scanner: span 1, all its ring differences, views and tangential positions
MMR_DEFAULTS = (stir_inputs.MMR_SPAN, 60, 252, 344)


def scanner_name(text: str) -> str:
    """``--scanner``'s STIR name: a shorthand of :data:`SCANNERS` or a name STIR knows."""
    from stirgpu.errors import GeometryError
    from stirgpu.geometry import Scanner

    try:
        return Scanner.from_name(SCANNERS.get(text.lower(), text)).name
    except GeometryError as exc:
        raise arguments.BadArgument(f"--scanner {text!r}: {exc}") from None


def geometry(args):
    """(ProjDataInfo, span) of the run, from ``--scanner``, ``--span``, ``--max-ring-difference``,
    ``--views``, ``--tangential`` and ``--tof-mash``; refuses a non-TOF scanner with a mashing
    factor and an even number of TOF bins (STIR 6.5's OSMAPOSL projects nothing in its gradient
    loops then: ``tests/stir_differential/test_stir_plugin_tof.py``)."""
    from stirgpu.errors import GeometryError
    from stirgpu.geometry import Scanner

    name = scanner_name(args.scanner)
    if args.tof_mash and not Scanner.from_name(name).is_tof_ready():
        raise arguments.BadArgument(f"--tof-mash {args.tof_mash}: {name!r} has no TOF")
    defaults = MMR_DEFAULTS if name == stir_inputs.MMR else (1, Scanner.from_name(name).num_rings - 1, None, None)
    given = (args.span, args.max_ring_difference, args.views, args.tangential)
    span, mrd, views, tangential = (d if g is None else g for g, d in zip(given, defaults, strict=True))
    try:
        pdi = stir_inputs.proj_data_info(name, span, mrd, views, tangential, args.tof_mash)
    except GeometryError as exc:
        raise arguments.BadArgument(
            f"--scanner {args.scanner!r} with --span, --max-ring-difference, --views, --tangential, --tof-mash: {exc}"
        ) from None
    bins = pdi.get_num_tof_poss()
    if pdi.is_tof_data() and bins % 2 == 0:
        raise arguments.BadArgument(
            f"--tof-mash {args.tof_mash}: {bins} TOF bins for {name!r}, an even number, for which STIR 6.5's "
            "OSMAPOSL runs no projection in its gradient loops; choose a mashing factor giving an odd number"
        )
    return pdi, span


def case_name(geometry: dict) -> str:
    """The run's case in words, e.g. "Siemens mMR span 11" or "GE Discovery MI 4 rings span 1,
    TOF mash 29 (13 TOF bins)"."""
    words = f"{geometry['scanner']} span {geometry['span']}"
    if geometry["tof_bins"] > 1:
        words += f", TOF mash {geometry['tof_mash_factor']} ({geometry['tof_bins']} TOF bins)"
    return words


def worst_agreement(ours: Path, theirs: Path, names: list[str]) -> dict:
    """:func:`agreement` of each image ``names`` in the two folders, the worst of each figure."""
    each = [agreement(ours / n, theirs / n) for n in names]
    return {key: max(a[key] for a in each) for key in each[0]}


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stir", help="prefix of a STIR build (bin/, lib/cmake/STIR-*, share/STIR-*/config)")
    ap.add_argument("--backend", default="cuda", choices=("auto", "cpu", "cuda"))
    ap.add_argument(
        "--threads",
        type=arguments.positive_int,
        default=None,
        help="OMP_NUM_THREADS for STIR (default: STIR's default)",
    )
    ap.add_argument(
        "--scanner",
        default="mmr",
        help=f"{', '.join(f'{k} ({v})' for k, v in SCANNERS.items())} or a STIR scanner name (default: mmr)",
    )
    ap.add_argument("--span", type=arguments.positive_int, default=None, help="default: 11 for the mMR, else 1")
    ap.add_argument(
        "--tof-mash",
        type=arguments.non_negative_int,
        default=0,
        help="STIR's TOF mashing factor (0, the default: non-TOF); it must give an odd number of TOF bins",
    )
    ap.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=None)
    ap.add_argument("--views", type=arguments.positive_int, default=None)
    ap.add_argument("--tangential", type=arguments.positive_int, default=None)
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--counts", type=arguments.positive_float, default=5e7)
    ap.add_argument(
        "--iterations",
        type=arguments.positive_int,
        nargs=2,
        default=(1, 2),
        metavar=("A", "B"),
        help="the two run lengths whose difference is the cost of B - A iterations (A < B)",
    )
    ap.add_argument("--tmpdir", default=None)
    ap.add_argument("--json", default=None, help="also write the JSON document to this file")
    args = ap.parse_args(argv)
    if args.iterations[0] >= args.iterations[1]:
        raise arguments.BadArgument(
            f"--iterations {args.iterations[0]} {args.iterations[1]}: the first must be smaller"
        )
    pdi, span = geometry(args)
    prefix = Path(args.stir).resolve()
    if not (prefix / "bin" / "OSMAPOSL").is_file():
        raise arguments.BadArgument(f"{args.stir}: not a STIR prefix (no bin/OSMAPOSL)")
    from stirgpu.stir_plugin import build

    t0 = time.perf_counter()
    plugin = build(prefix)
    build_seconds = time.perf_counter() - t0
    env = stir_env(prefix, args.threads)
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        d = Path(tmp)
        inputs = stir_inputs.write_inputs(d, pdi, span=span, counts=args.counts, backend=args.backend)
        for who in ("plugin", "stirgpu"):  # warm kernel and page caches, untimed
            run(who, d, prefix, env, args, args.iterations[0])
        runs = {
            who: {n: run(who, d, prefix, env, args, n) for n in args.iterations}
            for who in ("stir", "plugin", "stirgpu")
        }
        walls = {who: {n: r[0] for n, r in w.items()} for who, w in runs.items()}
        a, b = args.iterations
        per_iter = {who: (w[b] - w[a]) / (b - a) for who, w in walls.items()}
        stirgpu_walls_difference = per_iter["stirgpu"]
        per_iter["stirgpu"] = last_iteration_seconds(runs["stirgpu"][b][1], args.subsets)
        split = {
            who: {
                "iteration": per_iter[who],
                "stir_gradient_loops": stir_loop_seconds(runs[who][b][1], args.subsets),
                "stir_loop_threads": stir_loop_threads(runs[who][b][1]),
            }
            for who in ("stir", "plugin")
        }
        split["plugin"].update(plugin_split(d / f"plugin-{b}" / "trace.jsonl", args.subsets))
        plug_dir, stir_dir = d / f"plugin-{b}", d / f"stir-{b}"
        agree = {
            "estimate": agreement(plug_dir / f"out_{args.subsets * b}.hv", stir_dir / f"out_{args.subsets * b}.hv"),
            "sensitivity_0": agreement(plug_dir / "sens_0.hv", stir_dir / "sens_0.hv"),
            "sensitivities": worst_agreement(plug_dir, stir_dir, [f"sens_{k}.hv" for k in range(args.subsets)]),
        }
    doc = {
        "benchmark": "stir_plugin",
        "backend": args.backend,
        "stir_prefix": str(prefix),
        "stir_version": plugin.stir_version,
        "plugin": str(plugin.plugin),
        "plugin_build_seconds": build_seconds,
        "case": case_name(inputs),
        "geometry": inputs,
        "subsets": args.subsets,
        "iterations": list(args.iterations),
        "process_seconds": walls,
        "seconds_per_iteration": per_iter,
        "stirgpu_seconds_per_iteration_from_walls": stirgpu_walls_difference,
        "split_of_the_last_iteration": split,
        "ratios": {
            "stir_parallelproj_over_plugin": per_iter["stir"] / per_iter["plugin"],
            "plugin_over_stirgpu_osmaposl": per_iter["plugin"] / per_iter["stirgpu"],
        },
        "agreement_plugin_vs_stir": agree,
    }
    arguments.emit_json(doc, args.json)
    r = doc["ratios"]
    print(
        f"{case_name(inputs)} ({inputs['segments']} segments, {inputs['views']} views), {args.subsets} subsets, "
        f"{args.backend}: one iteration in STIR's OSMAPOSL with stirgpu {per_iter['plugin']:.2f} s, with "
        f"Parallelproj {per_iter['stir']:.2f} s ({r['stir_parallelproj_over_plugin']:.1f} x faster), stirgpu osmaposl "
        f"{per_iter['stirgpu']:.2f} s ({r['plugin_over_stirgpu_osmaposl']:.2f} x its time); whole runs of "
        f"{args.iterations[0]} iteration: {walls['plugin'][a]:.1f} / {walls['stir'][a]:.1f} / "
        f"{walls['stirgpu'][a]:.1f} s; "
        f"estimate vs STIR {agree['estimate']['max_rel']:.1e} of the maximum, subset sensitivities "
        f"{agree['sensitivities']['max_rel']:.1e}"
    )
    p = split["plugin"]
    print(
        f"the plugin's last iteration: STIR's gradient loops {p['stir_gradient_loops']:.2f} s, of which projections "
        f"{p['projections']:.2f} s and the plugin's copying {p['copying_thread_seconds']:.2f} thread-s (lock waits "
        f"{p['lock_waiting_thread_seconds']:.2f} thread-s); Parallelproj's gradient loops "
        f"{split['stir']['stir_gradient_loops']:.2f} s; STIR's loop threads: plugin {p['stir_loop_threads']}, "
        f"Parallelproj {split['stir']['stir_loop_threads']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
