"""STIR's filter keys in OSMAPOSL files (stirgpu.parfile.filters): the three placements, both
filter blocks with STIR's key names and defaults, refusals at their line, the round trip.

STIR's own parsing of the same blocks (keys, defaults, x/y/z order) is checked in
``stir_differential/test_filters_vs_stir.py`` (STIR parses each block the tests give us)."""

from __future__ import annotations

import pickle

import pytest
from test_parfile_osmaposl import line_of, par, read, refused, write

from stirgpu.filters import SeparableCartesianMetzFilter, SeparableGaussianFilter
from stirgpu.parfile import read_osmaposl_par

METZ = (
    "Separable Cartesian Metz Filter Parameters :=\n"
    "x-dir filter FWHM (in mm) := 5\n"
    "y-dir filter FWHM (in mm) := 6\n"
    "z-dir filter FWHM (in mm) := 8\n"
    "x-dir filter Metz power := 1.0\n"
    "z-dir filter Metz power := 2\n"
    "x-dir maximum kernel size := 129\n"
    "z-dir maximum kernel size := 31\n"
    "END Separable Cartesian Metz Filter Parameters :=\n"
)
GAUSSIAN = (
    "Separable Gaussian Filter Parameters :=\n"
    "x-dir filter FWHM (in mm) := 4\n"
    "z-dir filter FWHM (in mm) := 3.5\n"
    "y-dir maximum kernel size := 9\n"
    "Normalise filter to 1 := 0\n"
    "END Separable Gaussian Filter Parameters :=\n"
)


def test_the_three_placements_read_their_filters(tmp_path):
    """Each key lands in its field, (z, y, x) ordered, keys not given at STIR's defaults (FWHM 0,
    power 0, maximum kernel size -1, normalised): the Metz block of STIR's test pack, a Gaussian,
    and the intervals."""
    s = read(
        tmp_path,
        par(
            top="inter-update filter subiteration interval := 4\n"
            f"inter-update filter type := Separable Cartesian Metz\n{METZ}"
            "inter-iteration filter subiteration interval := 2\n"
            f"inter-iteration filter type := Separable Gaussian\n{GAUSSIAN}"
            f"post-filter type := separable gaussian\n{GAUSSIAN}"
        ),
    )
    metz = SeparableCartesianMetzFilter(fwhm=(8, 6, 5), metz_power=(2, 0, 1), max_kernel_size=(31, -1, 129))
    gauss = SeparableGaussianFilter(fwhm=(3.5, 0, 4), max_kernel_size=(-1, 9, -1), normalise=False)
    assert (s.inter_update_filter, s.inter_update_filter_interval) == (metz, 4)
    assert (s.inter_iteration_filter, s.inter_iteration_filter_interval) == (gauss, 2)
    assert s.post_filter == gauss
    assert pickle.loads(pickle.dumps(s)) == s
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert read_osmaposl_par(write(other, s.to_par(), "copy.par"), base_dir=other, env={}) == s


def test_a_disabled_filter_of_another_type_is_dropped(tmp_path):
    """STIR never applies a filter whose interval is 0: its type may be one stirgpu does not
    implement (the file is accepted, the filter dropped); one stirgpu implements is kept, unused."""
    s = read(
        tmp_path,
        par(
            top="inter-iteration filter type := Median\nMedian Filter Parameters :=\nEnd Median Filter Parameters :=\n"
            f"inter-update filter type := Separable Cartesian Metz\n{METZ}"
        ),
    )
    assert s.inter_iteration_filter is None and s.inter_iteration_filter_interval == 0
    assert isinstance(s.inter_update_filter, SeparableCartesianMetzFilter) and s.inter_update_filter_interval == 0


@pytest.mark.parametrize(
    "top, needle, words",
    [
        (
            "post-filter type := Separable Gaussian\nSeparable Gaussian Filter Parameters :=\n"
            "x-dir filter FWHM (in mm) := -2\nEND Separable Gaussian Filter Parameters :=\n",
            "x-dir filter FWHM",
            "must be >= 0 mm",
        ),
        (
            "post-filter type := Separable Gaussian\nSeparable Gaussian Filter Parameters :=\n"
            "z-dir maximum kernel size := 0\nEND Separable Gaussian Filter Parameters :=\n",
            "z-dir maximum kernel size",
            "must be at least 1 (or -1)",
        ),
        (
            "post-filter type := Separable Cartesian Metz\n" + METZ.replace("Metz power := 2", "Metz power := -1"),
            "z-dir filter Metz power",
            "must be >= 0",
        ),
        (
            "post-filter type := Separable Cartesian Metz\n"
            + METZ.replace("x-dir filter FWHM", "x-dir filter FWHM in mm"),
            "x-dir filter FWHM in mm",
            "did you mean 'x-dir filter FWHM (in mm)'",
        ),
        ("post-filter type := Separable Gaussian\n", "post-filter type", "must be followed by the block"),
        (
            "inter-update filter subiteration interval := 2\n"
            "inter-update filter type := Median\nMedian Filter Parameters :=\nEnd Median Filter Parameters :=\n",
            "inter-update filter type",
            "is enabled by 'inter-update filter subiteration interval := 2' (line",
        ),
    ],
)
def test_bad_filter_keys_are_refused_at_their_line(tmp_path, top, needle, words):
    """Values STIR would misuse (negative FWHMs, a zero maximum kernel size, negative powers), a
    misspelt key, a missing block and an enabled filter of another type: refused at the line."""
    text = par(top=top)
    err = refused(tmp_path, text)
    assert err.line == line_of(text, needle) and words in str(err), str(err)
