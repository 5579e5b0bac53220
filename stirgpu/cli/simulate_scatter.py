"""``stirgpu simulate-scatter FILE.par``: STIR's single scatter simulation from STIR's
``simulate_scatter`` parameter file, writing the same ``<output filename prefix>.hs`` / ``.s``
(:mod:`stirgpu.scatter.from_parameters`)."""

from __future__ import annotations

import argparse

__all__ = ["register", "run"]

DESCRIPTION = """\
STIR's single scatter simulation (Watson's SSS as STIR's simulate_scatter computes it) from
STIR's parameter file ('Scatter Simulation Parameters :=' with 'Scatter Simulation type :=
PET Single Scatter Simulation'), writing <output filename prefix>.hs/.s with the template's
geometry, STIR's numbers (docs/scatter.md).

Relative file names in FILE.par are taken from the working directory, as STIR does.  With
'downsample scanner := 1' the output has STIR's downsampled template (2 cm rings, 64
detectors per ring unless the file says otherwise).  Every key of STIR's is read; a bad value
or an unknown key stops the run with one line naming the file and line.  Scatter points are
placed at random in their voxels unless 'randomly place scatter points := 0' (STIR's default;
STIR seeds with the time, stirgpu with --seed or fresh entropy)."""

EPILOG = """\
examples:
  stirgpu simulate-scatter scatter_simulation.par
  stirgpu simulate-scatter scatter_simulation.par --seed 1 --overwrite"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate-scatter",
        help="STIR's single scatter simulation from a simulate_scatter .par file",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("parfile", metavar="FILE.par", help="STIR's scatter simulation parameter file")
    p.add_argument("--seed", type=int, default=None, help="seed of the random placement of scatter points")
    p.add_argument("--overwrite", action="store_true", help="replace existing output files")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..parfile.scatter import read_scatter_par
    from ..scatter.from_parameters import simulate_from_parameters

    result = simulate_from_parameters(read_scatter_par(args.parfile), seed=args.seed, overwrite=args.overwrite)
    print(f"{result.num_scatter_points} scatter points; total scatter {result.total:.7g}; wrote {result.output}")
    if result.scatter_point_image is not None:
        print(f"scatter-point image: {result.scatter_point_image}")
    return 0
