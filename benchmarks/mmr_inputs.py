"""The STIR-comparison benchmarks' inputs (``vs_stir.py``, ``stir_plugin.py``): STIR's default
image of a Siemens mMR span-11 geometry holding stirgpu's demo phantom (``image.hv``), and
Poisson prompts of its forward projection (``prompts.hs``, fixed seed), written by stirgpu."""

from __future__ import annotations

from pathlib import Path


def write_phantom_and_prompts(
    folder: Path, *, max_ring_difference: int, views: int, tangential: int, counts: float, backend: str
) -> dict:
    """Write ``image.hv`` and ``prompts.hs`` into ``folder`` (``backend`` forward projects the
    phantom); returns the geometry, for the benchmark's JSON."""
    import numpy as np

    from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk, VoxelsOnCartesianGrid, write_image
    from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon.simulate import demo_phantom

    pdi = ProjDataInfo.construct(
        Scanner.from_name("Siemens mMR"), 11, max_ring_difference, num_views=views, num_tangential_poss=tangential
    )
    info = ImageInfo.default_for(pdi)
    activity = demo_phantom(info).activity(info)
    write_image(folder / "image.hv", VoxelsOnCartesianGrid(info, activity))
    pp = ProjectorPair(backend=backend)
    pp.set_up(pdi, info)
    mean = ProjDataInMemory(pdi)
    pp.forward_project(mean, activity)
    rng = np.random.default_rng(5)
    all_views = np.arange(pdi.get_num_views())
    scale = counts / sum(float(mean.read_views(s, all_views).sum()) for s in pdi.segment_nums)
    with ProjDataOnDisk.create(folder / "prompts.hs", pdi) as out:
        for s in pdi.segment_nums:
            out.write_views(rng.poisson(mean.read_views(s, all_views) * scale).astype(np.float32), s, all_views)
    return {
        "scanner": "Siemens mMR",
        "span": 11,
        "max_ring_difference": max_ring_difference,
        "segments": pdi.get_num_segments(),
        "sinograms": pdi.get_num_sinograms(),
        "views": pdi.get_num_views(),
        "tangential_poss": pdi.get_num_tangential_poss(),
        "image": list(info.shape),
        "voxel_size_mm": list(info.voxel_size),
        "bytes": pdi.total_num_bins * 4,
    }
