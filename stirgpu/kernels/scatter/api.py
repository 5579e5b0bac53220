"""STIR's single scatter simulation, the two per-call kernels (``SingleScatterSimulation``,
``single_scatter_integrals.cxx`` and ``scatter_estimate_for_one_scatter_point.cxx``):

* :func:`line_integral_tables` -- for every scatter point p and detector d, the activity line
  integral times ``min(pi/2, 1/|p - d|^2)`` and ``exp(-integral of mu)`` (STIR's cached
  integrals; STIR fills its cache lazily, here both tables are filled once);
* :func:`single_scatter` -- each bin's sum over scatter points of STIR's formula (Klein-Nishina
  at 511 keV, the scattered photon's energy ``511 / (2 - cos)``, the Gaussian energy-window
  efficiency, attenuation of the scattered photon by ``att^(sigma(E)/sigma(511))``, the cosines of
  incidence), times ``scatter volume / sigma_total(511)`` and divided by STIR's efficiency of the
  pair for unscattered photons.

Arguments are float64 numpy arrays (the CPU kernels, :mod:`.cpu`); a GPU module would take the
same arguments as cupy arrays and be chosen here by where they live.
"""

from __future__ import annotations

import numpy as np

__all__ = ["line_integral_tables", "single_scatter", "PHYSICS_FIELDS"]

#: the order of :func:`single_scatter`'s ``physics`` vector
PHYSICS_FIELDS = (
    "max_cos_angle",
    "low_energy",
    "high_energy",
    "reference_energy",
    "energy_resolution",
    "efficiency_at_511",
    "scatter_volume",
    "total_cross_section_511",
)

_F64 = np.float64


def _host(name: str, a, ndim: int, dtype=_F64) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"single scatter kernels: {name} must be a numpy array (CPU), not {type(a).__name__}")
    if a.ndim != ndim:
        raise ValueError(f"single scatter kernels: {name} must have {ndim} dimensions, not {a.ndim}")
    return np.ascontiguousarray(a, dtype=dtype)


def line_integral_tables(
    activity, act_mins, act_points, act_dets, act_voxel, mu, mu_mins, mu_points, mu_dets, mu_voxel, points_mm, dets_mm
) -> tuple[np.ndarray, np.ndarray]:
    """(activity table, attenuation table), each (points, detectors), float32.  ``activity`` and ``mu``
    are (z, y, x) images whose element [0, 0, 0] has STIR's indices ``*_mins``; ``*_points`` /
    ``*_dets`` the scatter points and detectors in each image's STIR index coordinates (z, y, x:
    ``(position - origin) / voxel size``); ``*_voxel`` its voxel sizes (mm);
    ``points_mm`` / ``dets_mm`` the same points in mm (for the solid angle)."""
    from .cpu import line_integral_tables_cpu

    activity = _host("activity", activity, 3, np.float32)
    mu = _host("mu", mu, 3, np.float32)
    args = [
        _host(n, a, 2)
        for n, a in (
            ("act_points", act_points),
            ("act_dets", act_dets),
            ("mu_points", mu_points),
            ("mu_dets", mu_dets),
            ("points_mm", points_mm),
            ("dets_mm", dets_mm),
        )
    ]
    act_points, act_dets, mu_points, mu_dets, points_mm, dets_mm = args
    n_points, n_dets = points_mm.shape[0], dets_mm.shape[0]
    # float32, as STIR caches them (and half the memory: points x detectors can be large)
    act = np.zeros((n_points, n_dets), dtype=np.float32)
    att = np.zeros((n_points, n_dets), dtype=np.float32)
    if n_points and n_dets:
        line_integral_tables_cpu(
            activity,
            np.asarray(act_mins, dtype=np.int64),
            act_points,
            act_dets,
            np.asarray(act_voxel, dtype=_F64),
            mu,
            np.asarray(mu_mins, dtype=np.int64),
            mu_points,
            mu_dets,
            np.asarray(mu_voxel, dtype=_F64),
            points_mm,
            dets_mm,
            act,
            att,
        )
    return act, att


def single_scatter(det_pairs, points_mm, mu_at_points, dets_mm, act_table, att_table, physics) -> np.ndarray:
    """One float64 value per detector pair (``det_pairs``: (bins, 2) indices into ``dets_mm``);
    ``physics`` holds :data:`PHYSICS_FIELDS` in that order."""
    from .cpu import single_scatter_cpu

    det_pairs = _host("det_pairs", det_pairs, 2, np.int64)
    physics = _host("physics", physics, 1)
    if physics.shape[0] != len(PHYSICS_FIELDS):
        raise ValueError(f"single scatter kernels: physics must hold {len(PHYSICS_FIELDS)} values")
    out = np.zeros(det_pairs.shape[0], dtype=_F64)
    if det_pairs.shape[0]:
        single_scatter_cpu(
            det_pairs,
            _host("points_mm", points_mm, 2),
            _host("mu_at_points", mu_at_points, 1),
            _host("dets_mm", dets_mm, 2),
            _host("act_table", act_table, 2, np.float32),
            _host("att_table", att_table, 2, np.float32),
            physics,
            out,
        )
    return out
