"""What a machine's first run costs: README's first command with empty kernel caches against
the same command with the caches it filled.

Each round runs, in fresh processes, ``stirgpu demo --backend cpu`` (or ``--command``) first
with an empty ``STIRGPU_CACHE_DIR`` (and ``CUPY_CACHE_DIR``): the CPU kernels are compiled by
numba, as on a fresh machine; then the same command with the cache the first one filled.  Each
process records its kernels' compilations (``stirgpu.kernels.compiling``: the outermost ones'
seconds, so that a kernel compiled inside another counts once) in a file of its own.

    python3 benchmarks/first_run.py                   # the demo on the CPU, one round
    python3 benchmarks/first_run.py --rounds 2        # twice (the machine is shared: noisy)
    python3 benchmarks/first_run.py --command "forward-project {out}/fwd.hs IMAGE.hv TEMPLATE.hs --backend cpu"

Output: a JSON document (each round's seconds, the medians, the ratio cold / warm and the
compilation's share of the cold run), then one readable line.  ``{out}`` in ``--command`` is a
fresh folder of each run.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import arguments

#: what a run process does: the command line inside a watch of the kernels' compilations,
#: their total (outermost ones) written to the file named by its first argument
RUNNER = """
import json, sys
from stirgpu.cli.main import main
from stirgpu.kernels.compiling import watching_compilations

class Record:
    def __init__(self):
        self.seconds, self.kernels = 0.0, []
    def started(self, compilation): pass
    def finished(self, compilation, seconds):
        self.kernels.append(compilation.name)
        if not compilation.nested:
            self.seconds += seconds

record = Record()
with watching_compilations(record):
    code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"compile_seconds": record.seconds, "kernels": record.kernels}, f)
sys.exit(code)
"""

DEMO = "demo --backend cpu --quiet --output {out}"


def run_once(argv: list[str], cache: Path, work: Path, label: str) -> dict:
    """One fresh process of ``stirgpu ARGV`` with ``cache`` as its kernel caches."""
    out = work / label
    record = work / f"{label}.json"
    env = {
        **os.environ,
        "STIRGPU_CACHE_DIR": str(cache / "stirgpu"),
        "CUPY_CACHE_DIR": str(cache / "cupy"),
        "PYTHONPATH": os.pathsep.join([str(arguments.REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    out.mkdir()
    args = [a.replace("{out}", str(out)) for a in argv]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUNNER, str(record), *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise arguments.BadArgument(
            f"--command: 'stirgpu {' '.join(args)}' failed (exit code {done.returncode}): "
            f"{arguments.one_line(done.stderr)[-500:]}"
        )
    compiled = json.loads(record.read_text())
    return {"seconds": seconds, "compile_seconds": compiled["compile_seconds"], "kernels": len(compiled["kernels"])}


def round_trip(argv: list[str], work: Path) -> dict:
    """A cold run (empty caches) and then a warm one (the caches it filled)."""
    cache = Path(tempfile.mkdtemp(prefix="caches-", dir=work))
    cold = run_once(argv, cache, work, f"cold-{cache.name}")
    warm = run_once(argv, cache, work, f"warm-{cache.name}")
    return {"cold": cold, "warm": warm}


def summary(argv: list[str], rounds: list[dict]) -> dict:
    cold = statistics.median(r["cold"]["seconds"] for r in rounds)
    warm = statistics.median(r["warm"]["seconds"] for r in rounds)
    compile_s = statistics.median(r["cold"]["compile_seconds"] for r in rounds)
    return {
        "command": ["stirgpu", *argv],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "rounds": rounds,
        "cold_seconds": cold,
        "warm_seconds": warm,
        "cold_over_warm": cold / warm,
        "compile_seconds": compile_s,
        "compile_share_of_cold": compile_s / cold,
        "kernels_compiled": rounds[0]["cold"]["kernels"],
        "kernels_compiled_warm": max(r["warm"]["kernels"] for r in rounds),
    }


def readable(doc: dict) -> str:
    return (
        f"{' '.join(doc['command'][:2])}: first run (empty kernel caches) {doc['cold_seconds']:.1f} s, "
        f"warm {doc['warm_seconds']:.1f} s ({doc['cold_over_warm']:.1f} x); compiling "
        f"{doc['kernels_compiled']} kernels took {doc['compile_seconds']:.1f} s, "
        f"{100 * doc['compile_share_of_cold']:.0f}% of the first run "
        f"(median of {len(doc['rounds'])} round{'s' if len(doc['rounds']) != 1 else ''}; "
        f"{doc['cpus']} CPUs, load {doc['load_average']:.1f})"
    )


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=arguments.positive_int, default=1, help="cold/warm pairs (default 1)")
    ap.add_argument(
        "--command",
        default=DEMO,
        help=f"the stirgpu command line to time ({{out}}: a fresh folder per run; default {DEMO!r})",
    )
    ap.add_argument("--tmpdir", default=None, help="folder for the runs' outputs and caches (default: the system's)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the JSON document here")
    args = ap.parse_args(argv)
    command = shlex.split(args.command)
    if not command:
        raise arguments.BadArgument("--command: empty")
    if args.tmpdir is not None and not Path(args.tmpdir).is_dir():
        raise arguments.BadArgument(f"--tmpdir {args.tmpdir}: not a folder")
    with tempfile.TemporaryDirectory(prefix="stirgpu-first-run-", dir=args.tmpdir) as work:
        rounds = [round_trip(command, Path(work)) for _ in range(args.rounds)]
    doc = summary(command, rounds)
    arguments.emit_json(doc, args.json)
    print(readable(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
