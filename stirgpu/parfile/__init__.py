"""STIR parameter files: the grammar (:mod:`.grammar`), typed, validated settings for
OSMAPOSL (:mod:`.osmaposl`) and projectors (:mod:`.projectors`), and the text of an OSMAPOSL
file for a plain OSEM run (:func:`osmaposl_par`, :mod:`.writing`).

>>> from stirgpu.parfile import read_osmaposl_par, read_projector_par
>>> settings = read_osmaposl_par("osem.par")          # doctest: +SKIP
>>> settings.num_subsets, settings.projectors.pair_type  # doctest: +SKIP
(4, 'Parallelproj')

Anything stirgpu does not support is refused before any work, all problems of a file at
once: one :class:`~stirgpu.errors.ParFileProblems` lists them, each naming the file and line.
"""

from .grammar import Block, Entry, canonical_key, parse_par_file, parse_par_string, split_list
from .osmaposl import (
    OBJECTIVE_FUNCTION,
    FilenamePattern,
    OsmaposlSettings,
    osmaposl_settings_from_block,
    read_osmaposl_par,
)
from .projectors import ProjectorOptions, ProjectorSettings, projector_settings_from_block, read_projector_par
from .writing import osmaposl_par

__all__ = [
    "Block",
    "Entry",
    "canonical_key",
    "parse_par_file",
    "parse_par_string",
    "split_list",
    "OsmaposlSettings",
    "FilenamePattern",
    "read_osmaposl_par",
    "osmaposl_settings_from_block",
    "OBJECTIVE_FUNCTION",
    "ProjectorOptions",
    "ProjectorSettings",
    "read_projector_par",
    "projector_settings_from_block",
    "osmaposl_par",
]
