"""``stirgpu kosmaposl FILE.par``: KOSMAPOSL (STIR's kernelised EM) from a STIR KOSMAPOSL parameter
file (like STIR's ``KOSMAPOSL FILE.par``), writing the same files: the kernel coefficients
``<output filename prefix>_<n>.hv`` (unless output is disabled), the emission images
``<kernelised output filename prefix>_<n>.hv`` and, when asked for, the (subset) sensitivities.
Options, checks and output lines are ``stirgpu osmaposl``'s (:mod:`.osmaposl`)."""

from __future__ import annotations

import argparse

from .osmaposl import reconstruct
from .osmaposl import register as register_osmaposl
from .written import shown

__all__ = ["register", "run"]

DESCRIPTION = """\
KOSMAPOSL reconstruction (kernelised EM, the hybrid kernel method) from a STIR KOSMAPOSL
parameter file ('KOSMAPOSLParameters :='), like STIR's 'KOSMAPOSL FILE.par', writing the
same files: the kernel coefficients <output filename prefix>_<n>.hv (unless 'disable output
:= 1'), the emission images <kernelised output filename prefix>_<n>.hv (always, as STIR)
and, when asked for, the (subset) sensitivities.

Relative file names in FILE.par are taken from the working directory, as STIR does.
Everything is checked before any work starts (the anatomical images too); a bad file stops
with one line naming the file, the line and the key."""

EPILOG = """\
examples:
  stirgpu kosmaposl hkem.par
  stirgpu kosmaposl hkem.par --backend cpu --overwrite"""


def register(subparsers) -> None:
    register_osmaposl(
        subparsers,
        name="kosmaposl",
        help="kernelised EM (hybrid kernel method) from a STIR KOSMAPOSL .par file",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        run_function=run,
    )


def run(args) -> int:
    from ..recon import KOSMAPOSL
    from ..recon.kosmaposl_run import prepare_kosmaposl

    prepared_runs = []

    def prepare(par, overwrite):
        prepared = prepare_kosmaposl(par, overwrite=overwrite)
        prepared_runs.append(prepared)
        return prepared

    code = reconstruct(args, prepare, "KOSMAPOSL")
    run = prepared_runs[0].osem if prepared_runs else None
    if isinstance(run, KOSMAPOSL) and run.kernelised_files and run.comm.is_root:
        print("emission images: " + ", ".join(str(shown(f)) for f in run.kernelised_files))
    return code
