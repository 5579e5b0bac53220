"""STIR images of a given array and voxel size, for tests comparing with STIR's Python module."""

from __future__ import annotations

import numpy as np


def stir_grid(stir, array, voxel):
    """A ``stir.FloatVoxelsOnCartesianGrid`` holding ``array`` (z, y, x) with voxel sizes ``voxel``
    (z, y, x) mm, STIR's index ranges (z from 0, y and x centred) and origin 0."""
    nz, ny, nx = array.shape
    lo = (0, -(ny // 2), -(nx // 2))
    hi = (nz - 1, ny - 1 - ny // 2, nx - 1 - nx // 2)
    rng3 = stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi))
    img = stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(), rng3, stir.FloatCartesianCoordinate3D(0, 0, 0), stir.FloatCartesianCoordinate3D(*voxel)
    )
    img.fill(np.ascontiguousarray(array, dtype=np.float32).ravel())
    return img
