"""An input is never written: no argument, option (``--overwrite`` included) or parameter-file
key makes a command write over a file the same run reads (``stirgpu/formats/roles.py``,
``stirgpu/recon/outputs.py``).

Each refusal is one line naming both roles, comes before any work (any projection fails these
tests, ``no_projection``) and leaves the input's bytes and modification time as they were.
Names are compared by the files they are, not by spelling: ``./``, a symbolic link, a hard
link, STIR's implied extensions (``prompts``, ``prompts.hs`` and ``prompts.s`` are the same two
files), and a header whose ``name of data file`` is the output's data file.

osmaposl checks every file it writes the same way, refuses existing ones without
``--overwrite``, and with ``--overwrite`` removes an earlier run's estimates that it would
leave beside its own (saying so), never the estimate it restarts from.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest
from helpers import cli

from stirgpu.formats import ProjDataOnDisk, VoxelsOnCartesianGrid, format_projdata_header, write_image
from stirgpu.formats.testing import small_proj_data_info
from stirgpu.geometry import ImageInfo
from stirgpu.parfile import osmaposl_par

NEVER = "an input is never written, even with --overwrite"


@pytest.fixture
def no_projection(monkeypatch):
    """Any projection fails the test: the refusals must come before the work."""
    from stirgpu.projectors.base import StreamingProjector

    def forbidden(*args, **kwargs):
        raise AssertionError("a projection ran before the refusal")

    monkeypatch.setattr(StreamingProjector, "_run", forbidden)


@pytest.fixture
def data(tmp_path, monkeypatch):
    """prompts.hs + prompts.s (small ECAT 953 data) and truth.hv + truth.v (its default image,
    ones), in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    pdi = small_proj_data_info()
    ProjDataOnDisk.create(tmp_path / "prompts.hs", pdi, fill=1.0).close()
    info = ImageInfo.default_for(pdi, xy_size=8)
    write_image(tmp_path / "truth.hv", VoxelsOnCartesianGrid(info, fill=1.0))
    return tmp_path


def _state(folder) -> dict:
    """Every file's (hash, modification time) and every name in ``folder``: what must not change."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.lstat().st_mtime_ns) if p.is_file() else None
        for p in sorted(folder.iterdir())
    }


def _refused(argv, capsys, *words) -> str:
    code, _, err = cli(argv, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


def _forward(out, image="truth.hv", template="prompts.hs", *extra):
    return ["forward-project", out, image, template, "--backend", "cpu", "--quiet", *extra]


def _back(out, data="prompts.hs", *rest):
    return ["back-project", out, data, *rest, "--backend", "cpu", "--quiet"]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_forward_project_never_writes_its_template(data, capsys, no_projection, overwrite):
    """``forward-project prompts.hs truth.hv prompts.hs --overwrite`` used to replace the measured
    prompts it reads as its template: refused, one line naming OUTPUT and TEMPLATE, with or
    without --overwrite (and without suggesting it), the prompts untouched."""
    before = _state(data)
    err = _refused(
        _forward("prompts.hs", "truth.hv", "prompts.hs", *overwrite), capsys, "OUTPUT prompts.hs", "TEMPLATE", NEVER
    )
    assert "use --overwrite" not in err
    assert _state(data) == before


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_back_project_never_writes_its_template_image(data, capsys, no_projection, overwrite):
    """``back-project truth.hv prompts.hs truth.hv --overwrite`` used to replace the image it
    reads as its template: refused, naming OUTPUT and TEMPLATE_IMAGE, the image untouched."""
    before = _state(data)
    _refused(
        _back("truth.hv", "prompts.hs", "truth.hv", *overwrite), capsys, "OUTPUT truth.hv", "TEMPLATE_IMAGE", NEVER
    )
    _refused(_back("prompts.hs", "prompts.hs", "--overwrite"), capsys, "other kind")  # (an image is .hv + .v)
    assert _state(data) == before


def _link(data, kind: str, name: str, target: str) -> str:
    if kind == "symlink":
        os.symlink(data / target, data / name)  # (absolute: it works from any folder)
    else:
        os.link(data / target, data / name)
    return name


@pytest.mark.parametrize(
    "spelling",
    ["./prompts.hs", "prompts", "prompts.s", "{data}/prompts.hs", "sub/../prompts.hs", "symlink", "hardlink"],
)
def test_forward_project_compares_files_not_spellings(data, capsys, no_projection, spelling):
    """The output names the template's files however it is spelled: ``./``, an absolute path,
    ``..``, STIR's implied extensions (``prompts`` and ``prompts.s`` write prompts.hs +
    prompts.s), a symbolic link and a hard link to the header."""
    (data / "sub").mkdir()
    if spelling in ("symlink", "hardlink"):
        out = _link(data, spelling, "alias.hs", "prompts.hs")
    else:
        out = spelling.format(data=data)
    before = _state(data)
    shown = "prompts.hs" if os.path.isabs(out) else out  # (absolute names below the working directory: relative)
    _refused(_forward(out, "truth.hv", "prompts.hs", "--overwrite"), capsys, f"OUTPUT {shown}", "TEMPLATE", NEVER)
    assert _state(data) == before


@pytest.mark.parametrize("spelling", ["truth", "truth.v", "./truth.hv", "hardlink-data"])
def test_back_project_compares_files_not_spellings(data, capsys, no_projection, spelling):
    """An image output names the template image's files as ``truth``, ``truth.v`` (STIR writes
    truth.hv + truth.v for both) or ``./truth.hv``; and an output whose data file is a hard link
    to the template's data file (copy.v -> truth.v) is refused as well."""
    out = spelling
    if spelling == "hardlink-data":
        out = "copy.hv"
        os.link(data / "truth.v", data / "copy.v")
    before = _state(data)
    _refused(_back(out, "prompts.hs", "truth.hv", "--overwrite"), capsys, f"OUTPUT {out}", "TEMPLATE_IMAGE", NEVER)
    assert _state(data) == before


def test_header_naming_the_outputs_data_file_is_an_input(data, capsys, no_projection):
    """A template whose ``name of data file`` is the output's data file (other.hs -> prompts.s):
    writing OUTPUT 'fresh' would be fine, but OUTPUT prompts.s's header is a new name and its
    data file the template's data: refused, naming the data file."""
    (data / "other.hs").write_text(format_projdata_header(small_proj_data_info(), "prompts.s"))
    before = _state(data)
    err = _refused(_forward("prompts", "truth.hv", "other.hs", "--overwrite"), capsys, "TEMPLATE other.hs", NEVER)
    assert "(it writes prompts.s, the data file other.hs names)" in err
    assert _state(data) == before


def test_back_project_never_writes_its_projection_data_or_par(data, capsys, no_projection):
    """The projection data back projected and the projector parameter file are inputs too: an
    image whose data file is the projector .par is refused (STIR's names: bk.par is bk.hv's
    data file), and so is a --timeline picture over an input."""
    (data / "bk.par").write_text(
        "Back Projector parameters :=\ntype := Parallelproj\nBack Projector Using Parallelproj Parameters :=\n"
        "End Back Projector Using Parallelproj Parameters :=\nEnd :=\n"
    )
    (data / "pic.png").symlink_to(data / "prompts.s")
    before = _state(data)
    _refused(_back("bk.par", "prompts.hs", "bk.par", "--overwrite"), capsys, "OUTPUT bk.par", "PROJECTOR.par", NEVER)
    _refused(_back("b.hv", "prompts.hs", "--timeline", "pic.png", "--overwrite"), capsys, "--timeline", "PROJDATA")
    assert _state(data) == before


@pytest.mark.parametrize("args", [_forward, _back])
def test_output_that_is_a_folder_names_the_cause(data, capsys, no_projection, args):
    """An output name that is a folder says so, and does not suggest --overwrite (which cannot
    replace a folder)."""
    (data / "d.hs").mkdir()
    (data / "d.hv").mkdir()
    name = "d.hs" if args is _forward else "d.hv"
    for extra in ([], ["--overwrite"]):
        err = _refused(args(name) + extra, capsys, f"OUTPUT {name} is a folder")
        assert "--overwrite" not in err


# -- osmaposl -------------------------------------------------------------------------------
def _par(data, name="osem.par", extra="", **kw) -> str:
    """An OSMAPOSL file for the small data (an 8 x 8 image), ``extra`` keys of the objective
    function added."""
    kw = {"output_filename_prefix": "osem", "num_subiterations": 2, "save_interval": 1, **kw}
    end = "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :="
    text = osmaposl_par("prompts.hs", **kw).replace(end, f"XY output image size (in pixels) := 8\n{extra}{end}")
    (data / name).write_text(text)
    return name


def _osmaposl(par, *extra):
    return ["osmaposl", par, "--backend", "cpu", "--quiet", *extra]


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_osmaposl_never_writes_its_initial_estimate(data, capsys, no_projection, overwrite):
    """``initial estimate := truth.hv`` with ``sensitivity filename := truth.hv`` used to
    overwrite truth.v: refused (one line naming both keys), with or without --overwrite; and so
    is an estimate over the initial estimate (the prefix's first save point)."""
    par = _par(
        data,
        initial_estimate="truth.hv",
        extra="use subset sensitivities := 0\nsensitivity filename := truth.hv\n",
    )
    before = _state(data)
    _refused(
        _osmaposl(par, *overwrite), capsys, "'sensitivity filename' truth.hv", "'initial estimate' truth.hv", NEVER
    )
    assert _state(data) == before
    par = _par(data, "restart.par", output_filename_prefix="truth", initial_estimate="truth_2.hv", num_subiterations=2)
    write_image(data / "truth_2.hv", VoxelsOnCartesianGrid(ImageInfo.default_for(small_proj_data_info(), xy_size=8)))
    before = _state(data)
    _refused(_osmaposl(par, *overwrite), capsys, "'output filename prefix' truth_2.hv", "'initial estimate'", NEVER)
    assert _state(data) == before


def test_osmaposl_never_writes_its_data_through_a_sensitivity(data, capsys, no_projection):
    """A sensitivity written whose data file is the prompts' data file is refused: STIR's names
    make link.img the data file of link.hv, and link.img is a symbolic link to prompts.s."""
    os.symlink(data / "prompts.s", data / "link.img")
    par = _par(data, extra="use subset sensitivities := 0\nsensitivity filename := link.img\n")
    before = _state(data)
    _refused(_osmaposl(par, "--overwrite"), capsys, "'sensitivity filename' link.img", "'input file'", NEVER)
    assert _state(data) == before


def test_osmaposl_refuses_existing_outputs_without_overwrite(data, capsys, no_projection):
    """Without --overwrite an existing estimate or sensitivity is refused before any work, one
    line per problem (then a count line); an earlier run's estimate that this run would leave
    beside its own (osem_24 when it saves 1 and 2) is refused too, suggesting --overwrite."""
    info = ImageInfo.default_for(small_proj_data_info(), xy_size=8)
    for name in ("osem_2.hv", "sens_0.hv", "osem_24.hv"):
        write_image(data / name, VoxelsOnCartesianGrid(info))
    par = _par(data, subset_sensitivity_filenames="sens_%d.hv")
    before = _state(data)
    code, _, err = cli(_osmaposl(par), capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 4 and lines[-1].endswith("3 problems in osem.par"), err
    assert "osem_2.hv, osem_2.v already exist (use --overwrite" in err
    assert "sens_0.hv, sens_0.v already exist" in err
    assert "an earlier run's osem_24.hv, osem_24.v" in err and "--overwrite to remove" in err
    assert _state(data) == before


def test_osmaposl_overwrite_removes_an_earlier_runs_estimates(data, capsys):
    """With --overwrite the run replaces its own files and removes an earlier run's estimates
    it would not rewrite (osem_24), saying so in one line; an estimate before the start
    subiteration (osem_1 on a restart from it at subiteration 2) is kept: the run reads it."""
    info = ImageInfo.default_for(small_proj_data_info(), xy_size=8)
    for name in ("osem_2.hv", "osem_24.hv"):
        write_image(data / name, VoxelsOnCartesianGrid(info, fill=7.0))
    code, out, err = cli(_osmaposl(_par(data), "--overwrite"), capsys)
    assert code == 0, err
    assert "--overwrite: removed an earlier run's osem_24.hv, osem_24.v" in out
    assert sorted(p.name for p in data.glob("osem_*")) == ["osem_1.hv", "osem_1.v", "osem_2.hv", "osem_2.v"]
    from stirgpu.formats import read_image

    assert not np.all(read_image(data / "osem_2.hv").array == 7.0)
    write_image(data / "osem_9.hv", VoxelsOnCartesianGrid(info, fill=7.0))
    par = _par(data, "restart.par", initial_estimate="osem_1.hv", start_subiteration_num=2)
    code, out, err = cli(_osmaposl(par, "--overwrite"), capsys)
    assert code == 0, err
    assert "removed an earlier run's osem_9.hv, osem_9.v" in out
    assert sorted(p.name for p in data.glob("osem_*")) == ["osem_1.hv", "osem_1.v", "osem_2.hv", "osem_2.v"]


def test_osmaposl_checks_gradients_and_timelines(data, capsys, no_projection):
    """A prior's gradient images (``gradient filename prefix``: grad_1 .. grad_N, one per
    subiteration) and the --timeline pictures (one per subiteration with ``%d``) are outputs
    too: existing ones refused without --overwrite, a picture over an input refused always."""
    prior = (
        "prior type := Relative Difference Prior\nRelative Difference Prior Parameters :=\n"
        "penalisation factor := 0.2\ngradient filename prefix := grad_\nEND Relative Difference Prior Parameters :=\n"
    )
    info = ImageInfo.default_for(small_proj_data_info(), xy_size=8)
    write_image(data / "grad_2.hv", VoxelsOnCartesianGrid(info))
    (data / "tl_2.png").write_bytes(b"old")
    par = _par(data, extra=prior)
    before = _state(data)
    _refused(_osmaposl(par), capsys, "'gradient filename prefix': grad_2.hv, grad_2.v already exist", "--overwrite")
    _refused(_osmaposl(_par(data, "plain.par"), "--timeline", "tl_%d.png"), capsys, "tl_2.png", "already exists")
    (data / "prompts.png").symlink_to(data / "prompts.s")
    before = _state(data)
    _refused(_osmaposl("plain.par", "--timeline", "prompts.png", "--overwrite"), capsys, "--timeline", "'input file'")
    assert _state(data) == before


def test_python_api_never_writes_an_input(data, no_projection):
    """``run_osmaposl`` (overwrite=True by default, as before) refuses an output that is an input
    all the same; ``prepare_osmaposl(..., overwrite=False)`` refuses existing outputs."""
    from stirgpu.errors import ParFileProblems
    from stirgpu.recon import prepare_osmaposl, run_osmaposl

    par = _par(
        data, initial_estimate="truth.hv", extra="use subset sensitivities := 0\nsensitivity filename := truth\n"
    )
    before = _state(data)
    same = r"'sensitivity filename' truth.hv is also the 'initial estimate' truth.hv \(the same file\)"
    with pytest.raises(ParFileProblems, match=same):
        run_osmaposl(par)
    assert _state(data) == before
    write_image(data / "osem_1.hv", VoxelsOnCartesianGrid(ImageInfo.default_for(small_proj_data_info(), xy_size=8)))
    plain = _par(data, "plain.par")
    before = _state(data)
    with pytest.raises(ParFileProblems, match="osem_1.hv, osem_1.v already exist"):
        prepare_osmaposl(plain, overwrite=False)
    with prepare_osmaposl(plain) as prepared:  # (the default replaces them)
        assert prepared.outputs is not None and prepared.outputs.earlier == ()
    assert _state(data) == before


def test_osem_objects_never_write_an_input(data):
    """``OSEM(..., overwrite=True)`` itself refuses, at construction, an estimate or a computed
    sensitivity that is a file its data come from (a hard link p_1.hv to prompts.hs; link.img, a
    symbolic link to prompts.s), whatever ``overwrite`` says."""
    from stirgpu.errors import StirGpuError
    from stirgpu.formats import read_from_file
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import OSEM, PoissonLogLikelihood, SensitivitySpec

    os.symlink(data / "prompts.s", data / "link.img")
    os.link(data / "prompts.hs", data / "p_1.hv")
    info = ImageInfo.default_for(small_proj_data_info(), xy_size=8)
    spec = SensitivitySpec(use_subset_sensitivities=False, filename=data / "link.img")
    before = _state(data)
    with read_from_file(data / "prompts.hs") as y:
        objective = PoissonLogLikelihood(y)
        for overwrite in (True, False):
            with pytest.raises(
                StirGpuError, match=r"sensitivity link.img is also the input data prompts.hs .*prompts.s"
            ):
                OSEM(objective, ProjectorPair(backend="cpu"), info, sensitivity=spec, overwrite=overwrite)
            with pytest.raises(StirGpuError, match=r"estimate p_1.hv is also the input data prompts.hs .*" + NEVER):
                OSEM(
                    objective,
                    ProjectorPair(backend="cpu"),
                    info,
                    output_filename_prefix=data / "p",
                    overwrite=overwrite,
                )
    assert _state(data) == before


def test_osmaposl_output_names_of_the_other_kind(data, capsys, no_projection):
    """A computed sensitivity named with projection data's extension (``sens.s``) is refused
    before any work, naming the key (it used to be found when the sensitivity was written)."""
    par = _par(data, extra="use subset sensitivities := 0\nsensitivity filename := sens.s\n")
    _refused(_osmaposl(par), capsys, "'sensitivity filename'", "other kind")
