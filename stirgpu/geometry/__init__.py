"""WHAT is measured: scanners, projection-data geometry and image geometry.

Immutable values; imports nothing else of stirgpu but :mod:`stirgpu.errors`.
"""

from .image_info import ImageInfo
from .proj_data_info import ChunkTables, ProjDataInfo, SegmentInfo, Selection
from .scanner import Scanner
from .tof import TofSampling

__all__ = ["Scanner", "ProjDataInfo", "SegmentInfo", "ChunkTables", "Selection", "ImageInfo", "TofSampling"]
