"""stirgpu's tail mask against STIR's own ``create_tail_mask_from_ACFs`` (the reference build's
executable, both of its command forms), bit for bit.

The attenuation correction factors are those of an off-centre water cylinder (the exponential of
mu times the chord length of each bin's line), with lines STIR treats specially: a factor exactly
at the threshold (STIR's ``>=`` in float32), lines with no factor above the threshold (the
right-hand search stops at the left part of the mask) and a margin wider than the object's tails.

Guards against: the comparison's direction or precision, the margin applied on the wrong side
or not at all, the right-hand search allowed into the left part, the mask written in the wrong
order of views, axial positions or segments.
"""

from __future__ import annotations

import numpy as np
import pytest
from scatter_templates import scatter_scanner

from stirgpu.formats import ProjDataFromFile, read_from_file
from stirgpu.geometry import ProjDataInfo
from stirgpu.scatter import tail_mask_from_acfs

pytestmark = pytest.mark.stir


def _cylinder_acfs(pdi: ProjDataInfo) -> dict[int, np.ndarray]:
    """Per segment (views, axial, tangential): exp(mu * chord) of a 90 mm cylinder centred at
    (25, -10) mm, mu 0.0096 mm^-1; axial position 0 of segment 0 empty (all 1), and one bin of
    axial position 1 set to STIR's threshold exactly."""
    phi = np.asarray(pdi.get_phi(np.arange(pdi.get_num_views())))[:, None, None]
    s = np.asarray(pdi.get_s(np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)))
    d = s[None, None, :] - (25.0 * np.cos(phi) - 10.0 * np.sin(phi))
    chord = 2 * np.sqrt(np.clip(90.0**2 - d**2, 0, None))
    out = {}
    for seg in pdi.segment_nums:
        acf = np.repeat(np.exp(0.0096 * chord), pdi.get_num_axial_poss(seg), axis=1).astype(np.float32)
        if seg == 0:
            acf[:, 0] = 1.0
            acf[3, 1, 20] = np.float32(1.1)
        out[seg] = acf
    return out


def _write(path, pdi, per_segment):
    store = ProjDataFromFile.create(path, pdi)
    for seg, arr in per_segment.items():
        store.set_segment_by_view(arr, seg)
    store.close()


@pytest.mark.parametrize(
    ("threshold", "margin", "form"),
    [(None, None, "options"), (1.3, 2, "options"), (1.05, 30, "par"), (1.1, 0, "par")],
)
def test_tail_mask_equals_stir(reference_stir, tmp_path, threshold, margin, form):
    pdi = ProjDataInfo.construct(scatter_scanner(4, 64), 1, 2)
    acfs = _cylinder_acfs(pdi)
    assert any((a < 1.1).all(axis=-1).any() for a in acfs.values())
    _write(tmp_path / "acf.hs", pdi, acfs)
    if form == "options":
        args = ["--ACF-filename", "acf.hs", "--output-filename", "stir_mask.hs"]
        if threshold is not None:
            args += ["--ACF-threshold", str(threshold), "--safety-margin", str(margin)]
        reference_stir.run("create_tail_mask_from_ACFs", *args, cwd=tmp_path)
    else:
        (tmp_path / "mask.par").write_text(
            "CreateTailMaskFromACFs :=\nACF-filename := acf.hs\noutput-filename := stir_mask.hs\n"
            f"ACF-threshold := {threshold}\nsafety-margin := {margin}\nEND CreateTailMaskFromACFs :=\n"
        )
        reference_stir.run("create_tail_mask_from_ACFs", "mask.par", cwd=tmp_path)
    theirs = read_from_file(tmp_path / "stir_mask.hs")
    kwargs = {} if threshold is None else dict(acf_threshold=threshold, safety_margin=margin)
    ours = tail_mask_from_acfs(read_from_file(tmp_path / "acf.hs"), **kwargs)
    assert theirs.proj_data_info == ours.proj_data_info
    stir_mask = theirs.as_array()
    assert 0 < stir_mask.sum() < stir_mask.size
    np.testing.assert_array_equal(ours.as_array(), stir_mask)
