"""STIR's ``zoom_image`` for ``ImageData.zoom_image`` / ``zoom_image_as_template``: the grid and
values are :mod:`stirgpu.filters.zoom`'s (shared with the scatter simulation)."""

from __future__ import annotations

from ..filters.zoom import SCALINGS, zoom_values, zoomed_info

__all__ = ["SCALINGS", "zoomed_info", "zoom_values"]
