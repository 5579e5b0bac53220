"""``stirgpu demo [--output DIR] [--backend ...]``: simulate a small PET scan and reconstruct it.

1. a STIR scanner (ECAT 953, span 3) and a phantom: a water cylinder with two hot
   spheres (4:1, 3:1) and a cold one;
2. simulated data: forward projection of the phantom, attenuation correction factors
   (``f = exp(line integral of mu)``, STIR's ``Bin Normalisation From ProjData``), a
   flat background ``b`` in measured units, written as STIR's ``additive sinogram``
   ``a = b f`` (normalised units: mean data = (A x + a) / f), Poisson noise with a fixed seed;
3. everything written as Interfile (``.hs``/``.s``, ``.hv``/``.v``) with an OSMAPOSL
   parameter file that STIR's ``OSMAPOSL`` runs unchanged;
4. OSEM from that parameter file (``stirgpu osmaposl``), then ``slices.png``
   (:func:`slices_figure`: central slices of phantom, reconstruction and their difference in
   STIR's mm coordinates, and line profiles), ``timeline.png`` (the last subiteration's
   pipeline) and a summary of where everything went.

It uses the GPU when there is one (``--backend cpu`` to force the CPU).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..config import config
from ..errors import StirGpuError
from .checks import check_folder
from .options import add_execution_options, config_changes
from .progress import say_function
from .written import wrote_folder

__all__ = [
    "register",
    "run",
    "DemoSettings",
    "write_demo_inputs",
    "demo_par",
    "slices_figure",
    "draw_slices",
    "voxel_centres_mm",
    "ACTIVITY_CMAP",
]

#: inputs the demo writes (outputs of the reconstruction are replaced like STIR's)
DEMO_FILES = (
    "prompts.hs",
    "prompts.s",
    "additive.hs",
    "additive.s",
    "acf.hs",
    "acf.s",
    "truth.hv",
    "truth.v",
    "osem.par",
)


class DemoSettings:
    """Sizes of the demo (the defaults run in well under a minute on two CPU cores)."""

    scanner = "ECAT 953"
    span = 3
    max_ring_difference = 4
    num_views = 96
    num_tangential_poss = 128
    counts = 2e7
    background_fraction = 0.25
    seed = 20240229
    subsets = 8
    subiterations = 24
    save = 8


DESCRIPTION = """\
Simulate a small PET scan and reconstruct it, to see stirgpu work end to end:

  1. a STIR scanner (ECAT 953, span 3) and a phantom: a water cylinder with two hot
     spheres (4:1, 3:1) and a cold one;
  2. simulated data: forward projection, attenuation correction factors, a flat
     background b (written as STIR's additive sinogram a = b f) and Poisson noise (fixed seed);
  3. all written as Interfile into DIR with an OSMAPOSL parameter file, osem.par,
     that STIR's OSMAPOSL runs unchanged;
  4. OSEM from osem.par, then pictures: slices.png (phantom, reconstruction, their
     difference, line profiles) and timeline.png (the pipeline of one subiteration).

It uses the GPU when there is one; the last line names the folder and its files."""

EPILOG = """\
examples:
  stirgpu demo
  stirgpu demo --output /tmp/demo --backend cpu
  cd stirgpu-demo && OSMAPOSL osem.par        # the same reconstruction with STIR"""


def register(subparsers) -> None:
    import argparse

    p = subparsers.add_parser(
        "demo",
        help="simulate a small scan, reconstruct it with OSEM, draw the results",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--output",
        default="stirgpu-demo",
        metavar="DIR",
        help="folder for all files (created if needed; default ./stirgpu-demo)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the files of an earlier demo in DIR")
    add_execution_options(p, "simulate and reconstruct")
    p.set_defaults(run=run)


def demo_par(s=DemoSettings) -> str:
    """The OSMAPOSL parameter file the demo writes (STIR's syntax; names relative to its folder)."""
    from ..parfile import osmaposl_par

    return osmaposl_par(
        "prompts.hs",
        comment="written by 'stirgpu demo': run it with STIR's OSMAPOSL or with 'stirgpu osmaposl', in this folder",
        zero_end_planes_of_segment_0=False,
        normalisation="acf.hs",
        additive_sinogram="additive.hs",
        subset_sensitivity_filenames="sens_%d.hv",
        output_filename_prefix="osem",
        num_subsets=s.subsets,
        num_subiterations=s.subiterations,
        save_interval=s.save,
    )


def write_demo_inputs(out: Path, projector, s=DemoSettings, overwrite: bool = False) -> dict:
    """Simulate the data (see the module docstring) and write inputs + ``osem.par`` into ``out``."""
    from ..formats import ProjDataOnDisk, VoxelsOnCartesianGrid, write_image
    from ..recon.simulate import demo_geometry, demo_phantom, simulate

    pdi, info = demo_geometry(s.scanner, s.span, s.max_ring_difference, s.num_views, s.num_tangential_poss)
    phantom = demo_phantom(info)
    sim = simulate(
        projector,
        pdi,
        info,
        phantom.activity(info),
        phantom.mu_map(info),
        counts=s.counts,
        background_fraction=s.background_fraction,
        seed=s.seed,
    )
    files = {}
    for name, data in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        path = out / f"{name}.hs"
        store = ProjDataOnDisk.create(path, pdi, overwrite=overwrite, fill=data)
        store.close()
        files[name] = path
    files["truth"] = out / "truth.hv"
    write_image(files["truth"], VoxelsOnCartesianGrid(info, fill=sim.truth), overwrite=overwrite)
    par = out / "osem.par"
    par.write_text(demo_par(s), encoding="utf-8", errors="surrogateescape")
    files["par"] = par
    return {"files": files, "sim": sim, "phantom": phantom, "pdi": pdi, "info": info}


#: PET images are read on a "hot iron"-like scale: black for no activity through red and
#: yellow to white for the most.  inferno is that scale made perceptually uniform (its
#: lightness rises steadily, so equal steps in activity look equal, it stays readable in grey
#: print and for colour-blind readers), whereas matplotlib's "hot" climbs in three flat
#: ramps and saturates to white over the top ~third, hiding the differences between the hot
#: spheres this demo is about.
ACTIVITY_CMAP = "inferno"
#: differences: a diverging map, white at 0, red where the reconstruction is above the phantom
DIFFERENCE_CMAP = "RdBu_r"


def voxel_centres_mm(info, axis: int) -> np.ndarray:
    """STIR's image coordinates (mm) of the voxel centres along ``axis`` (0 z, 1 y, 2 x):
    origin + voxel size x index, the index running from STIR's min index."""
    return info.first_pixel_offset[axis] + info.voxel_size[axis] * np.arange(info.shape[axis])


def _extent(info, horizontal: int, vertical: int) -> tuple[float, float, float, float]:
    h, v = voxel_centres_mm(info, horizontal), voxel_centres_mm(info, vertical)
    dh, dv = info.voxel_size[horizontal] / 2, info.voxel_size[vertical] / 2
    return h[0] - dh, h[-1] + dh, v[-1] + dv, v[0] - dv  # first row on top (STIR's y points down)


_AXIS = ("z", "y", "x")
#: (name, the fixed axis, horizontal axis, vertical axis) of the three central slices
_SLICES = (("transverse", 0, 2, 1), ("coronal", 1, 2, 0), ("sagittal", 2, 1, 0))


def _slice(image: np.ndarray, fixed: int, index: int) -> np.ndarray:
    return np.take(image, index, axis=fixed)


def slices_figure(truth: np.ndarray, recon: np.ndarray, info, title: str, recon_label: str = "OSEM"):
    """The demo's picture as a matplotlib Figure (no pyplot state).

    Columns: phantom, reconstruction, reconstruction minus phantom; rows: the central
    transverse, coronal and sagittal slices (mm axes in STIR's image coordinates, the slice
    position in each title); the bottom row: line profiles of phantom and reconstruction
    along x and along y through the image centre (dashed on the transverse slices).  Phantom
    and reconstruction share one activity scale, each with its colour bar; the difference has
    a symmetric scale of its own.
    """
    from matplotlib.figure import Figure

    centre = tuple(n // 2 for n in info.shape)
    # slice positions to 0.1 mm; "+ 0.0" makes a header's -1e-6 read 0.0, not -0.0
    pos = {a: round(float(voxel_centres_mm(info, a)[centre[a]]), 1) + 0.0 for a in range(3)}
    lengths = [info.shape[a] * info.voxel_size[a] for a in range(3)]
    diff = recon.astype(np.float64) - truth
    vmax = float(max(truth.max(), np.percentile(recon, 99.9)))
    dmax = float(np.percentile(np.abs(diff), 99.9)) or 1.0
    heights = [lengths[1], lengths[0], lengths[0]]
    fig = Figure(figsize=(13, 11), layout="constrained")
    gs = fig.add_gridspec(4, 3, height_ratios=heights + [0.6 * lengths[1]])
    columns = (
        (truth, "phantom (truth)", ACTIVITY_CMAP, 0.0, vmax),
        (recon, recon_label, ACTIVITY_CMAP, 0.0, vmax),
        (diff, f"{recon_label} \u2212 phantom", DIFFERENCE_CMAP, -dmax, dmax),
    )
    for col, (img, label, cmap, lo, hi) in enumerate(columns):
        axes = []
        for row, (name, fixed, h, v) in enumerate(_SLICES):
            ax = fig.add_subplot(gs[row, col])
            im = ax.imshow(
                _slice(img, fixed, centre[fixed]),
                cmap=cmap,
                vmin=lo,
                vmax=hi,
                interpolation="nearest",
                extent=_extent(info, h, v),
                aspect="equal",
            )
            where = f"{name}, {_AXIS[fixed]} = {pos[fixed]:.1f} mm"
            ax.set_title(f"{label}\n{where}" if row == 0 else where, fontsize="medium")
            ax.set_xlabel(f"{_AXIS[h]} (mm)")
            ax.set_ylabel(f"{_AXIS[v]} (mm)")
            if name == "transverse":
                ax.axhline(pos[1], color="cyan", linestyle="--", linewidth=0.7)
                ax.axvline(pos[2], color="cyan", linestyle=":", linewidth=0.7)
            axes.append(ax)
        fig.colorbar(
            im,
            ax=axes,
            location="bottom",
            shrink=0.85,
            aspect=30,
            label="difference (reconstruction units)" if col == 2 else "activity (reconstruction units)",
        )
    sub = gs[3, :].subgridspec(1, 2)
    for k, (along, fixed_name) in enumerate(((2, "y"), (1, "x"))):
        ax = fig.add_subplot(sub[0, k])
        line = [centre[0], centre[1], centre[2]]
        line[along] = slice(None)
        mm = voxel_centres_mm(info, along)
        ax.step(mm, truth[tuple(line)], where="mid", color="black", linewidth=1.0, label="phantom (truth)")
        ax.plot(mm, recon[tuple(line)], color="tab:orange", linewidth=1.4, label=recon_label)
        other = 1 if along == 2 else 2
        ax.set_title(
            f"profile along {_AXIS[along]} at {fixed_name} = {pos[other]:.1f} mm, z = {pos[0]:.1f} mm "
            f"({'dashed' if along == 2 else 'dotted'} line)",
            fontsize="medium",
        )
        ax.set_xlabel(f"{_AXIS[along]} (mm)")
        ax.set_ylabel("activity")
        ax.set_xlim(mm[0], mm[-1])
        ax.set_ylim(0, 1.3 * max(float(truth[tuple(line)].max()), float(recon[tuple(line)].max()), 1e-30))
        ax.grid(linewidth=0.4, alpha=0.5)
        ax.legend(fontsize="small", loc="upper center", ncols=2)  # in the headroom above the curves
    fig.suptitle(title)
    return fig


def draw_slices(path: Path, truth: np.ndarray, recon: np.ndarray, info, title: str, recon_label: str = "OSEM") -> None:
    """Write :func:`slices_figure` to ``path`` (PNG)."""
    slices_figure(truth, recon, info, title, recon_label).savefig(os.fspath(path), dpi=110)


def contrast_report(phantom, info, truth: np.ndarray, recon: np.ndarray) -> list[str]:
    """Mean of each sphere relative to the background, truth vs reconstruction."""
    bg = phantom.cylinder_mask(info).copy()
    for i in range(len(phantom.spheres)):
        bg &= ~phantom.sphere_mask(info, i)
    # stay away from the cylinder's ends and edge, where partial volume and noise dominate
    z = np.arange(info.shape[0])
    bg &= (np.abs(z - info.shape[0] // 2) <= info.shape[0] // 4)[:, None, None]
    lines = []
    b_true, b_rec = float(truth[bg].mean()), float(recon[bg].mean())
    for i, sph in enumerate(phantom.spheres):
        m = phantom.sphere_mask(info, i)
        lines.append(
            f"sphere {i} (radius {sph.radius:.1f} mm): contrast truth {truth[m].mean() / b_true:.2f}, "
            f"OSEM {recon[m].mean() / b_rec:.2f}"
        )
    return lines


def run(args) -> int:
    from ..distributed import world
    from ..formats import read_image
    from ..projectors import ProjectorPair
    from ..recon.run import prepare_osmaposl
    from .timeline import render_timeline

    comm = world()
    with comm.together("starting the demo"):  # (every rank refuses alike: one message)
        if comm.parallel:
            raise StirGpuError(
                f"the demo runs in one process, not on {comm.size} MPI ranks: run it without mpirun "
                "(mpirun -n N works for osmaposl, forward-project and back-project)"
            )
    t_start = time.perf_counter()
    out, earlier = _output_folder(Path(args.output), args.overwrite)
    s = DemoSettings
    changes = config_changes(args)
    say = say_function(changes["progress"])  # (lines printed while the OSEM bar is shown)
    with config(**changes):
        projector = ProjectorPair()
        t0 = time.perf_counter()
        try:
            made = write_demo_inputs(out, projector, s, overwrite=args.overwrite)
        except KeyboardInterrupt as exc:  # (each file written is complete: temporary name, then renamed)
            new = [n for n in DEMO_FILES if n not in earlier and (out / n).exists()]
            exc.add_note(
                f"stopped while simulating the data; new inputs in {out}: {', '.join(new) or 'none'}"
                + ("; the earlier demo's files may be partly replaced" if earlier else "")
            )
            raise
        t_sim = time.perf_counter() - t0
        print(
            f"simulated {made['sim'].total_counts:.3g} counts on {s.scanner} (span {s.span}, "
            f"{made['pdi'].total_num_bins} bins) in {t_sim:.1f} s, backend {projector.backend}"
        )
        last = {}

        def keep_stats(rec, _image) -> None:
            last["record"] = rec
            say(
                f"  subiteration {rec.subiteration:3d} (subset {rec.subset}): {rec.seconds:.2f} s"
                + (f" -> {rec.saved.name}" if rec.saved else "")
            )

        t0 = time.perf_counter()
        # relative names in osem.par are relative to its folder (run it there with STIR too)
        with prepare_osmaposl(made["files"]["par"], projector=projector, base_dir=out) as prepared:
            result = prepared.run(callback=keep_stats)
        t_rec = time.perf_counter() - t0
    recon = read_image(result.saved[-1]).array
    truth = made["sim"].truth
    slices = out / "slices.png"
    draw_slices(
        slices,
        truth,
        recon,
        made["info"],
        f"{s.scanner} (span {s.span}), {made['sim'].total_counts / 1e6:.1f} million counts: phantom and OSEM "
        f"({s.subsets} subsets, {s.subiterations} subiterations)",
        recon_label=f"OSEM, subiteration {s.subiterations}",
    )
    timeline: Path | None = None
    rec = last.get("record")
    if rec is not None and rec.stats is not None and rec.stats.events:
        timeline = out / "timeline.png"
        render_timeline(
            rec.stats,
            timeline,
            context=f"stirgpu demo: OSEM subiteration {rec.subiteration} (update of subset {rec.subset})",
        )
    print(f"reconstructed in {t_rec:.1f} s (sensitivities {result.setup_seconds:.1f} s)")
    for line in contrast_report(made["phantom"], made["info"], truth, recon):
        print("  " + line)
    pictures = [slices] + ([timeline] if timeline else [])
    _print_files(out, made["files"], result, pictures)
    print(f"total {time.perf_counter() - t_start:.1f} s")
    print(
        wrote_folder(
            out,
            {
                "input": [made["files"][k] for k in ("prompts", "additive", "acf", "truth", "par")],
                "estimate": result.saved,
                "sensitivity image": result.sensitivity_files,
                "picture": pictures,
            },
        )
    )
    return 0


def _output_folder(out: Path, overwrite: bool) -> tuple[Path, list[str]]:
    """The ``--output`` folder, made if need be, and the names of an earlier demo's files in it
    (refused without ``--overwrite``)."""
    if out.exists() and not out.is_dir():
        raise StirGpuError(f"--output {out}: is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    check_folder(out, f"--output {out}")
    earlier = [n for n in DEMO_FILES if (out / n).exists()]
    if earlier and not overwrite:
        raise StirGpuError(
            f"{out} already holds files of a demo ({', '.join(earlier[:3])}"
            f"{', ...' if len(earlier) > 3 else ''}); use --overwrite to replace them"
        )
    return out, earlier


def _print_files(out: Path, f: dict, result, pictures: list[Path]) -> None:
    """What the demo wrote, by role, and how to run its parameter file with STIR."""
    print(f"\nfiles in {out}/:")
    print(
        f"  inputs:          {f['prompts'].name} (prompts), {f['additive'].name} (STIR additive sinogram), "
        f"{f['acf'].name} (correction factors), {f['truth'].name} (true activity)"
    )
    print(
        f"  parameter file:  {f['par'].name}  (cd {out} && OSMAPOSL osem.par  -- or stirgpu osmaposl osem.par "
        "--overwrite)"
    )
    print(f"  estimates:       {', '.join(p.name for p in result.saved)}")
    print(f"  sensitivities:   {', '.join(p.name for p in result.sensitivity_files)}")
    print(f"  pictures:        {', '.join(p.name for p in pictures)}")
