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
=============================  ==========================================  =====================

Every block also takes ``penalisation factor`` (0), ``only 2D`` (0), ``kappa filename``,
``weights`` (a 3-D list ``{{{...}}}``; empty: STIR's default) and ``gradient filename prefix``.
STIR's other priors (``FilterRootPrior``, ``PLS``, the ``Gibbs`` and ``Cuda`` ones) are refused
at the ``prior type`` line, naming the ones stirgpu has.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from .grammar import Block, canonical_key
from .keymap import Choice, Context, Key, Problem, TypeKey, as_bool, as_float, as_path, read_block

__all__ = ["PriorSettings", "PRIOR_TYPE", "block_name", "parse_weights", "prior_input_files", "prior_output_folders"]

QUADRATIC = "Quadratic"
RELATIVE_DIFFERENCE = "Relative Difference Prior"
LOGCOSH = "Logcosh"
_OTHER_STIR_PRIORS = (
    "FilterRootPrior",
    "PLS",
    "Gibbs Quadratic",
    "Gibbs Relative Difference",
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
    epsilon: float = 0.0
    scalar: float = 1.0
    lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.type not in (QUADRATIC, RELATIVE_DIFFERENCE, LOGCOSH):
            raise ValueError(f"PriorSettings: type {self.type!r} is not one stirgpu has")

    @property
    def is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: OSMAPOSL then runs plain OSEM."""
        return self.penalisation_factor == 0.0

    def parameters(self) -> dict:
        """Keyword arguments of the prior's class (``stirgpu.priors.make_prior(type, **...)``), the
        kappa image excepted (a file name here)."""
        out = {
            "penalisation_factor": self.penalisation_factor,
            "only_2D": self.only_2d,
            "weights": self.weights,
            "gradient_filename_prefix": self.gradient_filename_prefix,
        }
        if self.type == RELATIVE_DIFFERENCE:
            out.update(gamma=self.gamma, epsilon=self.epsilon)
        if self.type == LOGCOSH:
            out["scalar"] = self.scalar
        return out

    def par_lines(self) -> list[str]:
        """``prior type := ...`` and its block, as STIR reads them."""
        block = block_name(self.type)
        body = [f"penalisation factor := {self.penalisation_factor!r}", f"only 2D := {int(self.only_2d)}"]
        if self.kappa_filename is not None:
            body.append(f"kappa filename := {self.kappa_filename}")
        if self.weights is not None:
            body.append(f"weights := {_format_weights(self.weights)}")
        if self.gradient_filename_prefix is not None:
            body.append(f"gradient filename prefix := {self.gradient_filename_prefix}")
        if self.type == RELATIVE_DIFFERENCE:
            body += [f"gamma value := {self.gamma!r}", f"epsilon value := {self.epsilon!r}"]
        if self.type == LOGCOSH:
            body.append(f"scalar := {self.scalar!r}")
        return [f"prior type := {self.type}", f"{block} :=", *("  " + b for b in body), f"END {block} :="]


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
_OWN = {
    QUADRATIC: (),
    RELATIVE_DIFFERENCE: (Key("gamma value", "gamma", _at_least_zero), Key("epsilon value", "epsilon", _at_least_zero)),
    LOGCOSH: (Key("scalar", "scalar", _positive),),
}


def _reader(name: str):
    def read(block: Block, ctx: Context) -> PriorSettings:
        found = read_block(block, _COMMON + _OWN[name], ctx)
        return PriorSettings(
            name, **{k: f.value for k, f in found.items()}, lines=tuple((k, f.line) for k, f in found.items())
        )

    return read


def block_name(name: str) -> str:
    """The block a registered prior's keys go in (STIR's ``add_start_key``)."""
    return f"{name} Parameters" if name == RELATIVE_DIFFERENCE else f"{name} Prior Parameters"


def _other(value: str, line: int, nxt: Block | None, ctx: Context):
    known = ", ".join(f"'{n}'" for n in (QUADRATIC, RELATIVE_DIFFERENCE, LOGCOSH))
    v = canonical_key(value)
    stir = next((n for n in _OTHER_STIR_PRIORS if canonical_key(n) == v), None)
    if stir is None:
        raise Problem(f"unknown prior type; stirgpu (like STIR) has None, {known}")
    cuda_rdp = v == canonical_key("Cuda Relative Difference Prior")
    hint = " (STIR's CPU version of it is 'Relative Difference Prior')" if cuda_rdp else ""
    raise Problem(f"STIR's prior '{stir}' is not implemented by stirgpu{hint}; stirgpu has None, {known}")


#: the objective function's ``prior type`` key
PRIOR_TYPE = TypeKey(
    "prior type",
    "prior",
    (Choice("None"), *(Choice(n, block_name(n), _reader(n)) for n in (QUADRATIC, RELATIVE_DIFFERENCE, LOGCOSH))),
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
