"""``stirgpu info``: geometry of projection data and images, JSON output, clean errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO_ROOT

from stirgpu.cli import main as cli_main
from stirgpu.formats import ProjDataFromFile, StorageOrder, VoxelsOnCartesianGrid, write_image
from stirgpu.formats.testing import small_proj_data_info, small_tof_proj_data_info
from stirgpu.geometry import ImageInfo


@pytest.fixture
def projdata(tmp_path):
    pdi = small_proj_data_info()
    with ProjDataFromFile.create(tmp_path / "p.hs", pdi, StorageOrder.SINOGRAM, fill=2.0):
        pass
    return tmp_path / "p.hs"


def run(argv, capsys):
    code = cli_main.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_subcommands_are_registered_from_the_list():
    """Each module in SUBCOMMANDS adds its subcommand (adding one is one line)."""
    assert "stirgpu.cli.info" in cli_main.SUBCOMMANDS
    parser = cli_main.build_parser()
    args = parser.parse_args(["info", "x.hs", "--json"])
    assert args.command == "info" and args.json and callable(args.run)


def test_projdata_text(projdata, capsys):
    code, out, err = run(["info", str(projdata)], capsys)
    assert code == 0 and err == ""
    assert "ECAT 953" in out and "sinogram order" in out and "float32 little-endian" in out
    assert "segments: 3 (-1..1)" in out
    assert "arc-corrected: no" in out and "TOF: no" in out
    assert "views: 12 (0..11" in out and "tangential positions: 16 (-8..7)" in out
    # one row per segment: number, ring differences, axial positions
    rows = [m.groups() for m in re.finditer(r"^\s+(-?\d+)\s+\[\s*(-?\d+),\s*(-?\d+)\]\s+(\d+)", out, re.M)]
    assert rows == [("-1", "-4", "-2", "27"), ("0", "-1", "1", "31"), ("1", "2", "4", "27")]


def test_projdata_json_matches_geometry(projdata, capsys):
    pdi = small_proj_data_info()
    code, out, _ = run(["info", str(projdata), "--json", "--stats"], capsys)
    d = json.loads(out)
    assert code == 0 and d["kind"] == "projection data" and not d["template"]
    assert d["storage_order"] == "sinogram"
    assert [(s["segment"], s["min_ring_diff"], s["max_ring_diff"], s["num_axial_poss"]) for s in d["segments"]] == [
        (s, pdi.get_min_ring_difference(s), pdi.get_max_ring_difference(s), pdi.get_num_axial_poss(s))
        for s in pdi.segment_nums
    ]
    seg0 = d["segments"][1]
    assert seg0["m_max_mm"] == pytest.approx(pdi.get_m(0, 30)) and seg0["m_min_mm"] == pytest.approx(-seg0["m_max_mm"])
    assert d["views"]["phi_min_deg"] == pytest.approx(np.degrees(pdi.get_phi(0)))
    assert d["tangential"]["s_max_mm"] == pytest.approx(pdi.get_s(7))
    n = pdi.total_num_bins
    assert d["values"] == {"min": 2.0, "max": 2.0, "sum": pytest.approx(2.0 * n), "mean": 2.0, "non_finite": 0}


def test_tof_template(tmp_path, capsys):
    """A header without data is reported as a template; TOF positions are listed."""
    from stirgpu.formats import format_projdata_header

    (tmp_path / "t.hs").write_text(format_projdata_header(small_tof_proj_data_info(), "t.s"))
    code, out, _ = run(["info", str(tmp_path / "t.hs")], capsys)
    assert code == 0
    assert "template" in out and "TOF: 3 timing positions (-1..1)" in out
    pdi = small_tof_proj_data_info()
    w, res = pdi.get_sampling_in_k(0), pdi.get_scanner().timing_resolution
    assert f"mash factor 1, bin width {w:.6g} mm, timing resolution {res:.6g} ps FWHM" in out
    code, out, _ = run(["info", str(tmp_path / "t.hs"), "--json"], capsys)
    tof = json.loads(out)["tof"]
    assert tof["num_tof_poss"] == 3 and tof["mash_factor"] == 1 and tof["bin_width_mm"] == w
    assert tof["timing_resolution_ps"] == res and tof["sigma_mm"] == pytest.approx(res * 0.149896229 / 2.355)


def test_tof_plan_chunks_carry_all_timing_positions(tmp_path, capsys):
    """plan on TOF data (CPU): the data line names the timing positions and their width, and
    every operation's chunks hold all of them; chunk bytes are the TOF bytes of their views."""
    from stirgpu.formats import format_projdata_header

    pdi = small_tof_proj_data_info()
    (tmp_path / "t.hs").write_text(format_projdata_header(pdi, "t.s"))
    code, out, err = run(["plan", str(tmp_path / "t.hs"), "--backend", "cpu", "--max-views-per-chunk", "2"], capsys)
    assert code == 0, err
    assert f"3 TOF timing positions of {pdi.get_sampling_in_k(0):.6g} mm" in out
    assert out.count("TOF: 3 timing positions (-1..1) in every viewgram of every chunk") == 4


def test_image(tmp_path, capsys):
    info = ImageInfo((3, 5, 4), (2.0, 1.5, 1.5), origin=(0.0, 1.0, -2.0))
    values = np.arange(60, dtype=np.float32).reshape(3, 5, 4)
    write_image(tmp_path / "i.hv", VoxelsOnCartesianGrid(info, values))
    code, out, _ = run(["info", str(tmp_path / "i.hv"), "--json"], capsys)
    d = json.loads(out)
    assert code == 0 and d["kind"] == "image"
    assert d["shape_zyx"] == [3, 5, 4] and d["voxel_size_zyx_mm"] == [2.0, 1.5, 1.5]
    assert d["origin_zyx_mm"] == pytest.approx([0.0, 1.0, -2.0])
    assert d["min_indices_zyx"] == [0, -2, -2]
    assert d["values"] == {"min": 0.0, "max": 59.0, "sum": float(values.sum()), "mean": 29.5, "non_finite": 0}
    code, out, _ = run(["info", str(tmp_path / "i.hv")], capsys)
    assert "size (z, y, x): (3, 5, 4)" in out and "values: min 0, max 59, sum 1770, mean 29.5; no NaN or ±Inf" in out


def test_image_statistics_are_of_the_finite_values_and_count_the_others(tmp_path, capsys):
    """An image holding one NaN: min, max, sum and mean are those of its finite values, and the
    NaN is counted (JSON ``non_finite``, and in the text).  Guards against min inf, max -inf,
    sum nan: numpy's reductions of an array with a NaN."""
    info = ImageInfo((3, 5, 4), (2.0, 1.5, 1.5))
    values = np.arange(60, dtype=np.float32).reshape(3, 5, 4)
    values[1, 2, 3] = np.nan
    write_image(tmp_path / "i.hv", VoxelsOnCartesianGrid(info, values))
    code, out, _ = run(["info", str(tmp_path / "i.hv"), "--json"], capsys)
    finite = values[np.isfinite(values)]
    want = {"min": 0.0, "max": 59.0, "sum": float(finite.sum()), "mean": float(finite.mean()), "non_finite": 1}
    assert code == 0 and json.loads(out)["values"] == pytest.approx(want)
    code, out, _ = run(["info", str(tmp_path / "i.hv")], capsys)
    assert "values: min 0, max 59, sum " in out and "(of the finite values); 1 non-finite value (NaN or ±Inf)" in out


def test_projdata_statistics_count_infinities(tmp_path, capsys):
    """Projection data of 2 with one +Inf and one -Inf: --stats gives max 2 (not inf), min 2, and 2
    non-finite values; all of them NaN: no finite value, min/max/mean null."""
    pdi = small_proj_data_info()
    with ProjDataFromFile.create(tmp_path / "p.hs", pdi, fill=2.0) as pd:
        v = pd.read_views(1, [11])
        v[0, 0, 0], v[0, 1, 2] = np.inf, -np.inf
        pd.write_views(v, 1, [11])
    code, out, _ = run(["info", str(tmp_path / "p.hs"), "--json", "--stats"], capsys)
    d = json.loads(out)["values"]
    n = pdi.total_num_bins - 2
    assert code == 0 and d == {"min": 2.0, "max": 2.0, "sum": 2.0 * n, "mean": 2.0, "non_finite": 2}
    with ProjDataFromFile.create(tmp_path / "nan.hs", pdi, fill=np.nan):
        pass
    code, out, _ = run(["info", str(tmp_path / "nan.hs"), "--stats"], capsys)
    assert code == 0 and f"values: none finite; {pdi.total_num_bins} non-finite values (NaN or ±Inf)" in out


def test_image_without_data_reports_no_values(tmp_path, capsys):
    info = ImageInfo((3, 5, 4), (2.0, 1.5, 1.5))
    write_image(tmp_path / "i.hv", VoxelsOnCartesianGrid(info))
    (tmp_path / "i.v").unlink()
    code, out, _ = run(["info", str(tmp_path / "i.hv"), "--json"], capsys)
    assert code == 0 and json.loads(out)["has_data"] is False and "values" not in json.loads(out)


@pytest.mark.parametrize("content", ["garbage\n", "!INTERFILE :=\n!PET data type := Emission\n", None])
def test_errors_exit_2_naming_file_without_traceback(tmp_path, capsys, content):
    f = tmp_path / "bad.hs"
    if content is not None:
        f.write_text(content)
    code, out, err = run(["info", str(f)], capsys)
    assert code == 2 and out == ""
    assert str(f) in err and "Traceback" not in err and err.count("\n") == 1


def test_console_entry_point_in_a_subprocess(projdata, tmp_path):
    """The real process: exit code 2 and a one-line message for a data file given as header."""
    cmd = [sys.executable, "-m", "stirgpu.cli.main", "info", str(projdata.with_suffix(".s"))]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 2 and "p.s" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(cmd[:-1] + [str(projdata)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert r.returncode == 0 and "Projection data" in r.stdout


def test_fixtures(stir_fixtures, capsys):
    """Every STIR file of the fixtures is described without error."""
    for f in sorted(list(stir_fixtures.rglob("*.hs")) + list(stir_fixtures.rglob("*.hv"))):
        code, out, err = run(["info", str(f), "--json"], capsys)
        assert code == 0, err
        assert json.loads(out)["file"] == str(f)
