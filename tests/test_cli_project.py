"""``stirgpu forward-project`` / ``back-project``: STIR's argument order, STIR's numbers, subsets,
budgets, statistics and timelines, and clean refusals.

Reference tolerance: stirgpu vs STIR 6.5's own Parallelproj projections of the fixture (STIR
linked with libparallelproj 2.0.7).  Forward projections are STIR's bit for bit (STIR's float32
LOR endpoints and libparallelproj's float32 arithmetic); back projections differ by the order of
float32 additions into a voxel only: 1.6e-6 of the maximum measured, bar 1e-5.  CLI-vs-library
comparisons are bitwise (same code, same plans) or to float32 summation order for back
projections with other plans.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import back_args, cli, forward_args, reference_results

from stirgpu.cli import main as cli_main
from stirgpu.execution import format_bytes
from stirgpu.formats import ProjDataInMemory, read_from_file, read_image
from stirgpu.geometry import ImageInfo
from stirgpu.projectors import BackProjector

#: back projections against STIR's, of its maximum (module docstring)
STIR_TOL = 1e-5


@pytest.fixture
def ref(stir_fixtures):
    return reference_results(stir_fixtures)


def test_forward_project_matches_stir(ref, tmp_path, capsys):
    """forward-project OUTPUT IMAGE TEMPLATE reproduces STIR's own Parallelproj forward projection
    of the fixture bit for bit (its float32 endpoints and libparallelproj's arithmetic).  Guards
    against the command projecting with another geometry, image frame or units than STIR."""
    out = tmp_path / "fwd.hs"
    code, _, err = cli(forward_args(ref, out), capsys)
    assert code == 0, err
    with read_from_file(out) as got, read_from_file(ref / "ecat953_span3_fwd.hs") as want:
        a, b = got.as_array(), want.as_array()
    assert b.max() > 0 and np.array_equal(a, b)


def test_back_project_default_image_and_par_file(ref, tmp_path, capsys):
    """back-project OUTPUT PROJDATA [PROJECTOR.par] without a template writes STIR's default image
    for the data; with the fixture's Parallelproj back-projector file (restrict to FOV = 1) the
    values are those of BackProjector with that option."""
    out = tmp_path / "back.hv"
    par = ref.parent / "stir_recon_test_pack" / "back_projector_parallelproj.par"
    code, _, err = cli(
        ["back-project", str(out), str(ref / "ecat953_span3_fwd.hs"), str(par), "--backend", "cpu", "--quiet"], capsys
    )
    assert code == 0, err
    img = read_image(out)
    with read_from_file(ref / "ecat953_span3_fwd.hs") as data:
        pdi = data.get_proj_data_info()
        assert img.info == ImageInfo.default_for(pdi)
        bp = BackProjector(backend="cpu", restrict_to_cylindrical_fov=True)
        bp.set_up(pdi, img.info)
        want = bp.back_project(None, data)
    np.testing.assert_allclose(img.array, want, rtol=0, atol=2e-6 * want.max())


def test_back_project_with_template_matches_stir(ref, tmp_path, capsys):
    """back-project with a template image reproduces STIR's back projection of the fixture, to
    float32 summation order (STIR_TOL, module docstring)."""
    out = tmp_path / "back.hv"
    code, _, err = cli(back_args(ref, out), capsys)
    assert code == 0, err
    got, want = read_image(out).array, read_image(ref / "ecat953_span3_back.hv").array
    assert np.abs(got - want).max() <= STIR_TOL * want.max()


def test_subset_and_budget_options(ref, tmp_path, capsys):
    """--subset 1/4 writes only that subset's views (the rest stays 0); a --memory-budget that
    forces many chunks changes nothing in the numbers; --stats prints the plan and timings."""
    full, sub = tmp_path / "full.hs", tmp_path / "sub.hs"
    assert cli(forward_args(ref, full), capsys)[0] == 0
    code, text, err = cli(forward_args(ref, sub, "--subset", "1/4", "--memory-budget", "4M", "--stats"), capsys)
    assert code == 0, err
    assert "views per chunk (max)" in text and "overlap efficiency" in text
    assert "forward projection, subset 1 of 4 on cpu" in text  # the statistics name the operation and subset
    assert text.splitlines()[-1] == f"wrote {sub} (+ sub.s, {format_bytes(4 * 1044480 + sub.stat().st_size)})"
    with read_from_file(full) as a, read_from_file(sub) as b:
        pdi = a.get_proj_data_info()
        views = pdi.subset_views(1, 4)
        others = np.setdiff1d(np.arange(pdi.get_num_views()), views)
        for s in pdi.segment_nums:
            assert np.array_equal(b.read_views(s, views), a.read_views(s, views))
            assert np.all(b.read_views(s, others) == 0)


def test_timeline_png(ref, tmp_path, capsys):
    """--timeline FILE.png draws the stages of the call into a PNG."""
    png = tmp_path / "t.png"
    code, _, err = cli(back_args(ref, tmp_path / "b.hv", "--timeline", str(png)), capsys)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refusals(ref, tmp_path, capsys):
    """An existing output is refused without --overwrite (and replaced with it); a budget below
    one viewgram is a one-line PlanError; nothing is left behind by a failed call."""
    out = tmp_path / "o.hs"
    args = forward_args(ref, out)
    assert cli(args, capsys)[0] == 0
    code, _, err = cli(args, capsys)
    assert code == 2 and "already exists" in err
    assert cli(args + ["--overwrite"], capsys)[0] == 0
    new = tmp_path / "n.hs"
    code, _, err = cli(forward_args(ref, new, "--memory-budget", "20K"), capsys)
    assert code == 2 and "viewgram" in err and len(err.strip().splitlines()) == 1
    assert not new.exists() and not new.with_suffix(".s").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.hs", "o.s"]


def test_bad_arguments(ref, tmp_path, capsys):
    """--subset and --devices are checked by the parser (exit code 2)."""
    base = [
        "forward-project",
        str(tmp_path / "x.hs"),
        str(ref / "ecat953_span3_image.hv"),
        str(ref / "ecat953_span3_fwd.hs"),
    ]
    for bad in (["--subset", "4/4"], ["--subset", "x"], ["--devices", "0,0"], ["--memory-budget", "lots"]):
        with pytest.raises(SystemExit) as e:
            cli_main.main(base + bad)
        assert e.value.code == 2
    code, _, err = cli(
        ["back-project", str(tmp_path / "b.hv"), str(ref / "ecat953_span3_fwd.hs"), "a.par", "b.par"], capsys
    )
    assert code == 2 and "two projector parameter files" in err


def test_mismatched_par_role(ref, tmp_path, capsys):
    """A back-projector .par given to forward-project is refused, naming the file."""
    par = ref.parent / "stir_recon_test_pack" / "back_projector_parallelproj.par"
    code, _, err = cli(
        [
            "forward-project",
            str(tmp_path / "x.hs"),
            str(ref / "ecat953_span3_image.hv"),
            str(ref / "ecat953_span3_fwd.hs"),
            str(par),
            "--backend",
            "cpu",
            "--quiet",
        ],
        capsys,
    )
    assert code == 2 and "back_projector_parallelproj.par" in err


def test_library_round_trip_matches_cli(ref, tmp_path, capsys):
    """The CLI's forward projection equals the library's, bit for bit (same engine)."""
    from stirgpu.projectors import ForwardProjector

    out = tmp_path / "f.hs"
    assert (
        cli(
            [
                "forward-project",
                str(out),
                str(ref / "ecat953_arc_sino_image.hv"),
                str(ref / "ecat953_arc_sino_fwd.hs"),
                "--backend",
                "cpu",
                "--quiet",
            ],
            capsys,
        )[0]
        == 0
    )
    image = read_image(ref / "ecat953_arc_sino_image.hv")
    with read_from_file(out) as got:
        pdi = got.get_proj_data_info()
        fp = ForwardProjector(backend="cpu")
        fp.set_up(pdi, image.info)
        want = ProjDataInMemory(pdi)
        fp.forward_project(want, image)
        assert np.array_equal(got.as_array(), want.as_array())
