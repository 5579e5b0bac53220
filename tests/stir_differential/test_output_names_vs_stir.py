"""Output names: the header and data file STIR 6.5 writes for a name, and stirgpu's.

STIR's rule (``ProjDataInterfile`` for projection data, ``write_basic_interfile`` for images):
a name with the header extension has its data file beside it; a name without an extension gets
both; a name with another extension is the data file, and the header takes the header
extension.  stirgpu's stores follow it (:func:`stirgpu.formats.naming.output_names`); the files
each one writes in an empty folder must be the same.
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import quick_cases, stir_image, stir_proj_data_info, stirgpu_image_info, stirgpu_proj_data_info

from stirgpu.formats import ProjDataFromFile, VoxelsOnCartesianGrid, read_from_file, read_image, write_image

pytestmark = pytest.mark.stir

NAMES = ["out", "out.hs", "out.s", "out.raw", "out.x.y", "out.hv", "out.v"]


def _files(folder):
    """The files written, without the ``.ahv`` STIR writes beside an image header (a copy of
    the header for old Analyze-era tools; stirgpu does not write it)."""
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".ahv")


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("out.hv", "out.v")])
def test_projdata_names_like_stir(stir, tmp_path, name):
    """STIR's ProjDataInterfile and ProjDataFromFile.create write the same two files for a name,
    and each reads the other's header back."""
    case = quick_cases()[0]
    (tmp_path / "stir").mkdir()
    (tmp_path / "ours").mkdir()
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    theirs = stir.ProjDataInterfile(
        stir.ExamInfo(), stir_proj_data_info(stir, case), str(tmp_path / "stir" / name), mode
    )
    theirs.fill(1.0)
    del theirs  # closes the file
    with ProjDataFromFile.create(tmp_path / "ours" / name, stirgpu_proj_data_info(case), fill=1.0) as ours:
        header = ours.path
    assert _files(tmp_path / "ours") == _files(tmp_path / "stir")
    with read_from_file(tmp_path / "stir" / header.name) as pd:
        assert np.all(pd.as_array() == 1)
    assert np.all(np.asarray(stir.ProjData.read_from_file(str(header)).to_array().as_array()) == 1)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("out.hs", "out.s")])
def test_image_names_like_stir(stir, tmp_path, name):
    """STIR's write_to_file (Interfile) and write_image write the same two files for a name."""
    case = quick_cases()[0]
    (tmp_path / "stir").mkdir()
    (tmp_path / "ours").mkdir()
    theirs = stir_image(stir, case, stir_proj_data_info(stir, case))
    theirs.fill(2.0)
    theirs.write_to_file(str(tmp_path / "stir" / name))
    info = stirgpu_image_info(case, stirgpu_proj_data_info(case))
    header = write_image(tmp_path / "ours" / name, VoxelsOnCartesianGrid(info, fill=2.0))
    assert _files(tmp_path / "ours") == _files(tmp_path / "stir")
    assert np.all(read_image(tmp_path / "stir" / header.name).array == 2)


@pytest.mark.parametrize(
    "name, kind", [("out.hv", "projdata"), ("out.v", "projdata"), ("out.hs", "image"), ("out.s", "image")]
)
def test_other_kinds_extension_refused_where_stir_mixes_them(stir, tmp_path, name, kind):
    """Where STIR would put one kind's data under the other kind's extension (projection data
    into out.v beside out.hs, an image into out.s beside out.hv), stirgpu refuses and writes
    nothing."""
    from stirgpu.errors import FormatError

    case = quick_cases()[0]
    (tmp_path / "stir").mkdir()
    (tmp_path / "ours").mkdir()
    if kind == "projdata":
        mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
        theirs = stir.ProjDataInterfile(
            stir.ExamInfo(), stir_proj_data_info(stir, case), str(tmp_path / "stir" / name), mode
        )
        del theirs
        expected = sorted({"out.hs", name})
    else:
        stir_image(stir, case, stir_proj_data_info(stir, case)).write_to_file(str(tmp_path / "stir" / name))
        expected = sorted({"out.hv", name})
    assert _files(tmp_path / "stir") == expected  # STIR: the data under the other kind's name
    with pytest.raises(FormatError, match="other kind"):
        if kind == "projdata":
            ProjDataFromFile.create(tmp_path / "ours" / name, stirgpu_proj_data_info(case))
        else:
            write_image(
                tmp_path / "ours" / name, VoxelsOnCartesianGrid(stirgpu_image_info(case, stirgpu_proj_data_info(case)))
            )
    assert _files(tmp_path / "ours") == []
