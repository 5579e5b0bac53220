"""The CPU Joseph chunk kernels reproduce STIR's own Parallelproj projections of the fixtures (the
CUDA kernels: ``test_kernels_gpu_fixtures.py``).

Fixtures (``helpers.reference_results(stir_fixtures)``: STIR 6.5 linked with libparallelproj
2.0.7, one thread): NAME_image -> NAME_fwd (forward), NAME_fwd -> NAME_back (back), with
``restrict to cylindrical FOV`` on.  Cases (the ``stir_reference_case`` fixture): ``ecat953_span3``
(view order, not arc-corrected, STIR's default image) and ``ecat953_arc_sino`` (sinogram order,
arc-corrected, STIR's default image of zoom 1.25 with a shifted origin).  STIR projected the images
as it read them from their headers, and so do we (``read_image``, then ``stir_image_frame``).

Forward projections are STIR's bit for bit.  Back projections differ from STIR's in the order of
the float32 additions into a voxel only, which depends on the number of numba threads (the
workers' share of the LORs): measured 1.5e-6 to 2.41e-6 (``ecat953_span3``; 2.41e-6 with one
thread, 1.71e-6 with two) and 6.4e-7 to 9.2e-7 (``ecat953_arc_sino``) of STIR's maximum with 1 to
16 threads, hence :data:`BACK_BAR`.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import reference_results

from stirgpu.formats import read_image
from stirgpu.kernels import apply_cylindrical_fov, back_chunk, cylindrical_fov_mask, forward_chunk
from stirgpu.kernels.joseph.lors import stir_image_frame

#: back projections against STIR's, in units of STIR's maximum: float32 summation order (measured
#: at most 2.41e-6, see the module docstring)
BACK_BAR = 3e-6


@pytest.mark.parametrize("name", ["ecat953_span3", "ecat953_arc_sino"])
def test_image_frame_is_stirs_as_read(stir_fixtures, name):
    """The kernels' frame (mm) of the fixture image as ``read_image`` reads it equals, bit for
    bit, the frame of the image as STIR read it (``NAME.json``, ``image_as_read``: float32 voxel
    sizes, origin and minimum indices; the centre of voxel [0, 0, 0], z centred on the scanner).
    Guards the header values' rounding to float32 (STIR reads them as floats), on which the
    bit-for-bit forward projections below rest."""
    d = reference_results(stir_fixtures)
    info = read_image(d / f"{name}_image.hv").info
    stir = json.loads((d / f"{name}.json").read_text())["image_as_read"]
    origin, voxel_size, rescale = stir_image_frame(info, stir_units=False)
    vs, org = np.float32(stir["voxel"]), np.float32(stir["origin"])
    lo = np.array(stir["min_indices"])
    hi = lo + np.array(stir["shape"]) - 1
    first = (org + (lo.astype(np.float32) * vs).astype(np.float32)).astype(np.float32)
    first[0] = np.float32(first[0] - np.float32(np.float32(np.float32(lo[0] + hi[0]) / np.float32(2)) * vs[0]))
    assert tuple(info.shape) == tuple(stir["shape"]) and rescale == 1
    np.testing.assert_array_equal(voxel_size, vs)
    np.testing.assert_array_equal(origin, first)


def test_forward_matches_stir(stir_reference_case):
    """forward_chunk of the FOV-restricted image, segment by segment in STIR's units, equals
    STIR's NAME_fwd bit for bit, every bin: the same float32 endpoints, frame and arithmetic
    (libparallelproj 2.0.7's).  Guards every step of the projector (endpoints, clipping,
    principal axis, planes, interpolation, the order of the float32 sum)."""
    name, image, info, fwd, pdi, _ = stir_reference_case
    frame = stir_image_frame(info)
    img = apply_cylindrical_fov(image, cylindrical_fov_mask(info))
    for seg in pdi.segment_nums:
        got = forward_chunk(pdi.chunk_tables(seg), pdi, img, frame)
        bad = np.count_nonzero(got != fwd[seg])
        assert bad == 0, (
            f"{name} segment {seg}: {bad} of {got.size} bins differ, by up to "
            f"{np.abs(got - fwd[seg]).max() / np.abs(fwd[seg]).max():.2e} of the maximum"
        )
    assert max(float(v.max()) for v in fwd.values()) > 0


def test_back_matches_stir(stir_reference_case):
    """back_chunk of STIR's NAME_fwd over all segments, then STIR's cylindrical-FOV truncation,
    equals STIR's NAME_back to :data:`BACK_BAR` of its maximum (float32 summation order; the
    measured values are in the module docstring).  Without the truncation the image corners
    differ by ~30 % of the maximum, which shows what 'restrict to cylindrical FOV' does.  Guards
    the back projection's weights and the truncation applied after it."""
    name, _, info, fwd, pdi, back = stir_reference_case
    frame = stir_image_frame(info)
    raw = np.zeros(info.shape, dtype=np.float32)
    for seg in pdi.segment_nums:
        back_chunk(pdi.chunk_tables(seg), pdi, fwd[seg], raw, frame)
    got = apply_cylindrical_fov(raw, cylindrical_fov_mask(info))
    peak = float(np.abs(back).max())
    worst = float(np.abs(got - back).max())
    print(f"{name} back: max |ours - STIR| / max = {worst / peak:.3g}")
    assert worst <= BACK_BAR * peak
    assert float(np.abs(raw - back).max()) > 0.1 * peak
