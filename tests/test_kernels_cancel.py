"""CPU kernels given ``cancel=``: projected in pieces with a look at the flag between them.

Guards against (a) the split changing a single number -- a back projection's pieces must be
multiples of its worker count, so each worker adds the same LORs in the same order -- and (b) a
cancelled call running on to the end of its chunk (what made Ctrl-C wait for whole chunks).  Both
for the Joseph chunk kernels and the TOF ones, which share the pieces (``workers.lor_ranges``).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stirgpu.errors import Cancelled
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, back_chunk_tof, forward_chunk, forward_chunk_tof
from stirgpu.kernels.joseph import workers
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

PIECE = 101  # LORs per piece in these tests: odd, so that it is not a multiple of the worker count


def _setup(kind):
    """(pdi, image info, a multi-part chunk, image, TOF bins per LOR (1 without TOF))."""
    if kind == "joseph":
        pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 32, False)
        info = ImageInfo.default_for(pdi, xy_size=31)
        views = [0, 1, 5, 6]
    else:
        pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 8, 31, tof_mash_factor=29)
        info = stir_default_image_info(pdi)
        views = [0, 3]
    tables = [pdi.chunk_tables(s, views=views) for s in pdi.segment_nums]
    image = np.random.default_rng(3).uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, tables, image, pdi.get_num_tof_poss() if kind == "tof" else 1


@pytest.fixture(scope="module", params=["joseph", "tof"])
def projectors(request):
    """The setup of ``_setup`` and (forward(tables, image, out, cancel), back(tables, values,
    image, cancel)) of one kind of chunk kernel."""
    pdi, info, tables, image, nb = _setup(request.param)
    frame = stir_image_frame(info)
    if request.param == "joseph":
        fwd = lambda t, x, out, c: forward_chunk(t, pdi, x, frame, out=out, cancel=c)  # noqa: E731
        back = lambda t, v, img, c: back_chunk(t, pdi, v, img, frame, cancel=c)  # noqa: E731
    else:
        fwd = lambda t, x, out, c: forward_chunk_tof(t, pdi, x, frame, out=out, cancel=c)  # noqa: E731
        back = lambda t, v, img, c: back_chunk_tof(t, pdi, v, img, frame, cancel=c)  # noqa: E731
    return info, tables, image, nb, fwd, back


class _SetAfter:
    """A cancel flag that turns set at its ``n``-th look."""

    def __init__(self, n: int):
        self.n = n
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > self.n


def test_pieces_give_the_same_numbers_bit_for_bit(projectors, monkeypatch):
    """A call in pieces of 101 LORs (a flag given, never set) gives the forward and back
    projections of one call over the whole chunk, bit for bit: each LOR's value is its own, and a
    back projection's pieces are multiples of its worker count.  Guards against pieces that
    deal LORs to other workers (another order of float32 additions) or skip or repeat LORs."""
    info, tables, image, nb, fwd, back = projectors
    n = nb * sum(t.num_lors for t in tables)
    whole = fwd(tables, image, np.empty(n, np.float32), None)
    whole_back = back(tables, whole, np.zeros(info.shape, np.float32), None)
    monkeypatch.setattr(workers, "CANCEL_CHECK_LORS", PIECE)
    flag = threading.Event()
    assert sum(t.num_lors for t in tables) > 10 * PIECE
    np.testing.assert_array_equal(fwd(tables, image, np.empty(n, np.float32), flag), whole)
    np.testing.assert_array_equal(back(tables, whole, np.zeros(info.shape, np.float32), flag), whole_back)
    assert whole_back.max() > 0 and np.count_nonzero(whole) > n // 2


def test_a_cancelled_call_stops_after_the_piece_in_flight(projectors, monkeypatch):
    """A flag set at its 4th look stops a forward projection after 3 pieces: the first part's
    first 3 x 101 LORs (in every TOF bin) are written, nothing after them; a flag set before the
    call stops a back projection before it adds anything.  Guards against a cancelled call
    running on to the end of its chunk."""
    info, tables, image, nb, fwd, back = projectors
    monkeypatch.setattr(workers, "CANCEL_CHECK_LORS", PIECE)
    k0 = tables[0].num_lors
    n = nb * sum(t.num_lors for t in tables)
    out = np.full(n, np.nan, np.float32)
    flag = _SetAfter(3)
    with pytest.raises(Cancelled):
        fwd(tables, image, out, flag)
    assert flag.looks == 4
    first = out[: nb * k0].reshape(nb, k0)  # the first part's values, [TOF bin][LOR]
    assert not np.isnan(first[:, : 3 * PIECE]).any() and np.isnan(first[:, 3 * PIECE :]).all()
    assert np.isnan(out[nb * k0 :]).all()
    set_now = threading.Event()
    set_now.set()
    img = np.zeros(info.shape, np.float32)
    with pytest.raises(Cancelled):
        back(tables, np.ones(n, np.float32), img, set_now)
    assert not img.any()  # nothing was added: the flag is looked at before the first piece


def test_lor_ranges():
    """``lor_ranges``: the whole range in one piece without a flag (none for no LORs); with one,
    pieces of ``CANCEL_CHECK_LORS`` LORs, or multiples of the worker count.  Guards the ranges'
    cover of every LOR once."""
    assert list(workers.lor_ranges(10)) == [(0, 10)]
    assert list(workers.lor_ranges(0)) == []
    flag = threading.Event()
    step = workers.CANCEL_CHECK_LORS
    assert list(workers.lor_ranges(2 * step + 1, flag)) == [(0, step), (step, 2 * step), (2 * step, 2 * step + 1)]
    # multiples of the worker count, so that a back projection's workers keep their LORs
    pieces = list(workers.lor_ranges(10 * step, flag, multiple=3))
    assert all((hi - lo) % 3 == 0 for lo, hi in pieces[:-1])
    assert pieces[0][0] == 0 and pieces[-1][1] == 10 * step
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
