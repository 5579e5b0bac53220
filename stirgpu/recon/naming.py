"""OSMAPOSL's file names.

* estimates: ``<output filename prefix>_<subiteration>`` written as Interfile, i.e.
  ``prefix_N.hv`` + ``prefix_N.v`` (STIR's ``make_filename_prefix_subiteration_num`` and
  its default output format, which adds ``.hv`` when the name has no extension);
* subset sensitivities: ``subset sensitivity filenames`` is a ``boost::format`` pattern
  with one argument, the subset number (``sens_%d.hv``; ``%02d`` and boost's ``%1%``
  work too; :class:`stirgpu.parfile.FilenamePattern` fills it), then named as above;
* relative names are relative to the working directory, as in STIR (which opens them
  as given).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["interfile_image_name", "estimate_filename", "estimate_save_points"]


def interfile_image_name(name: str | os.PathLike) -> Path:
    """The ``.hv`` STIR's Interfile output format writes for ``name``: ``.hv`` is added when
    the name has no extension (``out_4`` -> ``out_4.hv``); an extension is kept."""
    p = Path(name)
    return p if p.suffix else p.with_name(p.name + ".hv")


def estimate_filename(prefix: str | os.PathLike, subiteration_num: int) -> Path:
    """``prefix_N.hv``: where OSMAPOSL saves the estimate after subiteration ``N``."""
    return interfile_image_name(f"{os.fspath(prefix)}_{int(subiteration_num)}")


def estimate_save_points(start_subiteration: int, num_subiterations: int, save_interval: int) -> list[int]:
    """Subiterations after which OSMAPOSL writes the estimate: multiples of the interval,
    and always the last one (STIR's ``end_of_iteration_processing``)."""
    return [
        n
        for n in range(int(start_subiteration), int(num_subiterations) + 1)
        if n % int(save_interval) == 0 or n == int(num_subiterations)
    ]
