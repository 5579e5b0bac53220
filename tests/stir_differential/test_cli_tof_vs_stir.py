"""``stirgpu forward-project`` / ``back-project`` on TOF data against STIR's own ``forward_project``
and ``back_project`` utilities with a Parallelproj projector, on the same files and ``.par`` (all
written by STIR): GE Discovery MI, odd numbers of TOF bins (this STIR's Parallelproj projector
returns zeros for even counts: ``test_tof_projection_vs_stir.py``), 1 and 3 segments.

Bar: 3e-5 of STIR's maximum; the kernels measure forward bit for bit and back < 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.cli import main as cli_main
from stirgpu.formats import read_from_file, read_image

pytestmark = pytest.mark.stir

BAR = 3e-5
DMI = "GE Discovery MI 4 rings"

FORWARD_PAR = """Forward Projector parameters :=
type := Parallelproj
Forward Projector Using Parallelproj Parameters :=
End Forward Projector Using Parallelproj Parameters :=
end :=
"""
BACK_PAR = """Back Projector parameters :=
type := Parallelproj
Back Projector Using Parallelproj Parameters :=
End Back Projector Using Parallelproj Parameters :=
end :=
"""

#: (TOF mashing factor, span, max ring difference): 13 bins and 3 segments, 29 bins and 1
CASES = [(29, 1, 1), (13, 3, 1)]


def _inputs(stir, folder, tof_mash, span, max_delta):
    """STIR's template (``template.hs``) and a smooth positive image on its default grid (``image.hv``)."""
    sc = stir.Scanner.get_scanner_from_name(DMI)
    pdi = stir.ProjDataInfo.construct_proj_data_info(sc, span, max_delta, 8, 41, False, tof_mash)
    exam = stir.ExamInfo()
    exam.imaging_modality = stir.ImagingModality(stir.ImagingModality.PT)
    template = stir.ProjDataInterfile(exam, pdi, str(folder / "template.hs"))
    del template  # flushes and closes the file
    img = stir.FloatVoxelsOnCartesianGrid(pdi, 1.0)
    img.set_exam_info(exam)
    nz, ny, nx = img.as_array().shape
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n) for n in (nz, ny, nx)), indexing="ij")
    values = 1.0 + np.cos(2 * x + 0.5) * np.sin(3 * y + 0.2) + 0.5 * z + 2.0 * ((x - 0.3) ** 2 + y**2 < 0.05)
    img.fill(np.ascontiguousarray(values, dtype=np.float32).ravel())
    img.write_to_file(str(folder / "image.hv"))
    (folder / "forward.par").write_text(FORWARD_PAR)
    (folder / "back.par").write_text(BACK_PAR)


def _cli(argv, capsys):
    code = cli_main.main([*argv, "--backend", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err


@pytest.mark.parametrize("tof_mash, span, max_delta", CASES, ids=["13bins-3seg", "29bins-1seg"])
def test_forward_and_back_project_match_stirs_utilities(
    reference_stir, stir, tmp_path, capsys, tof_mash, span, max_delta
):
    _inputs(stir, tmp_path, tof_mash, span, max_delta)
    reference_stir.run("forward_project", "stir_fwd.hs", "image.hv", "template.hs", "forward.par", cwd=tmp_path)
    _cli(
        [
            "forward-project",
            str(tmp_path / "fwd.hs"),
            *(str(tmp_path / f) for f in ("image.hv", "template.hs", "forward.par")),
        ],
        capsys,
    )
    with read_from_file(tmp_path / "fwd.hs") as ours, read_from_file(tmp_path / "stir_fwd.hs") as theirs:
        assert ours.get_proj_data_info() == theirs.get_proj_data_info()
        a, b = ours.as_array(), theirs.as_array()
    assert a.shape[0] == b.shape[0] > 1 and b.max() > 0
    assert np.abs(a - b).max() <= BAR * b.max()

    # back project STIR's forward projection into the image's grid, both ways
    reference_stir.run("back_project", "stir_back.hv", "stir_fwd.hs", "image.hv", "back.par", cwd=tmp_path)
    _cli(
        [
            "back-project",
            str(tmp_path / "back.hv"),
            *(str(tmp_path / f) for f in ("stir_fwd.hs", "image.hv", "back.par")),
        ],
        capsys,
    )
    ours_img, theirs_img = read_image(tmp_path / "back.hv"), read_image(tmp_path / "stir_back.hv")
    assert ours_img.info == theirs_img.info
    c, d = ours_img.array, theirs_img.array
    assert d.max() > 0 and np.abs(c - d).max() <= BAR * d.max()
