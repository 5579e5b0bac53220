"""PNG timeline of a projector call: one row per lane and stage, one bar per chunk.

Rendering lives here (the command line layer), never in the library: the library only
records :class:`stirgpu.execution.StageEvent` s in ``projector.last_stats.events``, and the
statistics name the operation and its subset (``RunStats.operation``, ``subset_num``,
``num_subsets``), which the title shows.  :func:`timeline_figure` builds the figure
(a ``matplotlib.figure.Figure``, no pyplot state), :func:`render_timeline` writes it.
"""

from __future__ import annotations

import os
import re

from ..errors import StirGpuError
from ..execution.plan import plural
from ..execution.stats import STAGES, RunStats

__all__ = ["render_timeline", "timeline_figure", "lane_label", "STAGE_LABELS"]

_COLOURS = {"read": "#4c72b0", "h2d": "#dd8452", "compute": "#55a868", "d2h": "#c44e52", "write": "#8172b3"}

#: the stages in words (legend and row labels)
STAGE_LABELS = {
    "read": "read projection data",
    "h2d": "upload to GPU",
    "compute": "project (kernels)",
    "d2h": "download from GPU",
    "write": "write projection data",
}


def lane_label(lane: str) -> str:
    """``"cuda0"`` -> ``"GPU 0"``, ``"cpu1"`` -> ``"CPU worker 1"`` (other names unchanged)."""
    m = re.fullmatch(r"(cuda|cpu)(\d+)", lane)
    if m is None:
        return lane
    return f"{'GPU' if m.group(1) == 'cuda' else 'CPU worker'} {m.group(2)}"


def _rows(stats: RunStats) -> list[tuple[str, str]]:
    present = {(e.lane, e.stage) for e in stats.events}
    return [(lane, stage) for lane in stats.lanes for stage in STAGES if (lane, stage) in present]


def timeline_figure(stats: RunStats, context: str | None = None):
    """The timeline of ``stats.events`` as a matplotlib Figure.

    The title names the operation and subset (from ``stats``) with its chunks, wall time and
    overlap efficiency; ``context`` (e.g. ``"OSMAPOSL subiteration 24"``) goes above it.  Each
    row is one stage on one lane, each bar one chunk (numbered on the compute bars where there
    is room); the legend sits below the axes, clear of the bars.
    """
    if stats is None or not stats.events:
        raise StirGpuError("no timeline to draw: the call recorded no stage events")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = _rows(stats)
    fig = Figure(figsize=(12, 0.42 * len(rows) + 1.9), layout="constrained")
    ax = fig.add_subplot()
    end = max(stats.wall_seconds, max(e.end for e in stats.events))
    for i, (lane, stage) in enumerate(rows):
        events = [e for e in stats.events if e.lane == lane and e.stage == stage]
        ax.broken_barh(
            [(e.start, e.seconds) for e in events],
            (i - 0.4, 0.8),
            facecolors=_COLOURS.get(stage, "grey"),
            edgecolor="black",
            linewidth=0.3,
        )
        if stage == "compute":
            for e in events:  # chunk numbers where a bar is wide enough to hold one
                if e.seconds > 0.025 * end:
                    ax.text(
                        e.start + e.seconds / 2,
                        i,
                        str(e.chunk),
                        ha="center",
                        va="center",
                        fontsize="x-small",
                        color="white",
                    )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{lane_label(lane)}: {STAGE_LABELS.get(stage, stage)}" for lane, stage in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time since the call started (s)")
    ax.set_xlim(0, end * 1.01)
    ax.grid(axis="x", linewidth=0.4, alpha=0.5)
    ax.set_axisbelow(True)
    title = (
        f"{stats.what} ({stats.backend} backend): {plural(stats.chunks, 'chunk')}, wall "
        f"{stats.wall_seconds:.3f} s, overlap efficiency {stats.overlap_efficiency:.2f}"
    )
    # a figure title: constrained layout keeps it clear of the legend beside the axes
    fig.suptitle(title if context is None else f"{context}\n{title}")
    handles = [
        Patch(facecolor=_COLOURS[s], edgecolor="black", linewidth=0.3, label=STAGE_LABELS[s])
        for s in STAGES
        if any(r[1] == s for r in rows)
    ]
    # below the axes, in one row: clear of the bars and of the (possibly long) title
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=len(handles),
        title="stage (one bar per chunk)",
        fontsize="small",
    )
    return fig


def render_timeline(stats: RunStats, path: str | os.PathLike, context: str | None = None) -> None:
    """Write :func:`timeline_figure` of ``stats`` to ``path`` (PNG)."""
    timeline_figure(stats, context).savefig(os.fspath(path), dpi=110)
