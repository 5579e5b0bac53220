"""OSEM from a STIR OSMAPOSL parameter file, as ``OSMAPOSL osem.par`` (or ``stirgpu osmaposl``).

Writes simulated data as Interfile (prompts, STIR additive sinogram, correction factors)
and an OSMAPOSL ``.par`` (``stirgpu.parfile.osmaposl_par``; printed, to show what such a file
holds) into a folder, then runs it with ``stirgpu.recon.run_osmaposl``:
every check happens before any work, and the outputs are STIR's (``osem_N.hv``,
``sens_K.hv``).  Then it restarts from a saved estimate, as a STIR user would with
``initial estimate`` and ``start at subiteration number``.

Run: ``python examples/03_osmaposl_par_file.py [--output DIR] [--backend cpu|cuda]``.
"""

import argparse
import tempfile
from pathlib import Path

import stirgpu
from stirgpu.formats import ProjDataOnDisk, read_image
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import run_osmaposl
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate


def par(last: int, restart_from: str | None = None) -> str:
    """The OSMAPOSL file: 6 subsets, estimates saved every 6 subiterations up to ``last``, the
    sensitivities written as sens_0.hv ... sens_5.hv; ``restart_from``: continue from that
    estimate at subiteration 13.  ``osmaposl_par`` writes it in STIR's syntax, only the keys
    given here (every other key keeps STIR's default)."""
    return osmaposl_par(
        "prompts.hs",
        normalisation="acf.hs",
        additive_sinogram="additive.hs",
        subset_sensitivity_filenames="sens_%d.hv",
        output_filename_prefix="osem",
        num_subsets=6,
        num_subiterations=last,
        save_interval=6,
        initial_estimate=restart_from,
        start_subiteration_num=None if restart_from is None else 13,
    )


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--output", default=None, help="folder (default: a temporary one)")
parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
args = parser.parse_args()
folder = Path(args.output or tempfile.mkdtemp(prefix="stirgpu-example-"))
folder.mkdir(parents=True, exist_ok=True)

with stirgpu.config(backend=args.backend):
    pdi, image_info = demo_geometry(num_views=48, num_tangential_poss=96)
    phantom = demo_phantom(image_info)
    sim = simulate(
        ProjectorPair(), pdi, image_info, phantom.activity(image_info), phantom.mu_map(image_info), counts=5e6, seed=3
    )
    for name, data in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        ProjDataOnDisk.create(folder / f"{name}.hs", pdi, fill=data, overwrite=True).close()
    (folder / "osem.par").write_text(par(last=12))
    print("osem.par, as STIR's OSMAPOSL reads it:\n" + (folder / "osem.par").read_text())

    # relative names in the .par are taken from base_dir (STIR: the working directory)
    result = run_osmaposl(folder / "osem.par", base_dir=folder)
    print("estimates:", [p.name for p in result.saved], " sensitivities:", [p.name for p in result.sensitivity_files])

    # restart: 6 more subiterations from osem_12.hv
    (folder / "more.par").write_text(par(last=18, restart_from="osem_12.hv"))
    more = run_osmaposl(folder / "more.par", base_dir=folder)
    print("after the restart:", [p.name for p in more.saved])

x = read_image(folder / "osem_18.hv").array
print(
    f"osem_18.hv: max {x.max():.4g}, mean in the cylinder {x[phantom.cylinder_mask(image_info)].mean():.4g} "
    f"(truth {sim.truth[phantom.cylinder_mask(image_info)].mean():.4g})"
)
print(f"files in {folder}")
