"""stirgpu.sirf where it once differed from SIRF, written from SIRF's documented behaviour.

* Attenuation: ``AcquisitionSensitivityModel(mu_image, acq_model)`` takes ``mu`` in 1/cm and its
  factors are ``exp(-line integral of mu)`` with lengths in cm -- STIR's
  ``BinNormalisationFromAttenuationImage``, whose numbers (with STIR's Parallelproj projector)
  are the reference here.
* ``range_geometry()`` / ``domain_geometry()`` are the templates given to ``set_up`` (SIRF hands
  out the model's own template objects, values and all).
* A header without values (its data file absent, empty, or the header itself as in SIRF's
  example templates) is a template: with the storage scheme ``file`` it has the geometry only
  (``is_empty()``, read-only; reading it is an error naming the file); ``memory`` gives writable
  data of its geometry.  ``get_uniform_copy``, ``AcquisitionData(template)`` and
  ``set_up(template, image)`` work on it, as in SIRF's own tests.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataFromFile, ProjDataInMemory, read_from_file
from stirgpu.recon.simulate import demo_geometry


@pytest.fixture(scope="module")
def geometry():
    return demo_geometry(num_views=12, num_tangential_poss=48)


def _image(info, values) -> pet.ImageData:
    return pet.ImageData.from_array(np.ascontiguousarray(values, dtype=np.float32), info)


# -- attenuation ---------------------------------------------------------------------------------
@pytest.mark.stir
def test_attenuation_factors_are_stirs(stir):
    """SIRF's acquisition_sensitivity_from_attenuation: ``asm.unnormalise(ones)`` gives the
    attenuation factors; equal to STIR's BinNormalisationFromAttenuationImage (Parallelproj's
    projector) ``undo`` of ones, on voxels far from 10 mm so a missing cm scale would show."""
    from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir

    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 2, 24, 64, False
    )
    img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 0.5)  # x voxels of 6.27 mm
    mu = (np.float32(0.096) * (0.5 + np.random.default_rng(0).random(img.as_array().shape))).astype(np.float32)
    img.fill(mu)
    norm = stir.BinNormalisationFromAttenuationImage(img, stir.ForwardProjectorByBinParallelproj())
    exam = stir.ExamInfo()
    norm.set_up(exam, spdi)
    theirs = stir.ProjDataInMemory(exam, spdi)
    theirs.fill(1.0)
    norm.undo(theirs)
    theirs = theirs.to_array().as_array().reshape(1, -1, spdi.get_num_views(), spdi.get_num_tangential_poss())

    pdi, info = proj_data_info_from_stir(spdi), image_info_from_stir(img)
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        templ = pet.AcquisitionData(ProjDataInMemory(pdi))
        am = pet.AcquisitionModelUsingParallelproj()
        am.set_up(templ, _image(info, mu))
        asm = pet.AcquisitionSensitivityModel(_image(info, mu), am)
        asm.set_up(templ)
        data = templ.get_uniform_copy(1.0)
        asm.unnormalise(data)
        af, acf = pet.AcquisitionSensitivityModel.compute_attenuation_factors(templ, _image(info, mu))
    assert 0.05 < theirs.min() < 0.5  # strong attenuation: a scale error is far above tolerance
    np.testing.assert_allclose(data.as_array(), theirs, rtol=2e-6)
    np.testing.assert_allclose(af.as_array(), theirs, rtol=2e-6)
    np.testing.assert_allclose(acf.as_array(), 1 / theirs, rtol=2e-6)


# -- the model's geometries ------------------------------------------------------------------------
def test_range_and_domain_geometry_are_the_set_up_templates(geometry):
    pdi, info = geometry
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        acq = pet.AcquisitionData(ProjDataInMemory(pdi, fill=3.0))
        img = _image(info, np.full(info.shape, 2.0))
        am = pet.AcquisitionModelUsingParallelproj()
        with pytest.raises(pet.error, match="set_up"):
            am.range_geometry()
        am.set_up(acq, img)
        assert am.range_geometry() is acq and am.domain_geometry() is img
        assert am.range_geometry().max() == 3 and am.domain_geometry().min() == 2
        lin = am.get_linear_acquisition_model()
        assert lin.range_geometry() is acq and lin.domain_geometry() is img
        # CIL's use: allocate from the geometries
        assert am.range_geometry().allocate(0).norm() == 0 and am.domain_geometry().allocate(1).shape == info.shape


# -- header-only templates ------------------------------------------------------------------------
def _header_only(tmp_path, pdi, how: str):
    """A header without values: its data file absent, empty, or the header itself."""
    with ProjDataFromFile.create(tmp_path / "full", pdi, fill=1.0) as store:
        hs, s = store.path, store.data_path
    if how == "absent":
        s.unlink()
    elif how == "empty":
        s.write_bytes(b"")
    else:
        s.unlink()
        text = hs.read_text().replace(f"name of data file := {s.name}", f"name of data file := {hs.name}")
        assert hs.name in text
        hs.write_text(text)
    return hs


@pytest.mark.parametrize("how", ["absent", "empty", "itself"])
def test_header_only_file_is_a_template(geometry, tmp_path, how):
    pdi, info = geometry
    hs = _header_only(tmp_path, pdi, how)
    before = sorted((p.name, p.stat().st_size) for p in tmp_path.iterdir())
    with stirgpu.config(backend="cpu"), pet.storage_scheme("file"):
        t = pet.AcquisitionData(str(hs))
        assert t.is_empty() and t.read_only and t.get_proj_data_info() == pdi
        assert t.dimensions() == pet.AcquisitionData(ProjDataInMemory(pdi)).dimensions()
        other = pet.AcquisitionData(ProjDataInMemory(pdi))
        for read in (t.as_array, t.norm, t.clone, lambda: t + 1, lambda: other.fill(t)):
            with pytest.raises(pet.error, match=rf"{hs.name}.*template"):
                read()
        with pytest.raises(pet.error, match="read-only"):
            t.fill(1.0)
        u = t.get_uniform_copy(2.0)
        assert not u.is_empty() and u.min() == 2 and u.max() == 2
        z = pet.AcquisitionData(t)
        assert z.norm() == 0 and not z.read_only
        z.fill(1.5)
        assert z.sum() == np.float32(1.5 * z.size)
        img = t.create_uniform_image(1.0)
        am = pet.AcquisitionModelUsingParallelproj()
        am.set_up(t, img)
        y = am.forward(img)
        assert y.dimensions() == t.dimensions() and y.max() > 0
        assert am.backward(y).max() > 0
    with pet.storage_scheme("memory"):
        m = pet.AcquisitionData(str(hs))
        assert not m.is_empty() and not m.read_only and m.norm() == 0
        m.fill(4.0)
        assert m.max() == 4
    assert sorted((p.name, p.stat().st_size) for p in tmp_path.iterdir()) == before


def test_header_naming_itself_opens_as_template_in_formats(geometry, tmp_path):
    pdi, _ = geometry
    hs = _header_only(tmp_path, pdi, "itself")
    with read_from_file(hs) as store:
        assert store.abilities.template and store.get_proj_data_info() == pdi
    with pytest.raises(stirgpu.errors.FormatError, match="header itself"):
        read_from_file(hs, allow_template=False)


def test_sirf_example_template_is_usable(stir_fixtures, tmp_path):
    """A header-only template as SIRF's examples ship it (a copy of a STIR fixture header
    naming itself as data file) under both storage schemes."""
    headers = sorted(stir_fixtures.glob("**/*.hs"))
    if not headers:
        pytest.skip(f"no .hs among the fixtures in {stir_fixtures}")
    hs = tmp_path / "template_sinogram.hs"
    shutil.copyfile(headers[0], hs)
    lines = [
        f"name of data file := {hs.name}" if line.lower().strip().startswith("name of data file") else line
        for line in hs.read_text().splitlines()
    ]
    hs.write_text("\n".join(lines) + "\n")
    for scheme in ("file", "memory"):
        with pet.storage_scheme(scheme):
            t = pet.AcquisitionData(str(hs))
            assert t.get_uniform_copy(0).norm() == 0 and t.is_empty() == (scheme == "file")


# -- out= on data read from a file ---------------------------------------------------------------
def _file_data(tmp_path, pdi, values):
    with ProjDataFromFile.create(tmp_path / "input", pdi, fill=values) as store:
        return store.path, store.data_path


def _snapshot(*paths):
    return [(p.name, p.read_bytes()) for p in paths]


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_out_on_data_read_from_a_file(geometry, tmp_path, scheme):
    """``out=`` given data read from a file (read-only with the scheme ``file``): the result is in
    the object afterwards, the file is never written, and the other operands are read before
    anything replaces them (``x.add(x, out=x)``)."""
    pdi, info = geometry
    x = np.random.default_rng(1).random(ProjDataInMemory(pdi).shape, dtype=np.float32) + np.float32(0.5)
    hs, s = _file_data(tmp_path, pdi, x)
    before = _snapshot(hs, s)
    with stirgpu.config(backend="cpu"), pet.storage_scheme("file"):
        a = pet.AcquisitionData(str(hs))
        assert a.read_only
        with pet.storage_scheme(scheme):
            a.add(a, out=a)
            np.testing.assert_array_equal(a.as_array()[0], x + x)
            assert not a.read_only
            b = pet.AcquisitionData(str(hs))
            b.sapyb(2.0, b, 3.0, out=b)
            np.testing.assert_allclose(b.as_array()[0], 5 * x, rtol=1e-6)
            c = pet.AcquisitionData(str(hs))
            c *= 3
            np.testing.assert_allclose(c.as_array()[0], 3 * x, rtol=1e-6)
            d = pet.AcquisitionData(str(hs))
            assert d.exp(out=d) is d and np.allclose(d.as_array()[0], np.exp(x), rtol=1e-6)
    assert _snapshot(hs, s) == before
    with pytest.raises(pet.error, match="read-only"):
        pet.AcquisitionData(str(hs)).fill(1.0)  # SIRF's fill refuses read-only data


@pytest.mark.parametrize("num_subsets", [1, 3])
def test_forward_out_on_data_read_from_a_file(geometry, tmp_path, num_subsets):
    pdi, info = geometry
    hs, s = _file_data(tmp_path, pdi, 7.0)
    before = _snapshot(hs, s)
    rng = np.random.default_rng(2)
    with stirgpu.config(backend="cpu"), pet.storage_scheme("file"):
        img = _image(info, rng.random(info.shape))
        am = pet.AcquisitionModelUsingParallelproj()
        am.set_background_term(pet.AcquisitionData(ProjDataInMemory(pdi, fill=0.25)))
        out = pet.AcquisitionData(str(hs))
        am.set_up(out, img)
        expected = am.forward(img, 1 % num_subsets, num_subsets).as_array()
        assert am.forward(img, 1 % num_subsets, num_subsets, out=out) is None
        np.testing.assert_array_equal(out.as_array(), expected)
        (tmp_path / "t").mkdir()
        template = pet.AcquisitionData(str(_header_only(tmp_path / "t", pdi, "empty")))
        am.forward(img, 1 % num_subsets, num_subsets, out=template)
        np.testing.assert_array_equal(template.as_array(), expected)
        with read_from_file(hs) as store, pytest.warns(DeprecationWarning), pytest.raises(pet.error, match="read-only"):
            am.forward(img, out=store)  # a bare store would not show a result put elsewhere
    assert _snapshot(hs, s) == before


# -- asarray(copy=...) ----------------------------------------------------------------------------
def test_asarray_views_where_values_are_one_array(geometry, tmp_path):
    """SIRF's ``asarray`` with the array API's ``copy``: memory data (the scheme ``memory``) and
    host images are viewed with ``copy=False`` (writes through the view change the data, as in
    SIRF's tests_asarray); data in a file refuse ``copy=False`` with a ValueError (SIRF's
    ``ContiguousError``) and are copied with ``copy=None``; ``copy=True`` always copies."""
    pdi, info = geometry
    x = np.random.default_rng(5).random(ProjDataInMemory(pdi).shape, dtype=np.float32)
    with pet.storage_scheme("memory"):
        m = pet.AcquisitionData(ProjDataInMemory(pdi)).get_uniform_copy(0)
        m.fill(x[None])
        assert m.supports_array_view
        view = m.asarray(copy=False)
        assert view.shape == m.dimensions() and np.shares_memory(view, m.asarray())
        assert np.shares_memory(view, np.asarray(m))
        view += 1
        np.testing.assert_array_equal(m.as_array()[0], x + np.float32(1))
        assert m.norm() == pytest.approx(np.linalg.norm((x + np.float32(1)).astype(np.float64)), rel=1e-6)
        m *= 2  # the view sees what the container does
        np.testing.assert_array_equal(view[0], (x + np.float32(1)) * np.float32(2))
        copied = m.asarray(copy=True)
        assert not np.shares_memory(copied, view)
        np.testing.assert_array_equal(copied, view)
    with pet.storage_scheme("file"):
        d = pet.AcquisitionData(ProjDataInMemory(pdi)).get_uniform_copy(3.0)
        assert not d.supports_array_view
        with pytest.raises(ValueError, match="copy=False"):
            d.asarray(copy=False)
        with pytest.raises(ValueError, match="views not supported"):
            np.asarray(d)
        np.testing.assert_array_equal(d.asarray(), np.full(d.dimensions(), 3, np.float32))
    img = _image(info, np.ones(info.shape))
    view = img.asarray(copy=False)
    view += 1
    assert img.max() == 2 and not np.shares_memory(img.asarray(copy=True), view)
