"""How STIR's OpenMP thread count changes an OSMAPOSL run with the stirgpu plugin, split into
STIR's own loops, the plugin's projections and the plugin's per-viewgram calls.

    python3 benchmarks/stir_plugin_threads.py /path/to/stir --threads 1 4 16     # mMR span 11, CUDA
    python3 benchmarks/stir_plugin_threads.py /path/to/stir --backend cpu --max-ring-difference 16 \\
        --views 28 --tangential 64 --subsets 7 --threads 1 2                     # 2 CPU cores

Same inputs and ``.par`` as ``stir_plugin.py`` (one iteration, subset sensitivities computed).
For each ``--threads`` value (``OMP_NUM_THREADS``; optionally also with ``OMP_WAIT_POLICY``
from ``--wait-policy``), one fresh OSMAPOSL process through ``stirgpu stir`` with the plugin's
trace on, after one untimed warm-up run.  Reported per run:

* ``wall``: the process, start to exit;
* ``sensitivity_loops`` / ``iteration_loops``: the wall seconds of STIR's
  ``distributable_computation`` loops (STIR prints one per subset sensitivity and one per
  subiteration), the part of STIR's work that goes through the projectors;
* ``sensitivity_projections`` / ``iteration_projections``: the plugin's projections inside them
  (its trace);
* ``copying_thread_seconds`` / ``lock_waiting_thread_seconds``: its per-viewgram calls, summed
  over STIR's threads.

With ``--with-parallelproj``, STIR's Parallelproj pair runs once more at the largest thread
count (its loops only).  The baseline of every ratio is the first ``--threads`` value's run in
this same invocation.  Output: one JSON document, then one readable line per run.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
from stir_inputs import write_phantom_and_prompts  # noqa: E402
from stir_plugin import call_costs, run, stir_env, stir_loop_times, trace_records  # noqa: E402


def one_run(who: str, folder: Path, prefix: Path, env: dict, args) -> dict:
    """One 1-iteration OSMAPOSL process of ``who`` (``plugin`` or ``stir``) in a new ``folder``."""
    wall, stdout = run(who, folder.parent, prefix, env, args, 1, folder=folder)
    loops = stir_loop_times(stdout)
    n = args.subsets
    if len(loops) != 2 * n:
        raise SystemExit(f"{who}: STIR printed {len(loops)} distributable_computation times, expected {2 * n}")
    result = {"wall": wall, "sensitivity_loops": sum(loops[:n]), "iteration_loops": sum(loops[n:])}
    if who == "plugin":
        result.update(trace_split(folder / "trace.jsonl", n))
    return result


def trace_split(trace: Path, subsets: int) -> dict:
    """The plugin's projections (the first ``subsets`` are the sensitivities' back projections)
    and its per-viewgram calls, from its trace."""
    projections, periods = trace_records(trace)
    seconds = [r["seconds"] for r in projections]
    return {
        "sensitivity_projections": sum(seconds[:subsets]),
        "iteration_projections": sum(seconds[subsets:]),
        **call_costs(periods),
    }


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stir", help="prefix of a STIR build (bin/, lib/cmake/STIR-*, share/STIR-*/config)")
    ap.add_argument("--backend", default="cuda", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--threads", type=arguments.positive_int, nargs="+", default=[1, 16])
    ap.add_argument(
        "--wait-policy",
        choices=("active", "passive"),
        default=None,
        help="also run each thread count with this OMP_WAIT_POLICY",
    )
    ap.add_argument("--with-parallelproj", action="store_true")
    ap.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=60)
    ap.add_argument("--views", type=arguments.positive_int, default=252)
    ap.add_argument("--tangential", type=arguments.positive_int, default=344)
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--counts", type=arguments.positive_float, default=5e7)
    ap.add_argument("--tmpdir", default=None)
    ap.add_argument("--json", default=None, help="also write the JSON document to this file")
    args = ap.parse_args(argv)
    prefix = Path(args.stir).resolve()
    if not (prefix / "bin" / "OSMAPOSL").is_file():
        raise arguments.BadArgument(f"{args.stir}: not a STIR prefix (no bin/OSMAPOSL)")
    from stirgpu.stir_plugin import build

    build(prefix)
    variants = [(t, None) for t in args.threads]
    if args.wait_policy:
        variants += [(t, args.wait_policy) for t in args.threads]
    runs = []
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        d = Path(tmp)
        geometry = write_phantom_and_prompts(
            d,
            max_ring_difference=args.max_ring_difference,
            views=args.views,
            tangential=args.tangential,
            counts=args.counts,
            backend=args.backend,
        )
        one_run("plugin", d / "warm-up", prefix, stir_env(prefix, args.threads[0]), args)
        for threads, policy in variants:
            env = stir_env(prefix, threads)
            if policy:
                env["OMP_WAIT_POLICY"] = policy
            result = one_run("plugin", d / f"plugin-{threads}-{policy or 'default'}", prefix, env, args)
            runs.append({"who": "plugin", "threads": threads, "wait_policy": policy, **result})
        if args.with_parallelproj:
            result = one_run("stir", d / "parallelproj", prefix, stir_env(prefix, max(args.threads)), args)
            runs.append({"who": "parallelproj", "threads": max(args.threads), "wait_policy": None, **result})
    base = runs[0]
    for r in runs:
        r["iteration_loops_over_baseline"] = r["iteration_loops"] / base["iteration_loops"]
    doc = {
        "benchmark": "stir_plugin_threads",
        "backend": args.backend,
        "geometry": geometry,
        "subsets": args.subsets,
        "baseline": f"plugin, {base['threads']} threads",
        "runs": runs,
    }
    arguments.emit_json(doc, args.json)
    for r in runs:
        extra = ""
        if r["who"] == "plugin":
            extra = (
                f", projections {r['iteration_projections']:.2f} s, copying {r['copying_thread_seconds']:.2f} "
                f"thread-s, lock waits {r['lock_waiting_thread_seconds']:.2f} thread-s"
            )
        print(
            f"{r['who']}, {r['threads']} threads{', ' + r['wait_policy'] if r['wait_policy'] else ''}: run "
            f"{r['wall']:.1f} s, sensitivity loops {r['sensitivity_loops']:.2f} s, iteration loops "
            f"{r['iteration_loops']:.2f} s ({r['iteration_loops_over_baseline']:.2f} x the baseline's){extra}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
