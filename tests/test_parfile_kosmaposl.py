"""KOSMAPOSL parameter files (``stirgpu.parfile.kosmaposl``): the kernel's keys with STIR's defaults
and STIR's list syntax, the OSMAPOSL keys read as for OSMAPOSL, STIR's checks across keys at their
lines, and ``prepare_kosmaposl``'s checks of the anatomical images (all before any work)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import ParFileProblems
from stirgpu.parfile.kosmaposl import read_kosmaposl_par

OBJECTIVE = """objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData
PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
input file := data.hs
projector pair type := Parallelproj
Projector Pair Using Parallelproj Parameters :=
End Projector Pair Using Parallelproj Parameters :=
End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=
"""


def _par(tmp_path, kernel: str, top: str = "disable output := 1\nnumber of subsets := 2\n") -> object:
    p = tmp_path / "k.par"
    p.write_text(f"KOSMAPOSLParameters :=\n{kernel}\n{OBJECTIVE}{top}END KOSMAPOSLParameters :=\n")
    return p


def test_defaults_and_the_example_layout(tmp_path):
    """STIR's KOSMAPOSL_hkem.par's keys (spellings with '_', a list without braces) and STIR's
    defaults for the rest; the OSMAPOSL keys as OSMAPOSL reads them."""
    s = read_kosmaposl_par(
        _par(tmp_path, "hybrid:=1\nsigma_m:= 1\nsigma_dm:=5\nanatomical image filenames:= {MRbrain.hv}\nonly_2D:=1"),
        base_dir=tmp_path,
    )
    assert (s.hybrid, s.only_2d, s.sigma_m, s.sigma_dm) == (True, True, (1.0,), 5.0)
    assert (s.num_neighbours, s.num_non_zero_features, s.sigma_p, s.sigma_dp, s.freeze_at_subiteration) == (
        3,
        1,
        1.0,
        1.0,
        -1,
    )
    assert s.anatomical_image_filenames == (tmp_path / "MRbrain.hv",)
    assert s.kernelised_prefix() == f"{tmp_path}/" and s.common.num_subsets == 2 and s.common.disable_output
    assert s.line("sigma_m") == 3 and s.line("num_subsets") is not None


def test_two_images_and_every_key(tmp_path):
    kernel = (
        "number of neighbours := 5\nnumber of non-zero feature elements := 1\nsigma_m := {0.1, 0.2}\n"
        "sigma_p := 2\nsigma_dp := 3\nsigma_dm := 4\nanatomical image filenames := {a.hv, b.hv}\n"
        "kernelised output filename prefix := out/k\nfreeze iterative kernel at subiteration number := 4"
    )
    s = read_kosmaposl_par(_par(tmp_path, kernel), base_dir=tmp_path)
    assert s.sigma_m == (0.1, 0.2) and s.anatomical_image_filenames == (tmp_path / "a.hv", tmp_path / "b.hv")
    assert (s.num_neighbours, s.sigma_p, s.sigma_dp, s.sigma_dm, s.freeze_at_subiteration) == (5, 2.0, 3.0, 4.0, 4)
    assert s.kernelised_prefix() == f"{tmp_path}/out/k"


@pytest.mark.parametrize(
    "kernel, line, words",
    [
        ("sigma_m := {1, 2}\nanatomical image filenames := {a.hv}", 2, "2 sigma_m values for 1 anatomical image"),
        ("hybrid := 0", 2, "the kernel needs an anatomical image unless it is hybrid"),
        ("hybrid := 1\nnumber of non-zero feature elements := 0", 3, "must be at least 1"),
        ("hybrid := 1\nfreeze iterative kernel at subiteration number := 0", 3, "cannot be frozen at subiteration 0"),
        ("hybrid := 1\nnumber of neighbours := 0", 3, "must be at least 1"),
    ],
)
def test_refusals_at_their_lines(tmp_path, kernel, line, words):
    with pytest.raises(ParFileProblems) as exc:
        read_kosmaposl_par(_par(tmp_path, kernel), base_dir=tmp_path)
    assert exc.value.problems[0].line == line and words in exc.value.problems[0].reason, str(exc.value)


def test_an_osmaposl_file_is_not_a_kosmaposl_one(tmp_path):
    p = tmp_path / "o.par"
    p.write_text("OSMAPOSLParameters :=\nEnd :=\n")
    with pytest.raises(ParFileProblems, match="not a KOSMAPOSL parameter file"):
        read_kosmaposl_par(p)


def test_prepare_checks_the_anatomical_images(tmp_path, osem_problem):
    """Before any work: a missing anatomical image is named at its line; one of another geometry is
    refused (STIR: different sizes); a constant one too; an emission image that would write over an
    anatomical image is refused."""
    from stirgpu.formats import ProjDataOnDisk, VoxelsOnCartesianGrid, write_image
    from stirgpu.geometry import ImageInfo
    from stirgpu.recon.kosmaposl_run import prepare_kosmaposl

    pdi, info, phantom, sim = osem_problem
    ProjDataOnDisk.create(tmp_path / "data.hs", pdi, fill=sim.prompts).close()
    write_image(tmp_path / "init.hv", VoxelsOnCartesianGrid(info, fill=1.0))
    top = "disable output := 1\nnumber of subsets := 2\ninitial estimate := init.hv\n"
    kernel = "sigma_m := 1\nanatomical image filenames := {mr.hv}"
    with pytest.raises(ParFileProblems, match="file not found: .*mr.hv"):
        prepare_kosmaposl(_par(tmp_path, kernel, top), base_dir=tmp_path)
    other = ImageInfo((info.shape[0], 10, 10), info.voxel_size)
    write_image(
        tmp_path / "mr.hv",
        VoxelsOnCartesianGrid(other, fill=np.arange(float(np.prod(other.shape))).reshape(other.shape)),
    )
    with pytest.raises(ParFileProblems, match="differs from the reconstruction's"):
        prepare_kosmaposl(_par(tmp_path, kernel, top), base_dir=tmp_path)
    write_image(tmp_path / "mr.hv", VoxelsOnCartesianGrid(info, fill=2.0), overwrite=True)
    with pytest.raises(ParFileProblems, match="is constant"):
        prepare_kosmaposl(_par(tmp_path, kernel, top), base_dir=tmp_path)
    write_image(tmp_path / "mr.hv", VoxelsOnCartesianGrid(info, fill=phantom.activity(info)), overwrite=True)
    with prepare_kosmaposl(_par(tmp_path, kernel, top), base_dir=tmp_path) as prepared:
        assert prepared.osem.kernelised_output_files() == [tmp_path / "_1.hv"]  # (STIR: 1 subiteration by default)
    # an emission image (prefix mr, subiteration 1: mr_1.hv) never writes over an anatomical image
    write_image(tmp_path / "mr_1.hv", VoxelsOnCartesianGrid(info, fill=phantom.activity(info)))
    over = "sigma_m := 1\nanatomical image filenames := {mr_1.hv}\nkernelised output filename prefix := mr"
    with pytest.raises(ParFileProblems, match="anatomical image") as exc:
        prepare_kosmaposl(_par(tmp_path, over, top), base_dir=tmp_path)
    assert "mr_1.hv" in str(exc.value) and len(exc.value.problems) == 1
