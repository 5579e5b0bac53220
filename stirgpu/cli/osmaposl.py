"""``stirgpu osmaposl FILE.par``: OSEM from a STIR OSMAPOSL parameter file (like STIR's
``OSMAPOSL FILE.par``), writing the same files: ``<output filename prefix>_<n>.hv`` and,
when asked for, the (subset) sensitivities.

Relative file names in the parameter file are taken from the working directory, as
STIR does.  Everything is checked before any work: a bad file stops with one line
naming the file, the line and the key.
"""

from __future__ import annotations

import contextlib
import sys
import time

from ..config import config
from .project import add_numerics_option, execution_config, parse_devices

__all__ = ["register", "run", "add_execution_options", "config_changes"]


def register(subparsers) -> None:
    p = subparsers.add_parser("osmaposl", help="OSEM reconstruction from a STIR OSMAPOSL .par file",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("par", help="OSMAPOSL parameter file")
    add_execution_options(p)
    p.set_defaults(run=run)


def add_execution_options(p) -> None:
    """``--backend``, ``--devices``, ``--memory-budget``, ``--numerics``, ``--quiet`` (shared with
    ``demo``)."""
    add_numerics_option(p)
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default=None,
                   help="where to compute (default: auto = CUDA when a GPU is usable; a 'stirgpu' projector "
                        "block in the .par wins)")
    p.add_argument("--devices", type=parse_devices, default=None, metavar="0,1",
                   help="GPU ids (CUDA) or worker ids (CPU); default all GPUs / two workers")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="memory a projector call may use per GPU and on the host, e.g. 512M, 2G")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def config_changes(args) -> dict:
    """The ``stirgpu.config`` overrides asked for by :func:`add_execution_options`."""
    out = execution_config(args)
    out["progress"] = not args.quiet and sys.stderr.isatty()
    return out


def run(args) -> int:
    from ..recon.run import prepare_osmaposl
    changes = config_changes(args)
    t0 = time.perf_counter()
    with config(**changes), contextlib.ExitStack() as stack:
        prepared = stack.enter_context(prepare_osmaposl(args.par))
        s = prepared.settings
        osem = prepared.osem
        setup = osem.set_up()  # projector set-up and sensitivities (computed and written, or read)
        print(f"OSMAPOSL {args.par}: {s.num_subsets} subsets, subiterations "
              f"{s.start_subiteration_num}..{s.num_subiterations}, image {osem.image_info.shape} (z, y, x), "
              f"backend {osem.projector.backend} {list(osem.projector.devices)}")
        print(f"sensitivities: {setup:.2f} s" + "".join(f"\n  written: {f}" for f in osem.sensitivity_files))

        def report(rec, _image) -> None:
            ll = "" if rec.log_likelihood is None else f", log-likelihood (subset) {rec.log_likelihood:.8g}"
            if rec.objective_function_value is not None:  # STIR's "Objective function without penalty"
                ll += f", objective function {rec.objective_function_value:.8g}"
            saved = f" -> {rec.saved}" if rec.saved else ""
            print(f"  subiteration {rec.subiteration} (subset {rec.subset}): {rec.seconds:.2f} s{ll}{saved}")

        result = prepared.run(callback=report)
    print(f"done in {time.perf_counter() - t0:.1f} s; {len(result.saved)} estimate(s) written")
    return 0
