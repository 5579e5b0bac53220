"""Inputs holding NaN or ±Inf are refused before anything is written, with one line naming the
input (its file, else the Python argument) and the count of non-finite values.

Data are tiny (ECAT 953, span 1, 24 views, 32 tangential positions; a 15 x 33 x 33 image): the
refusals are exact (a count), not numerical.  The streamed cases use one view per chunk, so the
non-finite value sits in a late chunk of many, after earlier chunks were read and computed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import cli, phantom, random_proj_data, small_geometry

import stirgpu
from stirgpu.arrays import count_non_finite
from stirgpu.errors import FormatError, NonFiniteError
from stirgpu.formats import ProjDataFromFile, VoxelsOnCartesianGrid, write_image
from stirgpu.formats.finite import count_non_finite_store
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import BackProjector, ForwardProjector, ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood
from stirgpu.recon.sensitivity import SensitivitySpec


@pytest.fixture(scope="module")
def geometry():
    return small_geometry()


def _poke(store, values, where=((2, 23, 5, 7),)):
    """``store`` with ``values`` written at ``where`` ((segment, view, axial, tangential) each);
    the default is the last view of the last segment: the last chunk read."""
    for value, (s, v, a, t) in zip(values, where, strict=True):
        block = store.read_views(s, [v])
        block[0, a, t] = value
        store.write_views(block, s, [v])
    return store


def _disk(path, pdi, fill=1.0, values=(), where=((2, 23, 5, 7),)):
    """A committed disk store of ``fill`` with ``values`` (if any) at ``where``; its header's path."""
    with ProjDataFromFile.create(path, pdi, fill=fill) as pd:
        if values:
            _poke(pd, values, where)
    return path


def test_count_non_finite_counts_nan_and_both_infinities():
    """One sum decides that there are none; the exact count follows only a sum that is not finite
    (a float32 sum of large finite values overflows too: that count is 0, not a refusal)."""
    a = np.ones(10_000, np.float32)
    assert count_non_finite(a) == 0
    a[[3, 500, 9_999]] = np.nan, np.inf, -np.inf
    assert count_non_finite(a) == 3
    assert count_non_finite(np.full(100, 3e38, np.float32)) == 0
    assert count_non_finite(np.arange(5)) == 0 and count_non_finite(np.float32(np.inf)) == 1


def test_forward_projection_refuses_a_nan_voxel_and_leaves_no_output(geometry, tmp_path):
    """Python: an image with a NaN inside the FOV is refused before the projection starts, naming
    the argument and the count; the new disk output is aborted (no file left).  Guards against
    the 1,374 NaN bins a NaN voxel gave, with no word."""
    pdi, info = geometry
    image = phantom(info)
    image[7, 16, 16] = np.nan
    fp = ForwardProjector(backend="cpu")
    fp.set_up(pdi, info)
    out = ProjDataFromFile.create(tmp_path / "fwd.hs", pdi)
    with pytest.raises(NonFiniteError, match=r"^image holds 1 non-finite value \(NaN or ±Inf\)") as exc:
        fp.forward_project(out, image)
    assert isinstance(exc.value, FormatError) and exc.value.count == 1
    assert os.listdir(tmp_path) == []


def test_back_projection_refuses_infinities_in_a_late_chunk_and_names_the_file(geometry, tmp_path):
    """Streamed, one view per chunk (120 chunks): +Inf in the last chunk and -Inf in the first
    are found by the reader's count, the file named with both counted; the caller's image keeps
    its values."""
    pdi, info = geometry
    path = _disk(tmp_path / "prompts.hs", pdi, values=(np.inf, -np.inf), where=((2, 23, 5, 7), (-2, 0, 0, 0)))
    bp = BackProjector(backend="cpu", max_views_per_chunk=1)
    bp.set_up(pdi, info)
    image = np.full(info.shape, 3.0, np.float32)
    with ProjDataFromFile.open(path) as data:
        with pytest.raises(NonFiniteError, match=r"prompts\.hs holds 2 non-finite values") as exc:
            bp.back_project(image, data)
    assert exc.value.path == str(path) and exc.value.count == 2
    assert len(bp.last_plan.chunks) == 120 and np.all(image == 3.0)


def test_subset_counts_its_own_views(geometry):
    """A subset's call counts the values it reads: an Inf in view 23 is refused by subset 1 of 2
    (views 1, 3, ..., 23) and not seen by subset 0."""
    pdi, info = geometry
    data = _poke(random_proj_data(pdi), [np.inf])
    bp = BackProjector(backend="cpu", max_views_per_chunk=2)
    bp.set_up(pdi, info)
    assert np.isfinite(bp.back_project(None, data, 0, 2)).all()
    with pytest.raises(NonFiniteError, match=r"^proj_data holds 1 non-finite value"):
        bp.back_project(None, data, 1, 2)


def test_model_forward_projection_refuses_a_nan_additive_term_and_aborts_its_output(geometry, tmp_path):
    """forward_project(additive=a) with a NaN in a's last chunk: the chunks before were written to
    the new output, which is aborted (no file left); the argument is named."""
    pdi, info = geometry
    additive = _poke(random_proj_data(pdi), [np.nan])
    fp = ForwardProjector(backend="cpu", max_views_per_chunk=1)
    fp.set_up(pdi, info)
    out = ProjDataFromFile.create(tmp_path / "model.hs", pdi)
    with pytest.raises(NonFiniteError, match=r"^additive holds 1 non-finite value"):
        fp.forward_project(out, phantom(info), additive=additive)
    assert os.listdir(tmp_path) == []


def test_fused_osem_call_names_its_inputs(geometry):
    """ProjectorPair.forward_back_ratio: a NaN in the multiplicative factors is named by its argument."""
    pdi, info = geometry
    pair = ProjectorPair(backend="cpu")
    pair.set_up(pdi, info)
    factors = _poke(random_proj_data(pdi, low=0.5), [np.nan])
    with pytest.raises(NonFiniteError, match=r"^multiplicative holds 1 non-finite value"):
        pair.forward_back_ratio(phantom(info), random_proj_data(pdi), multiplicative=factors)


def test_the_check_can_be_turned_off(geometry):
    """With ``check_finite=False`` (for measuring its cost) the Inf goes through, as before."""
    pdi, info = geometry
    data = _poke(random_proj_data(pdi), [np.inf])
    bp = BackProjector(backend="cpu")
    bp.set_up(pdi, info)
    with stirgpu.config(check_finite=False):
        assert not np.isfinite(bp.back_project(None, data)).all()


def test_count_non_finite_store_reads_every_view(geometry, tmp_path):
    """Every view of the segments asked for, by one thread or several (a file store reads in
    parallel): the same count."""
    pdi, _ = geometry
    where = ((0, 5, 1, 1), (1, 9, 2, 2), (-2, 23, 0, 0))
    data = _poke(random_proj_data(pdi), [np.nan, np.inf, -np.inf], where=where)
    assert count_non_finite_store(data, threads=1) == 3 and count_non_finite_store(data, segments=[0]) == 1
    path = _disk(tmp_path / "d.hs", pdi, values=(np.nan, np.inf, -np.inf), where=where)
    with ProjDataFromFile.open(path) as pd:
        assert [count_non_finite_store(pd, threads=n) for n in (1, 3)] == [3, 3]


def test_parallel_count_splits_an_image_over_the_pool():
    """The I/O threads' count of an image (slabs along z) is the whole image's count."""
    from stirgpu.execution.hostio import DaemonPool, parallel_count_non_finite

    image = np.ones((40, 128, 128), np.float32)  # (2.6 MB: several pieces of at least 1 MB)
    image[[0, 17, 39], 5, 6] = np.nan, np.inf, -np.inf
    pool = DaemonPool(2, "test-count")
    try:
        assert parallel_count_non_finite(pool, image) == 3 and parallel_count_non_finite(None, image) == 3
    finally:
        pool.shutdown()


# -- the command line ------------------------------------------------------------------------------
def _image_file(path, info, values):
    write_image(path, VoxelsOnCartesianGrid(info, values))
    return path


def test_cli_forward_project_names_the_image_file(geometry, tmp_path, capsys):
    pdi, info = geometry
    image = phantom(info)
    image[7, 16, 16] = np.nan
    truth = _image_file(tmp_path / "truth.hv", info, image)
    template = _disk(tmp_path / "template.hs", pdi)
    out = tmp_path / "fwd.hs"
    code, _, err = cli(["forward-project", str(out), str(truth), str(template), "--backend", "cpu", "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "truth.hv holds 1 non-finite value (NaN or ±Inf)" in err
    assert sorted(os.listdir(tmp_path)) == ["template.hs", "template.s", "truth.hv", "truth.v"]


def test_cli_back_project_names_the_data_file(geometry, tmp_path, capsys):
    pdi, info = geometry
    data = _disk(tmp_path / "prompts.hs", pdi, values=(np.inf,))
    out = tmp_path / "back.hv"
    argv = ["back-project", str(out), str(data), "--backend", "cpu", "--quiet", "--memory-budget", "320K"]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "prompts.hs holds 1 non-finite value (NaN or ±Inf)" in err, err
    assert sorted(os.listdir(tmp_path)) == ["prompts.hs", "prompts.s"]


# -- reconstruction --------------------------------------------------------------------------------
@pytest.fixture
def osem_inputs(geometry, tmp_path):
    """Prompts, additive sinogram and normalisation on disk (constants), in ``tmp_path``."""
    pdi, _ = geometry
    return {
        name: _disk(tmp_path / f"{name}.hs", pdi, fill=fill)
        for name, fill in (("prompts", 2.0), ("additive", 0.1), ("norm", 1.5))
    }


@pytest.mark.parametrize("bad", ["prompts", "additive", "norm"])
def test_osem_refuses_non_finite_data_before_writing_anything(geometry, osem_inputs, tmp_path, bad):
    """OSEM reads its data once before the sensitivities: an Inf in the last view of the
    prompts, additive sinogram or normalisation is refused naming that file, and no sensitivity
    or estimate is written."""
    pdi, info = geometry
    with ProjDataFromFile.open(osem_inputs[bad], "r+") as pd:
        _poke(pd, [np.inf])
    before = set(os.listdir(tmp_path))
    stores = {n: ProjDataFromFile.open(p) for n, p in osem_inputs.items()}
    objective = PoissonLogLikelihood(stores["prompts"], additive=stores["additive"], normalisation=stores["norm"])
    osem = OSEM(
        objective,
        ProjectorPair(backend="cpu"),
        info,
        num_subsets=2,
        output_filename_prefix=tmp_path / "est",
        sensitivity=SensitivitySpec(subset_filenames=str(tmp_path / "sens_%d.hv")),
    )
    with pytest.raises(NonFiniteError, match=rf"{bad}\.hs holds 1 non-finite value"):
        osem.reconstruct()
    for pd in stores.values():
        pd.close()
    assert set(os.listdir(tmp_path)) == before


def test_osem_refuses_a_non_finite_initial_estimate(geometry, osem_inputs, tmp_path):
    pdi, info = geometry
    stores = {n: ProjDataFromFile.open(p) for n, p in osem_inputs.items()}
    objective = PoissonLogLikelihood(stores["prompts"], normalisation=stores["norm"])
    osem = OSEM(objective, ProjectorPair(backend="cpu"), info, num_subsets=2, output_filename_prefix=tmp_path / "e")
    x = np.ones(info.shape, np.float32)
    x[0, 0, 0] = -np.inf
    with pytest.raises(NonFiniteError, match=r"^initial estimate holds 1 non-finite value"):
        osem.reconstruct(x)
    assert osem.sensitivities is None and not list(tmp_path.glob("e_*"))
    for pd in stores.values():
        pd.close()


def test_cli_osmaposl_names_the_files(geometry, osem_inputs, tmp_path, capsys, monkeypatch):
    """``stirgpu osmaposl``: an Inf in the prompts names prompts.hs (no file written); a NaN in
    the initial estimate file is refused among the .par's problems, at its line."""
    pdi, info = geometry
    monkeypatch.chdir(tmp_path)
    with ProjDataFromFile.open("prompts.hs", "r+") as pd:
        _poke(pd, [np.inf, np.inf], where=((0, 20, 3, 3), (1, 21, 3, 3)))
    par = osmaposl_par("prompts.hs", normalisation="norm.hs", additive_sinogram="additive.hs", num_subsets=2)
    (tmp_path / "osem.par").write_text(par)
    before = set(os.listdir(tmp_path))
    code, _, err = cli(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"], capsys)
    assert code == 2 and "prompts.hs holds 2 non-finite values (NaN or ±Inf)" in err, err
    assert set(os.listdir(tmp_path)) == before
    start = np.ones(info.shape, np.float32)
    start[3, 3, 3] = np.nan
    _image_file(tmp_path / "start.hv", info, start)
    (tmp_path / "osem.par").write_text(
        osmaposl_par("norm.hs", num_subsets=2, initial_estimate="start.hv", output_filename_prefix="x")
    )
    code, _, err = cli(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"], capsys)
    assert code == 2 and "start.hv holds 1 non-finite value (NaN or ±Inf)" in err and "osem.par:" in err, err
    assert not list(tmp_path.glob("x_*"))


# -- GPUs ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("pin", ["always", "never"])
def test_gpu_counts_direct_and_staged_chunks(geometry, cp, pin):
    """On a GPU, an in-memory store copied straight from page-locked memory (``always``: its chunks
    summed on the device after their copy) or through the staging buffers (``never``: counted by
    the reader): an Inf in the last of many chunks is refused with its count, and a clean store
    still back projects as on the CPU."""
    pdi, info = geometry
    clean = random_proj_data(pdi)
    bad = _poke(random_proj_data(pdi), [np.inf, np.nan], where=((2, 23, 5, 7), (-1, 11, 0, 0)))
    with stirgpu.config(pin_host_memory=pin):
        bp = BackProjector(backend="cuda", max_views_per_chunk=1)
        bp.set_up(pdi, info)
        with pytest.raises(NonFiniteError, match=r"^proj_data holds 2 non-finite values"):
            bp.back_project(None, bad)
        got = bp.back_project(None, clean)
        assert ("data" in bp.last_stats.direct) == (pin == "always")  # (the path this case is about)
    cpu = BackProjector(backend="cpu")
    cpu.set_up(pdi, info)
    want = cpu.back_project(None, clean)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * float(want.max()))
    assert count_non_finite(cp.asarray(bad.read_views(2, [23]))) == 1
