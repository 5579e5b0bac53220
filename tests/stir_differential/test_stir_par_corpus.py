"""Every reconstruction ``.par`` of STIR's ``recon_test_pack/`` and ``examples/samples/`` through
``stirgpu osmaposl``: accepted and equal to STIR's ``OSMAPOSL`` (within 1e-4 of its maximum),
or refused with clear lines.

The STIR source tree is given by ``STIRGPU_STIR_SOURCE`` (the tests skip, saying so, where it is
unset).  Each file is read unchanged, its ``${VAR}``s set as STIR's ``run_*.sh`` scripts set them
(``run_test_simulate_and_recon.sh``: ``suffix`` empty; ``num_subsets`` 4 where the script's 14
fits its simulated scanner's views and these data have 16; the list-mode and example variables
to file names).

* A file stirgpu accepts runs in both programs on STIR-made data (ECAT 931, 5 segments,
  normalisation, additive term, Poisson prompts: ``osmaposl_cases.make_inputs``, small enough for
  CI where the scripts simulate a full scanner), put under the names the file reads; the same
  files are written and the estimates agree within 1e-4 of STIR's maximum.
* A refused file is refused at its lines (file and line each), every line an unsupported feature
  stirgpu names -- never a line it cannot read, an unknown key or a value it misreads, which would
  mean that stirgpu does not parse STIR's file as STIR does.  Where STIR runs the file with
  stirgpu's plugin (KOSMAPOSL, the kinetic models, PLS), the line names that command.

Print the table of docs/parameter-files.md with ``-s`` (each file: result and figure).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import osmaposl_cases as oc
import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.parfile import osmaposl_settings_from_block, parse_par_string

pytestmark = pytest.mark.stir

SOURCE_ENV = "STIRGPU_STIR_SOURCE"
FOLDERS = ("recon_test_pack", "examples/samples")
#: the start keys of STIR's reconstruction programs' files
_RECONSTRUCTION = re.compile(
    r"^\s*(OSMAPOSL|KOSMAPOSL|OSSPS|FBP2D|FBP3DRP|DDSR2D|GRD2D|SRT2D|SRT2DSPECT)Parameters\s*:=", re.I
)
#: ${VAR}s as STIR's scripts set them (run_test_simulate_and_recon.sh, run_test_listmode_recon.sh;
#: the names of the examples' placeholders)
ENV = {
    "suffix": "",
    "num_subsets": "4",
    "INPUT": "my_input.hs",
    "ADD_SINO": "my_additive_sinogram.hs",
    "MAX_SEG_NUM": "1",
    "NORM_PROJDATA": "my_norm.hs",
    "FRAMES": "frames.fdef",
    "cache": "0",
    "recompute_cache": "1",
    "recompute_sensitivity": "1",
    "SENS": "my_sens.hv",
    "filename": "my_output",
    "prompts": "my_prompts.hs",
    "addittive_sino": "my_additive_sinogram.hs",
    "multifactor": "my_norm.hs",
    "sensitivity": "my_sens_%d.hv",
    "output": "my_output",
    "MAXSEG": "1",
    "NUMSUBS": "4",
    "ITER": "8",
    "SAVITER": "4",
    # recon_test_pack/SPECT's scripts
    "CACHEALLVIEWS": "1",
    "CACHEALLVIEWS2D": "1",
    "CACHEALLVIEWS3D": "1",
}
#: a template's placeholder for the user to replace (MCIR.par's 'number of subsets := NUM_SUBSETS')
_PLACEHOLDER = re.compile(r"got '[A-Z][A-Z0-9_]*'$")
#: what no refusal of a STIR file may be: stirgpu misreading STIR's own syntax
_MISREAD = ("unknown key", "expects", "environment variable", "expected 'key", "does not match", "still open")


def _corpus() -> list:
    root = os.environ.get(SOURCE_ENV)
    if not root:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{SOURCE_ENV} (a STIR source tree) is not set"))]
    files = []
    for folder in FOLDERS:
        for p in sorted((Path(root) / folder).rglob("*.par")):
            first = next((s for s in p.read_text(errors="replace").splitlines() if s.split(";")[0].strip()), "")
            if _RECONSTRUCTION.match(first):
                files.append(pytest.param(p, id=str(p.relative_to(root))))
    return files


def _read(path: Path, base: Path):
    block = parse_par_string(path.read_text(errors="replace"), path=path, env=ENV)
    return osmaposl_settings_from_block(block, base_dir=base)


@pytest.mark.parametrize("par", _corpus())
def test_stir_par_is_accepted_and_equal_or_refused_clearly(par, reference_stir, stir, tmp_path_factory, monkeypatch):
    work = tmp_path_factory.mktemp("corpus")
    try:
        settings = _read(par, work / "gpu")
    except ParFileProblems as exc:
        _check_refusal(par, exc)
        return
    _check_equal(par, settings, reference_stir, stir, work, tmp_path_factory, monkeypatch)


def _check_refusal(par: Path, exc: ParFileProblems) -> None:
    for p in exc.problems:
        assert p.path == str(par) and p.line is not None, str(exc)
        misread = any(m in p.reason for m in _MISREAD) and not _PLACEHOLDER.search(p.reason)
        assert not misread, f"{par.name}:{p.line}: {p.reason}"
    plugin = [p for p in exc.problems if "stirgpu stir " in p.reason]
    for p in plugin:
        assert re.search(rf"stirgpu stir (OSMAPOSL|KOSMAPOSL|POSMAPOSL) {re.escape(str(par))} ", p.reason), p.reason
    whole_file = (
        "not an OSMAPOSL parameter file",
        "(kernelised EM) is not implemented",
        "reconstruction is not implemented",
    )
    if any(w in p.reason for p in exc.problems for w in (*whole_file, "objective function is not implemented")):
        assert len(exc.problems) == 1, str(exc)  # a file stirgpu does not reconstruct at all: one line
    print(f"\nCORPUS | {_shown(par)} | refused | {exc.problems[0].line}: {exc.problems[0].reason}")


def _check_equal(par, settings, reference_stir, stir, work, tmp_path_factory, monkeypatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    geometry = oc.Geometry(span=3, max_delta=7, num_views=16, num_tangential_poss=64)
    inputs = oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("corpus_in"), geometry, seed=3)
    names = {"input_file": "prompts", "normalisation": "norm", "additive_sinogram": "additive"}
    wanted = {
        Path(getattr(settings, f)).name: src for f, src in names.items() if isinstance(getattr(settings, f), Path)
    }

    def data(folder: Path) -> None:
        for name, src in wanted.items():
            shutil.copy(inputs / f"{src}.s", folder / f"{src}.s")  # the header names its data file
            shutil.copy(inputs / f"{src}.hs", folder / name)

    text = par.read_text(errors="replace")
    s_dir, g_dir, _ = oc.run_both(reference_stir, work, text, prepare=data)
    prefix = Path(settings.output_filename_prefix).name
    diffs = oc.assert_agree(s_dir, g_dir, prefix=prefix)
    last = max((d for n, d in diffs.items() if n.startswith(f"{prefix}_")), default=None)
    print(f"\nCORPUS | {_shown(par)} | equal | {last:.2g} of STIR's maximum")


def _shown(par: Path) -> str:
    return str(par.relative_to(os.environ[SOURCE_ENV]))
