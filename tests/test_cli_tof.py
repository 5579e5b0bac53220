"""``stirgpu forward-project`` / ``back-project`` on TOF projection data (CPU): the outputs are the
Python projectors' to the bit (same code, same plans), with all timing positions, for the whole
data, a subset and a segment range.  Against STIR's own utilities:
``stir_differential/test_cli_tof_vs_stir.py``; refusals off the CPU: ``test_cli_checks.py``."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.cli import main as cli_main
from stirgpu.formats import (
    ProjDataInMemory,
    ProjDataOnDisk,
    VoxelsOnCartesianGrid,
    read_from_file,
    read_image,
    write_image,
)
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.projectors import BackProjector, ForwardProjector


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """GE Discovery MI, 13 TOF bins, 3 segments, 8 views: template, data and an image on disk."""
    folder = tmp_path_factory.mktemp("tof")
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 8, 31, tof_mash_factor=29)
    info = stir_default_image_info(pdi)
    rng = np.random.default_rng(3)
    img = rng.uniform(0, 1, info.shape).astype(np.float32)
    write_image(folder / "img.hv", VoxelsOnCartesianGrid(info, img))
    ProjDataOnDisk.create(folder / "template.hs", pdi, fill=0.0).close()
    data = ProjDataInMemory(pdi)
    data.fill(rng.uniform(0, 1, data.shape).astype(np.float32))
    ProjDataOnDisk.create(folder / "data.hs", pdi, fill=data.as_array()).close()
    return folder, pdi, info, img, data


def cli(argv, capsys):
    code = cli_main.main(argv)
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.mark.parametrize("extra", [[], ["--subset", "1/3"], ["--max-segment", "0"]], ids=["all", "subset", "seg0"])
def test_forward_project_equals_the_python_projector(case, tmp_path, capsys, extra):
    folder, pdi, _, _, _ = case
    image = read_image(folder / "img.hv")  # the projector on the file the command reads
    out = tmp_path / "fwd.hs"
    argv = ["forward-project", str(out), str(folder / "img.hv"), str(folder / "template.hs")]
    cli([*argv, "--backend", "cpu", "--quiet", *extra], capsys)
    fp = ForwardProjector(backend="cpu", max_segment_num_to_process=0 if "--max-segment" in extra else None)
    fp.set_up(pdi, image.info)
    want = ProjDataInMemory(pdi)
    k, n = (1, 3) if "--subset" in extra else (0, 1)
    fp.forward_project(want, image, subset_num=k, num_subsets=n)
    with read_from_file(out) as got:
        assert got.get_proj_data_info().get_num_tof_poss() == 13
        a = got.as_array()
    assert a.shape == want.as_array().shape and np.array_equal(a, want.as_array())
    assert np.count_nonzero(a.any(axis=(1, 2, 3))) >= 3  # several timing positions hold counts


@pytest.mark.parametrize("extra", [[], ["--subset", "2/3"]], ids=["all", "subset"])
def test_back_project_equals_the_python_projector(case, tmp_path, capsys, extra):
    folder, pdi, info, _, data = case
    out = tmp_path / "back.hv"
    cli(["back-project", str(out), str(folder / "data.hs"), "--backend", "cpu", "--quiet", *extra], capsys)
    bp = BackProjector(backend="cpu")
    bp.set_up(pdi, info)
    k, n = (2, 3) if extra else (0, 1)
    want = np.asarray(bp.back_project(None, data, subset_num=k, num_subsets=n))
    got = read_image(out)
    assert got.info == info
    assert np.array_equal(got.array, want) and want.max() > 0
