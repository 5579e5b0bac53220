"""STIR's single scatter simulation, the two per-call kernels (``SingleScatterSimulation``,
``single_scatter_integrals.cxx`` and ``scatter_estimate_for_one_scatter_point.cxx``):

* :func:`activity_table`, :func:`attenuation_table` -- for every scatter point p and detector
  d, the activity line integral times ``min(pi/2, 1/|p - d|^2)``, and ``exp(-integral of mu)``
  (STIR's cached integrals; STIR fills its caches lazily, here each table is filled at once);
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

__all__ = ["activity_table", "attenuation_table", "single_scatter", "PHYSICS_FIELDS"]

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


def _table_arguments(image, mins, points, dets, voxel):
    return (
        _host("image", image, 3, np.float32),
        np.asarray(mins, dtype=np.int64),
        _host("points", points, 2),
        _host("dets", dets, 2),
        np.asarray(voxel, dtype=_F64),
    )


def activity_table(image, mins, points, dets, voxel, points_mm, dets_mm) -> np.ndarray:
    """(points, detectors) float32 (as STIR caches them; half the memory): the activity line
    integral from each scatter point to each detector times ``min(pi/2, 1/r^2)``.  ``image`` is
    (z, y, x), its element [0, 0, 0] at STIR's indices ``mins``; ``points`` / ``dets`` in the
    image's STIR index coordinates (z, y, x: ``(position - origin) / voxel size``); ``voxel`` the
    voxel sizes (mm); ``points_mm`` / ``dets_mm`` the same points in mm (for ``r``)."""
    from .cpu import activity_table_cpu

    args = _table_arguments(image, mins, points, dets, voxel)
    points_mm, dets_mm = _host("points_mm", points_mm, 2), _host("dets_mm", dets_mm, 2)
    out = np.zeros((args[2].shape[0], args[3].shape[0]), dtype=np.float32)
    if out.size:
        activity_table_cpu(*args, points_mm, dets_mm, out)
    return out


def attenuation_table(image, mins, points, dets, voxel) -> np.ndarray:
    """(points, detectors) float32: ``exp(-line integral)`` of the mu-map ``image`` (cm^-1) from
    each scatter point to each detector (arguments as :func:`activity_table`'s)."""
    from .cpu import attenuation_table_cpu

    args = _table_arguments(image, mins, points, dets, voxel)
    out = np.zeros((args[2].shape[0], args[3].shape[0]), dtype=np.float32)
    if out.size:
        attenuation_table_cpu(*args, out)
    return out


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
