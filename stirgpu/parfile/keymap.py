"""Key maps: read one parsed :class:`~.grammar.Block` against the keys a STIR object accepts.

A key map is a tuple of specifications, like the ``add_key`` / ``add_parsing_key`` calls of
a STIR ``initialise_keymap()``:

* :class:`Key` -- ``key := value``, converted by a value parser (:func:`as_int`, ...);
* :class:`TypeKey` -- STIR's "parsing key": ``projector pair type := Parallelproj``, whose
  value selects a :class:`Choice`; a choice with a block name requires that block
  (``Projector Pair Using Parallelproj Parameters :=``) to follow and reads it.

:func:`read_block` walks the whole block and reports *every* problem to the :class:`Context`
(unknown keys, unparsable or out-of-range values, keys given twice, unknown or unsupported
types, missing blocks), each with the file and line, and carries on with the next key; the
caller ends with :meth:`Context.check`, which raises one
:class:`~stirgpu.errors.ParFileProblems` listing them all.  Where STIR warns and carries on,
stirgpu refuses: nothing is silently ignored, and a user fixes everything in one run.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ParFileError, ParFileProblems
from .grammar import Block, Entry, canonical_key, split_list

__all__ = [
    "Problem",
    "Context",
    "Found",
    "Key",
    "Choice",
    "TypeKey",
    "read_block",
    "as_int",
    "as_bool",
    "as_float",
    "as_str",
    "as_int_list",
    "as_path",
    "int_at_least",
]


class Problem(ValueError):
    """A value that cannot be accepted; :func:`read_block` adds the file, line and key."""


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a file came from: its path (for messages), the folder relative names are
    resolved against, and the problems found so far (see :meth:`report`, :meth:`check`)."""

    path: str | None
    base_dir: Path
    problems: list = dataclasses.field(default_factory=list, compare=False, repr=False)
    #: fields whose key is present but could not be read (checks across fields skip them)
    failed: set = dataclasses.field(default_factory=set, compare=False, repr=False)

    def error(self, message: str, line: int | None) -> ParFileError:
        return ParFileError(message, self.path, line)

    def report(self, message: str, line: int | None) -> None:
        """Note a problem at ``line`` and carry on reading."""
        self.problems.append(self.error(message, line))

    def check(self) -> None:
        """Raise :class:`~stirgpu.errors.ParFileProblems` listing every problem reported."""
        if self.problems:
            raise ParFileProblems(self.problems)

    def resolve(self, name: str) -> Path:
        """A file name from the parameter file, relative names taken from ``base_dir``."""
        return Path(os.path.abspath(self.base_dir / Path(name)))


@dataclasses.dataclass(frozen=True)
class Found:
    """A value read from the file, with the line it came from."""

    value: Any
    line: int


# ---------------------------------------------------------------------------------------------
# value parsers: text (never empty) -> python value, or Problem

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def as_int(text: str, ctx: Context) -> int:
    if not _INT.fullmatch(text):
        raise Problem(f"expects an integer, got {text!r}")
    return int(text)


def int_at_least(minimum: int, special: int | None = None) -> Callable[[str, Context], int]:
    """An integer >= ``minimum`` (or equal to ``special``, e.g. STIR's -1 for "default")."""

    def parse(text: str, ctx: Context) -> int:
        v = as_int(text, ctx)
        if v < minimum and v != special:
            alt = f" (or {special})" if special is not None else ""
            raise Problem(f"must be at least {minimum}{alt}, got {v}")
        return v

    return parse


def as_bool(text: str, ctx: Context) -> bool:
    # STIR reads booleans as integers 0/1 (and warns on other numbers); be strict
    if text not in ("0", "1"):
        raise Problem(f"expects 0 or 1, got {text!r}")
    return text == "1"


def as_float(text: str, ctx: Context) -> float:
    if not _FLOAT.fullmatch(text):
        raise Problem(f"expects a number, got {text!r}")
    v = float(text)
    if not math.isfinite(v):
        raise Problem(f"expects a finite number, got {text!r}")
    return v


def as_str(text: str, ctx: Context) -> str:
    return text


def as_path(text: str, ctx: Context) -> Path:
    return ctx.resolve(text)


def as_int_list(text: str, ctx: Context) -> tuple[int, ...]:
    try:
        items = split_list(text)
    except ValueError as exc:
        raise Problem(str(exc)) from None
    bad = [s for s in items if not _INT.fullmatch(s)]
    if bad:
        raise Problem(f"expects a list of integers like {{0, 1}}, got {text!r}")
    return tuple(int(s) for s in items)


# ---------------------------------------------------------------------------------------------
# specifications


@dataclasses.dataclass(frozen=True)
class Key:
    """``name := value``; the value goes to ``field`` through ``parse``.  An empty value
    (nothing after ``:=``) keeps the default, as in STIR."""

    name: str  #: STIR's spelling (messages, writing)
    field: str
    parse: Callable[[str, Context], Any]

    @property
    def key(self) -> str:
        return canonical_key(self.name)


@dataclasses.dataclass(frozen=True)
class Choice:
    """One value of a :class:`TypeKey`.

    ``block``: the name of the block that must follow (None: no block).  ``read`` turns
    that block into a value (None: the value is None, as for STIR's ``None``).  ``refuse``:
    why stirgpu does not support this choice (the file is refused at the type line).
    """

    name: str
    block: str | None = None
    read: Callable[[Block, Context], Any] | None = None
    refuse: str | None = None

    def __post_init__(self) -> None:
        if self.read is not None and self.block is None:
            raise ValueError(f"Choice {self.name!r}: 'read' reads a block, but no block is named")


@dataclasses.dataclass(frozen=True)
class TypeKey:
    """STIR's parsing key: ``name := <choice>`` followed by the choice's block.

    ``other`` handles values not in ``choices``: None refuses them as unknown; otherwise it
    is called as ``other(value, line, next_block)`` where ``next_block`` is the block right
    after the key (or None), and returns ``(value, consumed_block)``.
    """

    name: str
    field: str
    choices: tuple[Choice, ...]
    other: Callable[[str, int, Block | None, Context], tuple[Any, bool]] | None = None

    @property
    def key(self) -> str:
        return canonical_key(self.name)

    def choice(self, value: str) -> Choice | None:
        v = canonical_key(value)
        return next((c for c in self.choices if canonical_key(c.name) == v), None)


Spec = Key | TypeKey


def _unknown_key(e: Entry, block: Block, specs: Iterable[Spec], hints: Mapping[str, str], ctx: Context) -> str:
    if e.key in hints:
        return f"'{e.raw_key}' is not accepted in '{block.raw_key}': {hints[e.key]}"
    by_key = {s.key: s for s in specs}
    close = difflib.get_close_matches(e.key, list(by_key), n=1, cutoff=0.75)
    hint = ""
    if close:
        meant = by_key[close[0]]
        hint = f" (did you mean '{meant.name}'?)"
        ctx.failed.add(meant.field)  # the key meant is there, misspelt: not also "missing"
    return (
        f"unknown key '{e.raw_key}' in '{block.raw_key}'{hint}; STIR would ignore it with a "
        f"warning, stirgpu refuses so that no setting is silently dropped"
    )


def _read_type(c: Entry, type_name: str, spec: TypeKey, nxt: Block | None, ctx: Context) -> tuple[bool, Found | None]:
    """A type key's value (``type_name``, the entry's value): ``(the next block belongs to it,
    Found or None)``; problems go to ``ctx``.  A block right after an unknown or refused type
    is taken as its own (not reported again)."""
    choice = spec.choice(type_name)
    if choice is None:
        if spec.other is None:
            known = ", ".join(ch.name for ch in spec.choices if ch.refuse is None)
            ctx.report(f"'{c.raw_key} := {c.value}': unknown or unsupported type; stirgpu supports: {known}", c.line)
            return nxt is not None, None
        try:
            value, used = spec.other(type_name, c.line, nxt, ctx)
        except Problem as exc:
            ctx.report(f"'{c.raw_key} := {c.value}': {exc}", c.line)
            return nxt is not None, None
        return used, Found(value, c.line)
    if choice.refuse is not None:
        ctx.report(f"'{c.raw_key} := {c.value}' is not supported by stirgpu: {choice.refuse}", c.line)
        return nxt is not None, None
    if choice.block is None:  # (then there is no 'read' either)
        return False, Found(None, c.line)
    if nxt is None or nxt.key != canonical_key(choice.block):
        found = f"'{nxt.raw_key}' (line {nxt.line})" if nxt is not None else "nothing"
        ctx.report(
            f"'{c.raw_key} := {c.value}' must be followed by the block "
            f"'{choice.block} :=' ... 'End {choice.block} :=', found {found}",
            c.line,
        )
        return False, None
    return True, Found(None if choice.read is None else choice.read(nxt, ctx), c.line)


def read_block(
    block: Block, specs: tuple[Spec, ...], ctx: Context, *, hints: Mapping[str, str] | None = None
) -> dict[str, Found]:
    """Read ``block`` against ``specs``: returns ``{field: Found(value, line)}`` for the keys
    present and readable; every problem is reported to ``ctx`` (see :meth:`Context.check`).
    ``hints`` maps canonical keys to explanations used when they appear here (keys that belong
    to another block, or that stirgpu refuses on purpose)."""
    hints = hints or {}
    by_key = {s.key: s for s in specs}
    out: dict[str, Found] = {}
    seen: dict[str, int] = {}
    consumed: set[int] = set()
    children = block.children
    for i, c in enumerate(children):
        if isinstance(c, Block):
            if i not in consumed:
                ctx.report(
                    f"unexpected block '{c.raw_key}' in '{block.raw_key}': no 'type :=' key before it selects it",
                    c.line,
                )
            continue
        following = children[i + 1] if i + 1 < len(children) else None
        nxt = following if isinstance(following, Block) else None
        spec = by_key.get(c.key)
        if spec is None:
            ctx.report(_unknown_key(c, block, specs, hints, ctx), c.line)
            if nxt is not None and c.value is not None:
                consumed.add(i + 1)  # the block an unknown 'type' key selects is part of the same mistake
            continue
        if c.index is not None:
            ctx.report(f"'{c.raw_key}' does not take an index ('[{c.index}]')", c.line)
            continue
        if c.key in seen:
            ctx.report(
                f"'{c.raw_key}' is given twice (lines {seen[c.key]} and {c.line}); STIR would "
                f"silently keep the last value",
                c.line,
            )
            continue
        seen[c.key] = c.line
        if c.value is None:
            continue  # STIR: a key without a value keeps its default
        if isinstance(spec, Key):
            try:
                out[spec.field] = Found(spec.parse(c.value, ctx), c.line)
            except Problem as exc:
                ctx.report(f"'{c.raw_key}' {exc}", c.line)
                ctx.failed.add(spec.field)
            continue
        used, found = _read_type(c, c.value, spec, nxt, ctx)
        if used:
            consumed.add(i + 1)
        if found is not None:
            out[spec.field] = found
        else:
            ctx.failed.add(spec.field)
    return out
