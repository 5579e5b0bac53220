"""``stirgpu demo [--output DIR] [--backend ...]``: simulate a small PET scan and reconstruct it.

1. a STIR scanner (ECAT 953, span 3) and a phantom: a water cylinder with two hot
   spheres (4:1, 3:1) and a cold one;
2. simulated data: forward projection of the phantom, attenuation correction factors
   (``f = exp(line integral of mu)``, STIR's ``Bin Normalisation From ProjData``), a
   flat background (STIR's ``additive sinogram``), Poisson noise with a fixed seed;
3. everything written as Interfile (``.hs``/``.s``, ``.hv``/``.v``) with an OSMAPOSL
   parameter file that STIR's ``OSMAPOSL`` runs unchanged;
4. OSEM from that parameter file (``stirgpu osmaposl``), then a PNG of central slices
   (truth vs reconstruction), a PNG timeline of one OSEM subiteration's pipeline, and a
   summary of where everything went.

It uses the GPU when there is one (``--backend cpu`` to force the CPU).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..config import config
from .osmaposl import add_execution_options, config_changes

__all__ = ["register", "run", "DemoSettings", "write_demo_inputs", "OSMAPOSL_PAR"]

#: the OSMAPOSL parameter file the demo writes (STIR syntax; relative names)
OSMAPOSL_PAR = """\
OSMAPOSLParameters :=
; written by 'stirgpu demo': run it with STIR's OSMAPOSL or with 'stirgpu osmaposl', in this folder
objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData
PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
  input file := prompts.hs
  zero end planes of segment 0 := 0
  projector pair type := Parallelproj
    Projector Pair Using Parallelproj Parameters :=
    End Projector Pair Using Parallelproj Parameters :=
  Bin Normalisation type := From ProjData
    Bin Normalisation From ProjData :=
      normalisation projdata filename := acf.hs
    End Bin Normalisation From ProjData :=
  additive sinogram := additive.hs
  use subset sensitivities := 1
  subset sensitivity filenames := sens_%d.hv
  recompute sensitivity := 1
End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
output filename prefix := osem
number of subsets := {subsets}
number of subiterations := {subiterations}
save estimates at subiteration intervals := {save}
END :=
"""


#: inputs the demo writes (outputs of the reconstruction are replaced like STIR's)
DEMO_FILES = ("prompts.hs", "prompts.s", "additive.hs", "additive.s", "acf.hs", "acf.s", "truth.hv", "truth.v",
              "osem.par")


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


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="simulate a small scan, reconstruct it with OSEM, draw the results",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--output", default="stirgpu-demo", metavar="DIR",
                   help="folder for all files (created; default ./stirgpu-demo)")
    p.add_argument("--overwrite", action="store_true", help="replace files of an earlier demo in DIR")
    add_execution_options(p)
    p.set_defaults(run=run)


def write_demo_inputs(out: Path, projector, s=DemoSettings, overwrite: bool = False) -> dict:
    """Simulate the data (see the module docstring) and write inputs + ``osem.par`` into ``out``."""
    from ..formats import ProjDataOnDisk, VoxelsOnCartesianGrid, write_image
    from ..recon.simulate import demo_geometry, demo_phantom, simulate
    pdi, info = demo_geometry(s.scanner, s.span, s.max_ring_difference, s.num_views, s.num_tangential_poss)
    phantom = demo_phantom(info)
    sim = simulate(projector, pdi, info, phantom.activity(info), phantom.mu_map(info), counts=s.counts,
                   background_fraction=s.background_fraction, seed=s.seed)
    files = {}
    for name, data in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        path = out / f"{name}.hs"
        store = ProjDataOnDisk.create(path, pdi, overwrite=overwrite, fill=data)
        store.close()
        files[name] = path
    files["truth"] = out / "truth.hv"
    write_image(files["truth"], VoxelsOnCartesianGrid(info, fill=sim.truth), overwrite=overwrite)
    par = out / "osem.par"
    par.write_text(OSMAPOSL_PAR.format(subsets=s.subsets, subiterations=s.subiterations, save=s.save))
    files["par"] = par
    return {"files": files, "sim": sim, "phantom": phantom, "pdi": pdi, "info": info}


def _central_slices(image: np.ndarray) -> list[np.ndarray]:
    nz, ny, nx = image.shape
    return [image[nz // 2], image[:, ny // 2, :], image[:, :, nx // 2]]


def draw_slices(path: Path, truth: np.ndarray, recon: np.ndarray, info, title: str) -> None:
    """Transverse, coronal and sagittal central slices: truth (top) and reconstruction (bottom)."""
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    vz, vy, vx = info.voxel_size
    vmax = float(max(truth.max(), np.percentile(recon, 99.9)))
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.2), gridspec_kw={"width_ratios": [1, 1.6, 1.6]})
    try:
        for row, (img, label) in enumerate(((truth, "truth"), (recon, "OSEM"))):
            for col, (sl, name, aspect) in enumerate(zip(_central_slices(img), ("transverse", "coronal", "sagittal"),
                                                         (vy / vx, vz / vx, vz / vy))):
                ax = axes[row, col]
                im = ax.imshow(sl, cmap="gray_r", vmin=0, vmax=vmax, aspect=aspect, interpolation="nearest")
                ax.set_title(f"{label}: {name}")
                ax.set_xticks([])
                ax.set_yticks([])
        fig.colorbar(im, ax=axes, shrink=0.8, label="image value (reconstruction units)")
        fig.suptitle(title)
        fig.savefig(os.fspath(path), dpi=100)
    finally:
        plt.close(fig)


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
        lines.append(f"sphere {i} (radius {sph.radius:.1f} mm): contrast truth {truth[m].mean() / b_true:.2f}, "
                     f"OSEM {recon[m].mean() / b_rec:.2f}")
    return lines


def run(args) -> int:
    from ..formats import read_image
    from ..projectors import ProjectorPair
    from ..recon.run import prepare_osmaposl
    from .timeline import render_timeline
    t_start = time.perf_counter()
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    s = DemoSettings
    earlier = [n for n in DEMO_FILES if (out / n).exists()]
    if earlier and not args.overwrite:
        from ..errors import StirGpuError
        raise StirGpuError(f"{out} already holds files of a demo ({', '.join(earlier[:3])}"
                           f"{', ...' if len(earlier) > 3 else ''}); use --overwrite to replace them")
    with config(**config_changes(args)):
        projector = ProjectorPair()
        t0 = time.perf_counter()
        made = write_demo_inputs(out, projector, s, overwrite=args.overwrite)
        t_sim = time.perf_counter() - t0
        print(f"simulated {made['sim'].total_counts:.3g} counts on {s.scanner} (span {s.span}, "
              f"{made['pdi'].total_num_bins} bins) in {t_sim:.1f} s, backend {projector.backend}")
        stats = {}

        def keep_stats(rec, _image) -> None:
            stats["last"] = rec.stats
            print(f"  subiteration {rec.subiteration:3d} (subset {rec.subset}): {rec.seconds:.2f} s"
                  + (f" -> {rec.saved.name}" if rec.saved else ""))

        t0 = time.perf_counter()
        # relative names in osem.par are relative to its folder (run it there with STIR too)
        with prepare_osmaposl(made["files"]["par"], projector=projector, base_dir=out) as prepared:
            result = prepared.run(callback=keep_stats)
        t_rec = time.perf_counter() - t0
    recon = read_image(result.saved[-1]).array
    truth = made["sim"].truth
    slices = out / "slices.png"
    draw_slices(slices, truth, recon, made["info"],
                f"{s.scanner}: truth vs OSEM ({s.subsets} subsets, {s.subiterations} subiterations)")
    timeline = out / "timeline.png"
    if stats.get("last") is not None and stats["last"].events:
        render_timeline(stats["last"], timeline, title=f"one OSEM subiteration on {projector.backend}: "
                        f"{stats['last'].chunks} chunks, wall {stats['last'].wall_seconds:.3f} s")
    else:
        timeline = None
    print(f"reconstructed in {t_rec:.1f} s (sensitivities {result.setup_seconds:.1f} s)")
    for line in contrast_report(made["phantom"], made["info"], truth, recon):
        print("  " + line)
    print(f"\nfiles in {out}/:")
    f = made["files"]
    print(f"  inputs:          {f['prompts'].name} (prompts), {f['additive'].name} (STIR additive sinogram), "
          f"{f['acf'].name} (correction factors), {f['truth'].name} (true activity)")
    print(f"  parameter file:  {f['par'].name}  (cd {out} && OSMAPOSL osem.par  -- or stirgpu osmaposl osem.par)")
    print(f"  estimates:       {', '.join(p.name for p in result.saved)}")
    print(f"  sensitivities:   {', '.join(p.name for p in result.sensitivity_files)}")
    print(f"  pictures:        {slices.name}" + (f", {timeline.name}" if timeline else ""))
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0
