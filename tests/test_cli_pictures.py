"""The command line's pictures, checked through the functions that build them (figure, axes and
the data drawn), not through pixels: the demo's slices figure and the pipeline timeline."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.cli.demo import ACTIVITY_CMAP, slices_figure, voxel_centres_mm
from stirgpu.cli.timeline import lane_label, render_timeline, timeline_figure
from stirgpu.errors import StirGpuError
from stirgpu.execution.stats import RunStats, StageEvent
from stirgpu.geometry import ImageInfo


@pytest.fixture
def images():
    """A small image with a shifted origin (so mm positions are not index positions) and a
    'reconstruction' that differs from it."""
    info = ImageInfo((9, 12, 10), (3.0, 2.0, 2.5), origin=(4.0, -1.0, 1.5))
    rng = np.random.default_rng(3)
    truth = np.zeros(info.shape, np.float32)
    truth[2:7, 3:9, 2:8] = 1.0
    truth[4, 6, 5] = 4.0
    recon = (truth + 0.1 * rng.standard_normal(info.shape)).astype(np.float32)
    return info, truth, recon


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def test_voxel_centres_are_stir_coordinates(images):
    info, _, _ = images
    # STIR: physical = origin + voxel size x index, indices from min_indices (0, -6, -5)
    assert np.allclose(voxel_centres_mm(info, 0), 4.0 + 3.0 * np.arange(9))
    assert np.allclose(voxel_centres_mm(info, 1), -1.0 + 2.0 * np.arange(-6, 6))
    assert np.allclose(voxel_centres_mm(info, 2), 1.5 + 2.5 * np.arange(-5, 5))


def test_slices_figure_panels(images):
    """Three columns (phantom, reconstruction, difference) of transverse, coronal and sagittal
    slices with mm axes spanning the voxels' edges, the slice positions in mm in the titles,
    PET's colour map with a colour bar per column, a difference panel holding recon - truth,
    and two profile panels with phantom and reconstruction along x and y."""
    info, truth, recon = images
    fig = slices_figure(truth, recon, info, "test", recon_label="OSEM")
    panels = _image_axes(fig)
    assert len(panels) == 9
    titles = [ax.get_title() for ax in panels]
    by_title = dict(zip(titles, panels, strict=True))
    z = 4.0 + 3.0 * 4  # centre plane k = 4
    y = -1.0 + 2.0 * 0  # centre row: index 6 - 6 = 0
    x = 1.5 + 2.5 * 0
    assert f"phantom (truth)\ntransverse, z = {z:.1f} mm" in by_title
    assert f"OSEM\ntransverse, z = {z:.1f} mm" in by_title
    assert f"OSEM \u2212 phantom\ntransverse, z = {z:.1f} mm" in by_title
    assert titles.count(f"coronal, y = {y:.1f} mm") == 3 and titles.count(f"sagittal, x = {x:.1f} mm") == 3
    for ax in panels:
        assert ax.get_xlabel().endswith("(mm)") and ax.get_ylabel().endswith("(mm)")
    transverse = by_title[f"phantom (truth)\ntransverse, z = {z:.1f} mm"]
    left, right, bottom, top = transverse.images[0].get_extent()
    xs, ys = voxel_centres_mm(info, 2), voxel_centres_mm(info, 1)
    assert (left, right) == pytest.approx((xs[0] - 1.25, xs[-1] + 1.25))
    assert (top, bottom) == pytest.approx((ys[0] - 1.0, ys[-1] + 1.0))  # first row on top: STIR's y down
    assert transverse.images[0].get_cmap().name == ACTIVITY_CMAP
    diff = by_title[f"OSEM \u2212 phantom\ntransverse, z = {z:.1f} mm"].images[0]
    assert np.allclose(diff.get_array(), recon[4].astype(np.float64) - truth[4])
    lo, hi = diff.get_clim()
    assert lo == -hi and hi > 0  # symmetric about 0
    colorbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(colorbars) == 3
    profiles = [ax for ax in fig.axes if ax.get_title().startswith("profile along")]
    assert [ax.get_xlabel() for ax in profiles] == ["x (mm)", "y (mm)"]
    along_x = profiles[0].get_lines()
    assert [ln.get_label() for ln in along_x] == ["phantom (truth)", "OSEM"]
    assert np.allclose(along_x[1].get_xdata(), xs) and np.allclose(along_x[1].get_ydata(), recon[4, 6, :])


def _stats(**kw) -> RunStats:
    ev = [
        StageEvent("cuda0", "read", 0, 0.0, 0.1),
        StageEvent("cuda0", "h2d", 0, 0.1, 0.15),
        StageEvent("cuda0", "compute", 0, 0.15, 0.6),
        StageEvent("cuda0", "read", 1, 0.1, 0.2),
        StageEvent("cuda0", "compute", 1, 0.6, 0.9),
        StageEvent("cuda1", "compute", 2, 0.0, 0.8),
    ]
    args = dict(
        operation="back projection",
        subset_num=3,
        num_subsets=21,
        backend="cuda",
        lanes=("cuda0", "cuda1"),
        chunks=3,
        events=ev,
        wall_seconds=1.0,
        busy={"cuda0": {"read": 0.2, "h2d": 0.05, "compute": 0.75}, "cuda1": {"compute": 0.8}},
    )
    args.update(kw)
    return RunStats(**args)


def test_timeline_names_operation_and_subset_and_keeps_the_legend_off_the_bars():
    """The title names the operation and subset (and the caller's context), rows name GPU and
    stage in words, one bar per chunk, and the legend covers neither the bars nor the title."""
    stats = _stats()
    fig = timeline_figure(stats, context="OSMAPOSL subiteration 4")
    title = fig._suptitle.get_text()
    assert title.startswith("OSMAPOSL subiteration 4\nback projection, subset 3 of 21 (cuda backend): 3 chunks")
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [
        "GPU 0: read projection data",
        "GPU 0: upload to GPU",
        "GPU 0: project (kernels)",
        "GPU 1: project (kernels)",
    ]
    # one bar per chunk: the compute row of GPU 0 holds chunks 0 and 1
    bars = ax.collections[2].get_paths()
    assert len(bars) == 2
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (legend,) = fig.legends
    box, axes_box, title_box = (
        legend.get_window_extent(renderer),
        ax.get_window_extent(renderer),
        fig._suptitle.get_window_extent(renderer),
    )
    assert not box.overlaps(axes_box) and not box.overlaps(title_box)  # clear of the bars and the title
    assert [t.get_text() for t in legend.get_texts()] == ["read projection data", "upload to GPU", "project (kernels)"]


def test_timeline_of_all_views_and_refusal(tmp_path):
    fig = timeline_figure(_stats(num_subsets=1, subset_num=0))
    assert fig._suptitle.get_text().startswith("back projection (cuda backend): 3 chunks")
    with pytest.raises(StirGpuError, match="no stage events"):
        render_timeline(_stats(events=[]), tmp_path / "t.png")
    render_timeline(_stats(), tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (lane_label("cpu1"), lane_label("cuda12"), lane_label("other")) == ("CPU worker 1", "GPU 12", "other")


def test_projector_statistics_carry_operation_and_subset():
    """The data the timeline draws from: a projector call's statistics name its operation and the
    subset it ran (and as_dict keeps them)."""
    from helpers import small_geometry

    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import BackProjector, ForwardProjector

    pdi, info = small_geometry()
    image = np.ones(info.shape, np.float32)
    fp = ForwardProjector(backend="cpu")
    fp.set_up(pdi, info)
    data = ProjDataInMemory(pdi)
    fp.forward_project(data, image, subset_num=1, num_subsets=4)
    assert (fp.last_stats.operation, fp.last_stats.subset_num, fp.last_stats.num_subsets) == (
        "forward projection",
        1,
        4,
    )
    bp = BackProjector(backend="cpu")
    bp.set_up(pdi, info)
    bp.back_project(None, data)
    d = bp.last_stats.as_dict()
    assert (d["operation"], d["subset_num"], d["num_subsets"]) == ("back projection", 0, 1)
    assert "subset" not in bp.last_stats.what
