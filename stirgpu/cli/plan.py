"""``stirgpu plan PROJDATA.hs [IMAGE.hv] [--backend] [--devices] [--memory-budget] [--subsets N]``:
print the chunk plans and the memory the projector would use, without projecting anything.

For the projection data's geometry (and the image's, or STIR's default image) it shows
the plan of each operation OSEM runs -- forward projection, back projection, the
subset sensitivity ``B(1/f)`` and the fused ratio step ``B(y / ((A x)/f + b) / f)`` --
for one subset of ``--subsets``: chunks per segment, views per chunk, buffer sizes, and
host and GPU memory against their budgets.  Nothing is read but the headers.
"""

from __future__ import annotations

from ..config import config as scoped_config
from ..config import get_config
from ..execution.plan import plural
from .checks import positive_int, set_up_projector
from .options import add_backend_option, add_devices_option, add_memory_budget_option, execution_config

__all__ = ["register", "run", "plans_for", "LEGEND"]


DESCRIPTION = """\
Show how stirgpu would cut projection data into chunks, and how much memory it would
use on this machine, without projecting anything (only the headers are read).

A chunk is a block of viewgrams (one segment, one view: all axial and tangential
positions) that is read, uploaded, projected and written back in one go; each GPU or
CPU worker keeps a few chunks in flight, so reading the next one overlaps projecting
this one.  For each operation OSEM runs -- forward projection, back projection, the
subset sensitivity B(1/f) and the fused OSEM step B(y / ((A x)/f + a) / f) -- it prints
the plan for subset 0 of --subsets."""

#: what the table's columns and the lines under it mean (printed by ``stirgpu plan``)
LEGEND = """\
columns: segment; axial positions in it; views of the subset in it; chunks holding some of
them (a chunk may hold viewgrams of several segments); the most views of the segment in
one chunk.  Memory: per GPU or CPU worker, 'slots' are the chunks in flight, each with
one buffer per projection-data input and output (plus scratch on a GPU)."""

EPILOG = (
    LEGEND
    + """

examples:
  stirgpu plan prompts.hs
  stirgpu plan prompts.hs image.hv --subsets 21 --memory-budget 2G
  stirgpu plan prompts.hs --backend cpu --devices 0,1,2,3"""
)


def register(subparsers) -> None:
    import argparse

    p = subparsers.add_parser(
        "plan",
        help="show the chunk plan and memory use for projection data",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("projdata", metavar="DATA.hs", help="projection data header (a template without data is enough)")
    p.add_argument(
        "image",
        nargs="?",
        default=None,
        metavar="IMAGE.hv",
        help="image header (default: STIR's default image for the data)",
    )
    add_backend_option(p, "plan for")
    add_devices_option(p)
    add_memory_budget_option(p)
    p.add_argument(
        "--subsets",
        type=int,
        default=1,
        metavar="N",
        help="plan subset 0 of N subsets (STIR's subsets: views v with v %% N == 0); default 1: all views",
    )
    p.add_argument(
        "--max-views-per-chunk", type=positive_int, default=None, metavar="N", help="at most N viewgrams in one chunk"
    )
    p.set_defaults(run=run)


def plans_for(proj_data_info, image_info, num_subsets: int = 1) -> tuple[str, str, list]:
    """``(backend, lanes text, [(operation, Plan), ...])`` for the scoped configuration."""
    from ..errors import StirGpuError
    from ..execution import Engine, resolve_backend, resolve_devices
    from ..execution.plan import default_host_budget
    from ..kernels import kernel_geometry
    from ..projectors.programs import BackProgram, ForwardProgram, PoissonRatioProgram, SensitivityProgram

    if num_subsets < 1 or num_subsets > proj_data_info.get_num_views():
        raise StirGpuError(
            f"--subsets {num_subsets}: must be between 1 and the number of views ({proj_data_info.get_num_views()})"
        )
    cfg = get_config()
    backend = resolve_backend(cfg.backend)
    devices = resolve_devices(backend, cfg.devices)
    engine = Engine(backend, devices)
    geo = kernel_geometry(image_info, proj_data_info)
    views = proj_data_info.subset_views(0, num_subsets)
    host_budget = cfg.host_memory_budget if cfg.host_memory_budget is not None else default_host_budget()
    programs = [
        ("forward projection", ForwardProgram(geo)),
        ("back projection", BackProgram(geo)),
        ("sensitivity B(1/f)", SensitivityProgram(geo, True)),
        ("OSEM ratio step (y, b, f)", PoissonRatioProgram(geo, True, True, False)),
    ]
    out = []
    for name, prog in programs:
        plan = engine.make_plan(
            prog,
            proj_data_info,
            proj_data_info.segment_nums,
            views,
            image_info.shape,
            host_budget=host_budget,
            gpu_budget=cfg.gpu_memory_budget,
            max_views_per_chunk=cfg.max_views_per_chunk,
        )
        out.append((name, plan))
    lanes = ", ".join(f"GPU {d}" for d in devices) if backend == "cuda" else plural(len(devices), "CPU worker")
    return backend, lanes, out


def run(args) -> int:
    from ..execution.plan import format_bytes
    from ..formats import read_image, read_projdata_header
    from ..geometry import ImageInfo

    pdi = read_projdata_header(args.projdata).proj_data_info
    info = read_image(args.image).info if args.image else ImageInfo.default_for(pdi)
    changes = execution_config(args)
    if args.max_views_per_chunk is not None:
        changes["max_views_per_chunk"] = args.max_views_per_chunk
    with scoped_config(**changes):
        from ..projectors import ProjectorPair

        # data the projectors cannot take are an error, not a plan
        set_up_projector(ProjectorPair(), pdi, info, args.projdata)
        backend, lanes, plans = plans_for(pdi, info, args.subsets)
    print(
        f"projection data: {args.projdata}: {pdi.get_scanner().name}, segments "
        f"{pdi.get_min_segment_num()}..{pdi.get_max_segment_num()}, {pdi.get_num_views()} views, "
        f"{pdi.get_num_tangential_poss()} tangential positions, {pdi.total_num_bins} bins "
        f"({format_bytes(4 * pdi.total_num_bins)} as float32)"
        + (
            f", {pdi.get_num_tof_poss()} TOF timing positions of {pdi.get_sampling_in_k(0):.6g} mm"
            if pdi.is_tof_data()
            else ""
        )
    )
    print(
        f"image: {info.shape} (z, y, x), voxels {tuple(round(v, 4) for v in info.voxel_size)} mm, "
        f"{format_bytes(info.nbytes_float32)}"
    )
    print(
        f"backend: {backend} ({lanes}); "
        + (
            "all views"
            if args.subsets == 1
            else f"subset 0 of {args.subsets} ({len(pdi.subset_views(0, args.subsets))} of {pdi.get_num_views()} views)"
        )
    )
    for name, plan in plans:
        print(f"\n== {name} ==")
        print(plan)
    print("\n" + LEGEND)
    return 0
