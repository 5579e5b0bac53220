"""Every reconstruction ``.par`` of STIR's ``recon_test_pack/`` and ``examples/samples/`` through
``stirgpu osmaposl``: accepted and equal to STIR's ``OSMAPOSL`` (within 1e-4 of its maximum),
or refused with clear lines.

The STIR source tree is given by ``STIRGPU_STIR_SOURCE`` (the tests skip, saying so, where it is
unset).  Each file is read unchanged, its ``${VAR}``s set as STIR's ``run_*.sh`` scripts set them
(``run_test_simulate_and_recon.sh``: ``suffix`` empty; ``num_subsets`` 4 where the script's 14
fits its simulated scanner's views; the list-mode and example variables to file names).

* A file stirgpu accepts runs in both programs (``stirgpu osmaposl`` or ``stirgpu ossps``, as
  its root says) on STIR-made data (ECAT 931, span 1 to segment 4, 48 views -- 192 for the MRP
  example --, normalisation, additive term, 2e5 Poisson counts at count scale:
  ``osmaposl_cases.make_inputs``, small enough for CI where the scripts simulate a full
  scanner), put under the names the file reads (a uniform image at the phantom's background
  where it names an initial image; the sensitivities it reads made by STIR's run of the same
  file with ``recompute sensitivity := 1``, as an earlier run makes them); the same files are
  written and the estimates agree within 1e-4 of STIR's maximum.  One file, the RDP example
  (penalisation factor 1, 12 subsets, 24 subiterations), is chaotic in STIR itself on every
  such data set tried (:data:`STILL_CHAOTIC`), in its two end planes: there the other planes
  must agree within 1e-4, and the whole image within 10 times as far from STIR as STIR started
  1e-6 higher ends from itself.
* A refused file is refused at its lines (file and line each), every line an unsupported feature
  stirgpu names -- never a line it cannot read, an unknown key or a value it misreads, which would
  mean that stirgpu does not parse STIR's file as STIR does.  Where STIR runs the file with
  stirgpu's plugin (KOSMAPOSL, the kinetic models, PLS), the line names that command.

A second test runs each OSMAPOSL file with the Parallelproj pair in place of its projectors
(what a user writes to project with Parallelproj, or ``stirgpu`` through the plugin; STIR runs
the same edited file); SPECT files (STIR's SPECT UB matrices) have no such counterpart.

Print the table of docs/parameter-files.md with ``-s`` (each file: result and figure).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import osmaposl_cases as oc
import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.formats import VoxelsOnCartesianGrid, read_image, write_image
from stirgpu.parfile import Block, Entry, canonical_key, osmaposl_settings_from_block, parse_par_string
from stirgpu.parfile.kosmaposl import kosmaposl_settings_from_block
from stirgpu.parfile.ossps import ossps_settings_from_block

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
#: prompts in counts (about 0.5 a bin, as STIR's test pack's 600k counts on its larger scanner), so
#: the image is at a count scale where the files' Quadratic penalisation
#: factors 0.5 and 1 are mild and One-Step-Late converges; with 1e6 or more counts, or the
#: phantom's own scale, STIR itself oscillates on them (from a start 1e-6 higher it ends 1e-2 to 1
#: of its maximum away)
COUNTS = 2e5
NUM_VIEWS = 48
#: views for STIR's MRP example (penalisation factor 1, 12 subsets, 24 subiterations): MRP's
#: multiplicative update does not depend on the image's scale, only on the sensitivity of a subset,
#: and at 48 views (4 a subset) STIR itself moves 9e-5 from a start 1e-6 higher; at 192 it is stable
MORE_VIEWS = {
    "examples/samples/OSMAPOSL_MRP.par": 192,
    # 21 subsets: balanced with 42 views (STIR accepts views unrelated to the scanner's detectors)
    "examples/samples/KOSMAPOSL_hkem.par": 42,
}
#: files not run with the Parallelproj pair, each with why: too long for the test suite
TOO_LONG = {
    "examples/samples/KOSMAPOSL_mhkem.par": "630 subiterations on a 256 x 256 image (its 'xy output image size') "
    "with two anatomical images, STIR's kernel single-threaded here: too long for the test suite; KOSMAPOSL "
    "with two anatomical images is compared with STIR in test_kosmaposl_vs_stir.py",
}
#: the one file on which STIR's One-Step-Late stays chaotic on every such data set tried (RDP's
#: gradient does not shrink with the image's scale; 48 and 192 views, 2e5 to 2e7 counts: STIR
#: started 1e-6 higher ends 2e-3 to 0.8 of its maximum away) -- in its two end planes only, which
#: the file leaves to a few oblique LORs ('zero end planes of segment 0 := 1'), where the estimate
#: spikes to 50 times the median: the other planes within 1e-4 of STIR's maximum, the whole image
#: within 10 times STIR's own spread
STILL_CHAOTIC = {"examples/samples/OSMAPOSL_RDP.par"}
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


_OSSPS = canonical_key("OSSPSParameters")
_KOSMAPOSL = canonical_key("KOSMAPOSLParameters")


def _read(text: str, path: Path, base: Path) -> tuple[str, object, object]:
    """(the program that runs the file: ``OSSPS`` for an ``OSSPSParameters`` file, ``KOSMAPOSL``
    for a ``KOSMAPOSLParameters`` one, else ``OSMAPOSL``; the settings of the keys they share; a
    KOSMAPOSL file's kernel settings or None), as ``stirgpu ossps`` / ``kosmaposl`` / ``osmaposl``
    read it."""
    block = parse_par_string(text, path=path, env=ENV)
    if block.key == _OSSPS:
        return "OSSPS", ossps_settings_from_block(block, base_dir=base).common, None
    if block.key == _KOSMAPOSL:
        kernel = kosmaposl_settings_from_block(block, base_dir=base)
        return "KOSMAPOSL", kernel.common, kernel
    return "OSMAPOSL", osmaposl_settings_from_block(block, base_dir=base), None


@pytest.mark.parametrize("par", _corpus())
def test_stir_par_is_accepted_and_equal_or_refused_clearly(par, reference_stir, stir, tmp_path_factory, monkeypatch):
    work = tmp_path_factory.mktemp("corpus")
    try:
        program, settings, kernel = _read(par.read_text(errors="replace"), par, work / "gpu")
    except ParFileProblems as exc:
        _check_refusal(par, exc)
        return
    _check_equal(par, program, settings, reference_stir, stir, work, tmp_path_factory, monkeypatch, kernel=kernel)


def _check_refusal(par: Path, exc: ParFileProblems, tag: str = "CORPUS") -> None:
    for p in exc.problems:
        assert p.path == str(par) and p.line is not None, str(exc)
        misread = any(m in p.reason for m in _MISREAD) and not _PLACEHOLDER.search(p.reason)
        assert not misread, f"{par.name}:{p.line}: {p.reason}"
    plugin = [p for p in exc.problems if "stirgpu stir " in p.reason]
    for p in plugin:
        assert re.search(rf"stirgpu stir (OSMAPOSL|KOSMAPOSL|POSMAPOSL|POSSPS) {re.escape(str(par))} ", p.reason), (
            p.reason
        )
    whole_file = (
        "not an OSMAPOSL parameter file",
        "reconstruction is not implemented",
    )
    if any(w in p.reason for p in exc.problems for w in (*whole_file, "objective function is not implemented")):
        assert len(exc.problems) == 1, str(exc)  # a file stirgpu does not reconstruct at all: one line
    print(f"\n{tag} | {_shown(par)} | refused | {exc.problems[0].line}: {exc.problems[0].reason}")


def _check_equal(
    par,
    program,
    settings,
    reference_stir,
    stir,
    work,
    tmp_path_factory,
    monkeypatch,
    text=None,
    tag="CORPUS",
    kernel=None,
):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    # 48 views: the files' 1, 4, 8 and 12 subsets are balanced; span 1 up to segment 4: the files'
    # 'maximum absolute segment number to process' (3, 4) exist
    views = MORE_VIEWS.get(_shown(par), NUM_VIEWS)
    geometry = oc.Geometry(span=1, max_delta=4, num_views=views, num_tangential_poss=64)
    inputs = oc.make_inputs(
        reference_stir, stir, tmp_path_factory.mktemp("corpus_in"), geometry, seed=3, counts=COUNTS, in_counts=True
    )
    names = {"input_file": "prompts", "normalisation": "norm", "additive_sinogram": "additive"}
    wanted = {
        Path(getattr(settings, f)).name: src for f, src in names.items() if isinstance(getattr(settings, f), Path)
    }

    initial = settings.initial_estimate if isinstance(settings.initial_estimate, Path) else None
    if initial is not None:  # uniform at the phantom's background, on the data's default image
        phantom = read_image(inputs / "phantom.hv")
        background = float(phantom.array[phantom.array > 0].min())
        for name, value in (("uniform", background), ("nudged", background * (1.0 + 1e-6))):
            write_image(inputs / f"{name}.hv", VoxelsOnCartesianGrid(phantom.info, fill=value), overwrite=True)

    anatomical = [] if kernel is None else [p.name for p in kernel.anatomical_image_filenames]
    if anatomical:  # a KOSMAPOSL file's: the phantom with seeded noise, each its own
        phantom = read_image(inputs / "phantom.hv")
        rng = np.random.default_rng(7)
        for i in range(len(anatomical)):
            noisy = phantom.array * (1.0 + 0.5 * i) + rng.normal(0.0, 0.1 * phantom.array.max(), phantom.shape)
            write_image(
                inputs / f"anatomical{i}.hv", VoxelsOnCartesianGrid(phantom.info, fill=noisy.astype(np.float32))
            )

    def data(folder: Path, start: str = "uniform") -> None:
        for name, src in wanted.items():
            shutil.copy(inputs / f"{src}.s", folder / f"{src}.s")  # the header names its data file
            shutil.copy(inputs / f"{src}.hs", folder / name)
        for i, name in enumerate(anatomical):
            shutil.copy(inputs / f"anatomical{i}.v", folder / f"anatomical{i}.v")
            shutil.copy(inputs / f"anatomical{i}.hv", folder / name)
        if initial is not None:  # (after the anatomical images: a file may name one image for both)
            shutil.copy(inputs / f"{start}.v", folder / f"{start}.v")
            shutil.copy(inputs / f"{start}.hv", folder / initial.name)

    text = par.read_text(errors="replace") if text is None else text
    if not settings.sensitivity_must_be_computed:  # made by an earlier run, as a user (or STIR's scripts) would
        sensitivities = _earlier_sensitivities(reference_stir, program, settings, text, work / "earlier", data)

        def data_and_sensitivities(folder: Path, start: str = "uniform", base=data) -> None:
            base(folder, start)
            for f in sensitivities:
                shutil.copy(f, folder / f.name)

        data = data_and_sensitivities
    s_dir, g_dir, _ = oc.run_both(reference_stir, work, text, prepare=data, program=program)
    # (a KOSMAPOSL file's estimates compared are its emission images; its coefficients, when written,
    # within the same bound)
    kernelised = None if kernel is None else Path(kernel.kernelised_prefix() + "_").name[:-1]
    prefix = kernelised if kernel is not None else Path(settings.output_filename_prefix).name
    try:
        diffs = oc.assert_agree(s_dir, g_dir, prefix=prefix)
    except AssertionError:
        if _shown(par) not in STILL_CHAOTIC:
            raise
        inner = oc.assert_agree(s_dir, g_dir, prefix=prefix, skip_end_planes=True)
        inside = max(d for n, d in inner.items() if n.startswith(f"{prefix}_"))
        _assert_as_close_as_stir_to_itself(reference_stir, program, work, text, data, s_dir, g_dir, prefix, tag, par)
        print(f"\n{tag} | {_shown(par)} | equal off the end planes | {inside:.2g} of STIR's maximum")
        return
    estimates = [d for n, d in diffs.items() if n.startswith(f"{prefix}_")]
    what = "estimates" if estimates else "sensitivities (output disabled)"
    print(f"\n{tag} | {_shown(par)} | equal | {max(estimates or diffs.values()):.2g} of STIR's maximum ({what})")


def _assert_as_close_as_stir_to_itself(reference_stir, program, work, text, data, s_dir, g_dir, prefix, tag, par):
    """Where stirgpu's last estimate is further than 1e-4 from STIR's (:data:`STILL_CHAOTIC` only):
    STIR run again from an initial image 1e-6 larger (float32 rounding's size) must move as far --
    the iteration amplifies any rounding difference (One-Step-Late with a penalty too strong for
    the data oscillates, docs/priors.md), so stirgpu's difference must stay within 10 times STIR's own."""
    nudged = work / "stir_nudged"
    nudged.mkdir()
    data(nudged, start="nudged")
    proc = oc.run_stir(reference_stir, nudged, text, program=program)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = max(
        oc.image_files(s_dir) & {n for n in oc.image_files(s_dir) if n.startswith(f"{prefix}_")},
        key=lambda n: int(n.rsplit("_", 1)[1].split(".")[0]) if n.endswith(".hv") else -1,
    )
    ours = oc.relative_difference(g_dir / last, s_dir / last)
    stirs = oc.relative_difference(nudged / last, s_dir / last)
    assert ours <= 10 * stirs, f"{last}: stirgpu {ours:.3g} from STIR, STIR nudged by 1e-6 only {stirs:.3g}"
    print(
        f"\n{tag} | {_shown(par)} | equal as STIR to itself | {ours:.2g} of STIR's maximum; STIR from a start "
        f"1e-6 larger: {stirs:.2g}"
    )


def _earlier_sensitivities(reference_stir, program, settings, text: str, folder: Path, data) -> list[Path]:
    """The sensitivity images a file reads, made by STIR's ``program`` running the same file with
    'recompute sensitivity := 1' (the last value of a key counts in STIR)."""
    root = parse_par_string(text, env=ENV)
    objective = next(b for b in root.blocks() if "loglikelihood" in b.key)
    lines = text.splitlines()
    lines.insert(objective.end_line - 1, "recompute sensitivity := 1")
    folder.mkdir(parents=True)
    data(folder)
    proc = oc.run_stir(reference_stir, folder, "\n".join(lines) + "\n", program=program)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    if settings.use_subset_sensitivities:
        names = [settings.subset_sensitivity_filename(k).name for k in range(settings.num_subsets)]
    else:
        names = [settings.sensitivity_filename.name]
    return [folder / n for n in names] + [(folder / n).with_suffix(".v") for n in names]


def _shown(par: Path) -> str:
    return str(par.relative_to(os.environ[SOURCE_ENV]))


# -- the same files with the Parallelproj pair ------------------------------------------------------

PARALLELPROJ = (
    "projector pair type := Parallelproj",
    "Projector Pair Using Parallelproj Parameters :=",
    "End Projector Pair Using Parallelproj Parameters :=",
)
_PROJECTOR_KEYS = {canonical_key(k) for k in ("projector pair type", "forward projector type", "back projector type")}


_SPECT = re.compile(r"^\s*matrix\s*type\s*:=\s*(Pinhole\s*)?SPECT\s*UB", re.I | re.M)


def with_parallelproj(text: str, path: Path) -> str | None:
    """``text`` with its objective function's projectors (a pair, separate ones, or none: STIR's
    default) replaced by the Parallelproj pair, as a user makes STIR's file project with
    Parallelproj (or, with ``stirgpu``, with stirgpu's plugin); None without such a block."""
    root = parse_par_string(text, path=path, env=ENV)
    objective = next((b for b in root.blocks() if "loglikelihood" in b.key), None)
    if objective is None:
        return None
    drop: set[int] = set()
    children = list(objective.children)
    for i, c in enumerate(children):
        if isinstance(c, Entry) and c.key in _PROJECTOR_KEYS:
            drop.add(c.line)
            nxt = children[i + 1] if i + 1 < len(children) else None
            if isinstance(nxt, Block):
                drop.update(range(nxt.line, (nxt.end_line or nxt.line) + 1))
    lines = text.splitlines()
    kept = [s for n, s in enumerate(lines, 1) if n not in drop]
    at = objective.line - sum(1 for n in drop if n < objective.line)
    return "\n".join([*kept[:at], *PARALLELPROJ, *kept[at:]]) + "\n"


def _projecting_files() -> list:
    return [p for p in _corpus() if p.values[0] is None or _is_osmaposl_or_ossps(p.values[0])]


def _is_osmaposl_or_ossps(path: Path) -> bool:
    first = next((s for s in path.read_text(errors="replace").splitlines() if s.split(";")[0].strip()), "")
    return bool(re.match(r"\s*(OSMAPOSL|OSSPS|KOSMAPOSL)Parameters\s*:=", first, re.I))


@pytest.mark.parametrize("par", _projecting_files())
def test_stir_osmaposl_par_with_parallelproj_is_equal_or_refused_clearly(
    par, reference_stir, stir, tmp_path_factory, monkeypatch
):
    """Each OSMAPOSL and OSSPS file of the corpus with the Parallelproj pair in place of its
    projectors (what STIR then runs with Parallelproj, or through the plugin with 'stirgpu'):
    equal to STIR's OSMAPOSL or OSSPS on the same edited file, or refused at clear lines.  A file that reads sensitivity
    images it does not compute (STIR's test pack makes them in an earlier run) is skipped, saying so."""
    original = par.read_text(errors="replace")
    if _SPECT.search(original):
        print(f"\nCORPUS-PP | {_shown(par)} | not run | a SPECT file: Parallelproj projects PET")
        pytest.skip("a SPECT file (STIR's SPECT UB matrices): Parallelproj projects PET, there is no counterpart")
    if _shown(par) in TOO_LONG:
        print(f"\nCORPUS-PP | {_shown(par)} | not run | {TOO_LONG[_shown(par)]}")
        pytest.skip(TOO_LONG[_shown(par)])
    text = with_parallelproj(original, par)
    assert text is not None, f"{par}: no objective function block"
    work = tmp_path_factory.mktemp("corpus_pp")
    try:
        program, settings, kernel = _read(text, par, work / "gpu")
    except ParFileProblems as exc:
        _check_refusal(par, exc, tag="CORPUS-PP")
        return
    _check_equal(
        par,
        program,
        settings,
        reference_stir,
        stir,
        work,
        tmp_path_factory,
        monkeypatch,
        text=text,
        tag="CORPUS-PP",
        kernel=kernel,
    )
