"""SIRF's PET names stirgpu does not provide: each stops a script at once with one line naming the
class and what to use, as a ``pet.error`` (what SIRF scripts catch).

Guards against a script running on silently with another projector than it asked for, and
against SIRF's ``hasattr`` checks for optional engines (``tests_NiftyPET.py`` skips its tests
when ``hasattr(pet, 'AcquisitionModelUsingNiftyPET')`` is False) turning into failures.
"""

from __future__ import annotations

import pytest

import stirgpu.sirf as pet
from stirgpu.sirf.errors import NotSupported


@pytest.mark.parametrize(
    "name, args",
    [
        ("AcquisitionModelUsingRayTracingMatrix", ()),
        ("AcquisitionModelUsingRayTracingMatrix", (None,)),
        ("AcquisitionModelUsingMatrix", ()),
        ("RayTracingMatrix", ()),
    ],
)
def test_ray_tracing_matrix_names_the_class_and_the_parallelproj_model(name, args):
    """Construction raises NotSupported (a ``pet.error``), one line naming the class and
    ``AcquisitionModelUsingParallelproj``; so ``set_num_tangential_LORs`` (only on these classes
    in SIRF) is never reached."""
    with pytest.raises(NotSupported) as info:
        getattr(pet, name)(*args)
    message = str(info.value)
    assert isinstance(info.value, pet.error)
    assert message.startswith(f"{name}: ")
    assert "AcquisitionModelUsingParallelproj" in message
    assert "\n" not in message


def test_ray_tracing_model_is_a_class_scripts_can_name():
    """``isinstance(model, pet.AcquisitionModelUsingRayTracingMatrix)`` must not raise in a script
    that chose Parallelproj: the name is a class."""
    model = pet.AcquisitionModelUsingParallelproj()
    assert not isinstance(model, pet.AcquisitionModelUsingRayTracingMatrix)
    assert issubclass(pet.AcquisitionModelUsingRayTracingMatrix, pet.AcquisitionModelUsingMatrix)


def test_niftypet_model_is_absent_as_in_sirf_without_niftypet_and_says_why():
    """``hasattr`` is False (SIRF built without NiftyPET), and using the name raises an error
    that is an AttributeError, a NotSupported and a ``pet.error``, naming the class and the model
    to use."""
    assert not hasattr(pet, "AcquisitionModelUsingNiftyPET")
    with pytest.raises(AttributeError) as info:
        pet.AcquisitionModelUsingNiftyPET()
    assert isinstance(info.value, NotSupported) and isinstance(info.value, pet.error)
    assert str(info.value).startswith("AcquisitionModelUsingNiftyPET: ")
    assert "AcquisitionModelUsingParallelproj" in str(info.value)


def test_other_missing_names_are_plain_attribute_errors():
    """A name SIRF never had is Python's usual AttributeError, not a claim about SIRF."""
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchName'") as info:
        pet.NoSuchName  # noqa: B018
    assert not isinstance(info.value, NotSupported)
    with pytest.raises(ImportError):
        from stirgpu.sirf import NoSuchName  # noqa: F401
