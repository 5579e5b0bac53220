"""PNG timeline of a projector call: one row per lane and stage, one bar per chunk.

Rendering lives here (the command line layer), never in the library: the library
only records :class:`stirgpu.execution.StageEvent` s in ``projector.last_stats.events``.
"""

from __future__ import annotations

import os

from ..errors import StirGpuError
from ..execution.stats import STAGES, RunStats

__all__ = ["render_timeline"]

_COLOURS = {"read": "#4c72b0", "h2d": "#dd8452", "compute": "#55a868", "d2h": "#c44e52", "write": "#8172b3"}


def render_timeline(stats: RunStats, path: str | os.PathLike, title: str | None = None) -> None:
    """Write a PNG timeline of ``stats.events`` to ``path``."""
    if stats is None or not stats.events:
        raise StirGpuError("no timeline to draw: the call recorded no stage events")
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = []
    for lane in stats.lanes:
        for stage in STAGES:
            if any(e.lane == lane and e.stage == stage for e in stats.events):
                rows.append((lane, stage))
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    try:
        for i, (lane, stage) in enumerate(rows):
            spans = [(e.start, e.seconds) for e in stats.events if e.lane == lane and e.stage == stage]
            ax.broken_barh(spans, (i - 0.4, 0.8), facecolors=_COLOURS.get(stage, "grey"), edgecolor="black",
                           linewidth=0.3)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{lane} {stage}" for lane, stage in rows])
        ax.invert_yaxis()
        ax.set_xlabel("seconds since the call started")
        ax.set_xlim(0, max(stats.wall_seconds, max(e.end for e in stats.events)) * 1.01)
        ax.set_title(title or f"{stats.operation}: {stats.chunks} chunks, wall {stats.wall_seconds:.3f} s, "
                              f"overlap efficiency {stats.overlap_efficiency:.2f}")
        ax.legend(handles=[Patch(color=_COLOURS[s], label=s) for s in STAGES
                           if any(r[1] == s for r in rows)], loc="upper right", fontsize="small")
        fig.tight_layout()
        fig.savefig(os.fspath(path), dpi=110)
    finally:
        plt.close(fig)
