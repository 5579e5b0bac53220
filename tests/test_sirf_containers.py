"""SIRF's containers (``stirgpu.sirf.AcquisitionData``, ``ImageData``) against numpy.

Every element-wise operation, reduction and copy is checked bin by bin against the same float32
operation in numpy, for data in memory and for data in a file (read-only, streamed) or a scratch
file; the streamed case is also held to its memory promise: an operation on data on disk reads
them in chunks of the configured size and its peak allocation stays a small fraction of the
data (tracemalloc), never a full in-memory copy.
"""

from __future__ import annotations

import contextvars
import tracemalloc

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.errors import FormatError
from stirgpu.formats import ProjDataFromFile, ProjDataInMemory
from stirgpu.geometry import ImageInfo
from stirgpu.recon.simulate import demo_geometry
from stirgpu.sirf.errors import InputError
from stirgpu.sirf.storage import is_on_disk, storage_scheme


@pytest.fixture(scope="module")
def geometry():
    return demo_geometry(num_views=12, num_tangential_poss=48)


def _values(shape, seed):
    return (np.random.default_rng(seed).random(shape, dtype=np.float32) + np.float32(0.5)).astype(np.float32)


@pytest.fixture(params=["memory", "disk"])
def pair(request, geometry, tmp_path):
    """Two AcquisitionData with random positive values (numpy copies alongside), in memory or on disk."""
    pdi, _ = geometry
    shape = ProjDataInMemory(pdi).shape
    va, vb = _values(shape, 1), _values(shape, 2)
    if request.param == "memory":
        a = pet.AcquisitionData(ProjDataInMemory(pdi, fill=va))
        b = pet.AcquisitionData(ProjDataInMemory(pdi, fill=vb))
    else:
        for name, v in (("a", va), ("b", vb)):
            ProjDataFromFile.create(tmp_path / name, pdi, fill=v).close()
        a, b = pet.AcquisitionData(str(tmp_path / "a.hs")), pet.AcquisitionData(str(tmp_path / "b.hs"))
        assert a.read_only and is_on_disk(a.proj_data)
    return request.param, a, b, va[None], vb[None]


BINARY = [
    ("a + b", lambda a, b: a + b, lambda x, y: x + y),
    ("a - b", lambda a, b: a - b, lambda x, y: x - y),
    ("a * b", lambda a, b: a * b, lambda x, y: x * y),
    ("a / b", lambda a, b: a / b, lambda x, y: x / y),
    ("a + 2", lambda a, b: a + 2, lambda x, y: x + np.float32(2)),
    ("2 + a", lambda a, b: 2 + a, lambda x, y: np.float32(2) + x),
    ("a - 2", lambda a, b: a - 2, lambda x, y: x - np.float32(2)),
    ("2 - a", lambda a, b: 2 - a, lambda x, y: np.float32(2) - x),
    ("a * 3", lambda a, b: a * 3, lambda x, y: x * np.float32(3)),
    ("3 * a", lambda a, b: 3 * a, lambda x, y: np.float32(3) * x),
    ("np scalar * a", lambda a, b: np.float32(3) * a, lambda x, y: np.float32(3) * x),
    ("a / 3", lambda a, b: a / 3, lambda x, y: x * np.float32(1 / np.float32(3))),
    ("3 / a", lambda a, b: 3 / a, lambda x, y: np.power(x, np.float32(-1)) * np.float32(3)),
    ("-a", lambda a, b: -a, lambda x, y: -x),
    ("maximum", lambda a, b: a.maximum(b), np.maximum),
    ("minimum 1", lambda a, b: a.minimum(1.0), lambda x, y: np.minimum(x, np.float32(1))),
    ("power", lambda a, b: a.power(2), lambda x, y: np.power(x, np.float32(2))),
    ("abs", lambda a, b: (a - 1).abs(), lambda x, y: np.abs(x - np.float32(1))),
    ("sign", lambda a, b: (a - 1).sign(), lambda x, y: np.sign(x - np.float32(1))),
    ("sqrt", lambda a, b: a.sqrt(), np.sqrt),
    ("exp", lambda a, b: a.exp(), np.exp),
    ("log", lambda a, b: a.log(), np.log),
    ("sapyb numbers", lambda a, b: a.sapyb(2.0, b, 3.0), lambda x, y: x * np.float32(2) + y * np.float32(3)),
    ("sapyb containers", lambda a, b: a.sapyb(b, b, a), lambda x, y: x * y + y * x),
    ("conjugate", lambda a, b: a.conjugate(), lambda x, y: x),
    ("clone", lambda a, b: a.clone(), lambda x, y: x),
    ("uniform copy", lambda a, b: a.get_uniform_copy(2.5), lambda x, y: np.full_like(x, 2.5)),
    ("array operand", lambda a, b: a * b.as_array(), lambda x, y: x * y),
]


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
def test_acquisition_data_arithmetic_is_numpys(pair, name, op, ref):
    """Each operation gives numpy's float32 result bin by bin (the same operations: exactly)."""
    kind, a, b, va, vb = pair
    res = op(a, b)
    assert isinstance(res, pet.AcquisitionData) and res.dimensions() == va.shape
    np.testing.assert_array_equal(res.as_array(), ref(va, vb).astype(np.float32))
    # new data go where the storage scheme says: a scratch file by default (SIRF's "file")
    assert is_on_disk(res.proj_data)


def test_reductions_are_numpys(pair):
    kind, a, b, va, vb = pair
    x, y = va.astype(np.float64), vb.astype(np.float64)
    assert a.norm() == pytest.approx(np.sqrt((x * x).sum()), rel=1e-12)
    assert a.squared_norm() == pytest.approx((x * x).sum(), rel=1e-12)
    assert a.dot(b) == np.float32((x * y).sum()) and isinstance(a.dot(b), np.float32)
    assert a.sum() == np.float32(x.sum()) and a.max() == va.max() and a.min() == va.min()
    assert pet.norm(a) == a.norm() and pet.dot(a, b) == a.dot(b)
    assert pet.norm(va) == pytest.approx(np.linalg.norm(va)) and pet.dot(va, vb) == np.vdot(va, vb)


def test_in_place_operations_and_out(pair):
    kind, a, b, va, vb = pair
    c = a.clone()
    c += b
    c *= 2
    c -= 1
    c /= 4
    expect = (((va + vb) * np.float32(2)) - np.float32(1)) * np.float32(0.25)
    np.testing.assert_array_equal(c.as_array(), expect)
    out = a.get_uniform_copy(0)
    assert a.multiply(b, out=out) is out
    np.testing.assert_array_equal(out.as_array(), va * vb)
    if kind == "disk":  # data read from a file with the scheme "file" are read-only, as in SIRF
        with pytest.raises(pet.error, match="read-only"):
            a.fill(0.0)
        path = a.proj_data.path
        a += 1  # the result goes into new data held by a; the file is never written
        np.testing.assert_array_equal(a.as_array(), va + np.float32(1))
        np.testing.assert_array_equal(pet.AcquisitionData(str(path)).as_array(), va)


def test_fill_and_sizes(pair):
    kind, a, b, va, vb = pair
    c = pet.AcquisitionData(a)  # zeros of a's geometry
    assert c.norm() == 0 and c.dimensions() == va.shape == c.shape and c.size == va.size == c.number()
    assert c.fill(b) is c
    np.testing.assert_array_equal(c.as_array(), vb)
    c.fill(7)
    assert c.max() == c.min() == 7
    c.fill(va.astype(np.float64))
    np.testing.assert_array_equal(c.as_array(), va)
    with pytest.raises(InputError, match="cannot fill"):
        c.fill(va[0])
    with pytest.raises(TypeError):
        c.fill("values")
    assert c.dtype == np.float32 and not c.is_complex() and not c.is_empty()
    assert c.modality == "PT" and "AcquisitionData" in c.get_info() and c.get_tof_mash_factor() == 1
    assert c.allocate(3.0).max() == 3 and 0 <= c.allocate("random", seed=1).min()


def test_incompatible_operands_are_refused(geometry):
    pdi, info = geometry
    a = pet.AcquisitionData(ProjDataInMemory(pdi))
    other = pet.AcquisitionData(ProjDataInMemory(demo_geometry(num_views=6, num_tangential_poss=48)[0]))
    with pytest.raises(InputError, match="different geometries"):
        a + other
    with pytest.raises(TypeError):
        a + pet.ImageData.from_array(np.zeros(info.shape, np.float32), info)
    with pytest.raises(TypeError):
        a + 1j


def test_write_and_read_back(pair, tmp_path):
    kind, a, b, va, vb = pair
    (a * 2).write(str(tmp_path / "out"))
    back = pet.AcquisitionData(str(tmp_path / "out.hs"))
    np.testing.assert_array_equal(back.as_array(), va * np.float32(2))
    b.write(str(tmp_path / "out.hs"))  # replaced, as SIRF does
    np.testing.assert_array_equal(pet.AcquisitionData(str(tmp_path / "out.hs")).as_array(), vb)


def test_get_subset(pair):
    """SIRF's (STIR's) get_subset: the data of the given views, in that order."""
    kind, a, b, va, vb = pair
    views = [5, 1, 9]
    sub = a.get_subset(views)
    np.testing.assert_array_equal(sub.as_array(), va[:, :, views])
    both = sub + b.get_subset(views)
    np.testing.assert_array_equal(both.as_array(), (va + vb)[:, :, views])
    assert sub.norm() == pytest.approx(float(np.linalg.norm(va[:, :, views].astype(np.float64))))
    with pytest.raises(InputError):
        sub + a
    with pytest.raises(InputError):
        a.get_subset([12])


def test_storage_schemes(geometry, tmp_path):
    """Default 'file'; 'memory' reads files into memory (writable) and keeps new data in memory."""
    pdi, _ = geometry
    assert pet.AcquisitionData.get_storage_scheme() == "file"
    ProjDataFromFile.create(tmp_path / "a", pdi, fill=1.0).close()
    with storage_scheme("memory"):
        a = pet.AcquisitionData(str(tmp_path / "a.hs"))
        assert not a.read_only and not is_on_disk(a.proj_data)
        assert not is_on_disk((a + 1).proj_data)

    def set_in_context():
        pet.AcquisitionData.set_storage_scheme("memory")
        return pet.AcquisitionData.get_storage_scheme(), is_on_disk(pet.AcquisitionData(a).proj_data)

    assert contextvars.copy_context().run(set_in_context) == ("memory", False)
    assert pet.AcquisitionData.get_storage_scheme() == "file"  # the change stayed in that context
    with pytest.raises(InputError, match="storage scheme"):
        pet.AcquisitionData.set_storage_scheme("cloud")


def test_construction_from_scanner_and_errors(tmp_path):
    """SIRF's AcquisitionData(scanner, span, max_ring_diff, view_mash_factor): all detectors'
    views / mashing, the scanner's non-arc-corrected bins, zeros; bad sources are SIRF errors
    that are also stirgpu's."""
    with storage_scheme("memory"):
        acq = pet.AcquisitionData("ECAT 953", 3, 4, 4)
    pdi = acq.get_proj_data_info()
    assert acq.dimensions() == (1, pdi.get_num_axial_poss_total(), 48, 160) and acq.norm() == 0
    assert pdi.get_max_ring_difference_overall() == 4 and not pdi.is_arc_corrected()
    full = pet.AcquisitionData("ECAT 953", 1, -1)
    assert full.get_proj_data_info().get_max_ring_difference_overall() == 15
    with pytest.raises(pet.error, match="unknown scanner"):
        pet.AcquisitionData("no such scanner")
    with pytest.raises(FormatError) as err:
        pet.AcquisitionData(str(tmp_path / "missing.hs"))
    assert isinstance(err.value, pet.error) and "missing.hs" in err.value.value
    with pytest.raises(pet.error, match="empty"):
        pet.AcquisitionData().dimensions()
    with pytest.raises(pet.error):
        pet.AcquisitionData(3.5)


def test_disk_arithmetic_streams_in_chunks(geometry, tmp_path, monkeypatch):
    """On data on disk, ``a + b``, ``norm`` and ``dot`` read each file once, in pieces of at most
    an eighth of the host memory budget, and allocate no more than the budget (a small fraction
    of the data's size): no full in-memory copy is made."""
    pdi, _ = demo_geometry(num_views=96, num_tangential_poss=128)
    nbytes = 4 * pdi.total_num_bins
    for name, seed in (("a", 1), ("b", 2)):
        ProjDataFromFile.create(tmp_path / name, pdi, fill=_values(ProjDataInMemory(pdi).shape, seed)).close()
    a, b = pet.AcquisitionData(str(tmp_path / "a.hs")), pet.AcquisitionData(str(tmp_path / "b.hs"))
    reads = []
    original = ProjDataFromFile._read_box

    def counting(self, segment, tof_index, view_range, axial_range, out):
        reads.append(out.nbytes)
        return original(self, segment, tof_index, view_range, axial_range, out)

    monkeypatch.setattr(ProjDataFromFile, "_read_box", counting)
    budget = 256 * 1024
    with stirgpu.config(host_memory_budget=budget):
        for what, op in (("sum", lambda: a + b), ("norm", a.norm), ("dot", lambda: a.dot(b))):
            reads.clear()
            tracemalloc.start()
            result = op()
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert max(reads) <= budget // 8, what
            assert sum(reads) == (1 if what == "norm" else 2) * nbytes, what  # every bin read once per operand
            assert peak <= budget, f"{what}: peak allocation {peak} bytes for {nbytes} bytes of data"
    assert is_on_disk(result.proj_data if hasattr(result, "proj_data") else (a + b).proj_data)


# -- ImageData -----------------------------------------------------------------------------------------
@pytest.fixture()
def images(geometry):
    _, info = geometry
    x, y = _values(info.shape, 3), _values(info.shape, 4)
    return pet.ImageData.from_array(x.copy(), info), pet.ImageData.from_array(y.copy(), info), x, y


@pytest.mark.parametrize("name,op,ref", BINARY, ids=[b[0] for b in BINARY])
def test_image_data_arithmetic_is_numpys(images, name, op, ref):
    a, b, x, y = images
    res = op(a, b)
    assert isinstance(res, pet.ImageData) and res.dimensions() == x.shape
    np.testing.assert_array_equal(res.as_array(), ref(x, y).astype(np.float32))


def test_image_data_methods(images, tmp_path):
    a, b, x, y = images
    info = a.image_info
    assert a.dimensions() == info.shape == a.shape and a.voxel_sizes() == tuple(np.float32(v) for v in info.voxel_size)
    assert a.norm() == pytest.approx(np.linalg.norm(x.astype(np.float64))) and a.dot(b) == np.float32(
        (x.astype(np.float64) * y).sum()
    )
    a.write(str(tmp_path / "img"))
    back = pet.ImageData(str(tmp_path / "img.hv"))
    np.testing.assert_array_equal(back.as_array(), x)
    assert back.image_info == info
    c = pet.ImageData(a)  # a copy
    c += 1
    np.testing.assert_array_equal(a.as_array(), x)
    assert c.fill(b) is c and (c - b).norm() == 0
    c.fill(2)
    assert c.max() == 2 and a.get_uniform_copy().max() == 1
    with pytest.raises(InputError, match="cannot fill"):
        c.fill(np.zeros((2, 2, 2)))
    e = pet.ImageData()
    e.initialise((4, 5, 6), (2.0, 3.0, 3.0), (1.0, 0.0, 0.0))
    assert e.dimensions() == (4, 5, 6) and e.image_info == ImageInfo((4, 5, 6), (2, 3, 3), (1, 0, 0))
    with pytest.raises(pet.error, match="tuple"):
        e.initialise([4, 5, 6])
    with pytest.raises(pet.error, match="empty"):
        pet.ImageData().as_array()
    with pytest.raises(InputError, match="different geometries"):
        a + e
    assert "host" in a.get_info() and a.modality == "PT"


def test_image_data_zero_copy_views(images):
    """On the host: numpy views (``__array_interface__``, DLPack) share the image's memory;
    ``as_array`` is a copy; there is no CUDA interface."""
    a, b, x, y = images
    view = np.asarray(a)
    assert np.shares_memory(view, a.array) and np.shares_memory(np.from_dlpack(a), a.array)
    assert np.shares_memory(a.asarray(), a.array) and not np.shares_memory(a.asarray(copy=True), a.array)
    assert not np.shares_memory(a.as_array(), a.array)
    assert not hasattr(a, "__cuda_array_interface__") and a.supports_array_view
    view[0, 0, 0] = 42
    assert a.as_array()[0, 0, 0] == 42


def test_geometrical_info(geometry):
    """SIRF's LPS geometry of a STIR image of unknown patient position: x, y as STIR's, z flipped."""
    _, info = geometry
    g = pet.ImageData.from_array(np.zeros(info.shape, np.float32), info).get_geometrical_info()
    fz, fy, fx = info.first_pixel_offset
    assert g.get_size() == tuple(reversed(info.shape))
    np.testing.assert_allclose(g.get_spacing(), tuple(reversed(info.voxel_size)), rtol=1e-7)
    np.testing.assert_allclose(g.get_offset(), (fx, fy, -fz), rtol=1e-6)
    m = g.get_index_to_physical_point_matrix()
    k, j, i = 2, 3, 4  # (z, y, x) array indices: LPS = offset + direction * spacing * (i, j, k)
    lps = m @ np.array([i, j, k, 1.0])
    vz, vy, vx = info.voxel_size
    np.testing.assert_allclose(lps[:3], (fx + i * vx, fy + j * vy, -(fz + k * vz)), rtol=1e-6)
    assert "Offset" in g.get_info()


def test_images_from_acquisition_data(geometry):
    """create_uniform_image / ImageData(acq): STIR's default image (float32-exact), xy as asked."""
    from stirgpu.kernels.joseph.lors import stir_default_image_info

    pdi, _ = geometry
    acq = pet.AcquisitionData(ProjDataInMemory(pdi))
    img = acq.create_uniform_image(2.0)
    assert img.image_info == stir_default_image_info(pdi) and img.min() == img.max() == 2
    assert pet.ImageData(acq).image_info == img.image_info and pet.ImageData(acq).max() == 0
    assert acq.create_uniform_image(0, xy=33).dimensions()[1:] == (33, 33)
    assert acq.create_uniform_image(0, xy=(31, 35)).dimensions()[1:] == (31, 35)
    with pytest.raises(pet.error, match="create_uniform_image"):
        acq.create_uniform_image(0, xy="big")


@pytest.mark.gpu
def test_image_data_on_a_gpu(cp, geometry):
    """With the CUDA backend new images are cupy arrays: CUDA array interface and DLPack share their
    memory, ``as_array`` is numpy, arithmetic equals the host's."""
    _, info = geometry
    x = _values(info.shape, 5)
    with stirgpu.config(backend="cuda"):
        img = pet.ImageData(pet.ImageData.from_array(x.copy(), info))  # a copy: stays on the host
        assert isinstance(img.array, np.ndarray)
        g = pet.AcquisitionData(ProjDataInMemory(geometry[0])).create_uniform_image(1.0)
        assert isinstance(g.array, cp.ndarray) and g.max() == 1
        d = pet.ImageData.from_array(cp.asarray(x), info)
        assert cp.asarray(d).data.ptr == d.array.data.ptr == cp.from_dlpack(d).data.ptr
        assert isinstance(d.as_array(), np.ndarray) and not hasattr(d, "__array_interface__")
        np.testing.assert_array_equal((d * 2 + img).as_array(), x * np.float32(2) + x)
        assert (d * img).norm() == pytest.approx((img * img).norm(), rel=1e-6)


def test_copies_and_views_of_acquisition_data(pair):
    """asarray: a copy of data in a file (refused with copy=False), a view of data in memory
    (tests/test_sirf_regressions.py); copy, axpby (deprecated, as in SIRF) and the size methods."""
    kind, a, b, va, vb = pair
    np.testing.assert_array_equal(a.asarray(), va)
    if kind == "disk":
        assert not a.supports_array_view
        with pytest.raises(InputError, match="copy"):
            a.asarray(copy=False)
    np.testing.assert_array_equal(a.copy().as_array(), va)
    with pytest.warns(DeprecationWarning, match="sapyb"):
        c = a.axpby(2.0, 3.0, b)
    np.testing.assert_array_equal(c.as_array(), va * np.float32(2) + vb * np.float32(3))
    assert pet.AcquisitionData(a).same_object().__class__ is pet.AcquisitionData
    assert repr(pet.AcquisitionData()) == "AcquisitionData()" and not a.is_empty()


def test_image_spacing_and_info(images):
    a, b, x, y = images
    assert a.spacing == a.voxel_sizes() and a.same_object().__class__ is pet.ImageData
    assert repr(pet.ImageData()) == "ImageData()" and "ImageInfo" in repr(a)
