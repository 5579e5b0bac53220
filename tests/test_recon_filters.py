"""OSEM's filter schedule (stirgpu.recon.filtering), without STIR: which filter runs at which
subiteration and on what, and that the post-filter reaches the final estimate only.  The
agreement with STIR's OSMAPOSL is ``stir_differential/test_osmaposl_filters_vs_stir.py``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_osem

from stirgpu.errors import StirGpuError
from stirgpu.filters import PreparedFilter, SeparableGaussianFilter, SeparableImageFilter
from stirgpu.formats import read_image
from stirgpu.geometry import ImageInfo
from stirgpu.recon import FilterSchedule


class _Recording(SeparableImageFilter):
    """A filter that halves the image and notes (name, subiteration) in a shared log."""

    registered_name = "recording"

    def __init__(self, name, log, clock):
        self.name, self.log, self.clock = name, log, clock

    def prepare(self, voxel_size):
        outer = self

        class Prepared(PreparedFilter):
            def apply_in_place(self, array):
                outer.log.append((outer.name, outer.clock[0]))
                array *= np.float32(0.5)
                return array

        return Prepared(self.name, (), voxel_size)


def test_schedule_follows_stirs_intervals_and_thresholds():
    """Inter-update at multiples of its interval, inter-iteration at multiples of its own, the
    post-filter after the last subiteration only, in that order within a subiteration; the two
    inter-* filters are followed by STIR's positivity threshold, the post-filter is not."""
    log, clock = [], [0]
    sched = FilterSchedule(
        _Recording("update", log, clock), 2, _Recording("iteration", log, clock), 3, _Recording("post", log, clock)
    ).prepare(ImageInfo(shape=(2, 2, 2), voxel_size=(1.0, 1.0, 1.0)))
    image = np.zeros((2, 2, 2), np.float32)
    for n in range(1, 7):
        clock[0] = n
        sched.before_multiplying(image, n)
        sched.end_of_subiteration(image, n, last=n == 6)
    assert log == [("update", 2), ("iteration", 3), ("update", 4), ("update", 6), ("iteration", 6), ("post", 6)]
    # the threshold raises the zeros to 1e-6 after the first filtering (subiteration 2), then five
    # halvings follow (each within the threshold's 1e-6 of the smallest value, so it keeps them)
    assert np.all(image == np.float32(1e-6) / np.float32(32))


def test_schedule_refuses_bad_settings():
    with pytest.raises(StirGpuError, match="inter_update_interval must be >= 0"):
        FilterSchedule(SeparableGaussianFilter(fwhm=3.0), -1)
    with pytest.raises(StirGpuError, match="must be a stirgpu.filters filter"):
        FilterSchedule(post="Separable Gaussian")


def test_post_filter_changes_the_final_estimate_only(osem_problem, tmp_path):
    """OSEM with a post-filter: the estimates saved before the last subiteration are the
    unfiltered run's, the last one (file and the returned image) is the filter applied to the
    unfiltered run's last estimate, bit for bit."""
    post = SeparableGaussianFilter(fwhm=(5.0, 4.0, 4.0))
    kw = dict(num_subsets=4, num_subiterations=4, save_interval=2)
    plain = make_osem(osem_problem, output_filename_prefix=tmp_path / "plain", **kw).reconstruct()
    filtered = make_osem(
        osem_problem, output_filename_prefix=tmp_path / "post", filters=FilterSchedule(post=post), **kw
    )
    result = filtered.reconstruct()
    info = osem_problem[1]
    expected = post.apply(np.asarray(plain.image), voxel_size=info.voxel_size)
    assert np.array_equal(result.image, expected)
    assert np.array_equal(read_image(tmp_path / "post_4.hv").array, expected)
    assert np.array_equal(read_image(tmp_path / "post_2.hv").array, read_image(tmp_path / "plain_2.hv").array)
