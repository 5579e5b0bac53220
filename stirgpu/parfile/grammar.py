"""STIR parameter-file grammar: text -> a tree of blocks and ``key := value`` entries.

The rules are those of STIR's ``KeyParser`` (``src/buildblock/KeyParser.cxx``), made strict
where STIR only warns:

* a line is ``key := value``; keys are case-insensitive and spaces, tabs, ``_`` and ``!``
  are not significant (``num_gpu_chunks`` == ``Num GPU Chunks``); nothing after ``:=``
  means "no value" (STIR then keeps the default);
* ``;`` starts a comment, at the start of a line or after a value (STIR only strips it
  where a number is read; here it is stripped everywhere, so a file name cannot contain ``;``);
* a line ending in ``\\`` continues on the next one (as in STIR);
* ``${NAME}`` is replaced by the environment variable ``NAME`` (STIR substitutes an
  empty string and warns; here an unset variable is an error naming it and the line);
* a line without ``:=`` is skipped with a warning (logged), as STIR skips it (its whole text is
  then an unrecognised keyword); an ``End Name`` line without ``:=`` still closes ``Name``, as in
  STIR, whose keys need no ``:=`` when they take no value;
* blocks: ``Name :=`` (no value) opens a block that ``End Name :=`` closes; a bare
  ``End :=`` closes the innermost open block (STIR's ``End :=`` after ``OSMAPOSLParameters :=``,
  or after a shape block).  STIR closes a block only with the end key its object registered, so
  an ``End Other :=`` naming no open block is an unrecognised keyword there: skipped with a
  warning, the block staying open (``End Singles Rates From ECAT7`` in STIR's
  ``OSMAPOSL_osem_with_interfiltering.par``); one naming an enclosing block while an inner one
  is open is an error (STIR would read the rest of the file into the inner block).
  ``Name :=`` opens a block when its name ends in ``Parameters``
  or when a matching ``End Name :=`` follows (``Bin Normalisation From ProjData :=``);
  otherwise it is an entry without a value;
* the first entry of the file must open a block (STIR: the start key); the file may end
  without closing that outermost block (STIR stops at the end of the input), but anything
  after it has been closed is an error, and so is a nested block left open.

The tree keeps every line number.  What a block *means* (which keys it may have, which
``type := Value`` selects which ``Value ... Parameters`` block) is the job of the schema
modules (:mod:`.osmaposl`, :mod:`.projectors`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..errors import ParFileError, ParFileProblems

__all__ = [
    "Entry",
    "Block",
    "canonical_key",
    "parse_par_file",
    "parse_par_string",
    "split_list",
    "format_value",
]

#: refuse to treat something bigger than this as a parameter file (a data file passed by mistake)
MAX_PARFILE_BYTES = 4 * 1024 * 1024

_LOG = logging.getLogger("stirgpu.parfile")

_WS = re.compile(r"[\s_!]+")
_ENV = re.compile(r"\$\{([^}]*)\}")
_INDEX = re.compile(r"^(?P<key>.*?)\s*\[\s*(?P<index>[+-]?\d+)\s*\]$")


def canonical_key(text: str) -> str:
    """The form used for matching keys, block names and type values: lower case, without
    spaces, tabs, ``_`` and ``!``."""
    return _WS.sub("", text.lower())


def _words(text: str) -> list[str]:
    return _WS.sub(" ", text.lower()).split()


@dataclasses.dataclass(frozen=True)
class Entry:
    """One ``key [index] := value`` line."""

    key: str  #: canonical key (see :func:`canonical_key`)
    raw_key: str  #: the key as written (trimmed), for messages
    value: str | None  #: text after ``:=`` (comment removed, ``${VAR}`` substituted,
    #: stripped); None when there is nothing after ``:=``
    line: int  #: 1-based line number
    index: int | None = None  #: the ``n`` of ``key[n] :=``, else None


@dataclasses.dataclass(frozen=True)
class Block:
    """``Name :=`` ... ``End Name :=`` with its entries and nested blocks, in file order."""

    key: str  #: canonical block name
    raw_key: str  #: the name as written
    line: int  #: line of ``Name :=``
    end_line: int | None  #: line of the closing ``End``; None if the file just ended
    children: tuple[Entry | Block, ...]
    path: str | None = None  #: the file (for messages); None for text

    def entries(self) -> Iterator[Entry]:
        return (c for c in self.children if isinstance(c, Entry))

    def blocks(self) -> Iterator[Block]:
        return (c for c in self.children if isinstance(c, Block))

    def find(self, key: str) -> Entry | Block | None:
        """The first child whose canonical key equals ``canonical_key(key)``."""
        k = canonical_key(key)
        return next((c for c in self.children if c.key == k), None)

    def get(self, key: str, default: str | None = None) -> str | None:
        """Value of the first entry ``key`` (``default`` if absent or without a value)."""
        c = self.find(key)
        if isinstance(c, Entry) and c.value is not None:
            return c.value
        return default


def split_list(value: str) -> list[str]:
    """``{a, b , c}`` -> ``['a', 'b', 'c']``; a value without braces is a one-element list
    (as STIR reads list keys).  Raises ValueError for unbalanced braces or empty items."""
    v = value.strip()
    if v.startswith("{") != v.endswith("}") or (v.startswith("{") and len(v) < 2):
        raise ValueError(f"unbalanced braces in list {value!r}")
    if v.startswith("{"):
        v = v[1:-1]
        if "{" in v or "}" in v:
            raise ValueError(f"nested braces are not allowed in list {value!r}")
        if not v.strip():
            return []
    items = [s.strip() for s in v.split(",")]
    if any(not s for s in items):
        raise ValueError(f"empty item in list {value!r}")
    return items


def format_value(value, path: str | os.PathLike | None = None) -> str:
    """``value`` as the text after ``:=`` in a file written for STIR: booleans as 0/1, floats
    as ``repr`` (they read back equal), anything else (ints, names, paths) as ``str``.  Text the
    grammar would read otherwise -- a ``;`` (a comment), ``${`` (a substitution), a newline, a
    final ``\\`` (which joins the next line) -- is refused with a
    :class:`~stirgpu.errors.ParFileError` naming ``path`` (the file written)."""
    s = str(int(value)) if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)
    if ";" in s or "${" in s or "\n" in s or s.endswith("\\"):
        raise ParFileError(
            f"cannot write {s!r} into a parameter file (';', '${{', newlines and a final '\\' have a meaning there)",
            path,
        )
    return s


# ---------------------------------------------------------------------------------------------
# lexing


@dataclasses.dataclass(frozen=True)
class _Token:
    entry: Entry
    closer: str | None  # None: not an "End ..." line; "": bare End; else canonical block name
    text: str | None = None  # the line's text when it has no ':=' (skipped unless it closes a block)


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, text) with ``\\`` continuations joined (STIR: the
    backslash must be the very last character)."""
    physical = text.splitlines()
    i = 0
    while i < len(physical):
        start = i + 1
        line = physical[i]
        while line.endswith("\\") and i + 1 < len(physical):
            i += 1
            line = line[:-1] + physical[i]
        yield start, line
        i += 1


def _substitute(text: str, env: Mapping[str, str], path: str | None, line: int) -> str:
    def repl(m: re.Match) -> str:
        name = m.group(1)
        if not name.strip():
            raise ParFileError("empty environment variable reference '${}'", path, line)
        if name not in env:
            raise ParFileError(f"environment variable '{name}' (used as '${{{name}}}') is not set", path, line)
        return env[name]

    if "${" in _ENV.sub("", text):
        raise ParFileError("unterminated '${' (expected '${NAME}')", path, line)
    return _ENV.sub(repl, text)  # one pass: a value that itself contains ${...} is not expanded again


def _token(lineno: int, line: str, path: str | None, env: Mapping[str, str]) -> _Token | None:
    """The token of one logical line (None for a blank or comment line); ParFileError if malformed."""
    code = line.split(";", 1)[0]
    if not code.strip():
        return None
    code = _substitute(code, env, path, lineno)
    pos = code.find(":=")
    if pos < 0:
        return _without_assignment(lineno, code.strip())
    raw_key = code[:pos].strip()
    value = code[pos + 2 :].strip() or None
    index = None
    m = _INDEX.match(raw_key)
    if m:
        raw_key, index = m.group("key").strip(), int(m.group("index"))
    elif "[" in raw_key or "]" in raw_key:
        raise ParFileError(f"malformed index in key {raw_key!r} (expected 'key[n]')", path, lineno)
    key = canonical_key(raw_key)
    if not key:
        raise ParFileError("missing key before ':='", path, lineno)
    words = _words(raw_key)
    closer = None
    if words[0] == "end" and index is None:
        closer = canonical_key(" ".join(words[1:]))
        if value is not None:
            raise ParFileError(f"'{raw_key} :=' closes a block and takes no value (found {value!r})", path, lineno)
    return _Token(Entry(key, raw_key, value, lineno, index), closer)


def _without_assignment(lineno: int, text: str) -> _Token:
    """A line without ``:=``: STIR takes all of it as a keyword without a value, so only an
    ``End Name`` line means something (the end key of ``Name``); any other is skipped."""
    words = _words(text)
    closer = canonical_key(" ".join(words[1:])) if words[0] == "end" else None
    return _Token(Entry(canonical_key(text), text, None, lineno), closer, text)


def _skip(path: str | None, line: int, what: str) -> None:
    where = f"{path}:{line}" if path is not None else f"line {line}"
    _LOG.warning("%s: %s", where, what)


def _tokens(text: str, path: str | None, env: Mapping[str, str]) -> list[_Token]:
    """Every line's token; all malformed lines are reported together (ParFileProblems)."""
    toks, problems = [], []
    for lineno, line in _logical_lines(text):
        try:
            tok = _token(lineno, line, path, env)
        except ParFileError as exc:
            problems.append(exc)
            continue
        if tok is not None:
            toks.append(tok)
    if problems:
        raise ParFileProblems(problems)
    return toks


# ---------------------------------------------------------------------------------------------
# tree building


@dataclasses.dataclass
class _Open:
    entry: Entry
    children: list


def _build(tokens: list[_Token], path: str | None) -> Block:
    closer_lines: dict[str, list[int]] = {}
    for t in tokens:
        if t.closer:
            closer_lines.setdefault(t.closer, []).append(t.entry.line)

    def opens_block(t: _Token) -> bool:
        e = t.entry
        if t.closer is not None or e.value is not None or e.index is not None:
            return False
        return e.key.endswith("parameters") or any(n > e.line for n in closer_lines.get(e.key, ()))

    tokens = _without_skipped(tokens, path)
    if not tokens:
        raise ParFileError("no parameters found (empty file or only comments)", path, None)
    if not opens_block(tokens[0]):
        e = tokens[0].entry
        raise ParFileError(
            f"a parameter file must start with a block such as 'OSMAPOSLParameters :=', found '{e.raw_key} :='",
            path,
            e.line,
        )

    stack: list[_Open] = []
    root: Block | None = None
    for t in tokens:
        e = t.entry
        if root is not None:
            raise ParFileError(
                f"'{e.raw_key}' after the end of '{root.raw_key}' (closed at line "
                f"{root.end_line}); a parameter file holds one block",
                path,
                e.line,
            )
        if t.closer is not None:
            top = stack[-1]
            if t.closer and t.closer != top.entry.key:
                if t.closer in (o.entry.key for o in stack):
                    raise ParFileError(
                        f"'{e.raw_key}' closes a block while '{top.entry.raw_key}' "
                        f"(opened at line {top.entry.line}) is still open (STIR would read the rest of "
                        "the file into that block)",
                        path,
                        e.line,
                    )
                _skip(
                    path,
                    e.line,
                    f"skipped '{e.raw_key}': it closes no open block, and '{top.entry.raw_key}' (opened at "
                    f"line {top.entry.line}) stays open (STIR ignores it with a warning: an unrecognised keyword)",
                )
                continue
            stack.pop()
            done = Block(top.entry.key, top.entry.raw_key, top.entry.line, e.line, tuple(top.children), path)
            if stack:
                stack[-1].children.append(done)
            else:
                root = done
        elif opens_block(t):
            stack.append(_Open(e, []))
        else:
            stack[-1].children.append(e)
    if root is not None:
        return root
    if len(stack) > 1:
        inner = stack[-1].entry
        raise ParFileError(
            f"block '{inner.raw_key}' is never closed (expected 'End {inner.raw_key} :=')", path, inner.line
        )
    top = stack[0]
    return Block(top.entry.key, top.entry.raw_key, top.entry.line, None, tuple(top.children), path)


def _without_skipped(tokens: list[_Token], path: str | None) -> list[_Token]:
    """The tokens but the lines without ``:=`` that close no block, each skipped with a warning."""
    kept = []
    for t in tokens:
        if t.text is not None and t.closer is None:
            _skip(path, t.entry.line, f"skipped {t.text!r}: no ':=' (STIR ignores it with a warning)")
        else:
            kept.append(t)
    return kept


def parse_par_string(
    text: str, *, path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None
) -> Block:
    """Parse parameter-file text into its outermost :class:`Block`.

    ``path`` is only used in messages; ``env`` replaces ``os.environ`` for ``${VAR}``.
    Raises :class:`~stirgpu.errors.ParFileProblems` on malformed text: every line that cannot
    be read (no ``:=``, an unset ``${VAR}``, a malformed index ...), each with its line; or, when
    all lines can be read, the one problem of the block structure (an unclosed or mismatched
    block: what follows it cannot be placed).
    """
    p = None if path is None else os.fspath(path)
    tokens = _tokens(text, p, os.environ if env is None else env)
    try:
        return _build(tokens, p)
    except ParFileError as exc:
        raise ParFileProblems([exc]) from None


def parse_par_file(path: str | os.PathLike, *, env: Mapping[str, str] | None = None) -> Block:
    """Read and parse a parameter file (see :func:`parse_par_string`): UTF-8 text; bytes that are
    not UTF-8 (a Latin-1 file) are kept as they are, as ``os.fsdecode`` keeps them, so a name
    written with them names the file with those bytes (STIR reads a name as its bytes)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_PARFILE_BYTES:
            raise ParFileError(f"{size} bytes is too big for a parameter file (is this a data file?)", p)
        raw = p.read_bytes()
    except ParFileError as exc:
        raise ParFileProblems([exc]) from None
    except OSError as exc:
        raise ParFileProblems([ParFileError(f"cannot read parameter file: {exc.strerror or exc}", p)]) from exc
    if b"\0" in raw:
        raise ParFileProblems([ParFileError("binary content (NUL bytes): not a parameter file", p)])
    # STIR reads bytes: UTF-8 text is read as such, and bytes that are not UTF-8 (an old Latin-1
    # file) are kept as they are (surrogate escapes), so a file name opens the file STIR opens
    return parse_par_string(os.fsdecode(raw), path=p, env=env)
