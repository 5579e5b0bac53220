"""The disk store: file layout, number formats, partial I/O, templates, safe writing."""

from __future__ import annotations

import gc
import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stirgpu.formats.projdata_disk as disk_mod
from stirgpu.errors import FormatError, GeometryError
from stirgpu.formats import (
    ProjData,
    ProjDataFromFile,
    ProjDataInMemory,
    StorageOrder,
    format_projdata_header,
    read_from_file,
)
from stirgpu.formats.testing import reference_segment, small_proj_data_info, small_tof_proj_data_info


def snapshot(folder):
    """name -> (size, sha1) of every file: to check that a refused operation wrote nothing."""
    return {p.name: (p.stat().st_size, hashlib.sha1(p.read_bytes()).hexdigest()) for p in sorted(folder.iterdir())}


def file_layout(ref, pdi, order, dtype, segment_sequence=None):
    """The bytes STIR's layout gives: TOF outermost, segments in file order, then
    [view][axial][tang] or [axial][view][tang]; built independently of the store."""
    parts = []
    ntof = pdi.get_num_tof_poss()
    for t in range(-(ntof // 2), -(ntof // 2) + ntof):
        for s in segment_sequence or pdi.segment_nums:
            blk = reference_segment(ref, pdi, s, t)  # (axial, view, tang)
            parts.append(blk.transpose(1, 0, 2) if order is StorageOrder.VIEW else blk)
    return b"".join(np.ascontiguousarray(p, dtype=dtype).tobytes() for p in parts)


def random_ref(pdi, seed=0):
    n = pdi.get_num_tof_poss()
    shape = (pdi.get_num_axial_poss_total(), pdi.get_num_views(), pdi.get_num_tangential_poss())
    shape = ((n,) + shape) if n > 1 else shape
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def write_manual(tmp_path, pdi, ref, order, dtype, offset=0, scale=1.0, stored=None, name="m"):
    """A header + data file written by hand (not by the store)."""
    data = b"\0" * offset + file_layout(stored if stored is not None else ref, pdi, order, dtype)
    (tmp_path / f"{name}.s").write_bytes(data)
    (tmp_path / f"{name}.hs").write_text(format_projdata_header(pdi, f"{name}.s", order, dtype, offset, scale))
    return tmp_path / f"{name}.hs"


# -- layout and number formats ---------------------------------------------------------------


@pytest.mark.parametrize("order", list(StorageOrder))
@pytest.mark.parametrize("pdi_maker", [small_proj_data_info, small_tof_proj_data_info])
def test_reads_files_laid_out_like_stir(tmp_path, order, pdi_maker):
    """A file laid out by hand in STIR's order reads back as the values put in (exactly)."""
    pdi = pdi_maker()
    ref = random_ref(pdi)
    with read_from_file(write_manual(tmp_path, pdi, ref, order, "<f4")) as pd:
        assert pd.storage_order is order
        np.testing.assert_array_equal(pd.as_array(), ref)


@pytest.mark.parametrize("order", list(StorageOrder))
def test_writes_files_laid_out_like_stir(tmp_path, order):
    """What the store writes is byte for byte STIR's layout."""
    pdi = small_tof_proj_data_info()
    ref = random_ref(pdi, 5)
    with ProjDataFromFile.create(tmp_path / "w.hs", pdi, order) as pd:
        pd.fill(ref)
    assert (tmp_path / "w.s").read_bytes() == file_layout(ref, pdi, order, "<f4")


@pytest.mark.parametrize("dtype", [">f4", "<f8", ">f8", "<i2", ">i2", "<i4", ">i4", "<u2", ">u2"])
def test_number_formats_offset_and_scale(tmp_path, dtype):
    """Stored integers/floats of either byte order, after a data offset, times the scaling
    factor, come back as float32 values (exact: small integers times 0.5)."""
    pdi = small_proj_data_info()
    stored = np.random.default_rng(1).integers(0, 1000, random_ref(pdi).shape).astype(np.float32)
    hs = write_manual(tmp_path, pdi, None, StorageOrder.VIEW, dtype, offset=100, scale=0.5, stored=stored)
    with read_from_file(hs) as pd:
        assert pd.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(pd.as_array(), stored * np.float32(0.5))
        s = pdi.get_max_segment_num()
        np.testing.assert_array_equal(
            pd.read_views(s, [3, 4, 9]), 0.5 * reference_segment(stored, pdi, s)[:, [3, 4, 9]].transpose(1, 0, 2)
        )


def test_scaled_float_file_writes_back_scaled(tmp_path):
    """r+ on float data with a scaling factor stores value / factor."""
    pdi = small_proj_data_info()
    hs = write_manual(
        tmp_path, pdi, None, StorageOrder.VIEW, "<f4", scale=2.0, stored=np.zeros(random_ref(pdi).shape, np.float32)
    )
    with read_from_file(hs, "r+") as pd:
        pd.set_viewgram(np.full((pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), 6.0), 2, 0)
        np.testing.assert_array_equal(pd.get_viewgram(2, 0), 6.0)
    raw = np.frombuffer((tmp_path / "m.s").read_bytes(), "<f4")
    assert raw.max() == 3.0


@pytest.mark.parametrize("src_order", list(StorageOrder))
@pytest.mark.parametrize("dst_order", list(StorageOrder))
def test_round_trip_bit_identical(tmp_path, src_order, dst_order):
    """read -> write (either order) -> read gives identical float32 bits; writing back in the
    same order reproduces the data file byte for byte, and the header's geometry."""
    pdi = small_proj_data_info()
    ref = random_ref(pdi, 9)
    src = write_manual(tmp_path, pdi, ref, src_order, "<f4", name="src")
    with read_from_file(src) as a, ProjDataFromFile.create(tmp_path / "dst.hs", pdi, dst_order, fill=a):
        pass
    with read_from_file(tmp_path / "dst.hs") as b:
        assert b.proj_data_info == pdi and b.storage_order is dst_order
        assert b.as_array().tobytes() == ref.tobytes()
    if src_order is dst_order:
        assert (tmp_path / "dst.s").read_bytes() == (tmp_path / "src.s").read_bytes()


def test_segments_in_unusual_file_order(tmp_path):
    """A header listing segments +1, 0, -1 reads each segment from its place in the file."""
    pdi = small_proj_data_info()
    ref = random_ref(pdi, 2)
    seq = [1, 0, -1]
    (tmp_path / "u.s").write_bytes(file_layout(ref, pdi, StorageOrder.VIEW, "<f4", seq))
    text = format_projdata_header(pdi, "u.s")
    text = text.replace(
        "minimum ring difference per segment := {-4,-1,2}", "minimum ring difference per segment := {2,-1,-4}"
    )
    text = text.replace(
        "maximum ring difference per segment := {-2,1,4}", "maximum ring difference per segment := {4,1,-2}"
    )
    (tmp_path / "u.hs").write_text(text)
    with read_from_file(tmp_path / "u.hs") as pd:
        assert pd.header.segment_sequence == (1, 0, -1)
        np.testing.assert_array_equal(pd.as_array(), ref)


# -- partial I/O -----------------------------------------------------------------------------


@pytest.mark.parametrize("order", list(StorageOrder))
def test_subset_reads_only_its_bytes(tmp_path, order, monkeypatch):
    """Reading a subset's views reads exactly those bins' bytes, never the whole file."""
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), order, "<f4")
    seen = []
    real = disk_mod.pread_into
    monkeypatch.setattr(
        disk_mod, "pread_into", lambda fd, buf, off, path=None: (seen.append(buf.nbytes), real(fd, buf, off, path))
    )
    views = pdi.subset_views(2, 5)
    with read_from_file(hs) as pd:
        for s in pdi.segment_nums:
            pd.read_views(s, views)
    expected = 4 * len(views) * pdi.get_num_tangential_poss() * pdi.get_num_axial_poss_total()
    assert sum(seen) == expected
    file_bytes = (tmp_path / "m.s").stat().st_size
    assert sum(seen) < file_bytes / 4


def _union(intervals):
    """Sorted disjoint [start, stop) intervals covering the same bytes."""
    merged = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return merged


def _record_hints_and_reads(monkeypatch):
    """(hinted, read) byte intervals: posix_fadvise(WILLNEED) calls and pread_into calls."""
    hinted, read = [], []
    real_advise, real_read = os.posix_fadvise, disk_mod.pread_into

    def advise(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            hinted.append((offset, offset + length))
        return real_advise(fd, offset, length, advice)

    def pread(fd, buf, off, path=None):
        read.append((off, off + buf.nbytes))
        return real_read(fd, buf, off, path)

    monkeypatch.setattr(os, "posix_fadvise", advise)
    monkeypatch.setattr(disk_mod, "pread_into", pread)
    return hinted, read


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="this system has no posix_fadvise")
@pytest.mark.parametrize("order", list(StorageOrder))
@pytest.mark.parametrize("dtype", ["<f4", ">i2"])
def test_scattered_views_are_announced_byte_for_byte(tmp_path, order, dtype, monkeypatch):
    """A read of scattered views (a subset's) first announces them to the system
    (posix_fadvise WILLNEED), exactly the bytes it then reads and nothing in between (which
    the system's readahead would fetch); one run of views reads without an announcement;
    prefetch_views announces what read_views would read."""
    pdi = small_tof_proj_data_info()
    ref = random_ref(pdi, 5)
    hs = write_manual(tmp_path, pdi, ref, order, dtype, offset=12, scale=2.0 if dtype == ">i2" else 1.0)
    hinted, read = _record_hints_and_reads(monkeypatch)
    views = pdi.subset_views(1, 3)
    with read_from_file(hs) as pd:
        for t in (pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num()):
            for s in pdi.segment_nums:
                hinted.clear(), read.clear()
                pd.read_views(s, views, timing_pos=t)
                assert hinted and _union(hinted) == _union(read)
                hinted.clear(), read.clear()
                pd.read_views(s, range(1, 4), timing_pos=t)
                assert read and not hinted
                pd.prefetch_views(s, views, timing_pos=t)
                read.clear()
                pd.read_views(s, views, timing_pos=t)
                assert _union(hinted) == _union(read)


def test_read_views_into_strided_out(tmp_path):
    """out may be a strided view of a caller's bigger buffer."""
    pdi = small_proj_data_info()
    ref = random_ref(pdi, 4)
    hs = write_manual(tmp_path, pdi, ref, StorageOrder.VIEW, "<f4")
    big = np.zeros((6, pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), np.float32)
    with read_from_file(hs) as pd:
        pd.read_views(0, [1, 2, 7], out=big[::2])
    np.testing.assert_array_equal(big[::2], reference_segment(ref, pdi, 0)[:, [1, 2, 7]].transpose(1, 0, 2))
    assert not np.any(big[1::2])


# -- safety ----------------------------------------------------------------------------------


def test_read_only_store_refuses_writes_and_leaves_file(tmp_path):
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), StorageOrder.VIEW, "<f4")
    before = snapshot(tmp_path)
    with read_from_file(hs) as pd:
        for call in (
            lambda: pd.fill(1.0),
            lambda: pd.set_viewgram(np.zeros((pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss())), 0, 0),
            lambda: pd.write_views(np.zeros((1, pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss())), 0, [0]),
        ):
            with pytest.raises(FormatError, match=r"m\.hs.*read-only"):
                call()
    assert snapshot(tmp_path) == before


def test_create_refuses_existing_without_overwrite(tmp_path):
    pdi = small_proj_data_info()
    with ProjDataFromFile.create(tmp_path / "a.hs", pdi, fill=1.0):
        pass
    before = snapshot(tmp_path)
    with pytest.raises(FormatError, match=r"a\.(hs|s).*already exists"):
        ProjDataFromFile.create(tmp_path / "a.hs", pdi)
    assert snapshot(tmp_path) == before
    with ProjDataFromFile.create(tmp_path / "a.hs", pdi, overwrite=True, fill=2.0):
        pass
    with read_from_file(tmp_path / "a.hs") as pd:
        assert np.all(pd.as_array() == 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.hs", "a.s"]


def test_uncommitted_store_leaves_no_header(tmp_path):
    """Until commit, only a temporary data file exists; commit puts both in place."""
    pd = ProjDataFromFile.create(tmp_path / "n.hs", small_proj_data_info(), fill=3.0)
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) == 1 and names[0].startswith("n.s.tmp-")
    pd.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.hs", "n.s"]
    assert pd.mode == "r+"
    pd.close()
    with read_from_file(tmp_path / "n.hs") as back:
        assert np.all(back.as_array() == 3.0)


def test_exception_inside_with_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with ProjDataFromFile.create(tmp_path / "e.hs", small_proj_data_info()) as pd:
            pd.fill(1.0)
            raise RuntimeError("writer failed")
    assert list(tmp_path.iterdir()) == []


def test_dropped_store_is_not_committed(tmp_path):
    """A store garbage-collected without close() is incomplete: no header, temp data removed."""
    pd = ProjDataFromFile.create(tmp_path / "g.hs", small_proj_data_info(), fill=1.0)
    del pd
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def test_writer_that_dies_leaves_no_header(tmp_path):
    """A process killed mid-write (no cleanup at all) leaves no .hs, so nobody mistakes its
    data for complete."""
    code = textwrap.dedent(f"""
        import os
        from stirgpu.formats import ProjDataFromFile
        from stirgpu.formats.testing import small_proj_data_info
        pd = ProjDataFromFile.create({str(tmp_path / "d.hs")!r}, small_proj_data_info())
        pd.fill(1.0)
        os._exit(3)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 3
    names = [p.name for p in tmp_path.iterdir()]
    assert "d.hs" not in names and "d.s" not in names
    with pytest.raises(FormatError):
        read_from_file(tmp_path / "d.hs")


def test_create_checks_arguments(tmp_path):
    pdi = small_proj_data_info()
    with pytest.raises(FormatError, match="float32 or float64"):
        ProjDataFromFile.create(tmp_path / "i.hs", pdi, dtype=np.int16)
    for image_name in ("i.hv", "i.v"):  # STIR would write projection data into i.v beside i.hs
        with pytest.raises(FormatError, match=r"i\.h?v.*other kind.*\.hs \+ \.s"):
            ProjDataFromFile.create(tmp_path / image_name, pdi)
    with pytest.raises(FormatError, match="folder does not exist"):
        ProjDataFromFile.create(tmp_path / "nodir" / "i.hs", pdi)
    with pytest.raises(GeometryError):
        ProjDataFromFile.create(tmp_path / "i.hs", "not a geometry")
    assert list(tmp_path.iterdir()) == []


# -- templates and broken data files ---------------------------------------------------------


@pytest.mark.parametrize("data", [None, b""])
def test_template_has_geometry_but_no_values(tmp_path, data):
    """A header whose data file is absent or empty is a template (STIR's create_projdata_template)."""
    pdi = small_proj_data_info()
    (tmp_path / "t.hs").write_text(format_projdata_header(pdi, "t.s"))
    if data is not None:
        (tmp_path / "t.s").write_bytes(data)
    before = snapshot(tmp_path)
    with read_from_file(tmp_path / "t.hs") as pd:
        assert pd.is_template
        assert pd.get_proj_data_info() == pdi
        with pytest.raises(FormatError, match=r"t\.hs.*template"):
            pd.get_viewgram(0, 0)
        with pytest.raises(FormatError, match=r"t\.hs.*template"):
            pd.read_views(0, [1, 2])
    with pytest.raises(FormatError, match=r"t\.hs.*template"):
        read_from_file(tmp_path / "t.hs", "r+")
    assert snapshot(tmp_path) == before


def test_truncated_data_file(tmp_path):
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), StorageOrder.VIEW, "<f4")
    full = (tmp_path / "m.s").stat().st_size
    with open(tmp_path / "m.s", "r+b") as f:
        f.truncate(full - 4)
    before = snapshot(tmp_path)
    with pytest.raises(FormatError) as e:
        read_from_file(hs, "r+")
    msg = str(e.value)
    assert "m.s" in msg and str(full - 4) in msg and str(full) in msg and "truncated" in msg
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_bigger_data_file_is_refused(tmp_path, mode):
    """A data file longer than its header describes is refused at open, naming both sizes: the
    header does not describe the file (STIR 6.5 reads the first bytes without a word, see
    test_stir_reads_the_start_of_a_longer_data_file), so its values would be garbage whenever
    the header is wrong (a size, the number format) and not only padded."""
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), StorageOrder.VIEW, "<f4")
    need = (tmp_path / "m.s").stat().st_size
    with open(tmp_path / "m.s", "ab") as f:
        f.write(b"\1" * 64)
    before = snapshot(tmp_path)
    with pytest.raises(FormatError) as e:
        read_from_file(hs, mode)
    msg = str(e.value)
    assert "m.s" in msg and "larger than its header describes" in msg and str(need + 64) in msg
    assert f"describes {need} (0 offset" in msg and "m.hs" in msg
    assert snapshot(tmp_path) == before


def test_data_offset_explains_a_longer_file(tmp_path):
    """'data offset in bytes' accounts for bytes before the data: offset + bins is the size."""
    pdi = small_proj_data_info()
    ref = random_ref(pdi)
    hs = write_manual(tmp_path, pdi, ref, StorageOrder.VIEW, "<f4", offset=100)
    with read_from_file(hs) as pd:
        np.testing.assert_array_equal(pd.as_array(), ref)
    with open(tmp_path / "m.s", "ab") as f:
        f.write(b"\0" * 4)  # beyond offset + bins: not explained
    with pytest.raises(FormatError, match=r"larger than its header describes.*100 offset"):
        read_from_file(hs)


@pytest.mark.parametrize("data", [None, b""])
def test_missing_data_refused_where_values_are_needed(tmp_path, data):
    """With allow_template=False a header without data is refused at open, naming the header
    and the data file; a projector given a template refuses it before any work (instead of its
    reader thread failing mid-call)."""
    from stirgpu.geometry import ImageInfo
    from stirgpu.projectors import BackProjector

    pdi = small_proj_data_info()
    (tmp_path / "t.hs").write_text(format_projdata_header(pdi, "t.s"))
    if data is not None:
        (tmp_path / "t.s").write_bytes(data)
    with pytest.raises(FormatError) as e:
        read_from_file(tmp_path / "t.hs", allow_template=False)
    assert str(e.value).startswith(str(tmp_path / "t.hs")) and str(tmp_path / "t.s") in str(e.value)
    assert ("does not exist" if data is None else "is empty") in str(e.value)
    bp = BackProjector(backend="cpu")
    bp.set_up(pdi, ImageInfo.default_for(pdi))
    with read_from_file(tmp_path / "t.hs") as template:
        with pytest.raises(FormatError, match=r"t\.hs: has no values: it is a template"):
            bp.back_project(None, template)
    assert bp.last_plan is None  # refused before planning


def test_read_only_output_refused_before_any_work(tmp_path):
    """A projector's output opened read-only is refused before planning, naming the file."""
    from stirgpu.formats import VoxelsOnCartesianGrid
    from stirgpu.geometry import ImageInfo
    from stirgpu.projectors import ForwardProjector

    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), StorageOrder.VIEW, "<f4")
    before = snapshot(tmp_path)
    fp = ForwardProjector(backend="cpu")
    image = VoxelsOnCartesianGrid(ImageInfo.default_for(pdi), fill=1.0)
    fp.set_up(pdi, image.info)
    with read_from_file(hs, "r") as out:
        with pytest.raises(FormatError, match=r"m\.hs: was opened read-only"):
            fp.forward_project(out, image)
    assert fp.last_plan is None and snapshot(tmp_path) == before


@pytest.mark.parametrize(
    "name, header, data",
    [
        ("o", "o.hs", "o.s"),
        ("o.hs", "o.hs", "o.s"),
        ("o.s", "o.hs", "o.s"),
        ("o.raw", "o.hs", "o.raw"),
        ("o.x.y", "o.x.hs", "o.x.y"),
        ("d.1/o", "d.1/o.hs", "d.1/o.s"),
        ("O.HS", "O.HS", "O.s"),
    ],
)
def test_create_names_files_as_stir(tmp_path, name, header, data):
    """STIR's names (ProjDataInterfile): a .hs name has its .s beside it, a name without an
    extension gets both, another extension names the data file and the header gets .hs."""
    (tmp_path / "d.1").mkdir()
    pdi = small_proj_data_info()
    with ProjDataFromFile.create(tmp_path / name, pdi, fill=1.0) as pd:
        assert (pd.path, pd.data_path) == (tmp_path / header, tmp_path / data)
    with read_from_file(tmp_path / header) as pd:
        assert pd.data_path == tmp_path / data and np.all(pd.as_array() == 1)


def test_integer_data_cannot_be_opened_for_writing(tmp_path):
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, None, StorageOrder.VIEW, "<i2", stored=np.zeros(random_ref(pdi).shape, np.float32))
    with pytest.raises(FormatError, match="number format"):
        read_from_file(hs, "r+")


def test_bad_mode(tmp_path):
    with pytest.raises(FormatError, match="mode"):
        read_from_file(tmp_path / "x.hs", "w")


def test_stir_style_classmethod_and_memory_copy(tmp_path):
    """ProjData.read_from_file works like STIR's; ProjDataInMemory.from_proj_data copies."""
    pdi = small_proj_data_info()
    ref = random_ref(pdi, 11)
    hs = write_manual(tmp_path, pdi, ref, StorageOrder.SINOGRAM, "<f4")
    with ProjData.read_from_file(hs) as pd:
        mem = ProjDataInMemory.from_proj_data(pd)
    np.testing.assert_array_equal(mem.as_array(), ref)
    with pytest.raises(FormatError, match="closed"):
        pd.get_viewgram(0, 0)


@pytest.mark.parametrize(
    "change, key",
    [
        (("!PET data type := Emission", "!PET data type := Normalisation"), "PET data type"),
        (("!number format := float", "!number format := ascii"), "number format"),
        (("!matrix size [2] := {27,31,27}", "!matrix size [2] := {27,31,28}"), "matrix size [2]"),
        (
            ("minimum ring difference per segment := {-4,-1,2}", "minimum ring difference per segment := {-4,-1}"),
            "minimum ring difference per segment",
        ),
        (("!matrix size [1] := 16", "!matrix size [1] := {16,16}"), "matrix size [1]"),
    ],
)
def test_bad_header_on_disk_names_file_and_key_and_writes_nothing(tmp_path, change, key):
    """Opening (even for writing) a file with a bad header fails before touching anything."""
    pdi = small_proj_data_info()
    hs = write_manual(tmp_path, pdi, random_ref(pdi), StorageOrder.VIEW, "<f4")
    text = hs.read_text()
    assert change[0] in text
    hs.write_text(text.replace(change[0], change[1]))
    before = snapshot(tmp_path)
    for mode in ("r", "r+"):
        with pytest.raises(FormatError) as e:
            read_from_file(hs, mode)
        assert str(hs) in str(e.value) and key in str(e.value), str(e.value)
    assert snapshot(tmp_path) == before


def test_garbage_header_on_disk_writes_nothing(tmp_path):
    """A text file that is not Interfile: FormatError naming it, for reading and for 'r+'."""
    (tmp_path / "g.hs").write_text("this is a shopping list\neggs := 12\n")
    (tmp_path / "g.s").write_bytes(b"\1" * 64)
    before = snapshot(tmp_path)
    for mode in ("r", "r+"):
        with pytest.raises(FormatError, match=r"g\.hs.*not an Interfile header"):
            read_from_file(tmp_path / "g.hs", mode)
    assert snapshot(tmp_path) == before
