"""SIRF's scatter example, as ``stirgpu.sirf`` runs it, against what SIRF's C++ asks of STIR
(``PETSingleScatterSimulator``: ``set_template_proj_data_info`` and ``set_exam_info`` from the
template, ``set_density_image_sptr``, ``set_activity_image_sptr``, ``set_up``, ``process_data``
into data of the template's geometry), through the reference STIR's Python module.

The images are SIRF's ``scatter_simulation.py`` phantom (``EllipticCylinder`` shapes added to the
template's default image): the geometry SIRF users have, where the scatter-point grid comes from
STIR's default zoom of a default-image mu-map.  Scatter points at voxel centres
(``randomly_place_scatter_points`` off on both sides: STIR's random draw is seeded by the time).
Equal to 1e-4 of STIR's maximum (measured 3.1e-7 here, 4.4e-7 on the template of STIR's
recon_test_pack, scatter_cylinder.hs; float32 against float64 accumulation).
"""

from __future__ import annotations

import numpy as np
import pytest
from scatter_templates import scatter_scanner, write_scatter_template

import stirgpu.sirf as pet
from stirgpu.geometry import ProjDataInfo

pytestmark = pytest.mark.stir

TOL = 1e-4


def _stir_image(stir, image: pet.ImageData):
    info = image.image_info
    lo, hi = info.get_min_indices(), info.get_max_indices()
    out = stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(),
        stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi)),
        stir.FloatCartesianCoordinate3D(*info.origin),
        stir.FloatCartesianCoordinate3D(*info.voxel_size),
    )
    out.fill(np.ascontiguousarray(image.as_array()).ravel())
    return out


def _example_phantom(template):
    """``scatter_simulation.py``'s attenuation and activity cylinders."""
    atten = pet.ImageData(template)
    nz, ny, nx = atten.dimensions()
    vz, vy, vx = atten.voxel_sizes()
    water = pet.EllipticCylinder()
    water.set_length(nz * vz)
    water.set_radii((ny * vy * 0.25, nx * vx * 0.25))
    water.set_origin((nz * vz * 0.5, 0, 0))
    atten.add_shape(water, scale=9.687e-02)
    act = atten.get_uniform_copy(0)
    rod = pet.EllipticCylinder()
    rod.set_length(nz * vz)
    rod.set_radii((ny * vy * 0.125, nx * vx * 0.125))
    rod.set_origin((0, ny * vy * 0.06, nx * vx * 0.06))
    act.add_shape(rod, scale=1)
    return act, atten


def test_sirf_scatter_example_equals_stir(stir, tmp_path):
    pdi = ProjDataInfo.construct(scatter_scanner(5, 48, tilt_degrees=3.0, resolution=0.22), 1, 1)
    header = write_scatter_template(tmp_path, pdi, window=(350.0, 650.0))
    template = pet.AcquisitionData(str(header))
    act, atten = _example_phantom(template)
    sss = pet.SingleScatterSimulator()
    sss.set_attenuation_image(atten)
    sss.set_randomly_place_scatter_points(False)
    sss.set_up(template, act)
    ours = sss.forward(act)

    stir_template = stir.ProjData.read_from_file(str(header))
    sim = stir.SingleScatterSimulation()
    sim.set_template_proj_data_info(stir_template.get_proj_data_info())
    sim.set_exam_info(stir_template.get_exam_info())
    sim.set_density_image_sptr(_stir_image(stir, atten))
    sim.set_activity_image_sptr(_stir_image(stir, act))
    sim.set_randomly_place_scatter_points(False)
    sim.set_up()
    out = stir.ProjDataInMemory(stir_template.get_exam_info(), stir_template.get_proj_data_info())
    sim.set_output_proj_data_sptr(out)
    sim.process_data()
    theirs = out.to_array().as_array()

    mine = ours.as_array().reshape(theirs.shape)
    assert theirs.max() > 0
    assert np.abs(mine - theirs).max() <= TOL * theirs.max()
