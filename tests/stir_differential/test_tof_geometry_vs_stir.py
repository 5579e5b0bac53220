"""TOF geometry against the real STIR 6.5: every TOF rule of ``stirgpu.geometry.tof`` on
generated cases (every TOF-ready scanner STIR knows, every mashing factor that divides its
unmashed bins: odd and even numbers of positions, mashed and unmashed).

Compared exactly: mashing factor, number and range of timing positions, is-TOF; centres
(``get_k``), widths (``get_sampling_in_k``), the centres in ps, the bin of a delta time and, through
it, the float32 ps boundaries to the bit; the scanner's TOF parameters; and the kernel's sigma.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.geometry.tof import tof_delta_time_to_mm

pytestmark = pytest.mark.stir

TOF_SCANNERS = [n for n in Scanner.names() if Scanner.is_known(n) and Scanner.from_name(n).is_tof_ready()]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _mash_cases() -> list[tuple[str, int]]:
    out = []
    for name in TOF_SCANNERS:
        sc = Scanner.from_name(name)
        for mash in _divisors(sc.max_num_timing_poss):
            out.append((name, mash))
    return out


def test_tof_scanners_cover_odd_and_even():
    """The cases include the scanners the issue names and both parities of bin counts."""
    assert {"GE Discovery MI 4 rings", "Siemens Vision 600"} <= set(TOF_SCANNERS)
    counts = {Scanner.from_name(n).max_num_timing_poss // m for n, m in _mash_cases()}
    assert any(c % 2 == 0 for c in counts) and any(c % 2 == 1 for c in counts)


@pytest.mark.parametrize("name", TOF_SCANNERS)
def test_scanner_tof_parameters(stir, name):
    ours = Scanner.from_name(name)
    theirs = stir.Scanner.get_scanner_from_name(name)
    assert ours.is_tof_ready() == theirs.is_tof_ready()
    assert ours.get_max_num_timing_poss() == theirs.get_max_num_timing_poss()
    assert np.float32(ours.get_size_of_timing_pos()) == np.float32(theirs.get_size_of_timing_pos())
    assert np.float32(ours.get_timing_resolution()) == np.float32(theirs.get_timing_resolution())


def _both(stir, name: str, mash: int):
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name(name), 1, 0, 4, 5, False, mash
    )
    ours = ProjDataInfo.construct(Scanner.from_name(name), 1, 0, 4, 5, tof_mash_factor=mash)
    return ours, theirs


@pytest.mark.parametrize("name,mash", _mash_cases())
def test_timing_positions_as_stir(stir, name, mash):
    ours, theirs = _both(stir, name, mash)
    assert ours.get_tof_mash_factor() == theirs.get_tof_mash_factor()
    assert ours.get_num_tof_poss() == theirs.get_num_tof_poss()
    assert ours.get_min_tof_pos_num() == theirs.get_min_tof_pos_num()
    assert ours.get_max_tof_pos_num() == theirs.get_max_tof_pos_num()
    assert ours.is_tof_data() == theirs.is_tof_data()
    assert ours.get_num_sinograms() == theirs.get_num_sinograms()
    assert ours.get_num_non_tof_sinograms() == theirs.get_num_non_tof_sinograms()
    if ours.get_num_tof_poss() > 60:  # the longest lists: their ends and middle suffice
        ks = list(range(ours.get_min_tof_pos_num(), ours.get_min_tof_pos_num() + 5)) + [0, ours.get_max_tof_pos_num()]
    else:
        ks = list(range(ours.get_min_tof_pos_num(), ours.get_max_tof_pos_num() + 1))
    for k in ks:
        b = stir.Bin(0, 0, 0, 0, k)
        assert ours.get_k(k) == theirs.get_k(b), k
        assert ours.get_sampling_in_k(k) == theirs.get_sampling_in_k(b), k
        assert ours.get_tof_delta_time(k) == pytest.approx(theirs.get_tof_delta_time(b), rel=1e-15, abs=1e-12), k
        # STIR's boundaries are not exposed to Python: its get_tof_bin at and just below each of
        # ours pins them to the bit (float32 ps boundaries compared in double; neighbouring
        # float32 boundaries may overlap -- the lower position wins -- or leave a gap, which
        # STIR gives its lowest position)
        lo, hi = ours.tof_bin_boundaries_ps(k)
        mm_lo, mm_hi = ours.tof_bin_boundaries_mm(k)
        assert (mm_lo + mm_hi) / 2 == pytest.approx(ours.get_k(k), abs=1e-4)
        centre = theirs.get_tof_delta_time(b)
        assert ours.get_tof_bin(centre) == theirs.get_tof_bin(centre) == k
        for x in (lo, hi, _below(lo), _below(hi)):
            assert ours.get_tof_bin(x) == theirs.get_tof_bin(x), (k, x)


def _below(x: float) -> float:
    # the reference STIR is built with -ffast-math (denormals read as zero): below 0, the
    # nearest normal double
    return float(np.nextafter(x, -np.inf)) if x != 0 else -float(np.finfo(np.float64).tiny)


@pytest.mark.parametrize("name", ["GE Discovery MI 4 rings", "Siemens Vision 600", "GE Discovery 690"])
def test_non_tof_and_clone_as_stir(stir, name):
    """Mashing factor 0 is non-TOF; the non-TOF clone of TOF data is non-TOF; the TOF
    constructor's default is STIR's non-TOF (mashing factor 0, one position at 0)."""
    ours, theirs = _both(stir, name, 0)
    assert (ours.get_tof_mash_factor(), ours.get_num_tof_poss(), ours.is_tof_data()) == (0, 1, False)
    assert (theirs.get_tof_mash_factor(), theirs.get_num_tof_poss(), theirs.is_tof_data()) == (0, 1, False)
    mash = Scanner.from_name(name).max_num_timing_poss
    mash = [d for d in _divisors(mash) if d > 1][0]
    ours, theirs = _both(stir, name, mash)
    oc, tc = ours.create_non_tof_clone(), theirs.create_non_tof_clone()
    assert (oc.get_tof_mash_factor(), oc.get_num_tof_poss(), oc.get_min_tof_pos_num()) == (
        tc.get_tof_mash_factor(),
        tc.get_num_tof_poss(),
        tc.get_min_tof_pos_num(),
    )
    assert oc == ours.replace(tof_mash_factor=0) and oc != ours


def test_non_tof_scanner_gives_non_tof_data(stir):
    """STIR: a scanner that is not TOF-ready gives non-TOF data whatever the mashing factor."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 1, 0, 4, 5, False, 3
    )
    ours = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 1, 0, 4, 5, tof_mash_factor=3)
    assert theirs.get_tof_mash_factor() == ours.get_tof_mash_factor() == 0
    assert theirs.get_num_tof_poss() == ours.get_num_tof_poss() == 1


@pytest.mark.parametrize("mash_of", [lambda n: n + 1, lambda n: n - 1])
def test_bad_mashing_factors_refused_like_stir(stir, mash_of):
    """A mashing factor above the unmashed bins, or not dividing them: STIR errors, so do we."""
    name = "GE Discovery MI 4 rings"
    mash = mash_of(Scanner.from_name(name).max_num_timing_poss)
    with pytest.raises(Exception):  # noqa: B017 (STIR's error() raises a plain RuntimeError)
        stir.ProjDataInfo.construct_proj_data_info(stir.Scanner.get_scanner_from_name(name), 1, 0, 4, 5, False, mash)
    with pytest.raises(GeometryError, match="tof_mash_factor"):
        ProjDataInfo.construct(Scanner.from_name(name), 1, 0, 4, 5, tof_mash_factor=mash)


@pytest.mark.parametrize("name", ["GE Discovery MI 4 rings", "Siemens Vision 600"])
def test_kernel_sigma_as_parallelproj_helper(stir, name):
    """sigma = tof_delta_time_to_mm(resolution) / 2.355 with STIR's float32 conversion."""
    sc = stir.Scanner.get_scanner_from_name(name)
    ours = ProjDataInfo.construct(Scanner.from_name(name), 1, 0, 4, 5, tof_mash_factor=1)
    mm = np.float32(np.float64(sc.get_timing_resolution()) * 0.299792458 * 0.5)
    assert ours.tof.sigma_mm() == float(mm) / 2.355
    assert tof_delta_time_to_mm(sc.get_timing_resolution()) == float(mm)
