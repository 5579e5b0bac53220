"""The ``prior type :=`` key of an objective function and its block -> :class:`PriorSettings`.

STIR's registered priors stirgpu runs, with STIR's keys (``GeneralisedPrior``'s
``penalisation factor`` and each prior's own block) and defaults:

=============================  ==========================================  =====================
``prior type :=``              block                                       own keys
=============================  ==========================================  =====================
``Quadratic``                  ``Quadratic Prior Parameters``              --
``Relative Difference Prior``  ``Relative Difference Prior Parameters``    ``gamma value`` (2),
                                                                           ``epsilon value`` (0)
``Logcosh``                    ``Logcosh Prior Parameters``                ``scalar`` (1)
``Gibbs Quadratic``            ``Gibbs Quadratic Penalty Parameters``      --
``Gibbs Relative Difference``  ``Gibbs Relative Difference Penalty         ``gamma value`` (2),
                               Parameters``                                ``epsilon value`` (1e-7)
``FilterRootPrior``            ``FilterRootPrior Parameters``              ``Filter type``
                                                                           (``Median``, ``None``)
=============================  ==========================================  =====================

Every block takes ``penalisation factor`` (0); all but ``FilterRootPrior`` also ``only 2D`` (0),
``kappa filename``, ``weights`` (a 3-D list ``{{{...}}}``; empty: STIR's default) and
``gradient filename prefix`` (the Gibbs penalties parse it and write nothing, as STIR's).
``Filter type := Median`` is followed by ``Median Filter Parameters`` with ``mask radius x``,
``mask radius y``, ``mask radius z`` (0).  STIR's other priors (``PLS``, the ``Cuda`` ones) and
filters are refused at their type line; ``PLS`` naming the command that runs the file in STIR
with stirgpu's plugin.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from .grammar import Block, canonical_key
from .keymap import Choice, Context, Key, Problem, TypeKey, as_bool, as_float, as_path, int_at_least, read_block
from .refusals import plugin_hint

__all__ = ["PriorSettings", "PRIOR_TYPE", "block_name", "parse_weights", "prior_input_files", "prior_output_folders"]

QUADRATIC = "Quadratic"
RELATIVE_DIFFERENCE = "Relative Difference Prior"
LOGCOSH = "Logcosh"
GIBBS_QUADRATIC = "Gibbs Quadratic"
GIBBS_RELATIVE_DIFFERENCE = "Gibbs Relative Difference"
FILTER_ROOT = "FilterRootPrior"
_NEIGHBOURHOOD = (QUADRATIC, RELATIVE_DIFFERENCE, LOGCOSH, GIBBS_QUADRATIC, GIBBS_RELATIVE_DIFFERENCE)
_HAS = (*_NEIGHBOURHOOD, FILTER_ROOT)
#: STIR's default epsilon of each RDP
_EPSILON = {RELATIVE_DIFFERENCE: 0.0, GIBBS_RELATIVE_DIFFERENCE: 1e-7}
_OTHER_STIR_PRIORS = (
    "PLS",
    "Cuda Relative Difference Prior",
    "Cuda Gibbs Quadratic",
    "Cuda Gibbs Relative Difference",
)


@dataclasses.dataclass(frozen=True)
class PriorSettings:
    """One prior as a parameter file gives it, STIR's defaults elsewhere.  ``type`` is STIR's
    registered name; ``weights`` None means STIR's default (from the voxel sizes);
    ``gradient_filename_prefix`` is absolute (a prefix, not a file).  ``lines``: the line of
    each key given (not compared)."""

    type: str
    penalisation_factor: float = 0.0
    only_2d: bool = False
    kappa_filename: Path | None = None
    weights: tuple | None = None
    gradient_filename_prefix: str | None = None
    gamma: float = 2.0
    epsilon: float | None = None  #: None: the prior's default (STIR's: 0, or 1e-7 for the Gibbs RDP)
    scalar: float = 1.0
    #: FilterRootPrior: the (z, y, x) mask radii of its Median filter; None: no filter
    median_mask_radius: tuple[int, int, int] | None = None
    lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.type not in _HAS:
            raise ValueError(f"PriorSettings: type {self.type!r} is not one stirgpu has")
        if self.epsilon is None:
            object.__setattr__(self, "epsilon", _EPSILON.get(self.type, 0.0))

    @property
    def is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: OSMAPOSL then runs plain OSEM."""
        return self.penalisation_factor == 0.0

    def parameters(self) -> dict:
        """Keyword arguments of the prior's class (``stirgpu.priors.make_prior(type, **...)``), the
        kappa image excepted (a file name here)."""
        if self.type == FILTER_ROOT:
            return {"penalisation_factor": self.penalisation_factor, "median_mask_radius": self.median_mask_radius}
        out = {
            "penalisation_factor": self.penalisation_factor,
            "only_2D": self.only_2d,
            "weights": self.weights,
            "gradient_filename_prefix": self.gradient_filename_prefix,
        }
        if self.type in _EPSILON:
            out.update(gamma=self.gamma, epsilon=self.epsilon)
        if self.type == LOGCOSH:
            out["scalar"] = self.scalar
        return out

    def par_lines(self) -> list[str]:
        """``prior type := ...`` and its block, as STIR reads them."""
        block = block_name(self.type)
        if self.type == FILTER_ROOT:
            return [f"prior type := {self.type}", f"{block} :=", *_filter_lines(self), f"END {block} :="]
        body = [f"penalisation factor := {self.penalisation_factor!r}", f"only 2D := {int(self.only_2d)}"]
        if self.kappa_filename is not None:
            body.append(f"kappa filename := {self.kappa_filename}")
        if self.weights is not None:
            body.append(f"weights := {_format_weights(self.weights)}")
        if self.gradient_filename_prefix is not None:
            body.append(f"gradient filename prefix := {self.gradient_filename_prefix}")
        if self.type in _EPSILON:
            body += [f"gamma value := {self.gamma!r}", f"epsilon value := {self.epsilon!r}"]
        if self.type == LOGCOSH:
            body.append(f"scalar := {self.scalar!r}")
        return [f"prior type := {self.type}", f"{block} :=", *("  " + b for b in body), f"END {block} :="]


def _filter_lines(p: PriorSettings) -> list[str]:
    lines = [f"  penalisation factor := {p.penalisation_factor!r}"]
    if p.median_mask_radius is None:
        return [*lines, "  Filter type := None"]
    z, y, x = p.median_mask_radius
    radii = [f"    mask radius x := {x}", f"    mask radius y := {y}", f"    mask radius z := {z}"]
    return [
        *lines,
        "  Filter type := Median",
        "  Median Filter Parameters :=",
        *radii,
        "  END Median Filter Parameters :=",
    ]


# ---------------------------------------------------------------------------------------------
# values

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_TOKEN = re.compile(r"\s*([{},]|[^{},\s]+)")


def parse_weights(text: str) -> tuple | None:
    """``{{{0,1,0},{1,0,1},{0,1,0}}}`` -> nested tuples of floats (z, y, x); ``{}`` -> None (STIR's
    default).  STIR needs a regular array (every row as long): a ragged one is refused."""
    tokens = [m.group(1) for m in _TOKEN.finditer(text)]
    if "".join(tokens) != re.sub(r"\s+", "", text):
        raise Problem(f"cannot read {text!r} as a list of numbers")
    if tokens == ["{", "}"]:
        return None
    value, rest = _nested(tokens, 0)
    if rest != len(tokens):
        raise Problem(f"unexpected text after the closing brace in {text!r}")
    depth = _depth(value)
    if depth != 3:
        example = "{{{0,1,0},{1,0,1},{0,1,0}}}"
        raise Problem(f"expects a 3-D list (z, y, x) like {example}, got {depth} level(s) of braces")
    rows = [len(r) for plane in value for r in plane]
    if len({len(p) for p in value}) != 1 or len(set(rows)) != 1 or not rows or rows[0] == 0:
        raise Problem(f"weights must be a regular 3-D array (STIR: 'only regular arrays'), got {text!r}")
    return value


def _nested(tokens: list[str], i: int):
    if i >= len(tokens):
        raise Problem("unbalanced braces")
    if tokens[i] != "{":
        if not _NUMBER.fullmatch(tokens[i]):
            raise Problem(f"expects numbers, got {tokens[i]!r}")
        return float(tokens[i]), i + 1
    items: list = []
    i += 1
    while True:
        if i >= len(tokens):
            raise Problem("unbalanced braces")
        if tokens[i] == "}":
            return tuple(items), i + 1
        item, i = _nested(tokens, i)
        items.append(item)
        if i < len(tokens) and tokens[i] == ",":
            i += 1
        elif i < len(tokens) and tokens[i] != "}":
            raise Problem(f"expects ',' or '}}', got {tokens[i]!r}")


def _depth(v) -> int:
    if not isinstance(v, tuple):
        return 0
    depths = {_depth(x) for x in v}
    if len(depths) > 1:
        raise Problem("mixed numbers and lists at one level of braces")
    return 1 + (depths.pop() if depths else 0)


def _format_weights(w) -> str:
    return "{" + ",".join(_format_weights(x) for x in w) + "}" if isinstance(w, tuple) else repr(w)


def _weights(text: str, ctx: Context):
    return parse_weights(text)


def _at_least_zero(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v < 0:
        raise Problem(f"must be >= 0, got {text!r}")
    return v


def _positive(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v <= 0:
        raise Problem(f"must be positive, got {text!r}")
    return v


def _gibbs_epsilon(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v <= 0:
        raise Problem(
            f"must be > 0 for STIR's Gibbs Relative Difference penalty, got {text!r} (with 0 it divides 0 by 0 "
            "where two neighbours are 0: NaN); 'prior type := Relative Difference Prior' takes 0"
        )
    return v


def _radius(text: str, ctx: Context) -> int:
    return int_at_least(0)(text, ctx)


def _median_block(block: Block, ctx: Context) -> tuple[int, int, int]:
    keys = tuple(Key(f"mask radius {a}", a, _radius) for a in "xyz")
    found = read_block(block, keys, ctx)
    return tuple(found[a].value if a in found else 0 for a in "zyx")  # type: ignore[return-value]


def _other_filter(value: str, line: int, nxt: Block | None, ctx: Context):
    raise Problem("stirgpu's FilterRootPrior has STIR's 'Median' filter (and None) only")


_FILTER_TYPE = TypeKey(
    "Filter type",
    "median_mask_radius",
    (Choice("None"), Choice("Median", "Median Filter Parameters", _median_block)),
    other=_other_filter,
)


def _prefix(text: str, ctx: Context) -> str:
    # a prefix, not a file: a trailing '/' means "files inside that folder", so keep it as written
    return text if os.path.isabs(text) else os.path.join(str(ctx.base_dir), text)


_COMMON = (
    Key("penalisation factor", "penalisation_factor", as_float),
    Key("only 2D", "only_2d", as_bool),
    Key("kappa filename", "kappa_filename", as_path),
    Key("weights", "weights", _weights),
    Key("gradient filename prefix", "gradient_filename_prefix", _prefix),
)
_RDP_KEYS = (Key("gamma value", "gamma", _at_least_zero), Key("epsilon value", "epsilon", _at_least_zero))
_OWN = {
    QUADRATIC: _COMMON,
    RELATIVE_DIFFERENCE: _COMMON + _RDP_KEYS,
    LOGCOSH: (*_COMMON, Key("scalar", "scalar", _positive)),
    GIBBS_QUADRATIC: _COMMON,
    GIBBS_RELATIVE_DIFFERENCE: (
        *_COMMON,
        Key("gamma value", "gamma", _at_least_zero),
        Key("epsilon value", "epsilon", _gibbs_epsilon),
    ),
    FILTER_ROOT: (Key("penalisation factor", "penalisation_factor", as_float), _FILTER_TYPE),
}


def _reader(name: str):
    def read(block: Block, ctx: Context) -> PriorSettings:
        found = read_block(block, _OWN[name], ctx)
        return PriorSettings(
            name, **{k: f.value for k, f in found.items()}, lines=tuple((k, f.line) for k, f in found.items())
        )

    return read


def block_name(name: str) -> str:
    """The block a registered prior's keys go in (STIR's ``add_start_key``)."""
    if name in (GIBBS_QUADRATIC, GIBBS_RELATIVE_DIFFERENCE):
        return f"{name} Penalty Parameters"  # GibbsPenalty's get_parsing_name()
    if name in (RELATIVE_DIFFERENCE, FILTER_ROOT):
        return f"{name} Parameters"
    return f"{name} Prior Parameters"


def _other(value: str, line: int, nxt: Block | None, ctx: Context):
    known = ", ".join(f"'{n}'" for n in _HAS)
    v = canonical_key(value)
    stir = next((n for n in _OTHER_STIR_PRIORS if canonical_key(n) == v), None)
    if stir is None:
        raise Problem(f"unknown prior type; stirgpu (like STIR) has None, {known}")
    if stir == "PLS":
        raise Problem(f"STIR's prior 'PLS' is not implemented by stirgpu; {plugin_hint('OSMAPOSL', ctx.path)}")
    cuda = stir.removeprefix("Cuda ")
    raise Problem(f"STIR's prior '{stir}' is not implemented by stirgpu (STIR's CPU version of it is '{cuda}')")


#: the objective function's ``prior type`` key
PRIOR_TYPE = TypeKey(
    "prior type",
    "prior",
    (Choice("None"), *(Choice(n, block_name(n), _reader(n)) for n in _HAS)),
    other=_other,
)


def prior_input_files(prior: PriorSettings | None) -> dict[str, list[Path]]:
    """The files a prior reads (its kappa image), by settings field."""
    if prior is None or prior.kappa_filename is None:
        return {}
    return {"prior.kappa_filename": [prior.kappa_filename]}


def prior_output_folders(prior: PriorSettings | None) -> dict[str, list[Path]]:
    """The folder a prior writes into (its gradient images), by settings field."""
    if prior is None or prior.gradient_filename_prefix is None:
        return {}
    return {"prior.gradient_filename_prefix": [Path(prior.gradient_filename_prefix + "0").parent]}
