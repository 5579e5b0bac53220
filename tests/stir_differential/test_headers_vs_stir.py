"""Projection-data headers both ways between stirgpu and a real STIR 6.5 (``.hs`` + ``.s``).

Identities checked, case by case (``cases.py``): STIR reads what stirgpu writes (the same
``ProjDataInfo`` as STIR's own construction, the same values), stirgpu reads what STIR writes (the
same ``ProjDataInfo`` as stirgpu's construction, the same values), in both storage orders and in
segment orders other than ascending.  Values are float32 in the files and compared exactly: a
header read is a copy, any difference is a layout (order, offset, segment) error.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from cases import (
    every_scanner_cases,
    large_cases,
    large_marks,
    params,
    quick_cases,
    stir_proj_data_info,
    stirgpu_proj_data_info,
)

from stirgpu.errors import FormatError
from stirgpu.formats import ProjDataFromFile, StorageOrder, read_from_file, read_projdata_header
from stirgpu.formats.testing import small_proj_data_info
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

pytestmark = pytest.mark.stir

HEADER_CASES = params(quick_cases()) + params(every_scanner_cases()) + params(large_cases(), marks=large_marks())


def _order(case) -> StorageOrder:
    return StorageOrder.VIEW if case.storage_order == "view" else StorageOrder.SINOGRAM


def _stir_order(stir, case):
    return (
        stir.ProjDataFromStream.Segment_View_AxialPos_TangPos
        if case.storage_order == "view"
        else stir.ProjDataFromStream.Segment_AxialPos_View_TangPos
    )


def _values(case, shape) -> np.ndarray:
    """Seeded data, distinct per bin (a permuted ramp), so any misplaced bin shows."""
    n = int(np.prod(shape))
    return case.rng(7).permutation(n).astype(np.float32).reshape(shape)


def _stir_array(stir_proj_data, num_bins: int) -> np.ndarray:
    """STIR's values in its as_array order (segments 0, +1, -1, ...; [axial][view][tangential])."""
    return np.asarray(stir_proj_data.to_array().as_array(), dtype=np.float32).reshape(num_bins)


def _stir_write(stir, case, path, data, segment_sequence=None):
    """STIR writes ``data`` (as_array order) as Interfile with the case's storage order."""
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    pdi = stir_proj_data_info(stir, case)
    args = (stir.ExamInfo(), pdi, str(path), mode)
    if segment_sequence is not None:
        args += (list(segment_sequence),)
    proj = stir.ProjDataInterfile(*args, _stir_order(stir, case))
    proj.fill(data.ravel().flat)
    del proj  # closes and flushes the file


def _assert_stir_geometry_equal(stir, read_pdi, case) -> None:
    """STIR's reading of a header describes STIR's own construction of the case: same parameter
    listing, and per segment the same ring differences, axial positions and m of the first
    position (float32 to 1e-4 mm)."""
    want = stir_proj_data_info(stir, case)
    assert read_pdi.parameter_info() == want.parameter_info()
    for seg in range(want.get_min_segment_num(), want.get_max_segment_num() + 1):
        b = stir.Bin(seg, 0, 0, 0)
        assert read_pdi.get_num_axial_poss(seg) == want.get_num_axial_poss(seg)
        assert abs(read_pdi.get_m(b) - want.get_m(b)) < 1e-4


@pytest.mark.parametrize("case", HEADER_CASES)
def test_stir_reads_what_stirgpu_writes(stir, case, tmp_path):
    """stirgpu writes the case's data (its storage order); STIR's ``ProjData.read_from_file`` gives
    STIR's own geometry of the case and the same values.  Guards against headers STIR reads
    differently (segment order, axial counts of single-difference segments, orders, arc flag)."""
    pdi = stirgpu_proj_data_info(case)
    data = _values(case, (pdi.total_num_bins,))
    hs = tmp_path / "ours.hs"
    with ProjDataFromFile.create(hs, pdi, _order(case)) as store:
        store.fill(data.reshape(store.as_array().shape))
    theirs = stir.ProjData.read_from_file(str(hs))
    _assert_stir_geometry_equal(stir, theirs.get_proj_data_info(), case)
    np.testing.assert_array_equal(_stir_array(theirs, pdi.total_num_bins), data)


@pytest.mark.parametrize("case", HEADER_CASES)
def test_stirgpu_reads_what_stir_writes(stir, case, tmp_path):
    """STIR writes a ``ProjDataInterfile`` of the case (the case's storage order); stirgpu reads the
    same ``ProjDataInfo`` as its own construction of the case, the storage order, and the same
    values.  Guards against refusing STIR's headers (such as GE Discovery 690, span 3, maximum ring
    difference 5) and against misreading their layout."""
    ours = stirgpu_proj_data_info(case)
    data = _values(case, (ours.total_num_bins,))
    hs = tmp_path / "theirs.hs"
    _stir_write(stir, case, hs, data)
    with read_from_file(hs) as store:
        assert store.get_proj_data_info() == ours
        assert store.storage_order is _order(case)
        np.testing.assert_array_equal(store.as_array().ravel(), data)


@pytest.mark.parametrize("case", params(quick_cases()))
def test_stirgpu_reads_stir_segment_orders(stir, case, tmp_path):
    """STIR can write segments in any order (here its memory order 0, +1, -1, ...); stirgpu numbers
    them by ring difference as STIR does and reads each segment from its place in the file."""
    ours = stirgpu_proj_data_info(case)
    data = _values(case, (ours.total_num_bins,))
    hs = tmp_path / "seq.hs"
    _stir_write(stir, case, hs, data, segment_sequence=ours.segment_nums_stir_order)
    header = read_projdata_header(hs)
    assert header.segment_sequence == ours.segment_nums_stir_order
    with read_from_file(hs) as store:
        assert store.get_proj_data_info() == ours
        np.testing.assert_array_equal(store.as_array().ravel(), data)


def test_arc_corrected_bin_size_both_ways(stir, tmp_path):
    """An arc-corrected geometry with a bin size that is not the scanner's default: STIR writes it
    as ``effective central bin size (cm)`` and stirgpu reads it back (and the reverse), so s is
    the same in both (float32, 1e-4 mm)."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 4, 48, 64, True
    )
    theirs.set_tangential_sampling(2.5)
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    written = stir.ProjDataInterfile(
        stir.ExamInfo(), theirs, str(tmp_path / "a.hs"), mode, stir.ProjDataFromStream.Segment_View_AxialPos_TangPos
    )
    written.fill(1.0)
    del written
    with read_from_file(tmp_path / "a.hs") as store:
        ours = store.get_proj_data_info()
    assert abs(ours.get_tangential_sampling() - 2.5) < 1e-6
    with ProjDataFromFile.create(tmp_path / "b.hs", ours):
        pass
    read_back = stir.ProjData.read_from_file(str(tmp_path / "b.hs"))  # keeps its ProjDataInfo alive
    back = read_back.get_proj_data_info()
    assert back.parameter_info() == theirs.parameter_info()
    assert abs(back.get_s(stir.Bin(0, 0, 0, 31)) - ours.get_s(31)) < 1e-4


def _header_with_axial_sizes(tmp_path, sizes: str):
    """A stirgpu-written D690 span-3 max-RD-5 header with its axial sizes replaced."""
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery 690"), 3, 5, 8, 21, False)
    hs = tmp_path / "d690.hs"
    with ProjDataFromFile.create(hs, pdi):
        pass
    text = hs.read_text()
    assert "!matrix size [2] := {37,43,47,43,37}" in text
    hs.write_text(text.replace("{37,43,47,43,37}", sizes))
    (tmp_path / "d690.s").write_bytes(b"\0" * 4 * 8 * 21 * 300)
    return hs


def test_header_axial_counts_are_taken_as_given(stir, reference_stir, tmp_path):
    """A header whose single-difference segments have N - |RD| = 19 axial positions (what stirgpu
    wrote before): STIR reads it with 19 (full ring spacing, m symmetric), and so does stirgpu;
    ``list_projdata_info`` shows the counts.  stirgpu used to refuse any count but its own."""
    hs = _header_with_axial_sizes(tmp_path, "{19,43,47,43,19}")
    read = stir.ProjData.read_from_file(str(hs))  # keeps its ProjDataInfo alive
    theirs = read.get_proj_data_info()
    assert "{19 43 47 43 19 }" in reference_stir.run("list_projdata_info", "--geom", hs).stdout
    ours = read_projdata_header(hs).proj_data_info
    for seg in (-2, 0, 2):
        b = stir.Bin(seg, 0, 0, 0)
        assert ours.get_num_axial_poss(seg) == theirs.get_num_axial_poss(seg)
        assert abs(ours.get_m(seg, 0) - theirs.get_m(b)) < 1e-4
        assert abs(ours.get_sampling_in_m(seg) - theirs.get_sampling_in_m(b)) < 1e-5


def test_header_with_even_count_at_half_ring_spacing_is_refused_like_stir(stir, tmp_path):
    """An even number of axial positions in a segment sampled at half ring spacing: STIR refuses
    the header (the positions miss the ring locations); stirgpu refuses it too, naming the file
    and the ``matrix size`` key."""
    hs = _header_with_axial_sizes(tmp_path, "{37,42,47,43,37}")
    with pytest.raises(Exception, match="axial positions"):
        stir.ProjData.read_from_file(str(hs))
    with pytest.raises(FormatError, match=r"matrix size \[2\]") as err:
        read_projdata_header(hs)
    assert str(hs) in str(err.value) and "odd number of axial positions" in str(err.value)


@pytest.mark.parametrize("tof_mash", [5, 11])
def test_tof_headers_both_ways(stir, tmp_path, tof_mash):
    """TOF data (GE Discovery 690, 55 TOF bins mashed by 5 or 11): STIR writes a 5-dimensional
    view-order file (the only TOF order it writes) that stirgpu reads with the same geometry and
    values (timing positions outermost), and STIR reads stirgpu's (both orders) with its own
    geometry.
    (Mashed to a single TOF bin, STIR itself writes a plain 4-dimensional header, so that case
    is non-TOF data in both.)"""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("GE Discovery 690"), 3, 2, 4, 9, False, tof_mash
    )
    ours = ProjDataInfo.construct(Scanner.from_name("GE Discovery 690"), 3, 2, 4, 9, num_tof_poss=55 // tof_mash)
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    written = stir.ProjDataInterfile(
        stir.ExamInfo(),
        theirs,
        str(tmp_path / "t.hs"),
        mode,
        stir.ProjDataFromStream.Timing_Segment_View_AxialPos_TangPos,
    )
    data = np.random.default_rng(tof_mash).permutation(written.size_all()).astype(np.float32)
    written.fill(data.flat)
    del written
    with read_from_file(tmp_path / "t.hs") as store:
        assert store.get_proj_data_info() == ours
        np.testing.assert_array_equal(store.as_array().ravel(), data)
    for order in StorageOrder:  # STIR reads TOF sinogram order, though it does not write it
        hs = tmp_path / f"o_{order.name}.hs"
        with ProjDataFromFile.create(hs, ours, order) as store:
            store.fill(data.reshape(store.as_array().shape))
        read = stir.ProjData.read_from_file(str(hs))
        assert read.get_proj_data_info().parameter_info() == theirs.parameter_info()
        np.testing.assert_array_equal(_stir_array(read, data.size), data)


def test_user_defined_scanner_without_bin_size(stir, tmp_path):
    """A header for a scanner STIR does not know, without a default bin size (``-1``) or view
    offset: STIR reads it, keeps the bin size invalid and sizes its default image from the central
    bin's sampling in s, R sin(pi/N); stirgpu gives the same s, the same default image and the
    same tilt (0).  stirgpu's own default bin size (2 pi R / N) made images of twice the voxel."""
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    hs = tmp_path / "user.hs"
    with ProjDataFromFile.create(hs, pdi):
        pass
    lines = [
        line
        for line in hs.read_text().replace("ECAT 953", "Mystery PET").splitlines()
        if not line.strip().startswith(("View offset", "Default number of arc-corrected bins"))
    ]
    hs.write_text(
        "\n".join("  Default bin size (cm) := -1" if "Default bin size" in line else line for line in lines) + "\n"
    )
    read = stir.ProjData.read_from_file(str(hs))
    theirs = read.get_proj_data_info()
    ours = read_projdata_header(hs).proj_data_info
    assert ours.get_scanner().name == theirs.get_scanner().get_name() == "Mystery PET"
    assert abs(ours.get_azimuthal_angle_offset() - theirs.get_azimuthal_angle_offset()) < 1e-7
    for t in (-8, 0, 5, 7):
        assert abs(ours.get_s(t) - theirs.get_s(stir.Bin(0, 0, 0, t))) < 1e-4
    image = stir.FloatVoxelsOnCartesianGrid(theirs, 1.0)
    info = ImageInfo.default_for(ours)
    lengths, vox = image.get_lengths(), image.get_voxel_size()
    assert info.shape == (lengths[1], lengths[2], lengths[3])
    np.testing.assert_allclose(info.voxel_size, (vox.z(), vox.y(), vox.x()), rtol=1e-5)


@pytest.mark.parametrize(
    "numeric, byte_order, scale",
    [("SHORT", "big_endian", 2.5), ("FLOAT", "big_endian", 1.0), ("DOUBLE", "little_endian", 1.0)],
)
def test_number_formats_stir_writes(stir, tmp_path, numeric, byte_order, scale):
    """STIR writes 16-bit integers with a scaling factor, big-endian floats and doubles; stirgpu
    reads the values STIR itself reads back (stored x ``image scaling factor[1]``, exactly)."""
    pdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 2, 12, 16, False
    )
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    written = stir.ProjDataInterfile(
        stir.ExamInfo(),
        pdi,
        str(tmp_path / "n.hs"),
        mode,
        stir.ProjDataFromStream.Segment_View_AxialPos_TangPos,
        stir.NumericType(getattr(stir.NumericType, numeric)),
        stir.ByteOrder(getattr(stir.ByteOrder, byte_order)),
        scale,
    )
    written.fill((np.arange(written.size_all()) % 97 * scale).astype(np.float32).flat)
    del written
    read = stir.ProjData.read_from_file(str(tmp_path / "n.hs"))
    want = _stir_array(read, read.size_all())
    with read_from_file(tmp_path / "n.hs") as store:
        np.testing.assert_array_equal(store.as_array().ravel(), want)


@pytest.mark.parametrize("dtype", [">f4", ">f8", "<f8"])
def test_number_formats_stir_reads(stir, tmp_path, dtype):
    """stirgpu writes big-endian floats and doubles of either byte order; STIR reads the same
    values."""
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    data = np.random.default_rng(2).standard_normal(pdi.total_num_bins).astype(np.float32)
    with ProjDataFromFile.create(tmp_path / "o.hs", pdi, dtype=dtype) as store:
        store.fill(data.reshape(store.as_array().shape))
    read = stir.ProjData.read_from_file(str(tmp_path / "o.hs"))
    np.testing.assert_array_equal(_stir_array(read, data.size), data)


def _listed(text: str, key: str) -> str:
    line = next(line for line in text.splitlines() if line.strip().startswith(key))
    return line.split(":", 1)[1].strip()


@pytest.mark.parametrize("case", params(quick_cases()[-3:]))
def test_info_lists_what_list_projdata_info_lists(stir, reference_stir, case, tmp_path):
    """``stirgpu info`` of a STIR-written header gives what STIR's ``list_projdata_info --geom``
    prints: segment range, views, axial positions per segment, tangential positions and ring
    differences per segment."""
    from stirgpu.cli.info import describe_projdata

    pdi = stirgpu_proj_data_info(case)
    hs = tmp_path / "l.hs"
    _stir_write(stir, case, hs, np.zeros(pdi.total_num_bins, np.float32))
    listed = reference_stir.run("list_projdata_info", "--geom", hs).stdout
    d = describe_projdata(hs)
    segs = d["segments"]
    assert _listed(listed, "Segment_num range") == f"({segs[0]['segment']}, {segs[-1]['segment']})"
    assert int(_listed(listed, "Number of Views")) == d["views"]["num"]
    assert int(_listed(listed, "Number of tangential positions")) == d["tangential"]["num"]
    assert _listed(listed, "Number of axial positions per seg").strip("{} ").split() == [
        str(s["num_axial_poss"]) for s in segs
    ]
    rd_line = listed.split("ring differences per segment:")[1].split("\n")[1]
    assert rd_line.strip() == "".join(f"({s['min_ring_diff']},{s['max_ring_diff']})" for s in segs)


@pytest.mark.parametrize("extra", [64, -64])
def test_stir_reads_the_start_of_a_longer_data_file(stir, tmp_path, extra):
    """Why stirgpu checks a data file's size when it opens it.  STIR 6.5 opens a longer data
    file without a word and reads its first bytes (a header with, say, a wrong number of views
    would project garbage); a shorter one opens too and fails only when its values are read.
    stirgpu refuses both at open, naming both sizes ("larger than its header describes",
    "truncated")."""
    pdi = small_proj_data_info()
    values = np.arange(pdi.total_num_bins, dtype=np.float32)
    hs = tmp_path / "d.hs"
    with ProjDataFromFile.create(hs, pdi) as store:
        store.fill(values.reshape(store.as_array().shape))
    with read_from_file(hs) as store:
        want = store.as_array().ravel()
    data = tmp_path / "d.s"
    size = data.stat().st_size
    if extra > 0:
        with open(data, "ab") as f:
            f.write(b"\1" * extra)
    else:
        os.truncate(data, size + extra)
    stir_data = stir.ProjData.read_from_file(str(hs))  # STIR: no complaint at open either way
    if extra > 0:
        assert np.array_equal(_stir_array(stir_data, pdi.total_num_bins), want)  # the first bytes
    else:
        with pytest.raises(RuntimeError, match="error reading data"):
            _stir_array(stir_data, pdi.total_num_bins)
    what = "is larger than its header describes" if extra > 0 else "is truncated"
    with pytest.raises(
        FormatError,
        match=rf"d\.s: data file {what}: it has {size + extra} bytes but the "
        rf"header .*d\.hs describes {size}",
    ):
        read_from_file(hs)
