"""The tail mask's rule on single lines (STIR's ``CreateTailMaskFromACFs``; the whole function
is compared with STIR's executable in ``tests/stir_differential/test_tail_mask_vs_stir.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.scatter import tail_mask_lines


def test_margin_taken_off_each_tail():
    line = np.array([1.0, 1.0, 1.0, 1.05, 1.2, 1.5, 1.2, 1.0, 1.0, 1.0, 1.0])
    assert tail_mask_lines(line, 1.1, 1).tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1]
    assert tail_mask_lines(line, 1.1, 0).tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1]


def test_threshold_itself_is_inside():
    line = np.array([1.0, np.float32(1.1), 1.0])
    assert tail_mask_lines(line, 1.1, 0).tolist() == [1, 0, 1]


def test_line_without_object_keeps_last_margin_bins_out():
    """STIR's right-hand search stops where the left part ends: it finds only the margin."""
    assert tail_mask_lines(np.ones(8), 1.1, 3).tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert tail_mask_lines(np.ones(3), 1.1, 5).tolist() == [0, 0, 0]


def test_lines_are_independent():
    lines = np.array([[1.0, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 2.0]])
    np.testing.assert_array_equal(tail_mask_lines(lines, 1.1, 0), [[1, 0, 1, 1], [1, 1, 1, 0]])


def test_threshold_not_above_one_refused():
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.geometry import ProjDataInfo, Scanner
    from stirgpu.scatter import tail_mask_from_acfs

    acfs = ProjDataInMemory(ProjDataInfo.construct(Scanner.from_name("ECAT 931"), 1, 0), fill=1.0)
    with pytest.raises(ValueError, match="ACF-threshold should be larger than 1"):
        tail_mask_from_acfs(acfs, acf_threshold=1.0)
