"""SIRF's error class, on stirgpu's error hierarchy.

SIRF scripts catch ``sirf.Utilities.error`` (and print its ``value``).  Here that class is
:class:`error`, a :class:`stirgpu.errors.StirGpuError`; every error this package raises derives
from it, and so do the stirgpu errors raised underneath a call into this package: they reach the
caller as their own class *and* :class:`error` (:func:`translate_errors`), with their message,
attributes (``path``, ``key``, ``line``) and traceback unchanged.  So ``except error`` catches
what SIRF's would, and ``except stirgpu.errors.GeometryError`` still works.
"""

from __future__ import annotations

import functools
import inspect

from ..errors import StirGpuError

__all__ = [
    "error",
    "InputError",
    "InputTypeError",
    "NotSupported",
    "ConstModelError",
    "translate_errors",
    "translate_class_errors",
]


class error(StirGpuError):  # noqa: N801 -- SIRF's name (sirf.Utilities.error)
    """SIRF's ``error``: what a SIRF script catches.  ``value`` is the message (SIRF's attribute)."""

    @property
    def value(self) -> str:
        return str(self)


class InputError(error, ValueError):
    """An argument SIRF would refuse: a wrong value, shape or geometry."""


class InputTypeError(error, TypeError):
    """An argument of a type the call does not take (SIRF raises TypeError or error there)."""


class NotSupported(error):
    """A SIRF feature stirgpu does not provide (the message names it and says what to use)."""


class ConstModelError(error, RuntimeError):
    """Changing the linear part of an acquisition model, which SIRF makes a const object."""


def _as_sirf_error(exc: StirGpuError) -> StirGpuError:
    """``exc`` itself, its class extended by :class:`error` (same message, attributes, traceback)."""
    cls = type(exc)
    try:
        exc.__class__ = type(
            cls.__name__, (cls, error), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        )
    except TypeError:  # a layout that cannot take another base: chain a plain SIRF error instead
        wrapped = error(str(exc))
        wrapped.__cause__ = exc
        return wrapped
    return exc


def translate_errors(func):
    """Decorator: a stirgpu error raised inside ``func`` leaves it as a :class:`error` too."""

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except StirGpuError as exc:
            if isinstance(exc, error):
                raise
            translated = _as_sirf_error(exc)
            if translated is exc:
                raise  # the same object, now also an `error`: traceback and chaining untouched
            raise translated from exc

    return call


def translate_class_errors(cls):
    """Class decorator: :func:`translate_errors` on every function and property defined in the
    class itself (public methods and operators alike)."""
    for name, member in list(vars(cls).items()):
        if isinstance(member, property):
            fget, fset, fdel = (
                None if f is None else translate_errors(f) for f in (member.fget, member.fset, member.fdel)
            )
            setattr(cls, name, property(fget, fset, fdel, member.__doc__))
        elif isinstance(member, staticmethod):
            setattr(cls, name, staticmethod(translate_errors(member.__func__)))
        elif isinstance(member, classmethod):
            setattr(cls, name, classmethod(translate_errors(member.__func__)))
        elif inspect.isfunction(member):
            setattr(cls, name, translate_errors(member))
    return cls
