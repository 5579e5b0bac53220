"""Seconds and GB/s of the Relative Difference Prior's value and gradient, against a copy.

    python3 benchmarks/priors.py                                 # GPU: mMR and Quadra images
    python3 benchmarks/priors.py --osem                          # + one penalised OSEM iteration
    python3 benchmarks/priors.py --backend cpu --quick           # numba, a small image (CI smoke test)

For each image (``--cases``: ``mmr`` 127 x 285 x 285, ``quadra`` 645 x 447 x 447, both with
their scanner's voxel sizes and STIR's default 3 x 3 x 3 weights; ``--quick``: one small image
instead) the best of ``--repeat`` calls of ``get_value`` and of ``get_gradient`` (into a kept
output) of STIR's ``Relative Difference Prior`` (``--gamma``, ``--epsilon``) on a random
positive float32 image where the backend puts it (cupy on ``cuda``, numpy on ``cpu``).

GB/s counts the bytes a call must move at least (the value reads the image once, the gradient
reads it and writes its output), and is compared with a device-to-device copy of the
gradient's bytes measured in the same run (``cupy``: one ``cudaMemcpyAsync`` of the image into
another array; ``cpu``: ``numpy.copyto``): ``of_copy`` is the fraction of the copy's rate.

``--osem``: one full penalised OSEM iteration (OSMAPOSL with this prior, additive MAP model)
through :class:`stirgpu.recon.OSEM` on the problem ``benchmarks/osem.py`` builds (Siemens mMR
span 11, 21 subsets; with ``--quick`` its reduced CPU case), each subiteration timed, and the
prior's gradient inside it, so that the prior's share of a subiteration is measured.  The
devices are synchronised around each timed call.

Output: a JSON document (``--json FILE`` also writes it), then readable lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
import timing  # noqa: E402
from timing import best_seconds  # noqa: E402

#: case -> (scanner, image shape (z, y, x))
CASES = {"mmr": ("Siemens mMR", (127, 285, 285)), "quadra": ("Siemens Quadra", (645, 447, 447))}
QUICK_CASE = ("quick", "Siemens mMR", (31, 91, 91))
#: --osem with --quick: osem.py's reduced CPU case (3 segments, 84 views, 172 tangential)
QUICK_OSEM = {"max_ring_difference": 10, "views": 84, "tangential": 172, "image_xy": 61}


def case_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated case names of :data:`CASES`."""
    names = tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown case {unknown[0]!r}; the cases are {', '.join(CASES)}")
    return names


def voxel_size(scanner_name: str) -> tuple[float, float, float]:
    """STIR's default image voxels of a scanner: half the ring spacing, the default bin size."""
    from stirgpu.geometry import Scanner

    sc = Scanner.from_name(scanner_name)
    return (sc.ring_spacing / 2, sc.default_bin_size, sc.default_bin_size)


class Device(timing.Device):
    """Where the arrays live, and the bandwidth reference there."""

    def copy(self, dst, src) -> None:
        """A device-to-device copy of ``src`` into ``dst`` (the bandwidth reference)."""
        if self.name == "cuda":
            dst.data.copy_from_device_async(src.data, src.nbytes)
        else:
            np.copyto(dst, src)


def make_prior(args, scanner_name: str, shape, cls=None):
    from stirgpu.geometry import ImageInfo
    from stirgpu.priors import RelativeDifferencePrior

    prior = (cls or RelativeDifferencePrior)(1.0, gamma=args.gamma, epsilon=args.epsilon)
    prior.set_up(ImageInfo(shape, voxel_size(scanner_name)))
    return prior


def time_case(args, device: Device, name: str, scanner_name: str, shape) -> dict:
    xp = device.xp
    prior = make_prior(args, scanner_name, shape)
    host = np.random.default_rng(0).uniform(0.5, 1.5, shape).astype(np.float32)
    x = xp.asarray(host)
    out, dst = xp.empty_like(x), xp.empty_like(x)
    nbytes = x.nbytes
    copy = best_seconds(device, lambda: device.copy(dst, x), args.repeat)
    value = best_seconds(device, lambda: prior.get_value(x), args.repeat)
    gradient = best_seconds(device, lambda: prior.get_gradient(x, out=out), args.repeat)
    copy_gbs = 2 * nbytes / copy / 1e9
    result = {"scanner": scanner_name, "shape": list(shape), "voxels": int(x.size), "copy_gb_per_s": copy_gbs}
    for op, seconds, moved in (("value", value, nbytes), ("gradient", gradient, 2 * nbytes)):
        gbs = moved / seconds / 1e9
        result[op] = {"seconds": seconds, "gb_per_s": gbs, "of_copy": gbs / copy_gbs}
    return result


def time_osem(args, device: Device) -> dict:
    """One penalised OSEM iteration on osem.py's problem, each subiteration and its prior gradient timed."""
    import osem as osem_case  # benchmarks/osem.py: the same mMR span 11 problem

    from stirgpu.priors import RelativeDifferencePrior
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import OSEM, PoissonLogLikelihood

    class TimedPrior(RelativeDifferencePrior):
        """The prior, with each gradient's seconds recorded (the device synchronised around it)."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.seconds: list[float] = []

        def get_gradient(self, image, out=None):
            gradient = super().get_gradient
            seconds, g = device.timed(lambda: gradient(image, out))
            self.seconds.append(seconds)
            return g

    problem = argparse.Namespace(
        scanner="Siemens mMR", span=11, max_ring_difference=60, views=252, tangential=344, image_xy=None
    )
    if args.quick:
        vars(problem).update(QUICK_OSEM)
    pp = ProjectorPair(backend=args.backend)
    pdi, info, y, background, f = osem_case.make_problem(problem, pp)
    prior = TimedPrior(1.0, gamma=args.gamma, epsilon=args.epsilon)
    K = args.subsets
    objective = PoissonLogLikelihood(y, additive=background, normalisation=f)
    recon = OSEM(objective, pp, info, num_subsets=K, num_subiterations=K, prior=prior)
    recon.set_up()
    x = recon.initial_image(1.0)
    recon.update(x.copy(), 1)  # warm-up: kernel compilation, buffers
    prior.seconds = []
    subiterations = []
    for n in range(1, K + 1):
        subiterations.append(device.timed(lambda n=n: recon.update(x, n))[0])
    shares = [p / s for p, s in zip(prior.seconds, subiterations, strict=True)]
    return {
        "scanner": problem.scanner,
        "span": problem.span,
        "views": problem.views,
        "tangential": problem.tangential,
        "segments": pdi.get_num_segments(),
        "image": list(info.shape),
        "subsets": K,
        "iteration_seconds": sum(subiterations),
        "subiteration_seconds": subiterations,
        "prior_gradient_seconds": prior.seconds,
        "prior_share_mean": float(np.mean(shares)),
        "prior_share_max": float(np.max(shares)),
    }


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--cases", type=case_list, default=tuple(CASES), help=f"comma-separated: {', '.join(CASES)}")
    p.add_argument("--quick", action="store_true", help=f"one small image {QUICK_CASE[2]} instead of --cases")
    p.add_argument("--repeat", type=arguments.positive_int, default=5, help="timed calls per figure (best kept)")
    p.add_argument("--gamma", type=arguments.positive_float, default=2.0, help="RDP gamma (STIR's default 2)")
    p.add_argument("--epsilon", type=float, default=0.0, help="RDP epsilon (STIR's default 0)")
    p.add_argument("--osem", action="store_true", help="also one penalised OSEM iteration (mMR span 11)")
    p.add_argument("--subsets", type=arguments.positive_int, default=21, help="subsets of --osem")
    p.add_argument("--json", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    if not 0.0 <= args.epsilon < float("inf"):
        raise arguments.BadArgument(f"--epsilon {args.epsilon}: expected a number >= 0")

    from stirgpu.execution import resolve_backend

    args.backend = resolve_backend(args.backend)
    device = Device.of(args.backend)
    cases = [QUICK_CASE] if args.quick else [(n, *CASES[n]) for n in args.cases]
    result: dict = {"backend": args.backend, "gamma": args.gamma, "epsilon": args.epsilon, "repeat": args.repeat}
    result["cases"] = {name: time_case(args, device, name, scanner, shape) for name, scanner, shape in cases}
    if args.osem:
        result["osem"] = time_osem(args, device)

    arguments.emit_json(result, args.json)
    print(f"\nRelative Difference Prior (gamma {args.gamma}, epsilon {args.epsilon}), backend {args.backend}")
    for name, c in result["cases"].items():
        shape = " x ".join(map(str, c["shape"]))
        print(f"{name} {shape}: copy {c['copy_gb_per_s']:.1f} GB/s")
        for op in ("value", "gradient"):
            r = c[op]
            print(f"  {op:8s} {r['seconds']:.4f} s  {r['gb_per_s']:.2f} GB/s = {r['of_copy']:.3g} of the copy")
    if "osem" in result:
        o = result["osem"]
        print(
            f"penalised OSEM ({o['scanner']} span {o['span']}, {o['subsets']} subsets, image "
            f"{' x '.join(map(str, o['image']))}): {o['iteration_seconds']:.2f} s per iteration; prior gradient "
            f"{o['prior_share_mean']:.1%} of a subiteration on average, {o['prior_share_max']:.1%} at most"
        )
    return 0


if __name__ == "__main__":
    sys.exit(arguments.run(main))
