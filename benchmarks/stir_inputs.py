"""The STIR-comparison benchmarks' inputs (``vs_stir.py``, ``stir_plugin.py``,
``stir_plugin_threads.py``): STIR's default image of a geometry holding stirgpu's demo phantom
(``image.hv``), and Poisson prompts of its forward projection (``prompts.hs``, fixed seed),
written by stirgpu.  The geometry is STIR's ``construct_proj_data_info`` of any scanner, span and
TOF mashing (:func:`proj_data_info`; TOF prompts hold every timing position);
:func:`write_phantom_and_prompts` is the Siemens mMR span-11 case the benchmarks share."""

from __future__ import annotations

from pathlib import Path

MMR = "Siemens mMR"
MMR_SPAN = 11


def proj_data_info(
    scanner: str, span: int, max_ring_difference: int, views: int | None, tangential: int | None, tof_mash_factor: int
):
    """STIR's ``construct_proj_data_info(scanner, span, max ring difference, views, tangential,
    non-arc-corrected, tof_mash_factor)`` (``tof_mash_factor`` 0: non-TOF; ``views`` /
    ``tangential`` None: the scanner's)."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    return ProjDataInfo.construct(
        Scanner.from_name(scanner),
        span,
        max_ring_difference,
        num_views=views,
        num_tangential_poss=tangential,
        tof_mash_factor=tof_mash_factor or None,
    )


def write_phantom_and_prompts(
    folder: Path, *, max_ring_difference: int, views: int, tangential: int, counts: float, backend: str
) -> dict:
    """:func:`write_inputs` for the Siemens mMR, span 11, non-TOF."""
    pdi = proj_data_info(MMR, MMR_SPAN, max_ring_difference, views, tangential, 0)
    return write_inputs(folder, pdi, span=MMR_SPAN, counts=counts, backend=backend)


def write_inputs(folder: Path, pdi, *, span: int, counts: float, backend: str) -> dict:
    """Write ``image.hv`` and ``prompts.hs`` of ``pdi`` (made with ``span``) into ``folder``
    (``backend`` forward projects the phantom); returns the geometry, for the benchmark's JSON."""
    from stirgpu.formats import ProjDataInMemory, VoxelsOnCartesianGrid, write_image
    from stirgpu.geometry import ImageInfo
    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon.simulate import demo_phantom

    info = ImageInfo.default_for(pdi)
    activity = demo_phantom(info).activity(info)
    write_image(folder / "image.hv", VoxelsOnCartesianGrid(info, activity))
    pp = ProjectorPair(backend=backend)
    pp.set_up(pdi, info)
    mean = ProjDataInMemory(pdi)
    pp.forward_project(mean, activity)
    _write_poisson(folder / "prompts.hs", mean, counts)
    return {
        "scanner": pdi.scanner.name,
        "span": span,
        "max_ring_difference": pdi.get_max_ring_difference_overall(),
        "segments": pdi.get_num_segments(),
        "sinograms": pdi.get_num_sinograms(),
        "views": pdi.get_num_views(),
        "tangential_poss": pdi.get_num_tangential_poss(),
        "tof_mash_factor": pdi.get_tof_mash_factor(),
        "tof_bins": pdi.get_num_tof_poss(),
        "image": list(info.shape),
        "voxel_size_mm": list(info.voxel_size),
        "bytes": pdi.total_num_bins * 4,
    }


def _write_poisson(path: Path, mean, counts: float) -> None:
    """Poisson draws (seed 5) of ``mean`` scaled to ``counts`` in all, written to ``path``: segment
    by segment, each timing position in turn (a non-TOF geometry has timing position 0 only)."""
    import numpy as np

    from stirgpu.formats import ProjDataOnDisk

    pdi = mean.get_proj_data_info()
    rng = np.random.default_rng(5)
    views = np.arange(pdi.get_num_views())
    blocks = [(s, t) for s in pdi.segment_nums for t in range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)]
    scale = counts / sum(float(mean.read_views(s, views, timing_pos=t).sum()) for s, t in blocks)
    with ProjDataOnDisk.create(path, pdi) as out:
        for s, t in blocks:
            draw = rng.poisson(mean.read_views(s, views, timing_pos=t) * scale).astype(np.float32)
            out.write_views(draw, s, views, timing_pos=t)
