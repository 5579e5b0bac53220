"""SIRF's ``MessageRedirector``: where the engine's information, warnings and errors go.

SIRF sends STIR's ``info()``, ``warning()`` and ``error()`` text to stdout, stderr or files.
stirgpu prints nothing; its messages are records of the ``stirgpu`` loggers (the SIRF layer logs
each OSMAPOSL set-up, subiteration and saved estimate at INFO) and its warnings are Python
warnings.  A redirector, while it is alive (or inside ``with``), sends ``stirgpu`` log records
to SIRF's three destinations by level (INFO and below: ``info``; WARNING: ``warn``; ERROR and
above: ``errr``) and lowers the ``stirgpu`` logger's level to INFO; closing it (``close()``, the
end of ``with``, or garbage collection) removes its handlers, restores the level and closes its
files.  Destinations are SIRF's: ``'stdout'``/``'cout'``, ``'stderr'``/``'cerr'``, ``None`` or
``''`` (nothing), any other string a file name (written afresh).  ``set_verbosity(0)`` silences
the INFO records (:mod:`.engine_info`).
"""

from __future__ import annotations

import logging
import sys
import weakref

from .engine_info import info_shown
from .errors import error

__all__ = ["MessageRedirector"]

_LOGGER = "stirgpu"
_STREAMS = {"stdout": "stdout", "cout": "stdout", "stderr": "stderr", "cerr": "stderr"}


class _Stream:
    """sys.stdout / sys.stderr looked up when writing (so that a replaced stream is honoured)."""

    def __init__(self, name: str):
        self._name = name

    def write(self, text: str) -> None:
        getattr(sys, self._name).write(text)

    def flush(self) -> None:
        getattr(sys, self._name).flush()


def _handler(destination, low: int, high: int, what: str):
    if destination is None or destination == "":
        return None
    if not isinstance(destination, str):
        raise error(f"wrong {what} argument for MessageRedirector constructor: {destination!r}")
    h: logging.Handler
    if destination in _STREAMS:
        h = logging.StreamHandler(_Stream(_STREAMS[destination]))
    else:
        h = logging.FileHandler(destination, mode="w", encoding="utf-8")
    h.addFilter(lambda record: low <= record.levelno < high and info_shown(record.levelno))
    h.setFormatter(logging.Formatter("%(message)s"))
    return h


def _detach(logger: logging.Logger, handlers: list, level: int) -> None:
    for h in handlers:
        logger.removeHandler(h)
        h.close()
    logger.setLevel(level)


class MessageRedirector:
    """``MessageRedirector(info=None, warn='stdout', errr='stderr')`` (see the module docstring)."""

    def __init__(self, info=None, warn="stdout", errr="stderr"):
        specs = [
            (info, 0, logging.WARNING, "info"),
            (warn, logging.WARNING, logging.ERROR, "warn"),
            (errr, logging.ERROR, logging.CRITICAL + 1, "errr"),
        ]
        handlers = []
        try:
            for destination, low, high, what in specs:
                h = _handler(destination, low, high, what)
                if h is not None:
                    handlers.append(h)
        except BaseException:
            for h in handlers:
                h.close()
            raise
        logger = logging.getLogger(_LOGGER)
        previous = logger.level
        for h in handlers:
            logger.addHandler(h)
        logger.setLevel(logging.INFO)
        self._close = weakref.finalize(self, _detach, logger, handlers, previous)

    def close(self) -> None:
        """Stop redirecting (the handlers go, the files are closed)."""
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
