"""Simulated PET data for the SIRF-style examples, made with SIRF's API only.

A water cylinder with two hot spheres (4:1 and 3:1) and a cold one, on an ECAT 953 geometry
(span 3, ring differences up to 4, views mashed by 4): its attenuation as an
``AcquisitionSensitivityModel`` from the attenuation image, a flat background term (20 % of
the counts), Poisson noise.  Works with ``stirgpu.sirf`` and with ``sirf.STIR`` alike (pass the
module as ``pet``).
"""

import numpy as np

#: linear attenuation of water at 511 keV, 1/mm
MU_WATER = 0.0096
SPHERES = ((-0.45, 0.0, 4.0), (0.45, 0.0, 3.0), (0.0, -0.45, 0.0))  # (x, y) / cylinder radius, value


def phantom_masks(image):
    """Boolean (z, y, x) masks of the cylinder and of each sphere, from the image's geometry."""
    nz, ny, nx = image.dimensions()
    vz, vy, vx = (float(v) for v in image.voxel_sizes())
    z = (np.arange(nz) - (nz - 1) / 2) * vz
    y = (np.arange(ny) - ny // 2) * vy
    x = (np.arange(nx) - nx // 2) * vx
    z, y, x = np.meshgrid(z, y, x, indexing="ij")
    radius = 0.7 * 0.5 * min(ny * vy, nx * vx)
    cylinder = (x**2 + y**2 <= radius**2) & (np.abs(z) <= 0.42 * nz * vz)
    rs = 0.22 * radius
    spheres = [(x - cx * radius) ** 2 + (y - cy * radius) ** 2 + z**2 <= rs**2 for cx, cy, _ in SPHERES]
    return cylinder, spheres


def simulate(pet, counts=5e6, seed=2):
    """(measured data, acquisition model (set up), true image, cylinder mask, sphere masks)."""
    template = pet.AcquisitionData("ECAT 953", 3, 4, 4)  # scanner, span, max ring difference, view mashing
    image = template.create_uniform_image(0.0, xy=95)
    cylinder, spheres = phantom_masks(image)
    activity = np.where(cylinder, 1.0, 0.0)
    for (_, _, value), mask in zip(SPHERES, spheres, strict=True):
        activity[mask] = value
    image.fill(activity.astype(np.float32))

    # attenuation: the projector's line integrals are in units of the x voxel size (STIR's
    # Parallelproj), so the attenuation image holds mu times that size
    mu = image.get_uniform_copy(0.0)
    mu.fill(np.where(cylinder, MU_WATER * float(image.voxel_sizes()[2]), 0.0).astype(np.float32))
    acq_model = pet.AcquisitionModelUsingParallelproj()
    asm = pet.AcquisitionSensitivityModel(mu, acq_model)
    acq_model.set_acquisition_sensitivity(asm)
    acq_model.set_up(template, image)

    # scale to the counts, 20 % of them a flat background
    ideal = acq_model.forward(image)
    scale = 0.8 * counts / ideal.sum()
    image *= scale
    acq_model.set_background_term(template.get_uniform_copy(0.2 * counts / ideal.size))
    mean = acq_model.forward(image)
    measured = mean.get_uniform_copy(0.0)
    measured.fill(np.random.default_rng(seed).poisson(mean.as_array()).astype(np.float32))
    return measured, acq_model, image, cylinder, spheres


def report_contrast(estimate, cylinder, spheres):
    """Print each sphere's contrast against the cylinder, true and reconstructed."""
    x = estimate.as_array()
    background = cylinder & ~np.any(spheres, axis=0)
    for i, ((_, _, value), mask) in enumerate(zip(SPHERES, spheres, strict=True)):
        print(f"sphere {i}: true contrast {value:.1f}, reconstructed {x[mask].mean() / x[background].mean():.2f}")
