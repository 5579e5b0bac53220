"""STIR's scatter simulation parameter files (``stirgpu.parfile.scatter``): both forms STIR reads
(``simulate_scatter``'s wrapper with its type key, and the bare block SIRF's
``SingleScatterSimulator(filename)`` gives STIR), STIR's defaults, names taken from the working
folder, and every bad value or unknown key at its line in one report."""

from __future__ import annotations

import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.parfile.scatter import ScatterParameters, read_scatter_par

WRAPPED = """Scatter Simulation Parameters :=
Scatter Simulation type := PET Single Scatter Simulation
PET Single Scatter Simulation Parameters :=
template_projdata_filename := ${{TEMPLATE}}
attenuation image filename := mu.hv
activity image filename := act.hv
output filename prefix := out
attenuation threshold := .05
randomly place scatter points := 0
use cache := 1
zoom XY for attenuation image for scatter points := 0.5
Z size of downsampled image for scatter points := 4
downsampled scanner number of rings := 3
{extra}End PET Single Scatter Simulation Parameters:=
End Scatter Simulation Parameters:=
"""


def test_simulate_scatter_file(tmp_path):
    extra = "downsample scanner := 1\nattenuation image for scatter points filename := sp.hv\n"
    (tmp_path / "s.par").write_text(WRAPPED.format(extra=extra))
    p = read_scatter_par(tmp_path / "s.par", base_dir=tmp_path, env={"TEMPLATE": "t.hs"})
    assert p.template == tmp_path / "t.hs"
    assert p.attenuation_image == tmp_path / "mu.hv"
    assert p.activity_image == tmp_path / "act.hv"
    assert p.output_prefix == "out"
    assert p.attenuation_threshold == 0.05
    assert p.randomly_place_scatter_points is False
    assert (p.zoom_xy, p.zoom_z, p.size_xy, p.size_z) == (0.5, -1.0, -1, 4)
    assert p.downsampled_rings == 3 and p.downsample_scanner is True
    assert p.scatter_point_image == tmp_path / "sp.hv"


def test_bare_block_and_stir_defaults(tmp_path):
    (tmp_path / "s.par").write_text(
        "PET Single Scatter Simulation Parameters :=\nEnd PET Single Scatter Simulation Parameters :=\n"
    )
    p = read_scatter_par(tmp_path / "s.par")
    assert p == ScatterParameters(path=tmp_path / "s.par")
    assert p.attenuation_threshold == 0.01 and p.randomly_place_scatter_points and p.use_cache


def test_refusals_reported_at_their_lines(tmp_path):
    extra = "downsample scanner := 2\nzoom Z for attenuation image for scatter points := big\nnot a key := 3\n"
    (tmp_path / "s.par").write_text(WRAPPED.format(extra=extra))
    with pytest.raises(ParFileProblems) as exc:
        read_scatter_par(tmp_path / "s.par", env={"TEMPLATE": "t.hs"})
    lines = [p.line for p in exc.value.problems]
    assert lines == [14, 15, 16]
    text = str(exc.value)
    assert "'downsample scanner' expects 0 or 1" in text
    assert "expects a number, got 'big'" in text and "'not a key'" in text


def test_other_files_are_refused(tmp_path):
    (tmp_path / "s.par").write_text("OSMAPOSLParameters :=\nEnd :=\n")
    with pytest.raises(ParFileProblems, match="not a scatter simulation file"):
        read_scatter_par(tmp_path / "s.par")
    (tmp_path / "t.par").write_text("Scatter Simulation Parameters :=\nEnd Scatter Simulation Parameters :=\n")
    with pytest.raises(ParFileProblems, match="needs 'Scatter Simulation type"):
        read_scatter_par(tmp_path / "t.par")
