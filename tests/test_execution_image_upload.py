"""A numpy input image's upload: by DMA straight from its own memory once it is page-locked
(the stores' pinning policy, ``DirectIO.image_in_place``), through the pinned image buffer
otherwise; the same numbers either way, and the caller owns the image again when the call
returns."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import Pinning

from stirgpu.execution.direct_io import DirectIO
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info


def test_an_image_goes_in_place_from_its_second_upload():
    """ "reused": the pinned image buffer at an image's first upload, its own memory from the
    second; another image starts again; "always" at once; "never", the CPU backend and a
    refused page-locking: never."""
    img, other = np.ones((3, 4, 5), np.float32), np.ones((3, 4, 5), np.float32)
    pins = Pinning()
    reused = DirectIO("cuda", "reused", pins)
    assert [reused.image_in_place(img) for _ in range(3)] == [False, True, True]
    assert reused.image_in_place(other) is False
    assert DirectIO("cuda", "always", Pinning()).image_in_place(img) is True
    for direct in (DirectIO("cuda", "never", Pinning()), DirectIO("cpu", "always", Pinning())):
        assert [direct.image_in_place(img) for _ in range(2)] == [False, False]
    assert DirectIO("cuda", "always", Pinning(refuse=True)).image_in_place(img) is False


@pytest.mark.parametrize(
    "image",
    [
        np.ones((3, 4, 5), np.float64),  # converted while copied
        np.ones((3, 4, 10), np.float32)[:, :, ::2],  # strided
        np.ones((0, 4, 5), np.float32),
        [[[1.0]]],  # not a numpy array
    ],
    ids=["float64", "strided", "empty", "list"],
)
def test_images_that_cannot_go_in_place_never_ask_for_page_locking(image):
    """Only C-contiguous float32 numpy images are DMA'd from their own memory: any other goes
    through the pinned image buffer, and nothing of it is page-locked."""
    pins = Pinning()
    direct = DirectIO("cuda", "always", pins)
    assert direct.image_in_place(image) is False
    assert pins.asked == []


def test_a_view_into_a_much_larger_array_is_never_page_locked():
    """Page-locking covers an image's whole owning array: one image of a series (a view into a
    4-D array) goes through the pinned image buffer rather than lock the whole series; a view
    that is most of its owner goes in place."""
    series = np.ones((5, 3, 4, 5), np.float32)
    pins = Pinning()
    direct = DirectIO("cuda", "always", pins)
    assert direct.image_in_place(series[2]) is False
    assert pins.asked == []
    padded = np.ones((4, 4, 5), np.float32)
    assert direct.image_in_place(padded[:3]) is True


@pytest.mark.gpu
def test_in_place_upload_gives_the_staged_numbers_and_returns_the_image():
    """An image's second upload goes in place (its memory page-locked afterwards), with
    the projections of the first upload bit for bit; the image changed after ``set_input``
    returns does not change what is projected (the upload was complete)."""
    from stirgpu import config
    from stirgpu.execution.pinning import _locked
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import ProjectorPair

    pdi = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), span=11, max_ring_diff=10, num_views=12)
    info = stir_default_image_info(pdi)
    img = np.random.default_rng(4).uniform(0, 1, info.shape).astype(np.float32)
    with config(pin_host_memory="reused"):
        pair = ProjectorPair(backend="cuda", devices=[0], restrict_to_cylindrical_fov=False)
    pair.set_up(pdi, info)
    outs = []
    for _ in range(2):
        out = ProjDataInMemory(pdi)
        pair.forward_project(out, img)
        outs.append(out.as_array())
    assert _locked(img)
    np.testing.assert_array_equal(outs[1], outs[0])
    pair.set_input(img)
    img[...] = 0.0
    out = ProjDataInMemory(pdi)
    pair.forward_project(out, None)
    np.testing.assert_array_equal(out.as_array(), outs[0])
