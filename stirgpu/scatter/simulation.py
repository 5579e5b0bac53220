"""STIR's ``PET Single Scatter Simulation`` (``SingleScatterSimulation``) on stirgpu's kernels.

:class:`SingleScatterSimulation` is set up once per template and attenuation image (the
detectors of every bin, the scatter points, the attenuation line integrals) and then simulates
the scatter of any activity image: the activity line integrals, then each bin's sum over scatter
points.  The numbers are STIR's (``docs/scatter.md`` says to what figure); the output has the
template's geometry, as STIR's ``simulate_scatter`` writes it, or with ``downsample scanner``
STIR's downsampled template (:mod:`.downsample`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..formats import ProjData, VoxelsOnCartesianGrid
from ..geometry import ImageInfo, ProjDataInfo
from ..kernels.scatter import activity_table, attenuation_table, single_scatter
from ..parfile.scatter import ScatterParameters
from .detectors import DetectorPairs, detector_pairs
from .downsample import downsampled_proj_data_info
from .physics import EnergyModel
from .points import (
    ScatterPoints,
    ZoomSettings,
    points_of_image,
    sample_scatter_points,
    scatter_point_image_info,
    stir_divide,
    z_middle,
)

__all__ = ["ScatterSettings", "SingleScatterSimulation"]

_F = np.float32


@dataclasses.dataclass(frozen=True)
class ScatterSettings:
    """STIR's keys: ``attenuation threshold`` (cm^-1; default 0.01), ``randomly place scatter
    points`` (STIR's default: yes; ``seed`` seeds stirgpu's generator, None: fresh entropy, as
    STIR's time seed), the scatter-point image's zoom, and ``downsample scanner`` with its
    numbers of rings and detectors (-1: STIR's defaults; :mod:`.downsample`)."""

    attenuation_threshold: float = 0.01
    randomly_place_scatter_points: bool = True
    seed: int | None = None
    zoom: ZoomSettings = ZoomSettings()
    downsample_scanner: bool = False
    downsampled_rings: int = -1
    downsampled_detectors: int = -1

    @classmethod
    def from_parameters(cls, p: ScatterParameters, seed: int | None = None) -> ScatterSettings:
        """The settings a scatter simulation parameter file gives."""
        zoom = ZoomSettings(zoom_xy=p.zoom_xy, zoom_z=p.zoom_z, size_xy=p.size_xy, size_z=p.size_z)
        return cls(
            p.attenuation_threshold,
            p.randomly_place_scatter_points,
            seed,
            zoom,
            p.downsample_scanner,
            p.downsampled_rings,
            p.downsampled_detectors,
        )


def _index_coordinates(positions_mm: np.ndarray, info: ImageInfo) -> np.ndarray:
    """STIR's index coordinates of gantry-frame points in ``info`` (its origin's z shifted to the
    image's middle plane, as ``integral_between_2_points`` does), in STIR's float32 and its
    build's division (:func:`stir_divide`): the last bit decides which voxel a point on a voxel
    boundary starts in, and with it a whole voxel of the line integral."""
    origin = np.array(info.origin, dtype=_F)
    origin[0] -= _F(z_middle(info))
    return stir_divide(positions_mm.astype(_F) - origin, info.voxel_size).astype(np.float64)


def _check_z_middle(name: str, info: ImageInfo, activity: ImageInfo) -> None:
    """STIR's ``check_z_to_middle_consistent`` (STIR issue #495): every image's middle plane must
    sit where the activity image's does."""
    shift = z_middle(info) - z_middle(activity)
    if abs(shift) > 0.1:
        raise GeometryError(
            f"scatter simulation: the {name} image's planes and voxel size put its middle {shift} mm from the "
            "activity image's (STIR issue #495)"
        )


class SingleScatterSimulation:
    """STIR's single scatter simulation for the template ``proj_data_info`` (see the module
    docstring).  ``energy``: the scanner's resolution and the energy window;
    ``attenuation``: the mu-map (cm^-1).  With ``settings.downsample_scanner`` the simulation
    and its output have STIR's downsampled template (:attr:`proj_data_info`).
    ``scatter_point_image``: a mu-map whose voxels are the scatter points as they are (STIR's
    ``attenuation image for scatter points filename``), instead of the zoomed ``attenuation``."""

    def __init__(
        self,
        proj_data_info: ProjDataInfo,
        energy: EnergyModel,
        attenuation: VoxelsOnCartesianGrid,
        settings: ScatterSettings = ScatterSettings(),
        scatter_point_image: VoxelsOnCartesianGrid | None = None,
    ):
        if settings.downsample_scanner:
            proj_data_info = downsampled_proj_data_info(
                proj_data_info, settings.downsampled_rings, settings.downsampled_detectors
            )
        #: the geometry simulated and written: the template's, or its downsampled scanner's
        self.proj_data_info = proj_data_info
        self.energy = energy
        self.settings = settings
        self._attenuation = attenuation
        self._scatter_point_image = scatter_point_image
        self._detectors: DetectorPairs | None = None
        self._points: ScatterPoints | None = None
        self._att_table: np.ndarray | None = None

    @property
    def detectors(self) -> DetectorPairs:
        if self._detectors is None:
            self._detectors = detector_pairs(self.proj_data_info)
        return self._detectors

    @property
    def scatter_points(self) -> ScatterPoints:
        """The scatter points (sampled once; with random placement, one draw per simulation
        object, as STIR draws once per set-up)."""
        if self._points is None:
            s = self.settings
            att, given = self._attenuation, self._scatter_point_image
            rng = np.random.default_rng(s.seed) if s.randomly_place_scatter_points else None
            if given is not None:
                self._points = points_of_image(given.as_array(), given.info, s.attenuation_threshold, rng)
            else:
                grid = scatter_point_image_info(att.info, self.proj_data_info, s.zoom)
                self._points = sample_scatter_points(att.as_array(), att.info, grid, s.attenuation_threshold, rng)
        return self._points

    @property
    def attenuation_table(self) -> np.ndarray:
        """``exp(-integral of mu)`` from each scatter point to each detector (computed once)."""
        if self._att_table is None:
            points, dets, att = self.scatter_points, self.detectors, self._attenuation
            self._att_table = attenuation_table(
                att.as_array(),
                att.info.get_min_indices(),
                _index_coordinates(points.positions, att.info),
                _index_coordinates(dets.positions, att.info),
                att.info.voxel_size,
            )
        return self._att_table

    def _activity_table(self, activity: VoxelsOnCartesianGrid) -> np.ndarray:
        points, dets = self.scatter_points, self.detectors
        _check_z_middle("attenuation", self._attenuation.info, activity.info)
        _check_z_middle("scatter-point", points.info, activity.info)
        return activity_table(
            activity.as_array(),
            activity.info.get_min_indices(),
            _index_coordinates(points.positions, activity.info),
            _index_coordinates(dets.positions, activity.info),
            activity.info.voxel_size,
            points.positions,
            dets.positions,
        )

    def simulate(self, activity: VoxelsOnCartesianGrid) -> dict[int, np.ndarray]:
        """The scatter estimate of ``activity``: per segment a float32 (views, axial, tangential)
        array."""
        act_table = self._activity_table(activity)
        att_table = self.attenuation_table
        points, dets = self.scatter_points, self.detectors
        physics = self.energy.physics_vector(points.volume)
        out = {}
        for seg, pairs in dets.pairs.items():
            values = single_scatter(
                pairs.reshape(-1, 2), points.positions, points.mu, dets.positions, act_table, att_table, physics
            )
            out[seg] = values.astype(_F).reshape(pairs.shape[:3])
        return out

    def simulate_into(self, activity: VoxelsOnCartesianGrid, out: ProjData) -> float:
        """Write the scatter estimate of ``activity`` into ``out`` (the template's geometry);
        returns the total, as STIR's log reports it."""
        if out.proj_data_info != self.proj_data_info:
            raise GeometryError("scatter simulation: the output's geometry is not the template's")
        total = 0.0
        for seg, values in self.simulate(activity).items():
            out.set_segment_by_view(values, seg)
            total += float(values.sum(dtype=np.float64))
        return total
