"""The STIR rules under stirgpu.sirf, against a real STIR 6.5.

* Subsets: SIRF's forward projection of subset k of n is STIR's ``forward_project(proj_data,
  image, k, n)`` (which zeroes the data first for n > 1 and writes the views STIR assigns to the
  subset), then ``+ a``, ``undo`` of the normalisation (``/ f``) and ``+ b`` on every view
  (``PETAcquisitionModel::forward``).  Here STIR's own subset projection, into data holding a
  sentinel, is composed that way and compared with ``stirgpu.sirf``'s ``forward``: the zero
  pattern and the views are STIR's, the values equal to float32 rounding (the projector equals
  STIR's Parallelproj bit for bit).
* ``create_uniform_image()`` is STIR's default image for the data (``FloatVoxelsOnCartesianGrid(
  exam_info, proj_data_info, 1)``).
* ``get_geometrical_info()``'s LPS coordinates are STIR's ``get_LPS_coordinates_for_indices``.
* ``AcquisitionData(scanner, ...)`` uses STIR's scanner numbers (detectors per ring, non-arc-
  corrected bins, rings).
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import Scanner
from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir

pytestmark = pytest.mark.stir


@pytest.fixture(scope="module")
def stir_case(stir):
    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 4, 12, 48, False
    )
    img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 1.0)
    x = np.random.default_rng(3).random(img.as_array().shape, dtype=np.float32)
    img.fill(x)
    return spdi, img, x


def _stir_subset_forward(stir, spdi, img, k, n) -> np.ndarray:
    out = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    out.fill(123.0)  # a sentinel: STIR zeroes what the subset does not write
    pair = stir.ProjectorByBinPairUsingParallelproj()
    pair.set_up(spdi, img)
    pair.get_forward_projector().set_input(img)
    pair.get_forward_projector().forward_project(out, img, k, n)
    return out.to_array().as_array() if hasattr(out, "to_array") else _as_array(out, spdi)


def _as_array(stir_pd, spdi) -> np.ndarray:
    pdi = proj_data_info_from_stir(spdi)
    store = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        store.set_segment_by_sinogram(np.asarray(stir_pd.get_segment_by_sinogram(s).as_array()), s)
    return store.as_array()[None]


@pytest.mark.parametrize("k,n", [(0, 1), (1, 3), (2, 4)])
def test_subset_forward_is_stirs_composed_as_sirf_does(stir, stir_case, k, n):
    spdi, img, x = stir_case
    pdi = proj_data_info_from_stir(spdi)
    info = image_info_from_stir(img)
    rng = np.random.default_rng(k)
    shape = ProjDataInMemory(pdi).shape
    a, e, b = (rng.random(shape, dtype=np.float32) + np.float32(0.5) for _ in range(3))
    f = (1.0 / e.astype(np.float64)).astype(np.float32)
    stir_g = _stir_subset_forward(stir, spdi, img, k, n)
    expected = (stir_g + a[None]) / f[None] + b[None]
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        am = pet.AcquisitionModelUsingParallelproj()
        am.set_additive_term(pet.AcquisitionData(ProjDataInMemory(pdi, fill=a)))
        am.set_background_term(pet.AcquisitionData(ProjDataInMemory(pdi, fill=b)))
        am.set_acquisition_sensitivity(
            pet.AcquisitionSensitivityModel(pet.AcquisitionData(ProjDataInMemory(pdi, fill=e)))
        )
        templ = pet.AcquisitionData(ProjDataInMemory(pdi))
        am.set_up(templ, pet.ImageData.from_array(x.copy(), info))
        got = am.forward(pet.ImageData.from_array(x.copy(), info), k, n).as_array()
        plain = pet.AcquisitionModelUsingParallelproj()
        plain.set_up(templ, pet.ImageData.from_array(x.copy(), info))
        g = plain.forward(pet.ImageData.from_array(x.copy(), info), k, n).as_array()
    assert ((stir_g == 0) == (g == 0)).all() and not (stir_g == 123).any()
    projected = np.arange(pdi.get_num_views()) % n == k
    assert (stir_g[:, :, ~projected] == 0).all()
    np.testing.assert_allclose(g, stir_g, rtol=1e-6, atol=1e-6 * stir_g.max())
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * expected.max())


def test_default_image_and_lps_are_stirs(stir, stir_case):
    spdi, img, _ = stir_case
    pdi = proj_data_info_from_stir(spdi)
    mine = pet.AcquisitionData(ProjDataInMemory(pdi)).create_uniform_image(1.0)
    assert mine.image_info == image_info_from_stir(img)
    g = mine.get_geometrical_info()
    m = g.get_index_to_physical_point_matrix()
    mz, my, mx = mine.image_info.min_indices
    for k, j, i in [(0, 0, 0), (3, 5, 7), (30, 50, 1)]:
        lps = img.get_LPS_coordinates_for_indices(stir.Int3BasicCoordinate((k + mz, j + my, i + mx)))
        theirs = np.array([lps[3], lps[2], lps[1]])  # STIR's (z, y, x) coordinate, 1-based
        np.testing.assert_allclose((m @ np.array([i, j, k, 1.0]))[:3], theirs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["ECAT 953", "Siemens mMR"])
def test_scanner_numbers_are_stirs(stir, name):
    theirs = stir.Scanner.get_scanner_from_name(name)
    mine = Scanner.from_name(name)
    assert mine.get_num_detectors_per_ring() == theirs.get_num_detectors_per_ring()
    assert mine.get_max_num_non_arccorrected_bins() == theirs.get_max_num_non_arccorrected_bins()
    assert mine.get_num_rings() == theirs.get_num_rings()
    with pet.storage_scheme("memory"):
        acq = pet.AcquisitionData(name, 11 if "mMR" in name else 3, -1, 2)
    spdi = stir.ProjDataInfo.construct_proj_data_info(
        theirs,
        11 if "mMR" in name else 3,
        theirs.get_num_rings() - 1,
        theirs.get_num_detectors_per_ring() // 4,
        theirs.get_max_num_non_arccorrected_bins(),
        False,
    )
    assert acq.get_proj_data_info() == proj_data_info_from_stir(spdi)
