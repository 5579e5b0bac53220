"""SIRF's ``acq_data / acq_model.forward(x)`` holds 0/0 in the bins whose LORs miss the image;
back projecting it gives SIRF's image (those bins add nothing in every projector), while a NaN or
Inf in a bin that reaches the image is still refused (stirgpu/sirf/outside_image.py)."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ImageInfo
from stirgpu.recon.simulate import demo_geometry


@pytest.fixture(scope="module")
def case():
    """A demo geometry and an image narrower than the scanner's FOV (21 x 21 of its 51 x 51
    voxels), so the outer tangential positions' LORs miss it."""
    pdi, info = demo_geometry(num_views=8, num_tangential_poss=48)
    small = ImageInfo(shape=(info.shape[0], 21, 21), voxel_size=info.voxel_size, origin=info.origin)
    am = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    template = pet.AcquisitionData(ProjDataInMemory(pdi))
    template.fill(1.0)
    image = pet.ImageData.from_array(np.ones(small.shape, np.float32), small)
    am.set_up(template, image)
    return am, template, image


def test_ratio_with_0_over_0_outside_the_image_back_projects_as_sirf(case):
    am, template, image = case
    fwd = am.forward(image).as_array()
    assert (fwd == 0).any() and (fwd > 0).any()  # some LORs miss the image
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = template.as_array() / fwd  # SIRF's ratio: Inf (1/0) where the LORs miss the image
        ratio[:, :, :, :2] = np.where(fwd[:, :, :, :2] == 0, np.nan, ratio[:, :, :, :2])  # and 0/0
    assert not np.isfinite(ratio).all()
    data = template.clone()
    data.fill(ratio)
    got = am.backward(data).as_array()
    clean = template.clone()
    clean.fill(np.where(np.isfinite(ratio), ratio, 0.0).astype(np.float32))
    np.testing.assert_array_equal(got, am.backward(clean).as_array())
    assert np.isfinite(got).all() and got.max() > 0
    np.testing.assert_array_equal(np.isfinite(data.as_array()), np.isfinite(ratio))  # the data untouched


def test_a_nan_in_a_bin_that_reaches_the_image_is_still_refused(case):
    am, template, image = case
    fwd = am.forward(image).as_array()
    values = template.as_array()
    values[np.unravel_index(int(np.argmax(fwd)), fwd.shape)] = np.nan
    data = template.clone()
    data.fill(values)
    with pytest.raises(Exception, match="NaN|non-finite|Inf"):
        am.backward(data)
