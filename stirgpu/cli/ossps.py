"""``stirgpu ossps FILE.par``: OSSPS from a STIR OSSPS parameter file (like STIR's
``OSSPS FILE.par``), writing the same files: ``<output filename prefix>_<n>.hv``, the computed
``<output filename prefix>_precomputed_denominator.hv`` and, when asked for, the (subset)
sensitivities.  Options, checks and output lines are ``stirgpu osmaposl``'s
(:mod:`.osmaposl`)."""

from __future__ import annotations

import argparse

from .osmaposl import reconstruct
from .osmaposl import register as register_osmaposl

__all__ = ["register", "run"]

DESCRIPTION = """\
OSSPS reconstruction (ordered-subsets separable paraboloidal surrogates) from a STIR
OSSPS parameter file ('OSSPSParameters :='), like STIR's 'OSSPS FILE.par', writing the
same files: the estimates <output filename prefix>_<n>.hv, the denominator it computes
(<output filename prefix>_precomputed_denominator.hv, unless 'precomputed denominator'
names a file or is 1) and, when asked for, the (subset) sensitivities.

Relative file names in FILE.par are taken from the working directory, as STIR does.
Everything is checked before any work starts; a bad file stops with one line naming
the file, the line and the key.  Priors: Quadratic and Logcosh (STIR's OSSPS takes
priors with a parabolic surrogate).  Every file the run writes is checked first, as by 'stirgpu
osmaposl': none may be a file it reads, and none may exist unless --overwrite is given."""

EPILOG = """\
examples:
  stirgpu ossps ossps.par
  stirgpu ossps ossps.par --backend cpu --stats
  stirgpu ossps ossps.par --overwrite                  # replace an earlier run's files"""


def register(subparsers) -> None:
    register_osmaposl(
        subparsers,
        name="ossps",
        help="OSSPS reconstruction from a STIR OSSPS .par file",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        run_function=run,
    )


def run(args) -> int:
    from ..recon.ossps_run import prepare_ossps

    return reconstruct(args, prepare_ossps, "OSSPS")
