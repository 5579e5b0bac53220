"""The commands check every input and output before any work (``stirgpu/cli/checks.py``).

Each refusal is one line on stderr naming the file or argument, exit code 2, and nothing is
written; "before any work" is enforced by making any projection fail the test
(``no_projection``).  The error texts use the command line's words (``--overwrite``), never
the Python API's (``overwrite=True``).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import back_args, cli, forward_args, reference_results

from stirgpu.cli import main as cli_main
from stirgpu.formats import (
    ProjDataOnDisk,
    format_projdata_header,
    read_from_file,
    read_image,
)
from stirgpu.formats.testing import small_proj_data_info


@pytest.fixture
def ref(stir_fixtures):
    return reference_results(stir_fixtures)


@pytest.fixture
def no_projection(monkeypatch):
    """Any projection fails the test: the refusals must come before the work."""
    from stirgpu.projectors.base import StreamingProjector

    def forbidden(*args, **kwargs):
        raise AssertionError("a projection ran before the refusal")

    monkeypatch.setattr(StreamingProjector, "_run", forbidden)


def refused(argv, capsys, *words):
    """Exit code 2, one line on stderr holding ``words``, no API wording."""
    code, _, err = cli(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    assert "=True" not in err and "overwrite=" not in err, err
    return err


@pytest.mark.parametrize("args", [forward_args, back_args])
def test_timeline_is_checked_before_projecting(ref, tmp_path, capsys, no_projection, args):
    """--timeline: its folder exists, it has an extension matplotlib writes, and it is not an
    existing file without --overwrite -- all refused before the projection (which used to be
    written first, and the picture then failed)."""
    out = tmp_path / "o"
    refused(
        args(ref, out, "--timeline", str(tmp_path / "nodir" / "t.png")),
        capsys,
        "--timeline",
        "folder",
        "nodir",
        "does not exist",
    )
    refused(args(ref, out, "--timeline", str(tmp_path / "t.xyz")), capsys, "'.xyz'", ".png", ".pdf", ".svg")
    refused(args(ref, out, "--timeline", str(tmp_path / "t")), capsys, "no extension", ".png")
    (tmp_path / "t.png").write_bytes(b"old")
    refused(args(ref, out, "--timeline", str(tmp_path / "t.png")), capsys, "t.png", "already exists", "--overwrite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png"]


@pytest.mark.parametrize("args, data", [(forward_args, ".s"), (back_args, ".v")])
def test_outputs_are_checked_before_projecting(ref, tmp_path, capsys, no_projection, args, data):
    """The output's folder must exist, and neither its header nor its data file may exist
    without --overwrite (the data file was found only by the library, with API wording)."""
    refused(args(ref, tmp_path / "nodir" / "o"), capsys, "OUTPUT", "nodir", "does not exist")
    (tmp_path / f"o{data}").write_bytes(b"keep")
    err = refused(args(ref, tmp_path / "o"), capsys, f"o{data}", "already exists", "--overwrite")
    assert err.startswith(f"stirgpu {args(ref, 'x')[0]}: error: ")
    assert (tmp_path / f"o{data}").read_bytes() == b"keep"
    other = ".hv" if data == ".s" else ".hs"
    refused(args(ref, tmp_path / f"p{other}"), capsys, f"p{other}", "other kind")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"o{data}"]


def test_output_without_extension_gets_stirs_names(ref, tmp_path, capsys):
    """OUTPUT 'fwd' writes fwd.hs + fwd.s and OUTPUT 'bk.v' writes bk.hv + bk.v, as STIR does, and
    the command says which files it wrote."""
    code, out, err = cli(forward_args(ref, tmp_path / "fwd"), capsys)
    assert code == 0, err
    assert f"{tmp_path / 'fwd.hs'} and {tmp_path / 'fwd.s'}" in out
    with read_from_file(tmp_path / "fwd.hs") as a, read_from_file(ref / "ecat953_span3_fwd.hs") as b:
        assert np.array_equal(a.as_array(), b.as_array())
    code, out, err = cli(back_args(ref, tmp_path / "bk.v"), capsys)
    assert code == 0, err
    assert f"{tmp_path / 'bk.hv'} and {tmp_path / 'bk.v'}" in out
    assert read_image(tmp_path / "bk.hv").shape == read_image(ref / "ecat953_span3_image.hv").shape
    code, out, err = cli(forward_args(ref, tmp_path / "named.hs"), capsys)
    assert code == 0 and "written as" not in out  # the name given is the header: nothing to say
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bk.hv", "bk.v", "fwd.hs", "fwd.s", "named.hs", "named.s"]


def _template(tmp_path, pdi, data: bytes | None):
    (tmp_path / "t.hs").write_text(format_projdata_header(pdi, "t.s"))
    if data is not None:
        (tmp_path / "t.s").write_bytes(data)
    return tmp_path / "t.hs"


@pytest.mark.parametrize("data", [None, b""])
def test_back_project_refuses_data_without_values(tmp_path, capsys, no_projection, data):
    """Projection data whose data file is missing or empty: refused when opened, naming the
    header and the data file (it used to fail in the pipeline's reader thread)."""
    hs = _template(tmp_path, small_proj_data_info(), data)
    err = refused(
        ["back-project", str(tmp_path / "b.hv"), str(hs), "--backend", "cpu", "--quiet"],
        capsys,
        str(hs),
        str(tmp_path / "t.s"),
    )
    assert ("does not exist" if data is None else "is empty") in err
    assert not (tmp_path / "b.hv").exists()


def test_data_file_larger_than_header_is_refused(tmp_path, capsys, no_projection):
    """A data file larger than its header describes is refused, naming both sizes."""
    pdi = small_proj_data_info()
    ProjDataOnDisk.create(tmp_path / "d.hs", pdi, fill=1.0).close()
    need = (tmp_path / "d.s").stat().st_size
    with open(tmp_path / "d.s", "ab") as f:
        f.write(b"\0" * 16)
    for argv in (
        ["back-project", str(tmp_path / "b.hv"), str(tmp_path / "d.hs"), "--backend", "cpu", "--quiet"],
        ["info", str(tmp_path / "d.hs")],
    ):
        refused(argv, capsys, "d.s", "larger than its header describes", str(need + 16), f"describes {need}")


@pytest.mark.parametrize("value", ["stir", "exact"])
def test_numerics_is_an_unknown_option(ref, tmp_path, capsys, no_projection, value):
    """There is one projector, so no command takes ``--numerics`` any more: forward-project,
    back-project, osmaposl and demo stop at argparse's one-line error naming the option (after
    its usage line), exit code 2, before anything is written.  Guards against the option being
    taken and ignored (a script asking for the removed float64 geometry getting STIR's numbers
    without a word) or swallowed by an abbreviation of another option."""
    for argv in (
        forward_args(ref, tmp_path / "o.hs", "--numerics", value),
        back_args(ref, tmp_path / "b.hv", "--numerics", value),
        ["osmaposl", str(tmp_path / "recon.par"), "--numerics", value],
        ["demo", "--output", str(tmp_path / "demo"), "--backend", "cpu", "--quiet", "--numerics", value],
    ):
        with pytest.raises(SystemExit) as e:
            cli_main.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert errors == [f"stirgpu: error: unrecognized arguments: --numerics {value}"], err
    assert list(tmp_path.iterdir()) == []


def test_argument_values_use_command_line_words(ref, tmp_path):
    """Values the library would refuse in its own words are refused by the parser, naming the
    option: --max-segment below 0, a memory size it cannot read (osmaposl, plan), no views per
    chunk."""
    cases = [
        forward_args(ref, tmp_path / "o", "--max-segment", "-1"),
        ["plan", str(ref / "ecat953_span3_fwd.hs"), "--memory-budget", "12X"],
        ["plan", str(ref / "ecat953_span3_fwd.hs"), "--max-views-per-chunk", "0"],
        ["osmaposl", "x.par", "--memory-budget", "-3"],
    ]
    for argv in cases:
        with pytest.raises(SystemExit) as e:
            cli_main.main(argv)
        assert e.value.code == 2
    assert list(tmp_path.iterdir()) == []


def test_demo_output_folder_is_checked(tmp_path, capsys, no_projection):
    """demo --output that is a file is refused before simulating anything."""
    (tmp_path / "f").write_text("x")
    refused(["demo", "--output", str(tmp_path / "f"), "--backend", "cpu", "--quiet"], capsys, "is a file")


@pytest.mark.parametrize("args", [forward_args, back_args])
def test_more_subsets_than_views_refused_before_writing(ref, tmp_path, capsys, no_projection, args):
    """--subset K/N with N above the data's views is refused naming --subset, before an output
    is created (it used to be found once the projection started)."""
    refused(args(ref, tmp_path / "o", "--subset", "0/200"), capsys, "--subset 0/200", "only 96 views")
    assert list(tmp_path.iterdir()) == []
