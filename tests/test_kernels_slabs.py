"""The planning of the GPU back projection's slab launches (``stirgpu/kernels/joseph/slabs.py``),
on the host: the slab thickness a GPU's L2 cache gives, each axial position's plane bounds
(every corner of its LORs inside), and the slab directories' thread ranges (every LOR that
reaches a slab is run by it).  The kernels' own slab test is in test_kernels_cuda_host.py."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels import JosephChunk
from stirgpu.kernels.joseph.cpu import endpoints_array
from stirgpu.kernels.joseph.cuda import PART_FIELDS
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
from stirgpu.kernels.joseph.slabs import slab_planes

H200_L2 = 62_914_560


def test_slab_planes_fill_half_the_l2_with_image_and_accumulator_planes():
    assert slab_planes((645, 447, 447), H200_L2) == 19  # 0.5 * L2 / (2 * 447 * 447 * 4 bytes)
    assert slab_planes((645, 447, 447), H200_L2, share=0.25) == 9
    assert slab_planes((127, 285, 285), H200_L2) is None  # 41 MB: fits the L2
    assert slab_planes((40, 2000, 2000), H200_L2) == 1  # a plane larger than the L2 share: one each
    assert slab_planes((70, 400, 400), 32 * 2**20) == 13  # 45 MB against a 32 MiB L2
    assert slab_planes((30, 400, 400), 16 * 2**20, share=4) is None  # a slab as thick as the image: one launch


@pytest.fixture(scope="module")
def oblique():
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 35, 4, 21)
    info = stir_default_image_info(pdi)
    return pdi, info, JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)


def _corner_planes(chunk, info, frame):
    """Per part, per LOR ([view][axial][tangential]), the lowest and highest z plane its walk's
    corners may touch (floor of its endpoints' z index, and one more)."""
    org, vs, r = (np.asarray(v, np.float64) for v in frame)
    for tables in chunk.host:
        s, e = endpoints_array(tables)
        z = (np.stack([s[..., 0], e[..., 0]]) * r - org[0]) / vs[0]
        hit = np.asarray(tables[6], bool)[:, None, :]
        yield np.floor(z.min(axis=0)), np.floor(z.max(axis=0)) + 1, np.broadcast_to(hit, z.shape[1:])


def test_a_subsets_views_are_spread_and_a_run_of_views_is_not(oblique):
    pdi, _, chunk = oblique
    assert not chunk.spread_views
    assert JosephChunk([pdi.chunk_tables(0, views=[0, 2])], pdi).spread_views
    assert not JosephChunk([pdi.chunk_tables(0, views=[1, 2]), pdi.chunk_tables(1, views=[3])], pdi).spread_views


def test_axial_bounds_hold_every_corner_and_slabs_run_every_lor_that_reaches_them(oblique):
    pdi, info, chunk = oblique
    frame = stir_image_frame(info)
    org, vs, r = frame
    n0, planes = info.shape[0], 5
    packed = chunk.packed()
    directories, launches = chunk.host_slabs(packed.directory, planes, n0, org[0], vs[0], r)
    size = directories.size // len(launches)
    for k, (zmin, zmax, hit) in enumerate(_corner_planes(chunk, info, frame)):
        nv, na, nt = chunk.shapes[k]
        for s in launches:
            row = directories[s.offset : s.offset + size][k * PART_FIELDS : (k + 1) * PART_FIELDS]
            reaches = hit & (zmax >= s.z_lo) & (zmin < s.z_hi)  # (nv, na, nt)
            axial = np.flatnonzero(reaches.any(axis=(0, 2)))
            if axial.size:  # the slab's threads of this part: its axial range, all views
                assert row[10] <= axial[0] * nv * nt and (axial[-1] + 1) * nv * nt <= row[11]
    total = sum(s.blocks for s in launches)
    assert launches[0].z_lo == 0 and launches[-1].z_hi == n0 and total >= packed.blocks
