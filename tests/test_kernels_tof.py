"""TOF chunk kernels (libparallelproj 2.0.7's TOF sinogram projector along STIR's endpoints, CPU)
without STIR: TOF bins sum to the non-TOF projection,
adjointness, chunking invariance (parts, TOF-bin ranges), windows wider than libparallelproj's 64
weights, and clear errors.  Agreement with STIR: ``stir_differential/test_tof_projection_vs_stir.py``."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels import forward_chunk
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof, stir_tof_tables
from stirgpu.kernels.tof.cpu import window_size

DMI = "GE Discovery MI 4 rings"


def _setup(mash, scanner=DMI, views=8, tang=31):
    pdi = ProjDataInfo.construct(Scanner.from_name(scanner), 1, 1, views, tang, tof_mash_factor=mash)
    info = stir_default_image_info(pdi)
    nz, ny, nx = info.shape
    z, y, x = np.meshgrid(np.linspace(-1, 1, nz), np.linspace(-1, 1, ny), np.linspace(-1, 1, nx), indexing="ij")
    img = ((x / 0.6) ** 2 + (y / 0.5) ** 2 <= 1) * (1 + np.random.default_rng(mash).uniform(0, 0.2, info.shape))
    return pdi, img.astype(np.float32), stir_image_frame(info)


@pytest.mark.parametrize("mash", [13, 29, 1])
def test_tof_bins_sum_to_the_non_tof_projection(mash):
    """The weights of a plane are normalised over their window: with the image well inside the
    TOF range (here: the FOV of the DMI's 735 mm TOF range), the TOF bins of a LOR add up to its
    non-TOF projection to float32 rounding (the walk runs the other way, and each plane's float32
    weights add up to 1 only to a few ulps): measured 1.0e-5 of the maximum for each mash factor,
    bar 2e-5.  Guards the weights' normalisation and the TOF walk's planes against the non-TOF
    projector's."""
    pdi, img, frame = _setup(mash)
    t = pdi.chunk_tables(0)
    tof = forward_chunk_tof(t, pdi, img, frame)
    non_tof = forward_chunk(t, pdi, img, frame)
    assert tof.shape == (pdi.get_num_tof_poss(), *non_tof.shape)
    rel = np.abs(tof.sum(axis=0, dtype=np.float64) - non_tof).max() / non_tof.max()
    assert rel < 2e-5, rel
    assert np.count_nonzero(tof.sum(axis=(1, 2, 3))) > 1  # the values really spread over TOF bins


def test_unmashed_window_is_clamped_to_libparallelproj_buffer():
    """Unmashed DMI bins are 1.95 mm for a 24 mm sigma: ~100 bins within 4 sigmas, more than
    libparallelproj's 64 weights; 2.0.7 keeps the 64 bins around the plane's TOF coordinate, so
    the kernels' buffers hold 64 (the kept weights are normalised over themselves: the bins still
    add up to the non-TOF projection, test_tof_bins_sum_to_the_non_tof_projection[1])."""
    pdi, img, frame = _setup(1)
    tof, _, _ = stir_tof_tables(pdi, frame[2])
    width, sigma, n_sigmas = (float(v) for v in tof[:3])
    assert 2 * n_sigmas * sigma / width > 64
    assert window_size(tof) == 64


def test_back_projection_is_the_adjoint():
    """<A x, y> == <x, A^T y> over every TOF bin of a segment (float64 dot products of float32
    results: measured 1.8e-9 to 3.6e-9 relative with 1 to 16 numba threads, bar 1e-8).  Guards
    the TOF back projection against other weights or bins than the forward one's."""
    pdi, img, frame = _setup(29)
    t = pdi.chunk_tables(-1)
    y = np.random.default_rng(3).uniform(0, 1, (pdi.get_num_tof_poss(), *t.shape)).astype(np.float32)
    ax = forward_chunk_tof(t, pdi, img, frame)
    aty = back_chunk_tof(t, pdi, y, np.zeros_like(img), frame)
    lhs = float(np.dot(ax.ravel().astype(np.float64), y.ravel()))
    rhs = float(np.dot(img.ravel().astype(np.float64), aty.ravel()))
    assert abs(lhs - rhs) <= 1e-8 * abs(lhs)


def test_back_projection_of_zero_lors_adds_nothing():
    """Zero values add nothing (the image keeps its ones exactly): LORs whose value is 0 are
    skipped, as libparallelproj does.  Guards against a back projection that overwrites."""
    pdi, img, frame = _setup(29)
    t = pdi.chunk_tables(0)
    y = np.zeros((pdi.get_num_tof_poss(), *t.shape), np.float32)
    out = back_chunk_tof(t, pdi, y, np.ones_like(img), frame)
    assert np.all(out == 1)


def test_tof_bin_ranges_and_parts_give_the_same_numbers():
    """Any split of a chunk gives the same numbers: parts (segments) in one call and ranges of TOF
    bins give the forward projection bit for bit; the back projection by ranges of TOF bins
    equals the whole one up to the order of float32 additions (measured 1.6e-7 to 3.2e-7 of the
    maximum with 1 to 16 numba threads, bar 1e-6).  Guards the TOF bin offsets of a range
    (``timing_poss``) and of the parts."""
    pdi, img, frame = _setup(29)
    parts = [pdi.chunk_tables(s) for s in pdi.segment_nums]
    whole = [forward_chunk_tof(p, pdi, img, frame) for p in parts]
    flat = forward_chunk_tof(parts, pdi, img, frame)
    assert np.array_equal(flat, np.concatenate([w.ravel() for w in whole]))
    lo, hi = pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num()
    pieces = [forward_chunk_tof(parts[0], pdi, img, frame, timing_poss=range(a, b)) for a, b in ((lo, 0), (0, hi + 1))]
    split = np.concatenate(pieces)
    assert np.array_equal(split, whole[0])
    y = np.random.default_rng(5).uniform(0, 1, whole[0].shape).astype(np.float32)
    full = back_chunk_tof(parts[0], pdi, y, np.zeros_like(img), frame)
    by_bins = np.zeros_like(img)
    for (a, b), n in (((lo, 0), -lo), ((0, hi + 1), hi + 1)):
        sel = y[:n] if a == lo else y[-n:]
        back_chunk_tof(parts[0], pdi, np.ascontiguousarray(sel), by_bins, frame, timing_poss=range(a, b))
    assert np.abs(by_bins - full).max() <= 1e-6 * full.max()  # float32 sums in another order


def test_non_tof_kernels_unchanged_by_tof_geometry():
    """The non-TOF kernels give the same numbers, bit for bit, on TOF data and on its non-TOF
    clone (the same tables).  Guards against TOF settings leaking into the non-TOF geometry."""
    pdi, img, frame = _setup(29)
    a = forward_chunk(pdi.chunk_tables(0), pdi, img, frame)
    b = forward_chunk(pdi.create_non_tof_clone().chunk_tables(0), pdi.create_non_tof_clone(), img, frame)
    assert np.array_equal(a, b)


def test_errors():
    """Non-TOF data, TOF bins that are not a range of the data's, values without the TOF bins and
    an ``out`` of the non-TOF size are refused naming the problem."""
    pdi, img, frame = _setup(29)
    t = pdi.chunk_tables(0)
    with pytest.raises(GeometryError, match="not TOF data"):
        forward_chunk_tof(t, pdi.create_non_tof_clone(), img, frame)
    with pytest.raises(GeometryError, match="timing_poss"):
        forward_chunk_tof(t, pdi, img, frame, timing_poss=[0, 2])
    with pytest.raises(GeometryError, match="values"):
        back_chunk_tof(t, pdi, np.zeros(t.shape, np.float32), np.zeros_like(img), frame)
    with pytest.raises(GeometryError, match="out"):
        forward_chunk_tof(t, pdi, img, frame, out=np.zeros(t.shape, np.float32))
