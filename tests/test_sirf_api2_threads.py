"""SIRF's OpenMP thread functions on stirgpu's CPU backend, and ``stirgpu.sirf.config``.

* the numbers: the default is numba's ``NUMBA_NUM_THREADS``; ``set_max_omp_threads(n)`` makes
  ``get_max_omp_threads()`` ``n`` for the rest of the thread, ``set_default_num_omp_threads()``
  returns to the default (tests_three.py's own check), 0 changes nothing, other values are
  one-line errors;
* the effect: the projector's numba kernels (in its lane thread) and the priors' (in the calling
  thread) run with that many threads, and the calling thread's own numba setting is restored;
* ``stirgpu.sirf.config``'s flags say what stirgpu offers.
"""

from __future__ import annotations

import contextvars
import threading

import numba
import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
import stirgpu.sirf.config as sirf_config
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.projectors import ForwardProjector


def _in_fresh_context(fn):
    """Run ``fn`` in a copy of the current context, so the settings it makes end with it."""
    return contextvars.copy_context().run(fn)


def test_defaults_and_tests_three_sequence():
    def run():
        default = pet.get_default_num_omp_threads()
        assert default == numba.config.NUMBA_NUM_THREADS
        assert pet.get_max_omp_threads() == default
        pet.set_max_omp_threads(1)
        assert pet.get_max_omp_threads() == 1
        pet.set_max_omp_threads(0)  # STIR's set_num_threads(0) after a first setting: unchanged
        assert pet.get_max_omp_threads() == 1
        pet.set_default_num_omp_threads()
        assert pet.get_max_omp_threads() == pet.get_default_num_omp_threads()

    _in_fresh_context(run)


@pytest.mark.parametrize(
    "value,error,match",
    [
        (-1, ValueError, "set_max_omp_threads: -1 threads"),
        (10_000, ValueError, "NUMBA_NUM_THREADS"),
        (True, TypeError, "must be an integer"),
        (2.5, TypeError, "must be an integer"),
    ],
)
def test_bad_thread_numbers_are_refused(value, error, match):
    def run():
        with pytest.raises(error, match=match):
            pet.set_max_omp_threads(value)
        assert pet.get_max_omp_threads() == pet.get_default_num_omp_threads()

    _in_fresh_context(run)


def test_the_setting_is_per_thread():
    seen = []

    def run():
        pet.set_max_omp_threads(1)
        worker = threading.Thread(target=lambda: seen.append(pet.get_max_omp_threads()))
        worker.start()
        worker.join()

    _in_fresh_context(run)
    assert seen == [pet.get_default_num_omp_threads()]


def test_projector_and_prior_kernels_use_the_threads_set(monkeypatch):
    """The projector's kernels run in its lane thread with ``set_max_omp_threads``'s number (seen
    from inside the chunk's device step), the prior's in the calling thread; the caller's own numba
    setting is left as it was."""
    from stirgpu.priors import base

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: a setting of 1 would not show")
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, num_views=8, num_tangential_poss=32)
    info = ImageInfo((7, 16, 16), (3.375, 4.0, 4.0))
    image = np.ones(info.shape, dtype=np.float32)
    in_projector, in_prior = [], []

    def hook(lane, what, nbytes):
        if what == "chunk temporaries":
            in_projector.append(numba.get_num_threads())

    original = base.prior_gradient

    def recording(*args, **kw):
        in_prior.append(numba.get_num_threads())
        return original(*args, **kw)

    monkeypatch.setattr(base, "prior_gradient", recording)

    def project_and_penalise(threads):
        with stirgpu.config(backend="cpu"):
            if threads is not None:
                pet.set_max_omp_threads(threads)
            proj = ForwardProjector(backend="cpu")
            proj.set_up(pdi, info)
            proj.session.engine.allocation_hook = hook
            proj.forward_project(None, image)
            prior = pet.QuadraticPrior()
            prior.set_penalisation_factor(1.0)
            x = pet.ImageData.from_array(image.copy(), info)
            prior.set_up(x)
            prior.gradient(x)

    caller_before = numba.get_num_threads()
    _in_fresh_context(lambda: project_and_penalise(1))
    assert in_projector and set(in_projector) == {1} and in_prior == [1]
    assert numba.get_num_threads() == caller_before
    in_projector.clear()
    in_prior.clear()
    _in_fresh_context(lambda: project_and_penalise(None))
    default = numba.config.NUMBA_NUM_THREADS
    assert in_projector and set(in_projector) == {default} and in_prior == [default]


def test_config_flags_say_what_stirgpu_offers():
    assert sirf_config.SIRF_HAS_Parallelproj is True
    assert sirf_config.SIRF_HAS_NiftyPET is False and not hasattr(pet, "AcquisitionModelUsingNiftyPET")
    assert sirf_config.STIR_WITH_CUDA is False and not hasattr(pet, "CudaRelativeDifferencePrior")
    assert sirf_config.SIRF_HAS_SPM is False
