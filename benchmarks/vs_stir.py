"""stirgpu against STIR itself, same run: forward_project, back_project, one OSMAPOSL iteration.

    python3 benchmarks/vs_stir.py                    # the reference STIR tests/ finds
    python3 benchmarks/vs_stir.py --stir PREFIX      # a STIR build (bin/, share/STIR-*/config)

Geometry: Siemens mMR, span 11, reduced so that 2 CPU cores finish in minutes: maximum ring
difference ``--max-ring-difference`` (16: segments -1, 0, +1 of the mMR's 11, 357 sinograms),
views mashed to ``--views`` (63 of 252: mash 4; 21 subsets of 3 views), the central
``--tangential`` positions (128 of 344), STIR's default image for that (zoom 1: 127 planes of
2.03 mm, 2.09 mm pixels).  The data are a Poisson sample of the forward projection of
stirgpu's demo phantom (a cylinder with spheres), written by stirgpu as Interfile.

Runs, each a fresh process, the two in turn after one untimed run of each (numba's kernel
cache filled, files in the page cache); best of ``--repeat`` for the projections, one
OSMAPOSL run each (21 subsets, 1 iteration, subset sensitivities computed, no normalisation
or additive sinogram):

* STIR: ``forward_project``, ``back_project`` with Parallelproj ``.par`` files, and ``OSMAPOSL``
  with ``projector pair type := Parallelproj`` (libparallelproj's OpenMP CPU build,
  ``OMP_NUM_THREADS=--threads``);
* stirgpu: ``stirgpu forward-project``, ``back-project`` and ``osmaposl`` on the *same* files and
  ``.par`` files, ``--backend`` (cpu: numba, ``NUMBA_NUM_THREADS=--threads``).

Process wall time includes each program's start-up (stirgpu's: Python, numpy, numba's cached
kernels), reading its inputs and writing its outputs.  Also timed: the same forward and back
projections through stirgpu's Python API in this process (steady state: set up once, data in
memory), as a STIR Python user's loop calls them.  Agreement: max |stirgpu - STIR| / max
|STIR| and the 99.9th percentile of |stirgpu - STIR| / max |STIR|, on the forward projection,
the back projection and the OSMAPOSL estimate after 21 subiterations.

Output: one JSON document, then readable lines (ratios stirgpu / STIR).
STIR is found as tests/reference_stir.py finds it (``--stir`` overrides).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
from stir_inputs import write_phantom_and_prompts  # noqa: E402

from stirgpu.parfile import osmaposl_par  # noqa: E402

FORWARD_PAR = """Forward Projector parameters:=
type := Parallelproj
Forward Projector Using Parallelproj Parameters:=
restrict to cylindrical FOV := 1
End Forward Projector Using Parallelproj Parameters:=
End:=
"""
BACK_PAR = FORWARD_PAR.replace("Forward", "Back")


def find_stir(prefix: str | None = None):
    """A STIR build as tests/reference_stir.py finds one (``prefix``: an extracted build)."""
    tests = REPO / "tests"
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    import reference_stir

    if prefix:
        p = Path(prefix)
        if not (p / "bin").is_dir():
            raise arguments.BadArgument(f"--stir {prefix}: expected a STIR prefix holding bin/")
        return reference_stir._from_prefix(p, f"--stir {prefix}")
    found = reference_stir.find()
    if isinstance(found, str):
        raise arguments.BadArgument(f"{found} (or give --stir PREFIX)")
    return found


def make_inputs(d: Path, args) -> dict:
    """Phantom image, Poisson prompts (:mod:`stir_inputs`) and the runs' parameter files."""
    geometry = write_phantom_and_prompts(
        d,
        max_ring_difference=args.max_ring_difference,
        views=args.views,
        tangential=args.tangential,
        counts=args.counts,
        backend="cpu",
    )
    (d / "forward.par").write_text(FORWARD_PAR)
    (d / "back.par").write_text(BACK_PAR)
    for who in ("stir", "stirgpu"):
        n = args.subsets  # one iteration, its estimate saved
        par = osmaposl_par(
            "prompts.hs",
            zero_end_planes_of_segment_0=False,
            output_filename_prefix=f"osem_{who}",
            num_subsets=n,
            num_subiterations=n,
            save_interval=n,
        )
        (d / f"osem_{who}.par").write_text(par)
    return geometry


def run_timed(cmd: list[str], cwd: Path, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return seconds


def agreement(ours, theirs) -> dict:
    import numpy as np

    d = np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64))
    top = float(np.abs(theirs).max())
    return {"max_rel": float(d.max()) / top, "p99_9_rel": float(np.percentile(d, 99.9)) / top}


def read_projections(path: Path):
    import numpy as np

    from stirgpu.formats import read_from_file

    with read_from_file(path) as pd:
        pdi = pd.get_proj_data_info()
        return np.concatenate([pd.read_views(s, range(pdi.get_num_views())).ravel() for s in pdi.segment_nums])


def api_seconds(d: Path, args) -> dict:
    """Best of ``--repeat`` forward / back projections of the benchmark's files through stirgpu's
    Python API, in memory, after one untimed call of each."""
    from stirgpu.formats import ProjDataInMemory, read_from_file, read_image
    from stirgpu.projectors import ProjectorPair

    image = read_image(d / "image.hv")
    with read_from_file(d / "prompts.hs") as f:
        data = ProjDataInMemory.from_proj_data(f)
    pp = ProjectorPair(backend=args.backend)
    pp.set_up(data.get_proj_data_info(), image.info)
    out = ProjDataInMemory(data.get_proj_data_info())
    calls = {
        "forward_project": lambda: pp.forward_project(out, image),
        "back_project": lambda: pp.back_project(None, data),
    }
    best = {}
    for name, call in calls.items():
        call()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        best[name] = min(times)
    return best


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stir", default=None, help="prefix of a STIR build (bin/, share/STIR-*/config)")
    ap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "cuda"))
    ap.add_argument(
        "--threads", type=arguments.positive_int, default=2, help="OpenMP threads for STIR, numba threads for stirgpu"
    )
    ap.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=16)
    ap.add_argument("--views", type=arguments.positive_int, default=63)
    ap.add_argument("--tangential", type=arguments.positive_int, default=128)
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--counts", type=arguments.positive_float, default=2e7)
    ap.add_argument("--repeat", type=arguments.positive_int, default=2)
    ap.add_argument("--skip-osmaposl", action="store_true")
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args(argv)

    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)  # before numba is imported (API timings)
    from stirgpu.formats import read_image

    ref = find_stir(args.stir)
    stir_env = {**ref.env(), "OMP_NUM_THREADS": str(args.threads)}
    ours_env = {
        **os.environ,
        "NUMBA_NUM_THREADS": str(args.threads),
        "OMP_NUM_THREADS": str(args.threads),
        "PYTHONPATH": os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
    }
    stirgpu = [sys.executable, "-m", "stirgpu"]
    backend = ["--backend", args.backend, "--quiet"]
    with tempfile.TemporaryDirectory(prefix="stirgpu-vs-stir-", dir=args.tmpdir) as tmp:
        d = Path(tmp)
        geometry = make_inputs(d, args)
        jobs = {
            "forward_project": (
                [ref.executable("forward_project"), "fwd_stir.hs", "image.hv", "prompts.hs", "forward.par"],
                stirgpu
                + ["forward-project", *backend, "--overwrite", "fwd_ours.hs", "image.hv", "prompts.hs", "forward.par"],
            ),
            "back_project": (
                [ref.executable("back_project"), "back_stir.hv", "prompts.hs", "image.hv", "back.par"],
                stirgpu
                + ["back-project", *backend, "--overwrite", "back_ours.hv", "prompts.hs", "image.hv", "back.par"],
            ),
        }
        seconds = {name: {"stir": float("inf"), "stirgpu": float("inf")} for name in jobs}
        for stir_cmd, our_cmd in jobs.values():  # untimed: numba's cache, page cache
            run_timed(stir_cmd, d, stir_env), run_timed(our_cmd, d, ours_env)
        for _ in range(args.repeat):
            for name, (stir_cmd, our_cmd) in jobs.items():
                seconds[name]["stir"] = min(seconds[name]["stir"], run_timed(stir_cmd, d, stir_env))
                seconds[name]["stirgpu"] = min(seconds[name]["stirgpu"], run_timed(our_cmd, d, ours_env))
        agree = {
            "forward_project": agreement(read_projections(d / "fwd_ours.hs"), read_projections(d / "fwd_stir.hs")),
            "back_project": agreement(
                read_image(d / "back_ours.hv").as_array(), read_image(d / "back_stir.hv").as_array()
            ),
        }
        api = api_seconds(d, args)
        if not args.skip_osmaposl:
            seconds["osmaposl"] = {
                "stir": run_timed([ref.executable("OSMAPOSL"), "osem_stir.par"], d, stir_env),
                "stirgpu": run_timed(stirgpu + ["osmaposl", *backend, "osem_stirgpu.par"], d, ours_env),
            }
            K = args.subsets
            agree["osmaposl"] = agreement(
                read_image(d / f"osem_stirgpu_{K}.hv").as_array(), read_image(d / f"osem_stir_{K}.hv").as_array()
            )
    ratios = {n: s["stirgpu"] / s["stir"] for n, s in seconds.items()}
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "python": sys.version.split()[0],
            "backend": args.backend,
            "stir": ref.origin,
        },
        "geometry": {"scanner": "Siemens mMR", "span": 11, **geometry},
        "subsets": args.subsets,
        "repeat": args.repeat,
        "seconds": seconds,
        "ratio_stirgpu_over_stir": ratios,
        "agreement": agree,
        "stirgpu_api_seconds": api,
        "ratio_stirgpu_api_over_stir": {n: api[n] / seconds[n]["stir"] for n in api},
    }
    print(json.dumps(result, indent=1))
    g = geometry
    print(
        f"mMR span 11, {g['segments']} segments x {g['views']} views x {g['tangential_poss']} tangential, "
        f"image {'x'.join(map(str, g['image']))}; {args.threads} threads, stirgpu {args.backend}:"
    )
    for n in seconds:
        a = agree[n]
        api_part = f" (Python API in process: {api[n]:.2f} s = {api[n] / seconds[n]['stir']:.2f} x)" if n in api else ""
        print(
            f"  {n}: stirgpu {seconds[n]['stirgpu']:.2f} s / STIR {seconds[n]['stir']:.2f} s = {ratios[n]:.2f} x"
            f"{api_part}; max |diff| / max {a['max_rel']:.2e}, 99.9th percentile {a['p99_9_rel']:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
