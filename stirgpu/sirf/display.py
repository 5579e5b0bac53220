"""SIRF's ``show`` methods: planes of an image or sinograms of acquisition data, drawn with
matplotlib's pyplot (imported when a picture is asked for, never at import).

What SIRF does (``ImageData.show(slice, title)``, ``AcquisitionData.show(sino, tof, title)`` and
``sirf.Utilities``' ``show_2D_array`` / ``show_3D_array``), and so what happens here:

* one index: a figure of that plane titled ``"slice k"`` (``"sinogram k"``), with a colour bar;
  an index outside the data raises ``IndexError`` (also a ``pet.error`` here);
* ``None``: every plane; a list, tuple or range: those planes.  They are drawn as tiles, 16 to a
  figure (4 x 4 once there are 16 or more; fewer: about as many rows as keep the tiles square),
  all on one grey-level scale, the data's minimum to maximum; each tile titled with its index,
  axes only on the bottom-left tile (``x`` / ``y``, or ``tang.pos`` / ``view``, ticks at the ends),
  the figure titled ``title`` (default ``"Selected images"`` / ``"Selected sinograms"``);
* ``pyplot.show()`` after the last figure: it waits for the windows to be closed under an
  interactive backend, as SIRF's does, and returns at once under a non-interactive one (Agg,
  scripts run without a display), leaving the figures open for ``savefig``.

Differences: SIRF prints "You may need to close Figure ... window" (nothing is printed here),
silently draws nothing for a list holding an index outside the data (an ``IndexError`` naming it
here), and tiles acquisition data's TOF bin 0 whatever ``tof`` is (the bin asked for here).
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from .errors import error

__all__ = ["IndexOutOfRange", "show_planes"]

_PER_FIGURE = 16


class IndexOutOfRange(error, IndexError):
    """A plane index outside the data (SIRF raises IndexError)."""


def _selection(selection, n: int, what: str) -> list[int]:
    if selection is None:
        return list(range(n))
    try:
        chosen = [int(k) for k in selection]
    except (TypeError, ValueError):
        raise error(f"wrong {what} list: {selection!r}") from None
    for k in chosen:
        if not 0 <= k < n:
            raise IndexOutOfRange(f"show: {what} index {k} is outside 0..{n - 1}")
    return chosen


def _grid(count: int, ny: int, nx: int, tiled: bool) -> tuple[int, int]:
    if tiled:
        return 4, 4
    rows = min(max(int(round(math.sqrt(count * nx / ny))), 1), count)
    return rows, (count - 1) // rows + 1


def _draw_tiles(plt, volume: np.ndarray, chosen: list[int], title: str, labels: tuple[str, str, str], tiled: bool):
    label, xlabel, ylabel = labels
    _, ny, nx = volume.shape
    rows, cols = _grid(len(chosen), ny, nx, tiled)
    last_row = (len(chosen) - 1) // cols
    vmin, vmax = float(np.amin(volume)), float(np.amax(volume))
    fig = plt.figure()
    fig.suptitle(title)
    for k, z in enumerate(chosen):
        ax = fig.add_subplot(rows, cols, k + 1)
        if volume.shape[0] > 1:
            ax.set_title(f"{label} {z}")
        if k // cols == last_row and k % cols == 0:
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_xticks([0, nx - 1], [0, nx - 1])
            ax.set_yticks([0, ny - 1], [0, ny - 1])
        else:
            ax.set_axis_off()
        ax.imshow(volume[z], vmin=vmin, vmax=vmax)


def show_planes(volume: np.ndarray, selection, title, kind: str) -> None:
    """Draw planes of ``volume`` (a (planes, rows, columns) array) as SIRF's ``show`` does;
    ``kind`` is ``"image"`` or ``"sinogram"`` (titles and axis names)."""
    import matplotlib.pyplot as plt

    if kind == "image":
        label, what, xy = "slice", "slice", ("x", "y")
    else:
        label, what, xy = "sinogram", "sinograms", ("tang.pos", "view")
    n = volume.shape[0]
    if isinstance(selection, (Integral, np.integer)) and not isinstance(selection, bool):
        k = int(selection)
        if not 0 <= k < n:
            raise IndexOutOfRange(f"show: {label} index {k} is outside 0..{n - 1}")
        plane = volume[k]
        plt.figure()
        plt.title(f"{label} {k}")
        plt.imshow(plane, vmin=float(np.amin(plane)), vmax=float(np.amax(plane)))
        plt.colorbar()
        plt.show()
        return
    chosen = _selection(selection, n, what)
    if title is None:
        title = "Selected images" if kind == "image" else "Selected sinograms"
    tiled = len(chosen) >= _PER_FIGURE
    with plt.rc_context(
        {"axes.titlesize": "small", "axes.labelsize": "small", "xtick.labelsize": "small", "ytick.labelsize": "small"}
    ):
        for start in range(0, len(chosen), _PER_FIGURE):
            _draw_tiles(plt, volume, chosen[start : start + _PER_FIGURE], title, (label, *xy), tiled)
    plt.show()
