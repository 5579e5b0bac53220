"""SIRF's engine functions: ``set_verbosity`` / ``get_verbosity``, ``get_engine_version_string``,
``get_engine_doc_dir`` / ``get_engine_examples_dir`` and ``scanner_names``.

* **Verbosity.** SIRF sets STIR's process-wide ``Verbosity`` (STIR's default 1; 0 silences
  STIR's ``info()`` messages, warnings and errors stay).  Here the value is held like the storage
  scheme, in a :class:`contextvars.ContextVar` (per thread), and it does the same to stirgpu's
  messages: with verbosity 0 a :class:`~.messages.MessageRedirector` passes no INFO records
  (:func:`info_shown`), warnings and errors still go where it sends them.
* **Version.** The engine is stirgpu: ``get_engine_version_string()`` says stirgpu's version and
  the STIR numbers it computes (STIR's Parallelproj projector with libparallelproj), not a STIR
  version a script could mistake for a STIR build.
* **Scanners.** ``scanner_names()`` is STIR's ``Scanner::list_all_names()`` text (a line per
  predefined scanner, its names joined by ``" , "``) from stirgpu's copy of STIR's table,
  including the scanners stirgpu cannot project (STIR lists them too).
"""

from __future__ import annotations

import contextvars
import logging
from numbers import Integral
from pathlib import Path

from .. import __version__
from ..geometry import Scanner
from .errors import InputTypeError

__all__ = [
    "set_verbosity",
    "get_verbosity",
    "info_shown",
    "get_engine_version_string",
    "get_engine_doc_dir",
    "get_engine_examples_dir",
    "scanner_names",
    "TARGET_STIR",
    "TARGET_PARALLELPROJ",
]

#: the STIR release whose numbers stirgpu reproduces, and the libparallelproj it links
TARGET_STIR = "6.5"
TARGET_PARALLELPROJ = "2.0.7"

_VERBOSITY: contextvars.ContextVar[int] = contextvars.ContextVar("stirgpu_sirf_verbosity", default=1)


def set_verbosity(verbosity) -> None:
    """SIRF's ``set_verbosity``: 0 silences information messages; 1 (the default) and above show them.
    A bool is taken as 0 / 1, as SIRF's C interface converts it (SIRF's own tests pass ``False``)."""
    if not isinstance(verbosity, Integral):
        raise InputTypeError(f"set_verbosity: verbosity must be an integer, not {type(verbosity).__name__}")
    _VERBOSITY.set(int(verbosity))


def get_verbosity() -> int:
    """SIRF's ``get_verbosity`` (1 unless set in this thread)."""
    return _VERBOSITY.get()


def info_shown(levelno: int) -> bool:
    """Whether a log record of level ``levelno`` is shown at the current verbosity (warnings and
    errors always; information messages unless the verbosity is 0 or less)."""
    return levelno >= logging.WARNING or _VERBOSITY.get() > 0


def get_engine_version_string() -> str:
    """stirgpu's version and the numbers it computes."""
    numbers = f"STIR {TARGET_STIR} numbers: Parallelproj projector, libparallelproj {TARGET_PARALLELPROJ}"
    return f"stirgpu {__version__} ({numbers})"


def _beside_package(folder: str) -> str:
    """A folder of stirgpu's source tree (``docs``, ``examples``), or '' where stirgpu is installed without it."""
    path = Path(__file__).resolve().parents[2] / folder
    return str(path) if path.is_dir() else ""


def get_engine_doc_dir() -> str:
    """stirgpu's ``docs`` folder ('' for an installation without it)."""
    return _beside_package("docs")


def get_engine_examples_dir() -> str:
    """stirgpu's ``examples`` folder ('' for an installation without it)."""
    return _beside_package("examples")


def scanner_names() -> str:
    """STIR's ``Scanner::list_all_names()``: a line per predefined scanner, its names joined by ``" , "``."""
    return "".join(" , ".join(names) + "\n" for names in Scanner.all_names_of_predefined())
