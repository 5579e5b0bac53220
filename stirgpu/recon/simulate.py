"""Phantoms and simulated PET data, for the demo, the examples and the tests.

:func:`simulate` makes the three inputs of an OSMAPOSL run from an activity image:

* correction factors ``f = exp(line integral of mu)`` (attenuation correction factors
  of the phantom's water cylinder, >= 1; STIR's ``Bin Normalisation From ProjData``);
* the additive sinogram ``a = b f`` -- a flat background ``b`` (randoms + scatter, in
  measured units) expressed in STIR's normalised units (see
  :mod:`stirgpu.recon.objective`);
* prompts ``y ~ Poisson((A x + a) / f)``, scaled to a number of counts, with a fixed seed.

Everything is projected with the streaming projector, so the data are exactly
consistent with the reconstruction model.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError, renamed_arguments
from ..formats import ProjData, ProjDataInMemory
from ..geometry import ImageInfo, ProjDataInfo, Scanner

__all__ = [
    "Sphere",
    "Phantom",
    "demo_phantom",
    "demo_geometry",
    "SimulatedData",
    "simulate",
    "voxel_centres",
    "MU_WATER_PER_MM",
]

#: linear attenuation coefficient of water at 511 keV (1/mm)
MU_WATER_PER_MM = 0.0096


def voxel_centres(info: ImageInfo) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, y, x) mm of the voxel centres, gantry frame (z = 0 at the scanner's axial centre),
    as broadcastable 1-D arrays."""
    oz, oy, ox = info.gantry_origin
    vz, vy, vx = info.voxel_size
    nz, ny, nx = info.shape
    return (
        (oz + vz * np.arange(nz))[:, None, None],
        (oy + vy * np.arange(ny))[None, :, None],
        (ox + vx * np.arange(nx))[None, None, :],
    )


@dataclasses.dataclass(frozen=True)
class Sphere:
    """A sphere of ``value`` (added to what is below it) at ``centre`` (z, y, x) mm."""

    centre: tuple[float, float, float]
    radius: float
    value: float


@renamed_arguments(
    background="the cylinder's activity is 'cylinder_value' now ('background' is the "
    "projection data's term in measured units everywhere in stirgpu)"
)
@dataclasses.dataclass(frozen=True)
class Phantom:
    """A water cylinder (radius, half length mm; activity ``cylinder_value``) with spheres that
    *replace* the activity inside them (hot: value > cylinder_value, cold: 0)."""

    radius: float
    half_length: float
    cylinder_value: float = 1.0
    spheres: tuple[Sphere, ...] = ()

    def cylinder_mask(self, info: ImageInfo) -> np.ndarray:
        z, y, x = voxel_centres(info)
        return (y * y + x * x <= self.radius**2) & (np.abs(z) <= self.half_length)

    def sphere_mask(self, info: ImageInfo, i: int) -> np.ndarray:
        z, y, x = voxel_centres(info)
        s = self.spheres[i]
        return (z - s.centre[0]) ** 2 + (y - s.centre[1]) ** 2 + (x - s.centre[2]) ** 2 <= s.radius**2

    def activity(self, info: ImageInfo) -> np.ndarray:
        """(z, y, x) float32 activity image (voxel-centre sampling)."""
        img = np.where(self.cylinder_mask(info), np.float32(self.cylinder_value), np.float32(0))
        for i, s in enumerate(self.spheres):
            img = np.where(self.sphere_mask(info, i), np.float32(s.value), img)
        return img.astype(np.float32)

    def mu_map(self, info: ImageInfo) -> np.ndarray:
        """Attenuation (1/mm): water inside the cylinder."""
        return np.where(self.cylinder_mask(info), np.float32(MU_WATER_PER_MM), np.float32(0)).astype(np.float32)


def demo_phantom(info: ImageInfo) -> Phantom:
    """A cylinder filling most of the field of view, with two hot spheres (4:1 and 3:1) on the
    x axis and a cold one on the y axis, all centred in the central plane (so the central
    transverse slice cuts all three, the central coronal slice the hot ones and the central
    sagittal slice the cold one)."""
    nz, ny, nx = info.shape
    vz, vy, vx = info.voxel_size
    r_fov = 0.5 * min(ny * vy, nx * vx)
    r = 0.7 * r_fov
    half_len = 0.42 * nz * vz
    rs = 0.22 * r
    return Phantom(
        radius=r,
        half_length=half_len,
        cylinder_value=1.0,
        spheres=(
            Sphere((0.0, 0.0, -0.45 * r), rs, 4.0),
            Sphere((0.0, 0.0, 0.45 * r), 0.8 * rs, 3.0),
            Sphere((0.0, -0.45 * r, 0.0), rs, 0.0),
        ),
    )


def demo_geometry(
    scanner: str = "ECAT 953",
    span: int = 3,
    max_ring_difference: int = 4,
    num_views: int = 48,
    num_tangential_poss: int = 96,
) -> tuple[ProjDataInfo, ImageInfo]:
    """A small STIR geometry (default: the ECAT 953 of ``stir_reference_lpp2.0.7/osem953``) and its
    default image."""
    pdi = ProjDataInfo.construct(
        Scanner.from_name(scanner),
        span,
        max_ring_difference,
        num_views=num_views,
        num_tangential_poss=num_tangential_poss,
        arc_corrected=False,
    )
    return pdi, ImageInfo.default_for(pdi)


@dataclasses.dataclass
class SimulatedData:
    """Prompts, STIR's additive sinogram and correction factors, plus what made them."""

    prompts: ProjData
    additive: ProjData
    normalisation: ProjData
    truth: np.ndarray
    #: counts per unit of activity: the truth in the units a reconstruction returns
    scale: float
    total_counts: float


def simulate(
    projector,
    proj_data_info: ProjDataInfo,
    image_info: ImageInfo,
    activity: np.ndarray,
    mu_map: np.ndarray | None = None,
    *,
    counts: float = 2e6,
    background_fraction: float = 0.2,
    seed: int = 1,
) -> SimulatedData:
    """Simulate an acquisition of ``activity`` (see the module docstring).

    ``projector`` is a ``ProjectorPair`` (set up here for the geometry);
    ``background_fraction`` is the flat background's share of the mean counts.
    Returns data in memory; the truth is scaled so that it is what OSEM converges to.
    """
    activity = np.ascontiguousarray(activity, dtype=np.float32)
    if activity.shape != image_info.shape:
        raise GeometryError(f"simulate: activity shape {activity.shape} differs from {image_info.shape}")
    if not 0 <= background_fraction < 1:
        raise GeometryError(f"simulate: background_fraction must be in [0, 1), got {background_fraction}")
    projector.set_up(proj_data_info, image_info)
    # correction factors f = exp(integral mu); the projector returns line integrals in units of vx
    f = ProjDataInMemory(proj_data_info)
    if mu_map is None:
        f.fill(1.0)
    else:
        projector.forward_project(f, np.ascontiguousarray(mu_map, dtype=np.float32))
        vx = image_info.voxel_size[2]
        for seg in proj_data_info.segment_nums:
            f.set_segment_by_view(np.exp(f.get_segment_by_view(seg) * np.float32(vx)), seg)
    ax = ProjDataInMemory(proj_data_info)
    projector.forward_project(ax, activity)
    # mean of A x / f, to size the background b and scale to counts
    geo = sum(float(np.sum(ax.get_segment_by_view(s) / f.get_segment_by_view(s))) for s in proj_data_info.segment_nums)
    nbins = proj_data_info.total_num_bins
    b = background_fraction / (1 - background_fraction) * geo / nbins  # flat background, measured units
    scale = counts * (1 - background_fraction) / geo  # counts per unit activity
    rng = np.random.default_rng(seed)
    prompts = ProjDataInMemory(proj_data_info)
    additive = ProjDataInMemory(proj_data_info)
    total = 0.0
    for seg in proj_data_info.segment_nums:
        fs = f.get_segment_by_view(seg)
        a = np.float32(b * scale) * fs  # STIR's normalised units: a = b f
        mean = (ax.get_segment_by_view(seg) * np.float32(scale) + a) / fs
        y = rng.poisson(np.maximum(mean, 0).astype(np.float64)).astype(np.float32)
        total += float(y.sum())
        prompts.set_segment_by_view(y, seg)
        additive.set_segment_by_view(a.astype(np.float32), seg)
    return SimulatedData(prompts, additive, f, activity * np.float32(scale), float(scale), total)
