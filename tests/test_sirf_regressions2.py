"""stirgpu.sirf where SIRF's own PET scripts and tests (``test_sirf_clients.py``) found it differing
from SIRF, written from SIRF's documented behaviour.

* ``set_verbosity(False)``: SIRF's C interface takes a bool as the int 0 / 1 (SIRF's
  ``test_six_adjoint.py`` passes ``False`` and restores ``get_verbosity()`` afterwards).
* ``AcquisitionModel.set_image_data_processor(P)``: SIRF gives ``P`` to STIR's projector pair as
  the forward projector's pre-data processor and the back projector's post-data processor, so
  ``forward(x) = S (G P x + a) + b`` (``x`` itself unchanged) and ``backward(y) = P G' S y``; the
  linear model SIRF hands out shares the projectors, ``P`` included.  SIRF's
  ``acquisition_model.py`` uses it for resolution modelling with a ``SeparableGaussianImageFilter``;
  the forward projection equals STIR's Parallelproj projector with that pre-data processor.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.recon.simulate import demo_geometry
from stirgpu.sirf.Utilities import is_operator_adjoint


def _in_thread(fn):
    """``fn()`` in a new thread: SIRF's verbosity here is per thread, so the test leaves none behind."""
    result = []
    t = threading.Thread(target=lambda: result.append(fn()))
    t.start()
    t.join()
    return result[0]


@pytest.mark.parametrize(("given", "verbosity"), [(False, 0), (True, 1)])
def test_set_verbosity_takes_a_bool_as_sirf_does(given, verbosity):
    def body():
        original = pet.get_verbosity()
        pet.set_verbosity(given)
        got = pet.get_verbosity()
        pet.set_verbosity(original)  # test_six_adjoint.py's restore
        return got, pet.get_verbosity()

    got, restored = _in_thread(body)
    assert got == verbosity and type(got) is int
    assert restored == 1


# -- image data processor ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def problem():
    """A small geometry, a random image and random data of it, CPU, in memory."""
    pdi, info = demo_geometry(num_views=8, num_tangential_poss=32)
    rng = np.random.default_rng(3)
    image = pet.ImageData.from_array(rng.random(info.shape, dtype=np.float32), info)
    data = pet.AcquisitionData(ProjDataInMemory(pdi))
    data.fill(rng.random(data.shape, dtype=np.float32))
    return image, data


def _smoother() -> pet.SeparableGaussianImageFilter:
    f = pet.SeparableGaussianImageFilter()
    f.set_fwhms((4.0, 9.0, 12.0))
    return f


def _model(data, image, processor=None, **terms) -> pet.AcquisitionModelUsingParallelproj:
    am = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    if processor is not None:
        am.set_image_data_processor(processor)
    if "additive" in terms:
        am.set_additive_term(terms["additive"])
    am.set_up(data, image)
    return am


def _smoothed(image: pet.ImageData) -> pet.ImageData:
    out = image.clone()
    _smoother().apply(out)
    return out


def test_forward_with_processor_projects_the_processed_image(problem):
    image, data = problem
    before = image.as_array().copy()
    additive = data.get_uniform_copy(0.25)
    with pet.storage_scheme("memory"):
        am = _model(data, image, _smoother(), additive=additive)
        plain = _model(data, image, additive=additive)
        got = am.forward(image)
        np.testing.assert_array_equal(image.as_array(), before)  # x itself is not smoothed
        np.testing.assert_allclose(got.as_array(), plain.forward(_smoothed(image)).as_array(), rtol=1e-6)
        assert (got - plain.forward(image)).norm() > 1e-3 * got.norm()  # the processor did something
        # into out=, and on a subset (the other views hold the constant term, as without P)
        out = data.get_uniform_copy(0)
        assert am.forward(image, 1, 4, out=out) is None
        np.testing.assert_allclose(out.as_array(), plain.forward(_smoothed(image), 1, 4).as_array(), rtol=1e-6)


def test_backward_with_processor_processes_the_back_projection(problem):
    image, data = problem
    with pet.storage_scheme("memory"):
        am = _model(data, image, _smoother())
        plain = _model(data, image)
        want = _smoothed(plain.backward(data)).as_array()
        np.testing.assert_allclose(am.backward(data).as_array(), want, rtol=1e-6)
        out = image.get_uniform_copy(7)
        assert am.backward(data, out=out) is None
        np.testing.assert_allclose(out.as_array(), want, rtol=1e-6)


def test_linear_model_keeps_the_processor_and_stays_adjoint(problem):
    """The symmetric Gaussian makes ``P G`` and ``G' P`` adjoint, as SIRF's is_operator_adjoint checks."""
    image, data = problem
    with pet.storage_scheme("memory"):
        am = _model(data, image, _smoother(), additive=data.get_uniform_copy(1))
        lin = am.get_linear_acquisition_model()
        assert lin.processor is am.processor
        x, y = image, data
        lhs = lin.direct(x).dot(y)
        rhs = x.dot(lin.adjoint(y))
        assert lhs == pytest.approx(rhs, rel=1e-4)
        assert is_operator_adjoint(lin, verbose=False)
        with pytest.raises(pet.error, match="const"):
            lin.set_image_data_processor(_smoother())


def test_set_image_data_processor_refuses_what_is_not_a_processor():
    am = pet.AcquisitionModelUsingParallelproj()
    with pytest.raises(pet.error, match="set_image_data_processor: expected an ImageDataProcessor, not str"):
        am.set_image_data_processor("gauss")


def test_objective_refuses_a_model_with_a_processor(problem):
    """stirgpu's objective projects through the projector itself: a model with P is refused
    with a clear message, never reconstructed without P."""
    image, data = problem
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        am = _model(data, image, _smoother())
        obj = pet.make_Poisson_loglikelihood(data)
        obj.set_acquisition_model(am)
        with pytest.raises(pet.error, match="image data processor"):
            obj.set_up(image)


@pytest.mark.gpu
def test_processor_on_the_gpu_gives_the_cpus_numbers(problem):
    """A cupy image with ``backend="cuda"``: the processed forward and backward projections equal
    the CPU's to float32 rounding (1e-5 of the maximum, as test_sirf_gpu.py)."""
    import cupy

    image, data = problem
    on_gpu = pet.ImageData.from_array(cupy.asarray(image.as_array()), image.image_info)
    with pet.storage_scheme("memory"):
        results = {}
        for backend, x in (("cpu", image), ("cuda", on_gpu)):
            am = pet.AcquisitionModelUsingParallelproj(backend=backend)
            am.set_image_data_processor(_smoother())
            am.set_up(data, x)
            results[backend] = (am.forward(x).as_array(), am.backward(data).as_array())
        for cpu, gpu in zip(results["cpu"], results["cuda"], strict=True):
            np.testing.assert_allclose(gpu, cpu, rtol=0, atol=1e-5 * np.abs(cpu).max())


@pytest.mark.stir
def test_forward_with_processor_is_stirs_presmoothing_projector(stir):
    """STIR's Parallelproj forward projector with a separable Gaussian as its pre-data processor
    (what SIRF's set_image_data_processor makes) gives stirgpu.sirf's forward projection with P
    (bit for bit here: both the filter and the projection are STIR's)."""
    from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir

    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 2, 8, 32, False
    )
    img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 1.0)
    values = np.random.default_rng(5).random(img.as_array().shape, dtype=np.float32)
    img.fill(values)
    gauss = stir.SeparableGaussianImageFilter3DFloat()
    gauss.set_fwhms(stir.Float3BasicCoordinate((4.0, 9.0, 12.0)))
    fp = stir.ForwardProjectorByBinParallelproj()
    fp.set_pre_data_processor(gauss)
    fp.set_up(spdi, img)
    theirs = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    fp.forward_project(theirs, img)
    theirs = theirs.to_array().as_array().reshape(1, -1, spdi.get_num_views(), spdi.get_num_tangential_poss())

    pdi, info = proj_data_info_from_stir(spdi), image_info_from_stir(img)
    with pet.storage_scheme("memory"):
        image = pet.ImageData.from_array(values, info)
        data = pet.AcquisitionData(ProjDataInMemory(pdi))
        ours = _model(data, image, _smoother()).forward(image).as_array()
        plain = _model(data, image).forward(image).as_array()
    assert np.abs(plain - theirs).max() > 1e-2 * np.abs(theirs).max()  # STIR smoothed too
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 * np.abs(theirs).max())
