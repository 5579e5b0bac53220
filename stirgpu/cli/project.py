"""``stirgpu forward-project`` and ``stirgpu back-project``, in the argument order of STIR's
``forward_project`` and ``back_project`` utilities::

    stirgpu forward-project OUTPUT.hs IMAGE.hv TEMPLATE.hs [PROJECTOR.par]
    stirgpu back-project OUTPUT.hv PROJDATA.hs [TEMPLATE_IMAGE.hv] [PROJECTOR.par]

The optional ``.par`` is STIR's projector block (``Parallelproj``, or stirgpu's own with
execution settings); options given on the command line win over it.  Without a template
image, back-project writes STIR's default image for the projection data.  Outputs are
written under temporary names and appear only when complete.
"""

from __future__ import annotations

from ..config import config as scoped_config
from ..errors import NonFiniteError, StirGpuError
from ..formats.naming import IMAGE, PROJDATA
from ..formats.roles import reads
from .checks import non_negative_int, output_files, say_written, set_up_projector, subset_of, timeline_path
from .options import (
    QUIET_HELP,
    add_backend_option,
    add_devices_option,
    add_memory_budget_option,
    execution_config,
)
from .progress import terminal_progress
from .written import wrote_interfile

__all__ = [
    "register",
    "run_forward",
    "run_back",
    "parse_subset",
]


FORWARD_DESCRIPTION = """\
Forward project IMAGE.hv into new projection data OUTPUT.hs (+ OUTPUT.s) with the
geometry of TEMPLATE.hs, in the argument order of STIR's forward_project.

PROJECTOR.par (optional) is a STIR projector parameter file: a Parallelproj block, or
stirgpu's own block with execution settings; options given here win over it.  The
output appears only when complete; the last line names it."""

FORWARD_EPILOG = """\
examples:
  stirgpu forward-project fwd.hs image.hv template.hs
  stirgpu forward-project fwd.hs image.hv template.hs --subset 3/21 --stats
  stirgpu forward-project fwd.hs image.hv template.hs forward_projector.par --timeline fwd.png"""

BACK_DESCRIPTION = """\
Back project PROJDATA.hs into a new image OUTPUT.hv (+ OUTPUT.v), in the argument
order of STIR's back_project.  The image has the geometry of TEMPLATE_IMAGE.hv or,
without one, STIR's default image for the data (as STIR's back_project).

PROJECTOR.par (optional) is a STIR projector parameter file: a Parallelproj block, or
stirgpu's own block with execution settings; options given here win over it.  The
output appears only when complete; the last line names it."""

BACK_EPILOG = """\
examples:
  stirgpu back-project back.hv prompts.hs
  stirgpu back-project back.hv prompts.hs template.hv back_projector.par
  stirgpu back-project back.hv prompts.hs --subset 0/21 --stats --timeline back.png"""


def _common(p, role: str) -> None:
    """The options of forward-project (``role`` "forward") and back-project ("back")."""
    add_backend_option(p, "project")
    add_devices_option(p)
    if role == "forward":
        subset = (
            "only the views of subset K of N (STIR's subsets: views v with v %% N == K); OUTPUT's other views are 0"
        )
    else:
        subset = "back project only the views of subset K of N (STIR's subsets: views v with v %% N == K)"
    p.add_argument("--subset", type=parse_subset, default=None, metavar="K/N", help=subset)
    same = "the same numbers" if role == "forward" else "the same image to float32 rounding"
    add_memory_budget_option(p, f"; a smaller budget means more, smaller chunks, {same}")
    p.add_argument(
        "--max-segment",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="only segments -N..N (STIR's 'maximum absolute segment number to process')"
        + ("; OUTPUT's other segments are 0" if role == "forward" else ""),
    )
    p.add_argument(
        "--stats", action="store_true", help="print the chunk plan (as 'stirgpu plan' does) and where the time went"
    )
    p.add_argument(
        "--timeline",
        default=None,
        metavar="FILE.png",
        help="draw when each chunk was read, projected and written (per GPU or CPU worker) into FILE.png",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT (header and data file)")
    p.add_argument("--quiet", action="store_true", help=QUIET_HELP)


def register(subparsers) -> None:
    import argparse

    raw = argparse.RawDescriptionHelpFormatter
    f = subparsers.add_parser(
        "forward-project",
        help="forward project an image into projection data",
        description=FORWARD_DESCRIPTION,
        epilog=FORWARD_EPILOG,
        formatter_class=raw,
    )
    f.add_argument("output", metavar="OUTPUT.hs", help="new projection data (header; the data go to OUTPUT.s)")
    f.add_argument("image", metavar="IMAGE.hv", help="image to project")
    f.add_argument(
        "template",
        metavar="TEMPLATE.hs",
        help="projection data giving the geometry (a template header without data is enough)",
    )
    f.add_argument(
        "par", nargs="?", default=None, metavar="PROJECTOR.par", help="STIR projector parameter file (optional)"
    )
    _common(f, "forward")
    f.set_defaults(run=run_forward)

    b = subparsers.add_parser(
        "back-project",
        help="back project projection data into an image",
        description=BACK_DESCRIPTION,
        epilog=BACK_EPILOG,
        formatter_class=raw,
        usage="%(prog)s [options] OUTPUT.hv PROJDATA.hs [TEMPLATE_IMAGE.hv] [PROJECTOR.par]",
    )
    b.add_argument("output", metavar="OUTPUT.hv", help="new image (header; the data go to OUTPUT.v)")
    b.add_argument("projdata", metavar="PROJDATA.hs", help="projection data to back project")
    b.add_argument(
        "rest",
        nargs="*",
        metavar="[TEMPLATE_IMAGE.hv] [PROJECTOR.par]",
        help="optional: an image giving the geometry, and/or a STIR projector parameter file",
    )
    _common(b, "back")
    b.set_defaults(run=run_back)


# -- argument parsing --------------------------------------------------------------------
def parse_subset(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 0 <= K < N."""
    import argparse

    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--subset: expected K/N (e.g. 0/21), got {text!r}") from None
    if n < 1 or not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--subset: need 0 <= K < N, got {text!r}")
    return k, n


# -- running -----------------------------------------------------------------------------
def _projector_settings(par: str | None, role: str):
    """(config changes, projector keywords) from a projector .par (role 'forward' or 'back')."""
    if par is None:
        return {}, {}
    from ..parfile import read_projector_par

    settings = read_projector_par(par)
    opts = settings.forward if role == "forward" else settings.back
    if opts is None:
        raise StirGpuError(f"{par}: it describes a {settings.role} projector, but a {role} projector is needed")
    return opts.config_changes(), {"restrict_to_cylindrical_fov": opts.restrict_to_cylindrical_fov}


def _config_changes(args, from_par: dict) -> dict:
    changes = {**from_par, **execution_config(args)}
    changes["progress"] = terminal_progress(args.quiet)
    return changes


def _report(args, projector, timeline) -> None:
    stats = projector.last_stats
    if args.stats and stats is not None:
        print(projector.last_plan)
        print(stats.summary())
    if timeline is not None:
        from .timeline import render_timeline

        render_timeline(stats, timeline)


def run_forward(args) -> int:
    from ..distributed import shared_output, world
    from ..formats import read_image, read_projdata_header
    from ..projectors import ForwardProjector

    comm = world()  # under mpirun every rank writes its share of the views into the one output
    # everything is checked before any work: the .par, the outputs, the inputs, the projector set-up
    with comm.together("checking the arguments and inputs"):
        changes, kw = _projector_settings(args.par, "forward")
        # an input is never written: IMAGE, TEMPLATE and PROJECTOR.par with their data files
        inputs = (reads("IMAGE", args.image), reads("TEMPLATE", args.template)) + _par_role(args.par)
        names = output_files(args.output, PROJDATA, args.overwrite, inputs=inputs)
        timeline = timeline_path(args.timeline, args.overwrite, inputs)
        pdi = read_projdata_header(args.template).proj_data_info
        image = read_image(args.image)
        k, n = subset_of(args.subset, pdi)
    with scoped_config(**_config_changes(args, changes)):
        fp = ForwardProjector(max_segment_num_to_process=args.max_segment, comm=comm, **kw)
        with comm.together("setting up the projector"):
            set_up_projector(fp, pdi, image.info, args.template)
        # written under a temporary name and committed when every rank got through: nothing
        # appears under the output name otherwise
        with shared_output(comm, names.header, pdi, overwrite=args.overwrite) as out:
            try:
                fp.forward_project(out, image, subset_num=k, num_subsets=n)
            except NonFiniteError as exc:  # (the projector knows the image as its argument)
                if exc.what != "image":
                    raise
                raise NonFiniteError(args.image, exc.count, args.image) from None
    if comm.is_root:
        _report(args, fp, timeline)
        say_written(args.output, names)
        print(wrote_interfile(names.header) + _on_ranks(comm))
    return 0


def _par_role(par: str | None) -> tuple:
    """The projector parameter file as an input (none without one)."""
    return () if par is None else (reads("PROJECTOR.par", par),)


def _image_sum(comm) -> str:
    """`` (the image summed through host staging (...))`` under MPI, else nothing."""
    return f" (the image summed {comm.last_image_sum})" if comm.last_image_sum else ""


def _on_ranks(comm) -> str:
    """`` on 3 MPI ranks`` under MPI, else nothing."""
    return f" {comm.describe()}" if comm.describe() else ""


def _split_rest(rest: list[str]) -> tuple[str | None, str | None]:
    template = par = None
    for r in rest:
        if r.lower().endswith(".par"):
            if par is not None:
                raise StirGpuError(f"back-project: two projector parameter files ({par}, {r})")
            par = r
        else:
            if template is not None or par is not None:
                raise StirGpuError(
                    "back-project: arguments are OUTPUT.hv PROJDATA.hs [TEMPLATE_IMAGE.hv] "
                    f"[PROJECTOR.par]; cannot place {r!r}"
                )
            template = r
    return template, par


def run_back(args) -> int:
    from ..distributed import world
    from ..formats import VoxelsOnCartesianGrid, read_from_file, read_image, write_image
    from ..kernels.joseph.lors import stir_default_image_info
    from ..projectors import BackProjector

    comm = world()  # under mpirun every rank back projects its share; rank 0 writes the sum
    with comm.together("checking the arguments and inputs"):
        template, par = _split_rest(args.rest)
        changes, kw = _projector_settings(par, "back")
        inputs = (reads("PROJDATA", args.projdata),) + _par_role(par)
        inputs += (reads("TEMPLATE_IMAGE", template),) if template is not None else ()
        names = output_files(args.output, IMAGE, args.overwrite, inputs=inputs)
        timeline = timeline_path(args.timeline, args.overwrite, inputs)
        data = read_from_file(args.projdata, allow_template=False)
    with data:
        with comm.together("checking the arguments and inputs"):
            pdi = data.get_proj_data_info()
            k, n = subset_of(args.subset, pdi)
            # without a template, STIR's back_project uses its default image: to the last bit
            info = read_image(template).info if template is not None else stir_default_image_info(pdi)
        with scoped_config(**_config_changes(args, changes)):
            bp = BackProjector(max_segment_num_to_process=args.max_segment, comm=comm, **kw)
            with comm.together("setting up the projector"):
                set_up_projector(bp, pdi, info, args.projdata)
            values = bp.back_project(None, data, subset_num=k, num_subsets=n)
    with comm.together(f"writing {names.header}"):
        if comm.is_root:
            write_image(names.header, VoxelsOnCartesianGrid(info, fill=values), overwrite=args.overwrite)
    if comm.is_root:
        _report(args, bp, timeline)
        say_written(args.output, names)
        print(wrote_interfile(names.header) + _on_ranks(comm) + _image_sum(comm))
    return 0
