"""Real STIR files (../shared/fixtures, read-only): headers, geometry and data as STIR sees them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import reference_results

from stirgpu.errors import FormatError
from stirgpu.formats import ProjDataFromFile, StorageOrder, read_from_file, read_header, read_image, write_image
from stirgpu.formats.testing import reference_segment

CASES = ["ecat953_span3", "ecat953_arc_sino"]


def all_files(root, suffix):
    return sorted(p for p in root.rglob(f"*{suffix}"))


def test_every_projdata_header_matches_its_keys(stir_fixtures):
    """Each .hs reads, and the geometry agrees with its own keys (sizes, ring differences,
    axial positions per segment in file order)."""
    files = all_files(stir_fixtures, ".hs")
    assert len(files) >= 9
    for f in files:
        h = read_header(f)
        with read_from_file(f) as pd:
            pdi = pd.get_proj_data_info()
            view_dim = 3 if pd.storage_order is StorageOrder.VIEW else 2
            axial_dim = 5 - view_dim
            assert pdi.get_num_tangential_poss() == h.get_int("matrix size", 1), f
            assert pdi.get_num_views() == h.get_int("matrix size", view_dim), f
            assert pdi.get_num_segments() == h.get_int("matrix size", 4), f
            rd_min = h.get_int_list("minimum ring difference per segment")
            rd_max = h.get_int_list("maximum ring difference per segment")
            axial = h.get_int_list("matrix size", axial_dim)
            for seg, a, b, n in zip(pd.header.segment_sequence, rd_min, rd_max, axial, strict=True):
                assert (pdi.get_min_ring_difference(seg), pdi.get_max_ring_difference(seg)) == (a, b), f
                assert pdi.get_num_axial_poss(seg) == n, f
            sc = pdi.get_scanner()
            assert sc.num_rings == h.get_int("number of rings"), f
            assert sc.num_detectors_per_ring == h.get_int("number of detectors per ring"), f
            assert sc.inner_ring_radius == pytest.approx(h.get_float("inner ring diameter (cm)") * 5, rel=1e-6)
            ntof = h.get_int("matrix size", 5) if h.get_int("number of dimensions") == 5 else 1
            assert pdi.get_num_tof_poss() == ntof, f


def test_templates_and_data(stir_fixtures):
    """Headers whose .s is absent are templates: geometry yes, values a FormatError naming the file."""
    for f in all_files(stir_fixtures, ".hs"):
        with read_from_file(f) as pd:
            has_data = pd.data_path is not None and pd.data_path.is_file() and pd.data_path.stat().st_size > 0
            assert pd.is_template is (not has_data), f
            if pd.is_template:
                with pytest.raises(FormatError, match=f.name):
                    pd.get_viewgram(0, 0)
            else:
                assert np.isfinite(pd.get_segment_by_view(0)).all()


def test_special_headers(stir_fixtures):
    """STIR's gotchas in real files: the commented-out 'applied corrections' of the ECAT 931
    template means arc-corrected; the ROOT template is TOF with 5 timing positions;
    scatter_cylinder's 'unknown' scanner is user-defined from its block."""
    pack = stir_fixtures / "stir_recon_test_pack"
    with read_from_file(pack / "ECAT_931_projdata_template.hs") as pd:
        assert pd.get_proj_data_info().is_arc_corrected()
        assert pd.get_proj_data_info().get_tangential_sampling() == pytest.approx(3.129)
    with read_from_file(pack / "template_for_ROOT_scanner.hs") as pd:
        assert pd.get_num_tof_poss() == 5 and pd.shape == (5, 16, 252, 501)
    with read_from_file(pack / "scatter_cylinder.hs") as pd:
        sc = pd.get_proj_data_info().get_scanner()
        assert (sc.num_rings, sc.num_detectors_per_ring) == (8, 64)
        assert sc.inner_ring_radius == pytest.approx(443.1)
        assert sc.average_depth_of_interaction == pytest.approx(8.4)
    with read_from_file(pack / "Siemens_mMR_seg2.hs") as pd:
        assert pd.get_proj_data_info().get_scanner().name == "Siemens mMR"
        assert not pd.get_proj_data_info().is_arc_corrected()


def test_every_image_header_matches_its_keys(stir_fixtures):
    for f in all_files(stir_fixtures, ".hv"):
        h = read_header(f)
        img = read_image(f)
        nx, ny, nz = (h.get_int("matrix size", i) for i in (1, 2, 3))
        assert img.get_lengths() == (nz, ny, nx), f
        vox = tuple(h.get_float("scaling factor (mm/pixel)", i) for i in (3, 2, 1))
        assert img.get_voxel_size() == pytest.approx(vox), f
        assert img.get_min_indices() == (0, -(ny // 2), -(nx // 2))
        if h.has("first pixel offset (mm)", 1):
            fpo = tuple(h.get_float("first pixel offset (mm)", i) for i in (3, 2, 1))
            assert img.get_first_pixel_offset() == pytest.approx(fpo, abs=1e-9)


@pytest.mark.parametrize("case", CASES)
def test_geometry_numbers_match_stir(stir_fixtures, case):
    """Segment table and phi, s, m, tan(theta) of STIR's sample bins (STIR computes them in
    float32, hence rel 2e-6 / abs 1e-4 mm)."""
    ref = json.loads((reference_results(stir_fixtures) / f"{case}.json").read_text())
    g = ref["geometry"]
    with read_from_file(reference_results(stir_fixtures) / f"{case}_fwd.hs") as pd:
        pdi = pd.get_proj_data_info()
        assert (pd.storage_order is StorageOrder.SINOGRAM) == ref["sinogram_order"]
        assert (pd.get_min_segment_num(), pd.get_max_segment_num()) == (g["min_segment"], g["max_segment"])
        assert pd.get_num_views() == g["num_views"]
        assert pd.get_num_tangential_poss() == g["num_tangential_poss"]
        assert (pd.get_min_tangential_pos_num(), pd.get_max_tangential_pos_num()) == (
            g["min_tangential_pos"],
            g["max_tangential_pos"],
        )
        for s in g["segments"]:
            n = s["segment"]
            assert pdi.get_min_ring_difference(n) == s["min_ring_diff"]
            assert pdi.get_max_ring_difference(n) == s["max_ring_diff"]
            assert pdi.get_num_axial_poss(n) == s["num_axial_poss"]
        for b in g["bins"]:
            assert pdi.get_phi(b["view"]) == pytest.approx(b["phi"], rel=2e-6, abs=1e-6)
            assert pdi.get_s(b["tangential_pos"]) == pytest.approx(b["s"], rel=2e-6, abs=1e-4)
            assert pdi.get_m(b["segment"], b["axial_pos"]) == pytest.approx(b["m"], rel=2e-6, abs=1e-4)
            assert pdi.get_tantheta(b["segment"], b["tangential_pos"]) == pytest.approx(
                b["tantheta"], rel=2e-6, abs=1e-9
            )


@pytest.mark.parametrize("case", CASES)
def test_images_and_sums_match_stir(stir_fixtures, case):
    """Image geometry equals STIR's 'image_as_read' (float32: abs 1e-4 mm); the data sums equal
    STIR's (float64 sums of the same float32 values: rel 1e-9)."""
    d = reference_results(stir_fixtures)
    ref = json.loads((d / f"{case}.json").read_text())
    exp = ref["image_as_read"]
    img = read_image(d / f"{case}_image.hv")
    assert list(img.get_lengths()) == exp["shape"]
    assert img.get_voxel_size() == pytest.approx(exp["voxel"], rel=1e-6)
    assert img.get_origin() == pytest.approx(exp["origin"], abs=1e-4)
    assert list(img.get_min_indices()) == exp["min_indices"]
    with read_from_file(d / f"{case}_fwd.hs") as pd:
        assert pd.as_array().sum(dtype=np.float64) == pytest.approx(ref["fwd_sum"], rel=1e-9)
    back = read_image(d / f"{case}_back.hv")
    assert back.as_array().sum(dtype=np.float64) == pytest.approx(ref["back_sum"], rel=1e-9)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("order", list(StorageOrder))
def test_fixture_round_trips_bit_identical(stir_fixtures, tmp_path, case, order):
    """STIR's files read -> written by stirgpu (either order) -> read are bit-identical; written
    in STIR's own order, the data file is byte for byte STIR's."""
    src = reference_results(stir_fixtures) / f"{case}_fwd.hs"
    with read_from_file(src) as a:
        ref = a.as_array()
        with ProjDataFromFile.create(tmp_path / "copy.hs", a.get_proj_data_info(), order, fill=a):
            pass
        with read_from_file(tmp_path / "copy.hs") as b:
            assert b.get_proj_data_info() == a.get_proj_data_info()
            assert b.as_array().tobytes() == ref.tobytes()
            s = b.get_max_segment_num()
            np.testing.assert_array_equal(
                b.get_segment_by_sinogram(s), reference_segment(ref, a.get_proj_data_info(), s)
            )
        if order is a.storage_order:
            assert (tmp_path / "copy.s").read_bytes() == a.data_path.read_bytes()
    img = read_image(reference_results(stir_fixtures) / f"{case}_image.hv")
    write_image(tmp_path / "img.hv", img)
    back = read_image(tmp_path / "img.hv")
    assert back.as_array().tobytes() == img.as_array().tobytes()
    assert back.info == img.info
    assert (tmp_path / "img.v").read_bytes() == (reference_results(stir_fixtures) / f"{case}_image.v").read_bytes()
