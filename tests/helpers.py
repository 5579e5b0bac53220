"""Helpers shared by several test modules (test modules import from here, never from each other).

* ``REPO_ROOT`` -- the checkout (for subprocesses that run the tree's ``stirgpu``);
* :func:`reference_results` -- the folder of the STIR fixtures holding STIR's computed results,
  those of the STIR users run today (``REFERENCE_RESULTS``: libparallelproj 2.0.7);
* :func:`cuda_device_count` -- usable CUDA devices through cupy (0 without cupy or a GPU); the
  ``gpu`` / ``multi_gpu`` markers of ``conftest.py`` skip on it;
* :func:`plan_of` -- ``execution.make_plan`` over every segment, one CPU lane by default;
* the streaming projectors' small problem: :func:`small_geometry`, :func:`phantom`,
  :func:`random_proj_data`, and the comparisons :func:`all_views`, :func:`same_data`,
  :func:`assert_same_back` with its tolerance ``BACK_RTOL``;
* :func:`projection_results` -- a set-up projector pair's projections, for the MPI scripts;
* the OSEM tests' small simulated problem: :func:`osem_problem` (the ``osem_problem`` fixture of
  ``conftest.py``), :func:`osem_objective` and :func:`make_osem`;
* the prior kernels' cases (CUDA against numba): ``PRIOR_POTENTIALS``, ``PRIOR_CASES``,
  :func:`prior_image`, and :func:`assert_within_one_ulp`.

Fixtures stay in ``conftest.py``; the STIR differential suite's case builders are in
``stir_differential/cases.py`` and ``stir_differential/osmaposl_cases.py``.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from stirgpu import execution
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

__all__ = [
    "REPO_ROOT",
    "REFERENCE_RESULTS",
    "reference_results",
    "osem_problem",
    "osem_objective",
    "make_osem",
    "cuda_device_count",
    "BACK_RTOL",
    "assert_same_back",
    "plan_of",
    "small_geometry",
    "phantom",
    "random_proj_data",
    "all_views",
    "same_data",
    "projection_results",
    "PRIOR_POTENTIALS",
    "PRIOR_VOXEL_SIZE",
    "PRIOR_CASES",
    "prior_image",
    "assert_within_one_ulp",
    "cli",
    "forward_args",
    "back_args",
]

REPO_ROOT = Path(__file__).resolve().parent.parent

#: the folder of the STIR fixtures (``conftest.stir_fixtures``) holding STIR's projections and
#: reconstructions as the reference STIR computed them, linked with libparallelproj 2.0.7 (what
#: a STIR installed today computes; ``stir_reference`` beside it holds the 2.0.3 numbers)
REFERENCE_RESULTS = "stir_reference_lpp2.0.7"


def reference_results(stir_fixtures: Path) -> Path:
    """The folder of STIR's computed results in the STIR fixtures ``stir_fixtures``."""
    return stir_fixtures / REFERENCE_RESULTS


#: back-projection tolerance across chunk plans / lanes: float32 summation order
BACK_RTOL = 2e-6


@functools.cache
def cuda_device_count() -> int:
    """Number of usable CUDA devices through cupy (0 where cupy or a GPU is missing): stirgpu's
    own count (:func:`stirgpu.execution.cuda_device_count`), asked once per session."""
    return execution.cuda_device_count()


def assert_same_back(got, want, backend):
    """Back projections of the same plan: bitwise on the CPU (deterministic slabs); on CUDA the
    kernels add with atomics, whose order varies run to run, so float32 summation order."""
    if backend == "cpu":
        assert np.array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(want)))


def plan_of(
    pdi,
    views=None,
    *,
    lanes=1,
    host_buffers_per_slot=1,
    device_buffers_per_slot=None,
    host_budget=1 << 30,
    gpu_budget=None,
    **options,
):
    """``execution.make_plan`` over every segment of ``pdi`` and ``views`` (a list, or views per
    segment; default: every view), with one CPU lane's staging unless told otherwise."""
    return execution.make_plan(
        pdi,
        pdi.segment_nums,
        range(pdi.get_num_views()) if views is None else views,
        lanes=lanes,
        host_buffers_per_slot=host_buffers_per_slot,
        device_buffers_per_slot=device_buffers_per_slot,
        host_budget=host_budget,
        gpu_budget=gpu_budget,
        **options,
    )


def small_geometry():
    """ECAT 953, span 1, max ring difference 2 (5 segments of 16/15/14 axial positions),
    24 views (mashed), 32 tangential positions; a 15 x 33 x 33 image with a shifted origin."""
    pdi = ProjDataInfo.construct(
        Scanner.from_name("ECAT 953"), span=1, max_ring_diff=2, num_views=24, num_tangential_poss=32
    )
    info = ImageInfo((15, 33, 33), (6.75, 5.0, 5.0), origin=(1.0, 2.0, -3.0))
    return pdi, info


def phantom(info, seed=1):
    """A smooth blob plus noise, positive inside the FOV."""
    rng = np.random.default_rng(seed)
    z, y, x = np.meshgrid(*[np.linspace(-1, 1, n) for n in info.shape], indexing="ij")
    img = np.exp(-(x**2 + (y - 0.2) ** 2 + z**2) * 3) + 0.1 * rng.random(info.shape)
    return img.astype(np.float32)


def random_proj_data(pdi, seed=2, low=0.0):
    """In-memory projection data of ``pdi``, uniform in [low, low + 1) (seeded)."""
    rng = np.random.default_rng(seed)
    pd = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        shape = (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
        pd.write_views((low + rng.random(shape)).astype(np.float32), s, range(pdi.get_num_views()))
    return pd


def all_views(pd, s):
    """Segment ``s`` of the store ``pd``, every view: (views, axial, tangential)."""
    return pd.read_views(s, range(pd.get_num_views()))


def same_data(a, b, pdi):
    """Whether two stores of ``pdi`` hold the same numbers, bit for bit."""
    return all(np.array_equal(all_views(a, s), all_views(b, s)) for s in pdi.segment_nums)


# -- the prior kernels' cases ------------------------------------------------------------------------

#: name -> (kind, p1, p2) of stirgpu.kernels.priors (Quadratic, RDP with gamma / epsilon, Logcosh)
PRIOR_POTENTIALS = {
    "quadratic": (0, 0.0, 0.0),
    "rdp": (1, 2.0, 0.0),
    "rdp-gamma-eps": (1, 0.7, 0.05),
    "logcosh": (2, 1.7, 0.0),
}
PRIOR_VOXEL_SIZE = (2.03125, 2.08626, 2.08626)  # the mMR's: non-cubic default weights


def projection_results(pair, image, data, *, forward_subset, ratio_subset, back_subset=None, prefix=""):
    """What tests/mpi's scripts compare between ranks and one process: a set-up ``pair``'s
    forward projection of ``image`` (all of it, and subset ``forward_subset`` = (subset,
    subsets)), back projection of ``data`` (all of it, and subset ``back_subset`` if given) and
    fused ratio with its log-likelihood on subset ``ratio_subset``; each name after ``prefix``."""
    pdi = data.get_proj_data_info()
    results = {}
    forward = ProjDataInMemory(pdi)
    pair.forward_project(forward, image)
    results["forward"] = forward.as_array()
    subset = ProjDataInMemory(pdi)
    pair.forward_project(subset, image, *forward_subset)
    results["forward_subset"] = subset.as_array()
    results["back"] = pair.back_project(None, data)
    if back_subset is not None:
        results["back_subset"] = pair.back_project(None, data, *back_subset)
    ratio, loglik = pair.forward_back_ratio(image, data, *ratio_subset, return_loglik=True)
    results["ratio"], results["loglik"] = ratio, np.array(loglik)
    return {prefix + name: value for name, value in results.items()}


def _prior_user_weights():
    """(3, 5, 3), symmetric, with zeros (the Hessian skips them) and a non-zero centre weight."""
    w = np.random.default_rng(8).uniform(0.1, 1.0, (3, 5, 3))
    w = (w + w[::-1, ::-1, ::-1]) / 2
    w[0, 0, 0] = w[2, 4, 2] = 0.0
    w[1, 2, 1] = 0.4
    return w.astype(np.float32)


def _prior_cases():
    from stirgpu.priors import stir_default_weights

    default = stir_default_weights(PRIOR_VOXEL_SIZE)
    only_2d = stir_default_weights(PRIOR_VOXEL_SIZE, only_2d=True)
    return {
        "3d-default": ((5, 7, 9), default),
        "3d-only-2D": ((5, 7, 9), only_2d),
        "3d-user": ((7, 9, 5), _prior_user_weights()),
        "2d-default": ((1, 11, 13), default),
        "2d-only-2D": ((1, 11, 13), only_2d),
    }


#: case -> (image shape, weights): odd sizes, a single-plane (2-D) image, STIR's only-2D weights
PRIOR_CASES = _prior_cases()


def prior_image(shape, seed, dtype, zeros=True):
    """Random positive values, with 30 % zeros (RDP's 0/0 rule and its INFINITY Hessian)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 3.0, shape)
    if zeros:
        x[rng.random(shape) < 0.3] = 0.0
    return x.astype(dtype)


def assert_within_one_ulp(got, want):
    """Equal NaN / +Inf / -Inf positions; elsewhere at most one ulp of the output type apart (plus
    1e-12 of the maximum, for results that cancel to near zero from larger double terms).  ``got``
    may be a cupy array."""
    got = got.get() if hasattr(got, "get") else got
    assert got.dtype == want.dtype
    for where in (np.isnan, np.isposinf, np.isneginf):
        assert (where(got) == where(want)).all()
    fin = np.isfinite(want)
    a, b = want[fin].astype(np.float64), got[fin].astype(np.float64)
    bound = np.spacing(np.abs(want[fin])).astype(np.float64) + 1e-12 * float(np.abs(a).max(initial=0.0))
    assert (np.abs(b - a) <= bound).all(), float(np.abs(b - a).max(initial=0.0))


# -- the OSEM tests' problem ---------------------------------------------------------------------
def osem_problem():
    """(proj_data_info, image_info, phantom, simulation): ECAT 953 span 3, 24 views, 64
    tangential positions, the demo phantom, 2e6 counts (tests/test_recon_osem.py says more)."""
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

    pdi, info = demo_geometry(num_views=24, num_tangential_poss=64)
    phantom = demo_phantom(info)
    projector = ProjectorPair(backend="cpu")
    sim = simulate(projector, pdi, info, phantom.activity(info), phantom.mu_map(info), counts=2e6, seed=3)
    return pdi, info, phantom, sim


def osem_objective(sim, **kw):
    """The simulation's Poisson log-likelihood (its prompts, additive term and normalisation)."""
    from stirgpu.recon import PoissonLogLikelihood

    return PoissonLogLikelihood(sim.prompts, additive=sim.additive, normalisation=sim.normalisation, **kw)


def make_osem(problem, backend="cpu", objective=None, **kw):
    """An OSEM of ``problem`` (:func:`osem_problem`) on ``backend``."""
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import OSEM

    _, info, _, sim = problem
    return OSEM(objective or osem_objective(sim), ProjectorPair(backend=backend), info, **kw)


class Pinning:
    """Page-locking without a GPU: records what it was asked; ``refuse`` answers no."""

    def __init__(self, refuse=False):
        self.refuse, self.pinned, self.asked = refuse, set(), []

    def pin(self, a):
        self.asked.append(a)
        if not self.refuse:
            self.pinned.add(int(a.ctypes.data))
        return not self.refuse

    def is_pinned(self, a):
        return int(a.ctypes.data) in self.pinned


# -- the command line on the ECAT 953 fixture -----------------------------------------------------
def cli(argv, capsys) -> tuple[int, str, str]:
    """``stirgpu ARGV`` in this process: its exit code, standard output and standard error."""
    from stirgpu.cli import main as cli_main

    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def forward_args(ref, out, *extra) -> list[str]:
    """``forward-project OUT IMAGE TEMPLATE`` of the ECAT 953 fixture in ``ref`` (the fixtures'
    ``stir_reference``), on the CPU, quietly, then ``extra``."""
    image, template = ref / "ecat953_span3_image.hv", ref / "ecat953_span3_fwd.hs"
    return ["forward-project", str(out), str(image), str(template), "--backend", "cpu", "--quiet", *extra]


def back_args(ref, out, *extra) -> list[str]:
    """``back-project OUT DATA TEMPLATE`` of the ECAT 953 fixture in ``ref``, on the CPU,
    quietly, then ``extra``."""
    data, template = ref / "ecat953_span3_fwd.hs", ref / "ecat953_span3_image.hv"
    return ["back-project", str(out), str(data), str(template), "--backend", "cpu", "--quiet", *extra]


# -- a terminal for a subprocess's standard error ---------------------------------------------------
class TerminalStderr:
    """A pseudo-terminal to give a subprocess as its standard error (``stderr=term.slave``; it
    is 100 columns wide: tqdm draws nothing on a terminal of 0 columns), read as it comes after
    :meth:`start` (progress bars are written without newlines)."""

    def __init__(self, columns: int = 100):
        import fcntl
        import pty
        import struct
        import termios

        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        self.text = ""
        self._thread = None

    def start(self) -> TerminalStderr:
        """Call once the subprocess holds the terminal: reads until it closes it."""
        import os
        import threading

        os.close(self.slave)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        import os

        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: every holder of the terminal closed it
                return
            if not chunk:
                return
            self.text += chunk.decode(errors="replace")

    def finish(self) -> str:
        """Everything written to the terminal (the subprocess has ended)."""
        import os

        if self._thread is not None:
            self._thread.join(30)
        os.close(self.master)
        return self.text
