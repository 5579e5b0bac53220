"""The execution options the commands share, each declared once: ``--backend``, ``--devices``,
``--memory-budget`` (and, for the reconstruction commands, ``--quiet`` through
:func:`add_execution_options`), and :func:`execution_config`, the ``stirgpu.config`` overrides
they ask for.  A command adds them in the order its help lists them; the texts differ only where
the option does something else for that command (``--backend``: what runs there;
``--memory-budget``: a note on what a smaller budget changes).
"""

from __future__ import annotations

import argparse

from ..execution.plan import parse_bytes
from .checks import memory_size
from .progress import terminal_progress

__all__ = [
    "DEVICES_HELP",
    "QUIET_HELP",
    "MEMORY_BUDGET_HELP",
    "parse_devices",
    "add_backend_option",
    "add_devices_option",
    "add_memory_budget_option",
    "add_execution_options",
    "execution_config",
    "config_changes",
]

DEVICES_HELP = (
    "GPUs to use, e.g. 0,1 (default: all); with --backend cpu, as many worker threads as ids "
    "(default 1: its kernels use every core)"
)
MEMORY_BUDGET_HELP = (
    "most memory each projection may use on each GPU and on the host, e.g. 512M, 2G (default: from the free memory)"
)


QUIET_HELP = "no progress bars (they are drawn on standard error only when it is a terminal)"


def parse_devices(text: str) -> tuple[int, ...]:
    """``"0,1"`` -> (0, 1)."""
    try:
        ids = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--devices: expected ids like 0,1, got {text!r}") from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"--devices: expected distinct ids >= 0 like 0,1, got {text!r}")
    return ids


def add_backend_option(p, what: str, par_note: str = "") -> None:
    """``--backend``: ``what`` says what runs there (``"project"``, ``"reconstruct"``...)."""
    p.add_argument(
        "--backend",
        choices=("auto", "cpu", "cuda"),
        default=None,
        help=f"where to {what}: cuda (GPU), cpu, or auto (default: cuda when a GPU is usable){par_note}",
    )


def add_devices_option(p) -> None:
    p.add_argument("--devices", type=parse_devices, default=None, metavar="0,1", help=DEVICES_HELP)


def add_memory_budget_option(p, note: str = "") -> None:
    """``--memory-budget SIZE`` (one size, per GPU and on the host); ``note`` is added to its help."""
    p.add_argument("--memory-budget", type=memory_size, default=None, metavar="SIZE", help=MEMORY_BUDGET_HELP + note)


def add_execution_options(p, what: str, backend_note: str = "") -> None:
    """``--backend``, ``--devices``, ``--memory-budget``, ``--quiet`` (``osmaposl`` and ``demo``;
    ``what`` says what runs on the backend, ``backend_note`` what overrides it)."""
    add_backend_option(p, what, backend_note)
    add_devices_option(p)
    add_memory_budget_option(p)
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def execution_config(args) -> dict:
    """The ``stirgpu.config`` overrides of the shared options ``--backend``, ``--devices``,
    ``--memory-budget`` (one size, per GPU and on the host), where given."""
    out: dict = {}
    if args.backend is not None:
        out["backend"] = args.backend
    if args.devices is not None:
        out["devices"] = args.devices
    if args.memory_budget is not None:
        out["gpu_memory_budget"] = out["host_memory_budget"] = parse_bytes(args.memory_budget)
    return out


def config_changes(args) -> dict:
    """The ``stirgpu.config`` overrides asked for by :func:`add_execution_options`; ``progress``:
    the command's bars (:func:`~.progress.terminal_progress`: none with ``--quiet`` or when
    standard error is not a terminal)."""
    out = execution_config(args)
    out["progress"] = terminal_progress(args.quiet)
    return out
