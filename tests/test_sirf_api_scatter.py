"""``SingleScatterSimulator`` as SIRF's ``scatter_simulation.py`` and ``tests_scatter.py`` drive it
(``set_attenuation_image``, ``set_up(template, image)``, ``forward(image)``), on a small template
read from a header that carries an energy window, and with a STIR parameter file.

Its numbers are :mod:`stirgpu.scatter`'s (equal to STIR's ``simulate_scatter``:
``tests/stir_differential/test_scatter_vs_stir.py``): with centred scatter points the simulator
must give exactly what the scatter package gives on the same images.  With STIR's default random
placement two simulators differ (a new draw each), but by little: each lies within 15 % of the
norm of the centred simulation (measured here: about 6 %; the scatter-point grid of this small
template is coarse); a simulator that ignored the setting would give equal draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from scatter_templates import scatter_scanner, write_scatter_template

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory, VoxelsOnCartesianGrid
from stirgpu.geometry import ProjDataInfo
from stirgpu.scatter import ScatterSettings, SingleScatterSimulation, energy_model_from_header


@pytest.fixture
def template_file(tmp_path):
    """A small non-arc-corrected template whose header gives the energy window (350-650 keV) and
    the scanner's energy resolution, with its data file."""
    pdi = ProjDataInfo.construct(scatter_scanner(4, 40, resolution=0.22), 1, 1)
    return write_scatter_template(tmp_path, pdi, window=(350.0, 650.0))


def _images(template):
    """SIRF's example phantom: a water cylinder and an off-centre activity rod (EllipticCylinder,
    add_shape), on the template's default image."""
    atten = pet.ImageData(template)
    nz, ny, nx = atten.dimensions()
    vz, vy, vx = atten.voxel_sizes()
    water = pet.EllipticCylinder()
    water.set_length(nz * vz)
    water.set_radii((ny * vy * 0.3, nx * vx * 0.3))
    water.set_origin((nz * vz * 0.5, 0, 0))
    atten.add_shape(water, scale=9.687e-02)
    act = atten.get_uniform_copy(0)
    rod = pet.EllipticCylinder()
    rod.set_length(nz * vz)
    rod.set_radii((ny * vy * 0.15, nx * vx * 0.15))
    rod.set_origin((nz * vz * 0.5, ny * vy * 0.06, nx * vx * 0.06))
    act.add_shape(rod, scale=1)
    return act, atten


def _direct(template_path, act, atten) -> dict[int, np.ndarray]:
    template = pet.AcquisitionData(str(template_path))
    pdi = template.get_proj_data_info()
    energy = energy_model_from_header(template_path, pdi.get_scanner())
    settings = ScatterSettings(randomly_place_scatter_points=False)
    sim = SingleScatterSimulation(
        pdi, energy, VoxelsOnCartesianGrid.from_array(atten.as_array(), atten.image_info), settings
    )
    return sim.simulate(VoxelsOnCartesianGrid.from_array(act.as_array(), act.image_info))


def _centred(template, atten, act):
    sss = pet.SingleScatterSimulator()
    sss.set_attenuation_image(atten)
    sss.set_randomly_place_scatter_points(False)
    sss.set_up(template, act)
    return sss


def test_forward_is_the_scatter_simulation(template_file):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    scatter = _centred(template, atten, act).forward(act)
    assert isinstance(scatter, pet.AcquisitionData)
    assert scatter.get_proj_data_info() == template.get_proj_data_info()
    expected = _direct(template_file, act, atten)
    store = scatter.proj_data
    for seg, values in expected.items():
        np.testing.assert_array_equal(store.get_segment_by_view(seg), values)
    assert scatter.norm() > 0


def test_forward_into_out(template_file):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    sss = _centred(template, atten, act)
    out = template.get_uniform_copy(5)
    assert sss.forward(act, out=out) is None
    np.testing.assert_array_equal(out.as_array(), sss.forward(act).as_array())


def test_forward_simulates_the_image_it_is_given(template_file):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    sss = _centred(template, atten, act)
    twice = sss.forward(act * 2).as_array()
    np.testing.assert_allclose(twice, 2 * sss.forward(act).as_array(), rtol=1e-6, atol=0)


def test_random_placement_is_the_default(template_file):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    centred = _centred(template, atten, act).forward(act).as_array()
    draws = []
    for _ in range(2):
        sss = pet.SingleScatterSimulator()
        sss.set_attenuation_image(atten)
        sss.set_up(template, act)
        draws.append(sss.forward(act).as_array())
    assert not np.array_equal(draws[0], draws[1])
    for d in draws:
        assert np.linalg.norm(d - centred) <= 0.15 * np.linalg.norm(centred)


def test_parameter_file(template_file, tmp_path, monkeypatch):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    atten.write(str(tmp_path / "mu.hv"))
    (tmp_path / "sss.par").write_text(
        "PET Single Scatter Simulation Parameters :=\n"
        "attenuation image filename := mu.hv\n"
        "randomly place scatter points := 0\n"
        "attenuation threshold := 0.01\n"
        "End PET Single Scatter Simulation Parameters :=\n"
    )
    monkeypatch.chdir(tmp_path)
    sss = pet.SingleScatterSimulator(str(tmp_path / "sss.par"))
    sss.set_up(template, act)
    expected = _centred(template, atten, act).forward(act).as_array()
    # the written attenuation image's header rounds its geometry to float32 decimals
    np.testing.assert_allclose(sss.forward(act).as_array(), expected, rtol=0, atol=1e-5 * expected.max())


def test_parameter_file_scatter_point_image(template_file, tmp_path, monkeypatch):
    """A file's ``attenuation image for scatter points filename``: its voxels are the scatter points
    (here the attenuation image itself, unzoomed: more points than STIR's zoom gives)."""
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    atten.write(str(tmp_path / "mu.hv"))
    (tmp_path / "sss.par").write_text(
        "PET Single Scatter Simulation Parameters :=\n"
        "attenuation image filename := mu.hv\n"
        "attenuation image for scatter points filename := mu.hv\n"
        "randomly place scatter points := 0\n"
        "End PET Single Scatter Simulation Parameters :=\n"
    )
    monkeypatch.chdir(tmp_path)
    sss = pet.SingleScatterSimulator(str(tmp_path / "sss.par"))
    sss.set_up(template, act)
    pdi = template.get_proj_data_info()
    mu = VoxelsOnCartesianGrid.from_array(atten.as_array(), atten.image_info)
    direct = SingleScatterSimulation(
        pdi,
        energy_model_from_header(template_file, pdi.get_scanner()),
        mu,
        ScatterSettings(randomly_place_scatter_points=False),
        scatter_point_image=mu,
    )
    assert len(direct.scatter_points.mu) > len(SingleScatterSimulation(pdi, direct.energy, mu).scatter_points.mu)
    expected = direct.simulate(VoxelsOnCartesianGrid.from_array(act.as_array(), act.image_info))
    ours = sss.forward(act).proj_data
    for seg, values in expected.items():
        np.testing.assert_allclose(ours.get_segment_by_view(seg), values, rtol=0, atol=1e-5 * values.max())


def test_errors(template_file):
    template = pet.AcquisitionData(str(template_file))
    act, atten = _images(template)
    sss = pet.SingleScatterSimulator()
    with pytest.raises(pet.error, match="attenuation_image has not been set"):
        sss.set_up(template, act)
    with pytest.raises(pet.error, match="acquisition template not set"):
        sss.forward(act)
    sss.set_attenuation_image(atten)
    no_window = pet.AcquisitionData(ProjDataInMemory(template.get_proj_data_info()))
    with pytest.raises(pet.error, match="no energy window"):
        sss.set_up(no_window, act)
    sss.set_up(template, act)
    with pytest.raises(pet.error, match="expected ImageData"):
        sss.forward(template)
