"""CPU kernels given ``cancel=``: projected in pieces with a look at the flag between them.

Guards against (a) the split changing a single number -- a back projection's pieces must be
multiples of its worker count, so each worker adds the same LORs in the same order -- and (b) a
cancelled call running on to the end of its chunk (what made Ctrl-C wait for whole chunks).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stirgpu.errors import Cancelled
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, back_chunk_stir, cpu, forward_chunk, forward_chunk_stir, stir_scaled_geometry
from stirgpu.kernels.stir_lors import stir_image_frame

PIECE = 101  # LORs per piece in these tests: odd, so that it is not a multiple of the worker count


@pytest.fixture(scope="module")
def setup():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 32, False)
    info = ImageInfo.default_for(pdi, xy_size=31)
    tables = [pdi.chunk_tables(s, views=[0, 1, 5, 6]) for s in pdi.segment_nums]  # a multi-part chunk
    image = np.random.default_rng(3).uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, tables, image


def _projectors(pdi, info):
    """(forward(tables, image, out, cancel), back(tables, values, image, cancel)) per numerics."""
    kg = stir_scaled_geometry(info, stir_units=True, numerics="exact")
    frame = stir_image_frame(info)
    return {
        "exact": (
            lambda t, x, out, c: forward_chunk(t, x, kg.origin, kg.voxel_size, out=out, scale=kg.scale, cancel=c),
            lambda t, v, img, c: back_chunk(t, v, img, kg.origin, kg.voxel_size, scale=kg.scale, cancel=c),
        ),
        "stir": (
            lambda t, x, out, c: forward_chunk_stir(t, pdi, x, frame, out=out, cancel=c),
            lambda t, v, img, c: back_chunk_stir(t, pdi, v, img, frame, cancel=c),
        ),
    }


class _SetAfter:
    """A cancel flag that turns set at its ``n``-th look."""

    def __init__(self, n: int):
        self.n = n
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self.n


@pytest.mark.parametrize("numerics", ["exact", "stir"])
def test_pieces_give_the_same_numbers_bit_for_bit(setup, numerics, monkeypatch):
    pdi, info, tables, image = setup
    fwd, back = _projectors(pdi, info)[numerics]
    n = sum(t.shape[0] * t.shape[1] * t.shape[2] for t in tables)
    whole = fwd(tables, image, np.empty(n, np.float32), None)
    whole_back = back(tables, whole, np.zeros(info.shape, np.float32), None)
    monkeypatch.setattr(cpu, "CANCEL_CHECK_LORS", PIECE)
    flag = threading.Event()
    assert n > 10 * PIECE
    np.testing.assert_array_equal(fwd(tables, image, np.empty(n, np.float32), flag), whole)
    np.testing.assert_array_equal(back(tables, whole, np.zeros(info.shape, np.float32), flag), whole_back)
    assert whole_back.max() > 0


@pytest.mark.parametrize("numerics", ["exact", "stir"])
def test_a_cancelled_call_stops_after_the_piece_in_flight(setup, numerics, monkeypatch):
    pdi, info, tables, image = setup
    fwd, back = _projectors(pdi, info)[numerics]
    monkeypatch.setattr(cpu, "CANCEL_CHECK_LORS", PIECE)
    n = sum(t.shape[0] * t.shape[1] * t.shape[2] for t in tables)
    out = np.full(n, np.nan, np.float32)
    flag = _SetAfter(3)
    with pytest.raises(Cancelled):
        fwd(tables, image, out, flag)
    assert flag.looks == 4
    assert not np.isnan(out[: 3 * PIECE]).any() and np.isnan(out[3 * PIECE :]).all()
    set_now = threading.Event()
    set_now.set()
    img = np.zeros(info.shape, np.float32)
    with pytest.raises(Cancelled):
        back(tables, np.ones(n, np.float32), img, set_now)
    assert not img.any()  # nothing was added: the flag is looked at before the first piece


def test_lor_ranges():
    assert list(cpu.lor_ranges(10)) == [(0, 10)]
    assert list(cpu.lor_ranges(0)) == []
    flag = threading.Event()
    step = cpu.CANCEL_CHECK_LORS
    assert list(cpu.lor_ranges(2 * step + 1, flag)) == [(0, step), (step, 2 * step), (2 * step, 2 * step + 1)]
    # multiples of the worker count, so that a back projection's workers keep their LORs
    assert all((hi - lo) % 3 == 0 for lo, hi in list(cpu.lor_ranges(10 * step, flag, multiple=3))[:-1])
