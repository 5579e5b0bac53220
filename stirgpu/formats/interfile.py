"""Interfile keyword layer: parse and write ``key := value`` headers with STIR's rules.

Rules (STIR's ``KeyParser``):

* keys are case-insensitive, and spaces, underscores and ``!`` are not significant
  (``!Number_of bytes per pixel`` == ``number of bytes per pixel``);
* the value is what follows ``:=``; ``;`` starts a comment;
* ``{a, b, c}`` is a list; ``key [n]`` (or ``key[n]``) is element ``n`` of an indexed key;
* the first keyword must be ``!INTERFILE``; ``!END OF INTERFILE`` ends the header;
* a key given twice with the same value is that value; with different values it is refused
  when read, naming both lines (STIR keeps the last one silently, so a header edited by hand
  would describe other data than its author meant).

Text: STIR reads bytes.  Each line is read as UTF-8 (what stirgpu writes), a line that is not
valid UTF-8 as Latin-1 (what older STIR-written headers hold); a file name read from a header
(:meth:`InterfileHeader.get_path`) is made of the line's own bytes, so it opens the file STIR
would open whichever encoding its name was written in.  Headers are written as UTF-8, a name
that is not valid UTF-8 (``os.fsdecode``'s surrogate escapes) as its own bytes:
:func:`encode_header`.

A parsed header remembers the file and the line of every key, so errors say where
to look.  This module knows nothing about projection data or images: it only
turns text into typed values (:class:`InterfileHeader`) and back
(:func:`format_line`, :class:`HeaderWriter`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import FormatError

__all__ = [
    "Entry",
    "InterfileHeader",
    "HeaderWriter",
    "key_id",
    "parse_header",
    "read_header",
    "format_value",
    "format_line",
    "encode_header",
]

#: a header bigger than this is not a header (someone passed the raw data file)
MAX_HEADER_BYTES = 4 * 1024 * 1024

_MISSING = object()
_INDEXED = re.compile(r"^(?P<key>.*?)\s*\[\s*(?P<index>[+-]?\d+)\s*\]\s*$")


def key_id(key: str) -> str:
    """Canonical form used for matching: lower case without spaces, ``_`` and ``!``."""
    return re.sub(r"[\s_!]+", "", key.lower())


@dataclasses.dataclass(frozen=True)
class Entry:
    """One ``key [index] := value`` line."""

    key: str  #: as written (without ``!`` and the index), for messages
    index: int | None  #: the ``[n]`` of an indexed key (1-based, as written), else None
    value: str  #: text after ``:=``, comment removed, stripped
    line: int  #: 1-based line number in the file
    encoding: str = "utf-8"  #: how the line's bytes were read: "utf-8", or "latin-1" where not valid UTF-8

    @property
    def id(self) -> str:
        return key_id(self.key)

    @property
    def file_name(self) -> str:
        """The value as a file name made of the line's own bytes (``os.fsdecode``: a name that is
        not valid UTF-8 keeps its bytes as surrogate escapes, so it opens the file STIR opens)."""
        return os.fsdecode(self.value.encode(self.encoding))


def _split_list(text: str) -> list[str] | None:
    """``{a, b}`` -> ['a', 'b'];  not a list -> None."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        return None
    inner = t[1:-1].strip()
    return [p.strip() for p in inner.split(",")] if inner else []


class InterfileHeader:
    """A parsed Interfile header: ordered entries plus typed look-ups.

    Look-ups take keys in any spelling STIR accepts.  Every getter raises a
    :class:`~stirgpu.errors.FormatError` naming the file, the key and its line
    when a value is missing (and no default was given) or malformed.
    """

    def __init__(self, entries: Sequence[Entry], path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        self.entries = tuple(entries)
        self._last: dict[tuple[str, int | None], Entry] = {}
        #: a key given again with another value: its first line (refused when the key is read)
        self._conflicts: dict[tuple[str, int | None], Entry] = {}
        for e in self.entries:
            before = self._last.get((e.id, e.index))
            if before is not None and before.value != e.value:
                self._conflicts.setdefault((e.id, e.index), before)
            self._last[(e.id, e.index)] = e

    # -- raw access ----------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """Folder that relative data-file names are resolved against."""
        return self.path.parent if self.path is not None else Path.cwd()

    def entry(self, key: str, index: int | None = None) -> Entry | None:
        """The key's line; a FormatError naming both lines where it is given twice with different
        values."""
        e = self._last.get((key_id(key), index))
        first = self._conflicts.get((key_id(key), index))
        if e is not None and first is not None:
            raise FormatError(
                f"given twice with different values: line {first.line} {first.value!r}, "
                f"line {e.line} {e.value!r} (STIR would use the last; keep the one meant)",
                path=self.path,
                key=_display(e.key, index),
            )
        return e

    def has(self, key: str, index: int | None = None) -> bool:
        return (key_id(key), index) in self._last

    def indices(self, key: str) -> list[int]:
        """The indices present for an indexed key, ascending."""
        k = key_id(key)
        return sorted(i for (kk, i) in self._last if kk == k and i is not None)

    def error(self, message: str, key: str | None = None, index: int | None = None) -> FormatError:
        """A FormatError naming this file, the key (as the user wrote it) and its line."""
        name = None
        if key is not None:
            e = self._last.get((key_id(key), index))
            name = _display(e.key if e else key, index)
            if e is not None:
                message = f"(line {e.line}) {message}"
        return FormatError(message, path=self.path, key=name)

    def _raw(self, key: str, index: int | None, default: Any) -> Any:
        e = self.entry(key, index)
        if e is None:
            if default is _MISSING:
                raise self.error("required key is missing", key, index)
            return default
        return e

    # -- typed getters -------------------------------------------------------------------
    def get_str(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        e = self._raw(key, index, default)
        return e.value if isinstance(e, Entry) else e

    def get_int(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        e = self._raw(key, index, default)
        if not isinstance(e, Entry):
            return e
        return self._to_int(e.value, key, index)

    def get_float(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        e = self._raw(key, index, default)
        if not isinstance(e, Entry):
            return e
        return self._to_float(e.value, key, index)

    def get_path(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        """A file name (:attr:`Entry.file_name`: the line's own bytes), relative ones resolved
        against the header's folder; an empty value is ``default`` (or missing)."""
        e = self._raw(key, index, default)
        if not isinstance(e, Entry):
            return e
        if not e.value:
            if default is _MISSING:
                raise self.error("is empty (a file name is needed)", key, index)
            return default
        p = Path(e.file_name)
        return p if p.is_absolute() else self.folder / p

    def get_list(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        """A ``{a, b}`` list of strings; a single value becomes a one-element list."""
        e = self._raw(key, index, default)
        if not isinstance(e, Entry):
            return e
        items = _split_list(e.value)
        return [e.value] if items is None else items

    def get_int_list(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        items = self.get_list(key, index, default)
        if items is default and not isinstance(items, list):
            return items
        return [self._to_int(v, key, index) for v in items]

    def get_float_list(self, key: str, index: int | None = None, default: Any = _MISSING) -> Any:
        items = self.get_list(key, index, default)
        if items is default and not isinstance(items, list):
            return items
        return [self._to_float(v, key, index) for v in items]

    def _to_int(self, text: str, key: str, index: int | None) -> int:
        try:
            return int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                f = math.nan
            if math.isfinite(f) and f == int(f):
                return int(f)
            raise self.error(f"expected an integer, got {text!r}", key, index) from None

    def _to_float(self, text: str, key: str, index: int | None) -> float:
        try:
            v = float(text)
        except ValueError:
            raise self.error(f"expected a number, got {text!r}", key, index) from None
        if not math.isfinite(v):
            raise self.error(f"expected a finite number, got {text!r}", key, index)
        return v

    def __repr__(self) -> str:
        return f"InterfileHeader({str(self.path)!r}, {len(self.entries)} keys)"


def _display(key: str, index: int | None) -> str:
    return key if index is None else f"{key} [{index}]"


def _decoded_lines(text: str | bytes) -> Iterable[tuple[str, str]]:
    """(line, encoding) for each line: bytes as UTF-8, a line that is not valid UTF-8 as Latin-1."""
    if isinstance(text, str):
        yield from ((line, "utf-8") for line in text.splitlines())
        return
    for raw in text.splitlines():
        try:
            yield raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            yield raw.decode("latin-1"), "latin-1"


def parse_header(text: str | bytes, path: str | os.PathLike | None = None) -> InterfileHeader:
    """Parse header text, or a header's bytes (each line UTF-8, else Latin-1: see the module's
    docstring).  ``path`` is only used in messages and to resolve data files."""
    entries: list[Entry] = []
    started = False
    for lineno, (raw, encoding) in enumerate(_decoded_lines(text), start=1):
        line = raw.split(";", 1)[0].strip()
        if not line:
            continue
        if ":=" not in line:
            if not started:
                break  # reported below as "not Interfile"
            raise FormatError(f"line {lineno}: expected 'key := value', got {raw.strip()!r}", path=path)
        key_text, value = line.split(":=", 1)
        key_text = key_text.strip().lstrip("!").strip()
        index = None
        m = _INDEXED.match(key_text)
        if m:
            key_text, index = m.group("key").strip(), int(m.group("index"))
        if not started:
            if key_id(key_text) != "interfile":
                break
            started = True
        if not key_text:
            raise FormatError(f"line {lineno}: empty key before ':='", path=path)
        entry = Entry(key_text, index, value.strip(), lineno, encoding)
        entries.append(entry)
        if entry.id == "endofinterfile":
            break
    if not started:
        raise FormatError("not an Interfile header (the first keyword must be '!INTERFILE :=')", path=path)
    return InterfileHeader(entries, path)


def read_header(path: str | os.PathLike) -> InterfileHeader:
    """Read and parse an Interfile header file (refusing binary or huge files)."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise FormatError("file not found", path=p) from None
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", path=p) from None
    if not p.is_file():
        raise FormatError("not a regular file", path=p)
    with open(p, "rb") as f:
        data = f.read(min(size, MAX_HEADER_BYTES) + 1)
    if b"\0" in data[:65536] or len(data) > MAX_HEADER_BYTES:
        raise FormatError(
            "not an Interfile header (binary or too large; did you give the data file instead of the header?)", path=p
        )
    return parse_header(data, p)


# -- writing ---------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """Interfile text for a value: numbers with up to 12 significant digits (enough for
    float32/float64 geometry without noise like 0.31293200000000004), sequences as
    ``{a,b,c}``, bools as 0/1."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return str(int(value))
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "f"):
        v = float(value)
        if v == 0:
            return "0"
        return f"{v:.12g}"
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return "{" + ",".join(format_value(v) for v in value) + "}"
    return str(value)


def format_line(key: str, value: Any = "", index: int | None = None) -> str:
    """One ``key [index] := value`` line (no newline)."""
    k = key if index is None else f"{key} [{index}]"
    v = format_value(value)
    return f"{k} := {v}" if v != "" else f"{k} :="


def encode_header(text: str) -> bytes:
    """A header's bytes: UTF-8, a file name that is not valid UTF-8 (taken from the command line
    or another header: surrogate escapes) as its own bytes, as STIR writes a name."""
    return text.encode("utf-8", "surrogateescape")


class HeaderWriter:
    """Accumulates header lines; ``text()`` gives the finished header.

    >>> w = HeaderWriter()
    >>> w.add("!number format", "float"); w.add("!matrix size", [3, 4], index=2)
    >>> print(w.text())  # doctest: +NORMALIZE_WHITESPACE
    !INTERFILE :=
    !number format := float
    !matrix size [2] := {3,4}
    !END OF INTERFILE :=
    """

    def __init__(self) -> None:
        self._lines: list[str] = ["!INTERFILE :="]

    def add(self, key: str, value: Any = "", index: int | None = None, indent: int = 0) -> None:
        self._lines.append(" " * indent + format_line(key, value, index))

    def add_raw(self, line: str) -> None:
        self._lines.append(line)

    def text(self) -> str:
        return "\n".join(self._lines + ["!END OF INTERFILE :="]) + "\n"
