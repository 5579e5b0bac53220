"""The Joseph kernels reproduce STIR 6.5's own Parallelproj projections.

Fixtures (../shared/fixtures/stir_reference, computed by STIR with libparallelproj
2.0.3): NAME_image -> NAME_fwd (forward), NAME_fwd -> NAME_back (back), with
``restrict to cylindrical FOV`` on.  Cases: ``ecat953_span3`` (view order, not
arc-corrected, default image) and ``ecat953_arc_sino`` (sinogram order, arc-corrected,
zoom 1.25, shifted origin).

Files are read through :mod:`stirgpu.formats` (``read_image``, ``read_from_file``).
"""

from __future__ import annotations

import numpy as np

from stirgpu.kernels import apply_cylindrical_fov, back_chunk, cylindrical_fov_mask, forward_chunk, stir_scaled_geometry

#: STIR's float32 endpoint arithmetic vs our float64 geometry: measured 4.9e-5 (forward) and
#: 3.3e-5 (back) of the maximum, at the phantom's sharp edges; the brief's bound is 1e-4.
TOLERANCE = 1e-4


def _xp(backend):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _host(backend, a):
    return np.asarray(a.get() if backend == "cuda" else a)


def test_forward_matches_stir(backend, stir_reference_case):
    """forward_chunk of the FOV-restricted image, segment by segment with STIR's scale 1/vx,
    equals STIR's NAME_fwd to 1e-4 of its maximum (float32 endpoint rounding in STIR)."""
    xp = _xp(backend)
    name, image, info, fwd, pdi, _ = stir_reference_case
    kg = stir_scaled_geometry(info)
    img = xp.asarray(apply_cylindrical_fov(image, cylindrical_fov_mask(info)))
    peak = max(float(np.abs(v).max()) for v in fwd.values())
    worst = 0.0
    for seg in pdi.segment_nums:
        got = _host(backend, forward_chunk(pdi.chunk_tables(seg), img, **kg.as_kwargs()))
        worst = max(worst, float(np.abs(got - fwd[seg]).max()))
    print(f"{name} forward: max |ours - STIR| / max = {worst / peak:.3g}")
    assert worst <= TOLERANCE * peak


def test_back_matches_stir(backend, stir_reference_case):
    """back_chunk of STIR's NAME_fwd over all segments, then STIR's cylindrical-FOV truncation,
    equals STIR's NAME_back to 1e-4 of its maximum.  Without the truncation the image corners
    differ by ~30 % of the maximum, which proves what 'restrict to cylindrical FOV' does."""
    xp = _xp(backend)
    name, _, info, fwd, pdi, back = stir_reference_case
    kg = stir_scaled_geometry(info)
    out = xp.zeros(info.shape, dtype=xp.float32)
    for seg in pdi.segment_nums:
        back_chunk(pdi.chunk_tables(seg), xp.asarray(fwd[seg]), out, **kg.as_kwargs())
    raw = _host(backend, out)
    got = apply_cylindrical_fov(raw, cylindrical_fov_mask(info))
    peak = float(np.abs(back).max())
    worst = float(np.abs(got - back).max())
    print(f"{name} back: max |ours - STIR| / max = {worst / peak:.3g}")
    assert worst <= TOLERANCE * peak
    assert float(np.abs(raw - back).max()) > 0.1 * peak
