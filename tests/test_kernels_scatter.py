"""The scatter kernels' STIR rules that the STIR comparisons do not reach (their rays never lie
in a plane between voxels): STIR's ``RayTraceVoxelsOnCartesianGrid`` traces such a ray half a
voxel to each side with half weight, so a ray along x on the boundary of two rows sees their
mean; it counts whole voxels from the one holding the start to the one holding the stop; a ray
of zero length gives 0.  And the physics constants at 511 keV."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stirgpu.kernels.scatter import activity_table, attenuation_table
from stirgpu.scatter import EnergyModel, max_cos_angle, total_compton_cross_section


def _integral(image, start, stop, voxel=(1.0, 1.0, 1.0), mins=(0, 0, 0)):
    """The activity table's one entry for a point and a detector 1 mm apart (solid angle 1)."""
    pts = np.array([start], dtype=np.float64)
    dets = np.array([stop], dtype=np.float64)
    mm_p, mm_d = np.zeros((1, 3)), np.array([[0.0, 0.0, 1.0]])
    act = activity_table(image, mins, pts, dets, voxel, mm_p, mm_d)
    att = attenuation_table(image, mins, pts, dets, voxel)
    return float(act[0, 0]), float(att[0, 0])


def _rows(shape=(1, 2, 6), low=1.0, high=3.0):
    image = np.full(shape, low, dtype=np.float32)
    image[:, 1, :] = high
    return image


def test_ray_on_a_voxel_boundary_sees_the_mean_of_both_sides():
    # along x at y index 0.5 (the plane between rows 0 and 1), from voxel 0 to voxel 4: 5 voxels
    act, att = _integral(_rows(), (0.0, 0.5, -0.2), (0.0, 0.5, 4.3))
    assert act == pytest.approx(5 * (1.0 + 3.0) / 2, rel=1e-5)
    assert att == pytest.approx(math.exp(-0.1 * 10.0), rel=1e-5)  # mu in cm^-1, 1 mm voxels


def test_ray_inside_a_row_counts_whole_start_and_stop_voxels():
    act, _ = _integral(_rows(), (0.0, 1.0, 0.4), (0.0, 1.0, 3.45))
    assert act == pytest.approx(4 * 3.0, rel=1e-5)


def test_lengths_are_in_x_voxels():
    # the same ray on a grid of 2 mm voxels: each voxel is one x voxel long
    act, att = _integral(_rows(), (0.0, 0.0, 0.0), (0.0, 0.0, 5.0), voxel=(2.0, 2.0, 2.0))
    assert act == pytest.approx(6 * 1.0, rel=1e-5)
    assert att == pytest.approx(math.exp(-0.2 * 6.0), rel=1e-5)


def test_outside_the_image_adds_nothing_and_a_point_ray_is_zero():
    image = _rows()
    act, _ = _integral(image, (0.0, 0.0, -10.0), (0.0, 0.0, 2.0), mins=(0, 0, 0))
    assert act == pytest.approx(3 * 1.0, rel=1e-5)
    assert _integral(image, (0.0, 0.0, 1.0), (0.0, 0.0, 1.0))[0] == 0.0


def test_physics_at_511_kev():
    # Klein-Nishina total cross section per electron at 511 keV: 0.2866 barn
    assert total_compton_cross_section(511.0) == pytest.approx(2.8643e-25, rel=1e-4)
    window = EnergyModel(low=350.0, high=650.0, resolution=0.22, reference_energy=511.0)
    # a window of +-2.9 and +4.4 sigma around 511 keV keeps nearly every photon
    assert 0.99 < window.efficiency_at_511() < 1.0
    assert EnergyModel(low=600.0, high=700.0, resolution=0.2, reference_energy=511.0).efficiency_at_511() < 0.05
    # STIR's largest scattering angle: cos below it puts the scattered photon 2 FWHM under 350 keV
    assert -1.0 < max_cos_angle(350.0, 2.0, 0.22) < max_cos_angle(425.0, 2.0, 0.22) < 1.0
