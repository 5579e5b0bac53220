"""The CUDA Joseph kernels reproduce STIR's own Parallelproj projections of the STIR fixtures.

Fixtures (``helpers.reference_results``: computed by the reference STIR linked with
libparallelproj 2.0.7, one thread): NAME_image -> NAME_fwd and NAME_fwd -> NAME_back with
``restrict to cylindrical FOV`` on; ``ecat953_span3`` (STIR's default image, view order) and
``ecat953_arc_sino`` (arc-corrected, zoom 1.25, shifted origin, sinogram order), each image's
geometry as its header gives it.  The projections are made segment by segment on the GPU.

Forward projections are the CPU kernels' bit for bit (the same float32 endpoints, computed on
the host, and libparallelproj 2.0.7's arithmetic), and STIR's bit for bit where this host
computes STIR's tan(theta): STIR's ``get_tantheta`` goes through the x86 ``rsqrtss``
approximation, which Intel and AMD processors round differently (``stirgpu.kernels.joseph.lors``),
so on a host of the other kind than the fixtures' machine the oblique segments' LORs move by an
ulp; that host is recognised by the tan(theta) the fixtures record, and its projections are
STIR's to 2e-6 of the maximum (4.5e-7 measured on an H200's Intel host).  A changed operation, a
contracted multiply-add or another rounding of an endpoint shows as a bit difference from the
CPU kernels.  Back projections add the same float32 products in another order than STIR's one
thread (the GPU's atomics), so they agree to float32 summation order: 5e-6 of the maximum
(1.6e-6 and 7.8e-7 measured on an H200).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import reference_results

from stirgpu.kernels import apply_cylindrical_fov, back_chunk, cylindrical_fov_mask, forward_chunk
from stirgpu.kernels.joseph.lors import stir_float_geometry, stir_image_frame

pytestmark = pytest.mark.gpu

#: forward projections on a host whose ``rsqrtss`` is not the fixtures' machine's
OTHER_RSQRT_TOLERANCE = 2e-6
BACK_TOLERANCE = 5e-6


def _hosts_tantheta_is_stirs(stir_fixtures, name, pdi) -> bool:
    """Whether this host computes the tan(theta) STIR computed for the fixture's sample bins."""
    bins = json.loads((reference_results(stir_fixtures) / f"{name}.json").read_text())["geometry"]["bins"]
    assert any(b["tantheta"] != 0 for b in bins)
    for b in bins:
        g = stir_float_geometry(pdi, b["segment"], [b["view"]], [b["axial_pos"]], [b["tangential_pos"]])
        if np.float32(g.tantheta[0]) != np.float32(b["tantheta"]):
            return False
    return True


def test_forward_is_the_cpus_and_stirs(cp, stir_fixtures, stir_reference_case):
    """forward_chunk of the FOV-restricted image on the GPU, segment by segment, equals the CPU
    kernels' projection bit for bit, and STIR's NAME_fwd bit for bit where this host computes
    STIR's tan(theta) (else to 2e-6 of its maximum)."""
    name, image, info, fwd, pdi, _ = stir_reference_case
    frame = stir_image_frame(info)
    host = apply_cylindrical_fov(image, cylindrical_fov_mask(info))
    img = cp.asarray(host)
    stirs = _hosts_tantheta_is_stirs(stir_fixtures, name, pdi)
    peak = max(float(np.abs(v).max()) for v in fwd.values())
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        got = cp.asnumpy(forward_chunk(t, pdi, img, frame))
        np.testing.assert_array_equal(got, forward_chunk(t, pdi, host, frame), err_msg=f"{name} segment {seg}")
        if stirs:
            np.testing.assert_array_equal(got, fwd[seg], err_msg=f"{name} segment {seg}")
        else:
            worst = float(np.abs(got - fwd[seg]).max())
            assert worst <= OTHER_RSQRT_TOLERANCE * peak, f"{name} segment {seg}: {worst / peak:.3g} of max"


def test_back_matches_stir(cp, stir_reference_case):
    """back_chunk of STIR's NAME_fwd over all segments on the GPU, then STIR's cylindrical-FOV
    truncation, equals STIR's NAME_back to float32 summation order (5e-6 of its maximum)."""
    name, _, info, fwd, pdi, back = stir_reference_case
    frame = stir_image_frame(info)
    out = cp.zeros(info.shape, dtype=cp.float32)
    for seg in pdi.segment_nums:
        back_chunk(pdi.chunk_tables(seg), pdi, cp.asarray(fwd[seg]), out, frame)
    got = apply_cylindrical_fov(cp.asnumpy(out), cylindrical_fov_mask(info))
    peak = float(np.abs(back).max())
    worst = float(np.abs(got - back).max())
    assert peak > 0 and worst <= BACK_TOLERANCE * peak, f"{name}: {worst / peak:.3g} of max"
