"""``stirgpu osmaposl FILE.par``: OSEM from a STIR OSMAPOSL parameter file (like STIR's
``OSMAPOSL FILE.par``), writing the same files: ``<output filename prefix>_<n>.hv`` and,
when asked for, the (subset) sensitivities.

Relative file names in the parameter file are taken from the working directory, as
STIR does.  Everything is checked before any work: a bad file stops with one line
naming the file, the line and the key.

``--stats`` prints, after each subiteration, the statistics of its update (the fused
forward and back projection of its subset), and the chunk plan whenever it differs from
the last one printed.  ``--timeline FILE.png`` draws the last subiteration's update; a
name with ``%d`` (STIR's pattern, e.g. ``timeline_%d.png``) gets one picture per
subiteration, ``%d`` replaced by its number.

Every file the run would write (the estimates at each save point, the sensitivities it
computes, a prior's gradients, the ``--timeline`` pictures) is checked before the first
projection: none may be a file the run reads (an input is never written, even with
``--overwrite``), and none may exist without ``--overwrite``.  With ``--overwrite`` an
earlier run's estimates with the same prefix that this run does not rewrite are removed
first, and a line says so.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path

from ..config import config
from ..errors import StirGpuError
from ..execution.plan import plural
from . import checks
from .leftovers import warn_about_leftovers
from .options import add_execution_options, config_changes
from .progress import say_function
from .written import describe_interfile, shown

__all__ = ["register", "run", "reconstruct", "timeline_path", "wrote_line", "no_estimate_reason"]

DESCRIPTION = """\
OSEM reconstruction from a STIR OSMAPOSL parameter file, like STIR's
'OSMAPOSL FILE.par', writing the same files: the estimates
<output filename prefix>_<n>.hv and, when asked for, the (subset) sensitivities.

Relative file names in FILE.par are taken from the working directory, as STIR does.
Everything is checked before any work starts; a bad file stops with one line naming
the file, the line and the key.  Execution settings in a 'stirgpu' projector block of
FILE.par win over --backend, --devices and --memory-budget.  The last line names the
final estimate.

Every file the run writes (estimates, computed sensitivities, a prior's gradients,
--timeline pictures) is checked first: none may be a file it reads (an input is never
written, even with --overwrite), and none may exist unless --overwrite is given;
--overwrite also removes an earlier run's estimates with the same prefix that this run
does not rewrite (e.g. osem_24.hv when this run saves up to osem_8.hv)."""

EPILOG = """\
examples:
  stirgpu osmaposl osem.par
  stirgpu osmaposl osem.par --backend cpu --stats
  stirgpu osmaposl osem.par --overwrite                  # replace an earlier run's files
  stirgpu osmaposl osem.par --timeline timeline.png      # the last subiteration
  stirgpu osmaposl osem.par --timeline timeline_%d.png   # one per subiteration"""


def register(subparsers, name: str = "osmaposl", run_function=None, **parser_options) -> None:
    """Add the ``osmaposl`` command (or, with another ``name``, ``run_function`` and parser
    texts, a reconstruction command with the same options: ``ossps``)."""
    texts = {"help": "OSEM reconstruction from a STIR OSMAPOSL .par file", "description": DESCRIPTION, "epilog": EPILOG}
    p = subparsers.add_parser(
        name, **{"formatter_class": argparse.RawDescriptionHelpFormatter, **texts, **parser_options}
    )
    method = "OSMAPOSL" if name == "osmaposl" else name.upper()
    p.add_argument("par", metavar="FILE.par", help=f"{method} parameter file (STIR's syntax)")
    add_execution_options(p, "reconstruct")
    p.add_argument(
        "--stats",
        action="store_true",
        help="after each subiteration, print where its projection time went (and the chunk plan when it changes)",
    )
    p.add_argument(
        "--timeline",
        default=None,
        metavar="FILE.png",
        help="draw the last subiteration's projection pipeline into FILE.png; a name with %%d "
        "(e.g. timeline_%%d.png) gets one picture per subiteration",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing estimates, sensitivities, gradients and pictures, and remove an earlier "
        "run's estimates with the same prefix that this run does not rewrite (inputs are never written)",
    )
    p.set_defaults(run=run if run_function is None else run_function)


def timeline_path(pattern: str, subiteration: int) -> Path:
    """``--timeline``'s file for a subiteration: ``pattern`` with ``%d`` replaced, or ``pattern``."""
    return Path(pattern % subiteration if "%d" in pattern else pattern)


def _check_timeline(pattern: str | None, overwrite: bool, prepared) -> None:
    """Before any work: the picture's name works, matplotlib can write it, into its folder,
    none is a file the run reads, and none exists unless ``--overwrite`` (every subiteration's
    picture for a name with ``%d``)."""
    if pattern is None:
        return
    s = prepared.settings
    try:
        subiterations = range(s.start_subiteration_num, s.num_subiterations + 1)
        paths = dict.fromkeys(timeline_path(pattern, n) for n in subiterations)
    except (TypeError, ValueError):
        raise StirGpuError(f"--timeline {pattern}: only one %d may stand in the name") from None
    inputs = tuple(role for _, role in prepared.outputs.inputs)
    for path in paths:  # the projection commands' checks (an extension matplotlib writes, a writable folder)
        checks.timeline_path(str(path), overwrite, inputs)


def no_estimate_reason(settings) -> str:
    """Why a run saved no estimate, naming the keys: output disabled, or no subiteration to run."""
    if settings.disable_output:
        return "output disabled in the parameter file: 'disable output := 1'"
    if settings.start_subiteration_num > settings.num_subiterations:
        return (
            f"no subiteration ran: 'start at subiteration number := {settings.start_subiteration_num}' comes after "
            f"the last one, 'number of subiterations := {settings.num_subiterations}'"
        )
    return "no estimate was due to be saved"


def wrote_line(
    saved: list, sensitivity_files: list, pictures: Sequence[Path | str] = (), *, no_estimate: str = ""
) -> str:
    """``wrote osem_24.hv (+ osem_24.v, 1.9 MiB): the final estimate; 3 estimates in all
    (subiterations 8, 16, 24); 8 sensitivity images; timeline.png``; with no estimate saved,
    ``no_estimate`` says why (:func:`no_estimate_reason`)."""
    extra = ([plural(len(sensitivity_files), "sensitivity image")] if sensitivity_files else []) + [
        str(p) for p in pictures
    ]
    if not saved:
        return "wrote " + ("; ".join(extra) + "; no estimate" if extra else "nothing") + f" ({no_estimate})"
    its = ", ".join(p.stem.rsplit("_", 1)[-1] for p in saved)
    return (
        f"wrote {describe_interfile(saved[-1])}: the final estimate; {plural(len(saved), 'estimate')} in all "
        f"(subiteration{'s' if len(saved) > 1 else ''} {its})" + "".join(f"; {e}" for e in extra)
    )


def run(args) -> int:
    from ..recon.run import prepare_osmaposl

    return reconstruct(args, prepare_osmaposl, "OSMAPOSL")


def reconstruct(args, prepare, method: str) -> int:
    """The command of ``method`` (STIR's executable: ``OSMAPOSL``, ``OSSPS``), whose parameter
    file ``prepare(par, overwrite=...)`` checks and opens (a ``recon.run.PreparedRun``)."""
    from ..distributed import world
    from .timeline import render_timeline

    comm = world()  # under mpirun: every rank projects its share of each subset; rank 0 writes
    changes = config_changes(args)
    say = say_function(changes["progress"])  # (lines printed while the OSEM bar is shown)
    t0 = time.perf_counter()
    with config(**changes), contextlib.ExitStack() as stack:
        with comm.together("checking the parameter file and its inputs"):
            prepared = stack.enter_context(prepare(args.par, overwrite=args.overwrite))
            _check_timeline(args.timeline, args.overwrite, prepared)
        if comm.is_root:
            warn_about_leftovers(method.lower(), prepared.output_folders)
        with comm.together("removing an earlier run's estimates"):
            removed = prepared.remove_earlier_estimates() if args.overwrite else []
        if removed and comm.is_root:
            print(f"--overwrite: removed an earlier run's {', '.join(str(shown(f)) for f in removed)}")
        s = prepared.settings
        osem = prepared.osem
        setup = osem.set_up()  # projector set-up and sensitivities (computed and written, or read)
        on_ranks = f" {osem.comm.describe()}" if osem.comm.describe() else ""
        print(
            f"{method} {args.par}: {plural(s.num_subsets, 'subset')}, subiterations "
            f"{s.start_subiteration_num}..{s.num_subiterations}, image {osem.image_info.shape} (z, y, x), "
            f"backend {osem.projector.backend} {list(osem.projector.devices)}{on_ranks}"
        )
        what = "sensitivities and denominator" if method == "OSSPS" else "sensitivities"
        print(f"{what}: {setup:.2f} s" + "".join(f"\n  written: {shown(f)}" for f in osem.set_up_files()))
        seen = {"plan": None, "last": None}
        pictures: list[Path] = []

        def report(rec, _image) -> None:
            ll = "" if rec.log_likelihood is None else f", log-likelihood (subset) {rec.log_likelihood:.8g}"
            if rec.objective_function_value is not None:  # STIR's "Objective function without penalty"
                ll += f", objective function {rec.objective_function_value:.8g}"
            if rec.penalty is not None:  # STIR's "Penalty" (the objective is the difference)
                ll += f", penalty {rec.penalty:.8g}"
            saved = f" -> {shown(rec.saved)}" if rec.saved else ""
            say(f"  subiteration {rec.subiteration} (subset {rec.subset}): {rec.seconds:.2f} s{ll}{saved}")
            if rec.stats is None:
                return
            if args.stats:
                if rec.stats.plan != seen["plan"]:
                    say("\n".join("    " + line for line in rec.stats.plan.splitlines()))
                    seen["plan"] = rec.stats.plan
                say("\n".join("    " + line for line in rec.stats.summary().splitlines()))
            seen["last"] = rec
            if args.timeline and "%d" in args.timeline and rec.stats.events and comm.is_root:
                pictures.append(_timeline(render_timeline, args.timeline, rec, method))

        result = prepared.run(callback=report)
    last = seen["last"]
    if args.timeline and "%d" not in args.timeline and last is not None and last.stats.events and comm.is_root:
        pictures.append(_timeline(render_timeline, args.timeline, last, method))
    print(f"done in {time.perf_counter() - t0:.1f} s{on_ranks}")
    if osem.comm.last_image_sum:  # (under MPI: which path the sums over the ranks took)
        print(f"MPI: images summed over the ranks {osem.comm.last_image_sum}")
    shown_pictures = pictures if len(pictures) <= 2 else [f"{plural(len(pictures), 'timeline')} ({args.timeline})"]
    print(wrote_line(result.saved, result.sensitivity_files, shown_pictures, no_estimate=no_estimate_reason(s)))
    return 0


def _timeline(render, pattern: str, rec, method: str) -> Path:
    path = timeline_path(pattern, rec.subiteration)
    render(rec.stats, path, context=f"{method} subiteration {rec.subiteration} (update of subset {rec.subset})")
    return path
