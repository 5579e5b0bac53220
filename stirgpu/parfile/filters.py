"""STIR's image-filter keys -> :mod:`stirgpu.filters` objects.

Three keys of an OSMAPOSL file select a filter (a STIR "parsing key" followed by the
filter's block): ``inter-update filter type`` (``OSMAPOSLReconstruction``),
``inter-iteration filter type`` (``IterativeReconstruction``) and ``post-filter type``
(``Reconstruction``).  stirgpu implements four of STIR's image processors, with STIR's keys as its
``initialise_keymap()`` registers them:

``Separable Cartesian Metz`` (block ``Separable Cartesian Metz Filter Parameters``):
    ``x-dir filter FWHM (in mm)``, ``y-dir ...``, ``z-dir ...`` (default 0: not filtered),
    ``x-dir filter Metz power`` ... (default 0), ``x-dir maximum kernel size`` ... (default -1);
``Separable Gaussian`` (block ``Separable Gaussian Filter Parameters``):
    the FWHM and maximum kernel size keys, and ``Normalise filter to 1`` (default 1);
``Truncate To Cylindrical FOV`` (block ``Truncate To Cylindrical FOV Parameters``):
    ``strictly_less_than_radius`` (default 1);
``Chained Data Processor`` (block ``Chained Data Processor Parameters``):
    ``Data Processor to apply first`` and ``... second``, each any of these (chains nest).

Where STIR would do something meaningless with a value, stirgpu refuses it: negative FWHMs
(STIR's Metz ignores them, its Gaussian takes their magnitude), negative Metz powers, and
maximum kernel sizes other than -1 or >= 1 (STIR's Gaussian stops at 0, its Metz reads 0 as
unrestricted).  A filter of another type is refused at its type line -- for the inter-update
and inter-iteration filters only when its subiteration interval enables it (STIR never applies
a filter whose interval is 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..filters import (
    FILTER_TYPES,
    ChainedProcessor,
    SeparableCartesianMetzFilter,
    SeparableGaussianFilter,
    SeparableImageFilter,
    TruncateToCylindricalFOV,
)
from .grammar import Block
from .keymap import Choice, Context, Found, Key, Problem, TypeKey, as_bool, as_float, int_at_least, read_block

__all__ = [
    "UnsupportedFilter",
    "filter_type_key",
    "check_filter_intervals",
    "filter_par_lines",
    "FILTER_PLACEMENTS",
]

#: (settings field, its type key, its interval key or None) of each place STIR filters at
FILTER_PLACEMENTS = (
    ("inter_update_filter", "inter-update filter type", "inter-update filter subiteration interval"),
    ("inter_iteration_filter", "inter-iteration filter type", "inter-iteration filter subiteration interval"),
    ("post_filter", "post-filter type", None),
)


@dataclasses.dataclass(frozen=True)
class UnsupportedFilter:
    """A filter type stirgpu does not implement, kept while reading: it is refused once its
    interval turns out to enable it (:func:`check_filter_intervals`), dropped otherwise."""

    name: str


def _fwhm(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v < 0:
        raise Problem(f"must be >= 0 mm (0: that direction is not filtered), got {text!r}")
    return v


def _metz_power(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v < 0:
        raise Problem(f"must be >= 0 (0: a Gaussian), got {text!r}")
    return v


_MAX_KERNEL_SIZE = int_at_least(1, special=-1)


def _per_axis(name: str, field: str, parse: Callable) -> tuple[Key, ...]:
    return tuple(Key(name.format(d), f"{field}_{d}", parse) for d in "xyz")


def _zyx(found: dict[str, Found], field: str, default) -> tuple:
    return tuple(found[f"{field}_{d}"].value if f"{field}_{d}" in found else default for d in "zyx")


_METZ_KEYS = (
    *_per_axis("{}-dir filter FWHM (in mm)", "fwhm", _fwhm),
    *_per_axis("{}-dir filter Metz power", "power", _metz_power),
    *_per_axis("{}-dir maximum kernel size", "size", _MAX_KERNEL_SIZE),
)
_GAUSSIAN_KEYS = (
    *_per_axis("{}-dir filter FWHM (in mm)", "fwhm", _fwhm),
    *_per_axis("{}-dir maximum kernel size", "size", _MAX_KERNEL_SIZE),
    Key("Normalise filter to 1", "normalise", as_bool),
)


def _read_metz(block: Block, ctx: Context) -> SeparableCartesianMetzFilter:
    found = read_block(block, _METZ_KEYS, ctx)
    return SeparableCartesianMetzFilter(
        fwhm=_zyx(found, "fwhm", 0.0), metz_power=_zyx(found, "power", 0.0), max_kernel_size=_zyx(found, "size", -1)
    )


def _read_gaussian(block: Block, ctx: Context) -> SeparableGaussianFilter:
    found = read_block(block, _GAUSSIAN_KEYS, ctx)
    normalise = found["normalise"].value if "normalise" in found else True
    return SeparableGaussianFilter(
        fwhm=_zyx(found, "fwhm", 0.0), max_kernel_size=_zyx(found, "size", -1), normalise=normalise
    )


def _read_truncate(block: Block, ctx: Context) -> TruncateToCylindricalFOV:
    found = read_block(block, (Key("strictly_less_than_radius", "strict", as_bool),), ctx)
    return TruncateToCylindricalFOV(found["strict"].value if "strict" in found else True)


def _read_chained(block: Block, ctx: Context) -> ChainedProcessor:
    keys = tuple(
        TypeKey(f"Data Processor to apply {which}", which, _CHOICES, other=_refused) for which in ("first", "second")
    )
    found = read_block(block, keys, ctx)
    return ChainedProcessor(*(found[w].value if w in found else None for w in ("first", "second")))


_CHOICES = (
    Choice("None"),
    Choice(SeparableCartesianMetzFilter.registered_name, SeparableCartesianMetzFilter.block_name, _read_metz),
    Choice(SeparableGaussianFilter.registered_name, SeparableGaussianFilter.block_name, _read_gaussian),
    Choice(TruncateToCylindricalFOV.registered_name, TruncateToCylindricalFOV.block_name, _read_truncate),
    Choice(ChainedProcessor.registered_name, ChainedProcessor.block_name, _read_chained),
)
_SUPPORTED = ", ".join(f"'{name}'" for name in FILTER_TYPES)


def _kept_for_now(value: str, line: int, nxt: Block | None, ctx: Context) -> tuple[UnsupportedFilter, bool]:
    return UnsupportedFilter(value), nxt is not None  # its block (if any) belongs to it


def _refused(value: str, line: int, nxt: Block | None, ctx: Context):
    raise Problem(f"stirgpu implements the filters {_SUPPORTED} (or 'None')")


def filter_type_key(name: str, field: str, *, always_applied: bool) -> TypeKey:
    """The type key ``name`` (STIR's spelling) of a filter placement.  ``always_applied``
    (the post-filter): another type is refused at once; else it waits for its interval."""
    return TypeKey(name, field, _CHOICES, other=_refused if always_applied else _kept_for_now)


def check_filter_intervals(values: dict, lines: dict, report: Callable[[str, str], None]) -> None:
    """Refuse (``report(field, message)``) an unsupported inter-update / inter-iteration
    filter that its interval enables; drop it where the interval is 0 (STIR never applies it)."""
    for field, type_key, interval_key in FILTER_PLACEMENTS:
        filt = values.get(field)
        if interval_key is None or not isinstance(filt, UnsupportedFilter):
            continue
        interval = values.get(f"{field}_interval", 0)
        if interval > 0:
            report(
                field,
                f"'{type_key} := {filt.name}' is enabled by '{interval_key} := {interval}' (line "
                f"{lines[f'{field}_interval']}): stirgpu implements the filters {_SUPPORTED}; use one "
                f"of them, or set the interval to 0 or the type to None",
            )
        values.pop(field)


def filter_par_lines(field: str, filt: SeparableImageFilter | None, interval: int | None = None) -> list[str]:
    """The lines of one filter placement for a parameter file (``field`` as in
    :data:`FILTER_PLACEMENTS`)."""
    _, type_key, interval_key = next(p for p in FILTER_PLACEMENTS if p[0] == field)
    lines = [] if interval_key is None else [f"{interval_key} := {interval or 0}"]
    if filt is None:
        return [*lines, f"{type_key} := None"]
    return [*lines, f"{type_key} := {filt.registered_name}", *filt.par_lines()]
