"""SIRF's ``ImageData.show`` / ``AcquisitionData.show``: the figures SIRF's ``show`` draws (one
plane with a colour bar; tiles of chosen planes, 16 a figure, on one scale), returning at once
under a non-interactive backend (scripts run without a display must not wait), and SIRF's
refusals.  Guards against a show that blocks, draws other planes, or silently draws nothing."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.recon.simulate import demo_geometry

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(autouse=True)
def _agg_and_no_leftover_figures():
    """Agg (no display) for these tests; the figures they draw are closed afterwards."""
    previous = plt.get_backend()
    plt.switch_backend("Agg")
    plt.close("all")
    yield
    plt.close("all")
    plt.switch_backend(previous)


def _image(nz=20, ny=6, nx=9):
    image = pet.ImageData()
    image.initialise((nz, ny, nx))
    image.fill(np.arange(nz * ny * nx, dtype=np.float32).reshape(nz, ny, nx))
    return image


def _shown(ax) -> np.ndarray:
    return np.asarray(ax.get_images()[0].get_array())


def test_one_slice_is_one_figure_with_its_plane_and_a_colour_bar():
    image = _image()
    assert image.show(3) is None
    (num,) = plt.get_fignums()
    fig = plt.figure(num)
    main = fig.axes[0]
    assert main.get_title() == "slice 3" and len(fig.axes) == 2  # the plane and its colour bar
    np.testing.assert_array_equal(_shown(main), image.as_array()[3])
    assert main.get_images()[0].get_clim() == (float(image.as_array()[3].min()), float(image.as_array()[3].max()))


def test_all_slices_are_tiled_sixteen_a_figure_on_one_scale():
    """20 planes: two figures of 4 x 4 tiles (16 and 4 drawn), titled, on the image's whole range;
    axes only on the bottom-left tile."""
    image = _image()
    image.show()
    nums = plt.get_fignums()
    assert len(nums) == 2
    first, second = (plt.figure(n) for n in nums)
    assert len(first.axes) == 16 and len(second.axes) == 4
    assert first.get_suptitle() == "Selected images"
    a = image.as_array()
    for k, ax in enumerate(first.axes + second.axes):
        assert ax.get_title() == f"slice {k}"
        np.testing.assert_array_equal(_shown(ax), a[k])
        assert ax.get_images()[0].get_clim() == (float(a.min()), float(a.max()))
        assert ax.get_subplotspec().get_gridspec().get_geometry() == (4, 4)
    on = [ax for ax in first.axes if ax.axison]
    assert len(on) == 1 and on[0].get_xlabel() == "x" and on[0].get_ylabel() == "y"
    assert on[0] is first.axes[12]  # row 3 (the last), column 0


def test_chosen_slices_in_a_grid_that_keeps_tiles_square():
    """3 planes of 6 x 9: round(sqrt(3 * 9 / 6)) = 2 rows, 2 columns; the title given is used."""
    image = _image()
    image.show([1, 10, 11], title="Reconstructed images")
    (num,) = plt.get_fignums()
    fig = plt.figure(num)
    assert fig.get_suptitle() == "Reconstructed images"
    assert [ax.get_title() for ax in fig.axes] == ["slice 1", "slice 10", "slice 11"]
    assert fig.axes[0].get_subplotspec().get_gridspec().get_geometry() == (2, 2)
    image.show(range(2, 8, 3))
    assert len(plt.get_fignums()) == 2


@pytest.mark.parametrize(
    "selection, kind, match",
    [
        (20, IndexError, "slice index 20 is outside 0..19"),
        (-1, IndexError, "slice index -1 is outside"),
        ([0, 25], IndexError, "slice index 25 is outside"),
        (2.5, pet.error, "wrong slice list"),
        ("all", pet.error, "wrong slice list"),
    ],
)
def test_bad_selections_are_refused_and_draw_nothing(selection, kind, match):
    with pytest.raises(kind, match=match) as info:
        _image().show(selection)
    assert isinstance(info.value, pet.error)
    assert plt.get_fignums() == []


def test_acquisition_data_sinograms():
    """Sinograms of TOF bin 0: one with its number, or tiles labelled ``tang.pos`` / ``view``."""
    pdi, _ = demo_geometry(num_views=6, num_tangential_poss=10)
    data = pet.AcquisitionData(ProjDataInMemory(pdi))
    values = np.random.default_rng(0).random(data.dimensions(), dtype=np.float32)
    data.fill(values)
    data.show(2)
    fig = plt.figure(plt.get_fignums()[-1])
    assert fig.axes[0].get_title() == "sinogram 2"
    np.testing.assert_array_equal(_shown(fig.axes[0]), values[0, 2])
    data.show([0, 1, 2])
    fig = plt.figure(plt.get_fignums()[-1])
    assert fig.get_suptitle() == "Selected sinograms"
    on = [ax for ax in fig.axes if ax.axison]
    assert on[0].get_xlabel() == "tang.pos" and on[0].get_ylabel() == "view"
    with pytest.raises(IndexError, match="TOF bin index 1"):
        data.show(0, tof=1)
