"""Seconds per OSEM iteration on N MPI ranks, and the share of it spent summing over the ranks.

    python3 benchmarks/mpi.py                                   # CPU ranks N = 1, 2, 4
    python3 benchmarks/mpi.py --ranks 1,2 --views 84 --tangential 172   # larger
    python3 benchmarks/mpi.py --backend cuda --ranks 1,2,4,8    # one GPU per rank (see below)

For each N the script starts ``mpiexec -n N`` on itself (``--worker``; MPICH's or Open MPI's
mpiexec beside the Python interpreter, else on PATH: the ``mpi`` extra installs one).  Every
rank builds the same problem (``y = A x`` of a uniform cylinder, a flat background and factors,
in memory), computes the subset sensitivities, then runs ``--iterations`` full OSEM iterations
(``--subsets`` fused forward-back-ratio calls each, ``x *= ratio / sens_k``) and reports:

* ``seconds_per_iteration`` -- wall time of one iteration (the median over the iterations);
* ``exchange_share`` -- the part of it in the calls' MPI steps (``RunStats.exchange_seconds``:
  the image sums, waiting for the slowest rank included);
* ``allreduce_seconds`` -- one image sum alone, after a barrier (the all-reduce's own cost);
* ``parallel_efficiency`` -- with one GPU per rank ``t(1) / (N t(N))`` (N devices do N times
  the work of one); CPU ranks on one machine share its cores, so there ``t(1) / t(N)`` (1.0:
  splitting the cores between ranks costs nothing).

CPU ranks on one machine share its cores: each rank's numba kernels get ``cores / N`` threads
(``NUMBA_NUM_THREADS``), so N ranks use the machine as one process does.  ``--backend cuda``
gives each rank one GPU: its rank on the node modulo the GPUs it sees (the launcher's
``MPI_LOCALRANKID`` / ``OMPI_COMM_WORLD_LOCAL_RANK`` / ``SLURM_LOCALID``; with
``CUDA_VISIBLE_DEVICES`` set per rank, as ``srun --gpus-per-task 1`` does, that is the one GPU
it sees).  The report lists every rank's host and GPU (``rank_devices``; ``gpus_shared`` when
two ranks of a node got the same GPU: more ranks than GPUs) and how the images were summed over
the ranks (``image_sum``: on the GPUs with a CUDA-aware MPI, else through host staging;
``STIRGPU_MPI_CUDA_AWARE=1`` tells stirgpu the MPI is CUDA-aware where it does not say so).

Output: a JSON document (``--json FILE`` also writes it), then readable lines.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402

#: what launchers set: the rank among those on this node (MPICH's hydra, Open MPI, Slurm)
LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def _parser():
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=arguments.int_list, default=[1, 2, 4], help="numbers of ranks (default 1,2,4)")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--scanner", default="Siemens mMR")
    ap.add_argument("--span", type=arguments.positive_int, default=11)
    ap.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=10)
    ap.add_argument("--views", type=arguments.positive_int, default=48)
    ap.add_argument("--tangential", type=arguments.positive_int, default=96)
    ap.add_argument("--image-xy", type=arguments.positive_int, default=None)
    ap.add_argument("--subsets", type=arguments.positive_int, default=6)
    ap.add_argument("--iterations", type=arguments.positive_int, default=2)
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the JSON document here")
    ap.add_argument("--worker", default=None, help=arguments.argparse.SUPPRESS)
    return ap


def _problem(args, pair):
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

    pdi = ProjDataInfo.construct(
        Scanner.from_name(args.scanner),
        args.span,
        args.max_ring_difference,
        num_views=args.views,
        num_tangential_poss=args.tangential,
        arc_corrected=False,
    )
    info = ImageInfo.default_for(pdi, xy_size=args.image_xy)
    pair.set_up(pdi, info)
    yy, xx = np.meshgrid(
        np.arange(info.shape[1]) - info.shape[1] // 2, np.arange(info.shape[2]) - info.shape[2] // 2, indexing="ij"
    )
    truth = np.broadcast_to(((yy**2 + xx**2) < (0.4 * info.shape[2]) ** 2)[None], info.shape).astype(np.float32)
    y = ProjDataInMemory(pdi)
    pair.forward_project(y, truth)
    return pdi, info, y, ProjDataInMemory(pdi, fill=0.1), ProjDataInMemory(pdi, fill=1.25)


def gpu_of_rank(environ, device_count: int) -> int:
    """The GPU a rank uses: its rank on the node (as the launcher says; 0 where it says nothing)
    modulo the GPUs this rank sees."""
    if device_count < 1:
        raise arguments.BadArgument("--backend cuda: no CUDA GPU is visible (CUDA_VISIBLE_DEVICES, the driver)")
    local = next((int(environ[v]) for v in LOCAL_RANK_VARIABLES if environ.get(v, "").isdigit()), 0)
    return local % device_count


def _synchronize(x) -> None:
    """Wait for a cupy array's GPU (the iteration's last update is queued, not done); nothing
    for a numpy array (whose ``device`` is the string "cpu")."""
    if not isinstance(x, np.ndarray):
        x.device.synchronize()


def worker(args) -> tuple[int, dict]:
    """One rank's run (under mpiexec): (its rank, its figures); rank 0's are the report."""
    import socket

    from stirgpu.execution import cuda_device_count
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon.arrays import array_module, stir_divide, to_numpy

    devices = None
    if args.backend == "cuda":  # one GPU per rank: the rank on its node, modulo the GPUs it sees
        import cupy

        devices = [gpu_of_rank(os.environ, cuda_device_count())]
        # this rank's arrays on its GPU (not the current device, 0 on every rank): an output
        # image on a GPU the projector does not use gets its result in host memory
        cupy.cuda.Device(devices[0]).use()
    pair = ProjectorPair(backend=args.backend, devices=devices)
    comm = pair.comm
    where = (socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES"), devices)
    rank_devices = comm.mpi.allgather(where) if comm.mpi is not None else [where]
    pdi, info, y, background, f = _problem(args, pair)
    K = args.subsets
    sens = [pair.sensitivity(None, k, K, multiplicative=f) for k in range(K)]
    x = np.ones(info.shape, dtype=np.float32)
    if args.backend == "cuda":
        import cupy

        x, sens = cupy.asarray(x), [cupy.asarray(s) for s in sens]
    # (untimed, every subset once: the first call of each kernel, and of each subset's chunks,
    # compiles what it needs or loads it from the caches, which a later process finds filled)
    for k in range(K):
        pair.forward_back_ratio(
            x, y, k, K, background=background, multiplicative=f, out_image=array_module(x).zeros_like(x)
        )
    seconds, exchange = [], []
    for _ in range(args.iterations):
        comm.barrier()
        t0 = time.perf_counter()
        spent = 0.0
        for k in range(K):
            ratio = pair.forward_back_ratio(
                x, y, k, K, background=background, multiplicative=f, out_image=array_module(x).zeros_like(x)
            )
            spent += pair.last_stats.exchange_seconds
            x *= stir_divide(ratio, sens[k])
        _synchronize(x)
        seconds.append(time.perf_counter() - t0)
        exchange.append(spent)
    image_sum = comm.last_image_sum  # (how the iterations' images were summed over the ranks)
    probe = array_module(x).zeros(info.shape, dtype=np.float32)  # (on the GPU for --backend cuda)
    _synchronize(probe)
    comm.barrier()
    t0 = time.perf_counter()
    comm.sum_image(probe)
    allreduce = time.perf_counter() - t0
    return comm.rank, {
        "ranks": comm.size,
        "seconds_per_iteration": statistics.median(seconds),
        "exchange_seconds_per_iteration": statistics.median(exchange),
        "allreduce_seconds": allreduce,
        "image_bytes": int(probe.nbytes),
        "image_sum": image_sum,
        "rank_devices": [{"host": h, "cuda_visible_devices": v, "devices": d} for h, v, d in rank_devices],
        "gpus_shared": args.backend == "cuda" and len({(h, v, tuple(d)) for h, v, d in rank_devices}) < comm.size,
        "bins_per_subset": int(pdi.total_num_bins // K),
        "checksum": float(np.sum(to_numpy(x), dtype=np.float64)),
    }


def _mpiexec() -> list[str]:
    beside = [Path(sys.executable).parent / n for n in ("mpiexec", "mpirun")]
    found = next((str(p) for p in beside if p.is_file()), None) or shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise arguments.BadArgument("no mpiexec or mpirun found: install the 'mpi' extra (pip install 'stirgpu[mpi]')")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60).stdout
    return [found, "--oversubscribe"] if "Open MPI" in version else [found]


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.worker is not None:
        rank, result = worker(args)
        if rank == 0:
            Path(args.worker).write_text(json.dumps(result))
        return 0
    if not args.ranks or min(args.ranks) < 1:
        raise arguments.BadArgument(f"--ranks: every number of ranks must be at least 1, got {args.ranks}")
    from stirgpu.geometry import Scanner

    Scanner.from_name(args.scanner)  # (a bad name: refused here, before any rank starts)
    if args.backend == "cuda":  # (no GPU: refused here too, in one line)
        from stirgpu.execution import cuda_device_count

        gpu_of_rank({}, cuda_device_count())
    launch = _mpiexec()
    cores = os.cpu_count() or 1
    runs = []
    for n in args.ranks:
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"stirgpu-mpi-bench-{os.getpid()}-{n}.json"
        env = dict(os.environ, NUMBA_NUM_THREADS=str(max(cores // n, 1)) if args.backend == "cpu" else "")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        if not env["NUMBA_NUM_THREADS"]:
            del env["NUMBA_NUM_THREADS"]
        passed = list(argv if argv is not None else sys.argv[1:])
        cmd = launch + ["-n", str(n), sys.executable, str(Path(__file__).resolve()), *passed, "--worker", str(out)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"mpi.py: the run on {n} ranks failed (exit {proc.returncode})")
        runs.append(json.loads(out.read_text()))
        out.unlink()
    base = next((r["seconds_per_iteration"] for r in runs if r["ranks"] == 1), None)
    for r in runs:
        r["exchange_share"] = r["exchange_seconds_per_iteration"] / r["seconds_per_iteration"]
        devices = r["ranks"] if args.backend == "cuda" else 1  # (CPU ranks share one machine's cores)
        r["parallel_efficiency"] = None if base is None else base / (devices * r["seconds_per_iteration"])
    doc = {
        "backend": args.backend,
        "cores": cores,
        "load_average": os.getloadavg()[0],
        "scanner": args.scanner,
        "subsets": args.subsets,
        "runs": runs,
    }
    arguments.emit_json(doc, args.json)
    for r in runs:
        eff = "" if r["parallel_efficiency"] is None else f", parallel efficiency {r['parallel_efficiency']:.2f}"
        print(
            f"{r['ranks']} rank(s): {r['seconds_per_iteration']:.3f} s per iteration, MPI steps "
            f"{100 * r['exchange_share']:.1f} % of it; one image all-reduce {1e3 * r['allreduce_seconds']:.2f} ms "
            f"({r['image_bytes'] / 1e6:.1f} MB){eff}"
            + (f"; images summed {r['image_sum']}" if r["image_sum"] else "")
            + ("; some ranks shared a GPU" if r["gpus_shared"] else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
