"""SIRF names stirgpu.sirf refuses on construction, each with one line saying why and what to use."""

from __future__ import annotations

import pytest

import stirgpu.sirf as pet
from stirgpu.sirf.errors import NotSupported


@pytest.mark.parametrize(
    "name,match",
    [
        ("FBP2DReconstructor", "FBP2DReconstructor: STIR's FBP2D back projects with its interpolating back projector"),
    ],
)
def test_refused_on_construction_naming_what_to_use(name, match):
    cls = getattr(pet, name)
    assert name in pet.__all__
    with pytest.raises(pet.error, match=match) as caught:
        cls()
    assert isinstance(caught.value, NotSupported)
    assert "\n" not in str(caught.value)
