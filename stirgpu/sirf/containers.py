"""SIRF's ``DataContainer``: arithmetic, reductions and copies, written once for both kinds.

A container is a sequence of *pieces* (its subclass says which: one image array, or the chunks
of projection data of :mod:`.acquisition_data`), each read into an array, combined element-wise
and written to the result's same piece.  So an operation on data on disk holds a few chunks at a
time, never the whole data; an image is one piece (numpy or cupy, whichever holds it).

SIRF's rules kept here (``sirf/SIRF.py``'s ``DataContainer`` and its C++ element-wise
functions): values are float32 and scalars are taken as float32; division by a scalar multiplies
by its float32 reciprocal; ``x / 0`` is IEEE's (inf or nan, no warning); ``norm``, ``dot`` and
``sum`` add in float64 and ``sum``, ``max``, ``min`` and ``dot`` return a float32 number.
Differences from SIRF 3.x (docs/sirf.md): ``number - x`` is ``number - x`` (SIRF gives
``x - number``), and every operation given ``out=`` returns ``out`` (SIRF returns None from some).
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Iterable
from numbers import Number
from typing import Self

import numpy as np

from ..arrays import array_module, in_namespace
from .errors import InputError, InputTypeError

__all__ = ["DataContainer", "norm", "dot"]

_F32 = np.float32


#: numpy or cupy, whichever an array belongs to
_xp_of = array_module


def _binary_function(name: str):
    return {
        "add": lambda xp, x, y: x + y,
        "subtract": lambda xp, x, y: x - y,
        "reversed subtract": lambda xp, x, y: y - x,
        "multiply": lambda xp, x, y: x * y,
        "divide": lambda xp, x, y: x / y,
        "maximum": lambda xp, x, y: xp.maximum(x, y),
        "minimum": lambda xp, x, y: xp.minimum(x, y),
        "power": lambda xp, x, y: xp.power(x, y),
    }[name]


_UNARY = {
    "abs": lambda xp, x: xp.abs(x),
    "sign": lambda xp, x: xp.sign(x),
    "sqrt": lambda xp, x: xp.sqrt(x),
    "exp": lambda xp, x: xp.exp(x),
    "log": lambda xp, x: xp.log(x),
}


def _dot64(xp, x, y) -> float:
    """``sum(x * y)`` with products and sums in float64 (SIRF's), one float64 copy of each."""
    x64 = x.reshape(-1).astype(xp.float64)
    return float(xp.dot(x64, x64 if y is x else y.reshape(-1).astype(xp.float64)))


def _scalar(value) -> np.float32:
    if isinstance(value, complex) or np.iscomplexobj(value):
        raise InputTypeError(f"stirgpu data are real (float32): cannot combine them with the complex number {value!r}")
    return _F32(value)


class DataContainer(abc.ABC):
    """Base of :class:`~.acquisition_data.AcquisitionData` and :class:`~.image_data.ImageData`:
    a subclass says what its pieces are (the abstract methods below) and SIRF's ``fill``,
    ``as_array``, ``dimensions``, ``write``; everything else is here."""

    #: numpy leaves operators with these containers to them (``np.float32(2) * x`` is ``x * 2``)
    __array_ufunc__ = None

    # -- what a subclass provides -------------------------------------------------------------
    @abc.abstractmethod
    def _pieces(self) -> Iterable:
        """The keys of the pieces, in order."""

    @abc.abstractmethod
    def _read(self, key):
        """The values of one piece: a new array, or a live one that the caller only reads."""

    @abc.abstractmethod
    def _write(self, key, values) -> None:
        """Store ``values`` (numpy or cupy) as one piece."""

    @abc.abstractmethod
    def _new_like(self) -> Self:
        """New data of the same geometry, zeros."""

    @abc.abstractmethod
    def _check_compatible(self, other, what: str) -> None:
        """Raise unless ``other`` is the same kind of container with the same geometry."""

    @abc.abstractmethod
    def _check_writable(self) -> None:
        """Raise when the values cannot be changed (data read-only on disk)."""

    @abc.abstractmethod
    def dimensions(self) -> tuple[int, ...]:
        """SIRF's shape of the values."""

    @abc.abstractmethod
    def fill(self, value) -> Self:
        """Set the values (SIRF's ``fill``); returns the container."""

    @abc.abstractmethod
    def as_array(self) -> np.ndarray:
        """A numpy copy of the values."""

    @property
    @abc.abstractmethod
    def supports_array_view(self) -> bool:
        """Whether the values are one array that numpy can view."""

    # -- the machinery ---------------------------------------------------------------------
    def _operand(self, other, what: str):
        """``other`` as a scalar (float32) or a container compatible with this one; arrays are
        put into a container of this geometry first (SIRF: ``self.clone().fill(other)``)."""
        if isinstance(other, (Number, np.number)) and not isinstance(other, bool):
            return _scalar(other)
        if isinstance(other, DataContainer):
            self._check_compatible(other, what)
            return other
        if hasattr(other, "shape") and hasattr(other, "dtype"):
            return self._new_like().fill(other)
        raise InputTypeError(f"{what}: expected a number or {type(self).__name__}, not {type(other).__name__}")

    def _target(self, out, what: str):
        if out is None:
            return self._new_like()
        if not isinstance(out, type(self)):
            raise InputTypeError(f"{what}: out must be {type(self).__name__}, not {type(out).__name__}")
        self._check_compatible(out, what)
        return out._result_holder()

    def _result_holder(self):
        """Where a result given ``out=self`` is written: ``self``, or (where the subclass says
        its values are never written, as a file read) new data that :meth:`_keep_result` then
        makes this container's."""
        self._check_writable()
        return self

    def _keep_result(self, holder) -> None:
        """Make ``holder``'s values this container's (``holder`` from :meth:`_result_holder`);
        here that is always the container itself, which already holds them."""
        if holder is not self:
            raise TypeError(f"{type(self).__name__}: results given out= are written into it, not elsewhere")

    def _apply(self, function, operands: tuple, out, what: str):
        """``out[piece] = function(xp, self[piece], *operands[piece])`` for every piece."""
        target = self._target(out, what)
        for key in self._pieces():
            x = self._read(key)
            xp = _xp_of(x)
            args = [in_namespace(xp, o._read(key)) if isinstance(o, DataContainer) else o for o in operands]
            with np.errstate(all="ignore"):  # IEEE results (inf, nan), as SIRF's C++
                target._write(key, function(xp, x, *args))
        if out is not None and target is not out:
            out._keep_result(target)
            return out
        return target

    def _binary(self, other, name: str, out=None):
        what = name if name != "reversed subtract" else "subtract"
        return self._apply(_binary_function(name), (self._operand(other, what),), out, what)

    def _reduce(self, piece_value, combine, other=None):
        other = None if other is None else self._operand(other, "dot")
        values = []
        for key in self._pieces():
            x = self._read(key)
            xp = _xp_of(x)
            values.append(piece_value(xp, x, None if other is None else in_namespace(xp, other._read(key))))
        return combine(values)

    # -- SIRF's element-wise operations -------------------------------------------------------
    def add(self, other, out=None):
        """``self + other`` (a container or a number)."""
        return self._binary(other, "add", out)

    def subtract(self, other, out=None):
        """``self - other``."""
        return self._binary(other, "subtract", out)

    def multiply(self, other, out=None):
        """``self * other``, element-wise."""
        return self._binary(other, "multiply", out)

    def divide(self, other, out=None):
        """``self / other``, element-wise (by a number: times its float32 reciprocal, as SIRF)."""
        if isinstance(other, (Number, np.number)) and not isinstance(other, bool):
            return self._binary(_F32(1.0 / _scalar(other)), "multiply", out)
        return self._binary(other, "divide", out)

    def maximum(self, other, out=None):
        return self._binary(other, "maximum", out)

    def minimum(self, other, out=None):
        return self._binary(other, "minimum", out)

    def power(self, other, out=None):
        return self._binary(other, "power", out)

    def _unary(self, name: str, out=None):
        return self._apply(_UNARY[name], (), out, name)

    def abs(self, out=None):
        return self._unary("abs", out)

    def sign(self, out=None):
        return self._unary("sign", out)

    def sqrt(self, out=None):
        return self._unary("sqrt", out)

    def exp(self, out=None):
        return self._unary("exp", out)

    def log(self, out=None):
        return self._unary("log", out)

    def sapyb(self, a, y, b, out=None, **kwargs):
        """``a * self + b * y`` with ``a``, ``b`` numbers or containers (SIRF's, CIL's)."""
        ops = tuple(self._operand(v, "sapyb") for v in (a, y, b))
        return self._apply(lambda xp, x, a_, y_, b_: x * a_ + y_ * b_, ops, out, "sapyb")

    def axpby(self, a, b, y, out=None, **kwargs):
        """Deprecated in SIRF: :meth:`sapyb` ``(a, y, b)``."""
        warnings.warn("axpby is deprecated (as in SIRF): use sapyb(a, y, b)", DeprecationWarning, stacklevel=2)
        return self.sapyb(a, y, b, out=out)

    def conjugate(self, out=None):
        """The complex conjugate: the same values (the data are real)."""
        return self._apply(lambda xp, x: x.copy(), (), out, "conjugate")

    # -- operators -----------------------------------------------------------------------------
    def __neg__(self):
        return self.multiply(-1.0)

    def __add__(self, other):
        return self.add(other)

    def __radd__(self, other):
        return self.add(other)

    def __sub__(self, other):
        return self.subtract(other)

    def __rsub__(self, other):
        return self._binary(other, "reversed subtract")

    def __mul__(self, other):
        return self.multiply(other)

    def __rmul__(self, other):
        return self.multiply(other)

    def __truediv__(self, other):
        return self.divide(other)

    def __rtruediv__(self, other):
        return self.power(-1.0).multiply(other)  # SIRF: other * self.power(-1)

    def __iadd__(self, other):
        return self.add(other, out=self)

    def __isub__(self, other):
        return self.subtract(other, out=self)

    def __imul__(self, other):
        return self.multiply(other, out=self)

    def __itruediv__(self, other):
        return self.divide(other, out=self)

    # -- reductions ----------------------------------------------------------------------------
    def norm(self) -> float:
        """The 2-norm of the data as one vector (float64 sums)."""
        return float(np.sqrt(self.squared_norm()))

    def squared_norm(self) -> float:
        return self._reduce(lambda xp, x, _: _dot64(xp, x, x), sum)

    def dot(self, other) -> np.float32:
        """``sum(self * other)`` (float64 sums, a float32 result as SIRF)."""
        return _F32(self._reduce(lambda xp, x, y: _dot64(xp, x, y), sum, other))

    def sum(self) -> np.float32:
        return _F32(self._reduce(lambda xp, x, _: float(x.astype(xp.float64).sum()), sum))

    def max(self) -> np.float32:
        return _F32(self._reduce(lambda xp, x, _: float(x.max()), max))

    def min(self) -> np.float32:
        return _F32(self._reduce(lambda xp, x, _: float(x.min()), min))

    # -- copies ----------------------------------------------------------------------------------
    def clone(self):
        """A copy (new storage, the same values)."""
        return self._apply(lambda xp, x: x.copy(), (), None, "clone")

    def copy(self):
        """Alias of :meth:`clone`."""
        return self.clone()

    def get_uniform_copy(self, value=1.0):
        """New data of the same geometry, every value ``value``."""
        return self._new_like().fill(value)

    def allocate(self, value=0, **kwargs):
        """CIL's ``allocate``: a uniform copy, or ``'random'`` (uniform in [0, 1)) / ``'random_int'``
        (integers below ``max_value``, default 100) values, seeded by ``seed``."""
        if value is None:
            value = 0
        if isinstance(value, str):
            rng = np.random.default_rng(kwargs.get("seed"))
            if value == "random":
                return self._new_like().fill(rng.random(self.shape, dtype=np.float32))
            if value == "random_int":
                return self._new_like().fill(rng.integers(kwargs.get("max_value", 100), size=self.shape))
            raise InputError(f"allocate: value must be a number, 'random' or 'random_int', not {value!r}")
        return self.get_uniform_copy(value)

    # -- sizes -------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.dimensions()

    @property
    def size(self) -> int:
        return int(np.prod(self.dimensions()))

    def number(self) -> int:
        """The number of values."""
        return self.size

    def is_empty(self) -> bool:
        return self.number() < 1

    def is_complex(self) -> bool:
        return False

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32)

    def asarray(self, xp=np, copy=None, **kwargs):
        """SIRF's ``asarray`` (the array API's ``copy``): ``copy=None`` a view where the values
        are one array in host memory, else a copy; ``copy=False`` a view, or a ValueError where
        none can be (SIRF's ``ContiguousError``); ``copy=True`` a copy."""
        if copy is not True and self.supports_array_view:
            return xp.asarray(self, **kwargs) if copy is None else xp.asarray(self, copy=copy, **kwargs)
        if copy is False:
            raise InputError(
                f"{type(self).__name__}: its values are not one array in memory (data in a file, a GPU "
                "image); asarray(copy=False) cannot give a view: use copy=True or None"
            )
        return xp.asarray(self.as_array(), **kwargs)


def norm(x) -> float:
    """SIRF's ``sirf.SIRF.norm``: of a numpy array or a container."""
    return float(np.linalg.norm(x)) if isinstance(x, np.ndarray) else x.norm()


def dot(x, y):
    """SIRF's ``sirf.SIRF.dot``: ``numpy.vdot`` of arrays, else ``x.dot(y)``."""
    return np.vdot(x, y) if isinstance(x, np.ndarray) else x.dot(y)


def copyto(y, x) -> None:
    """SIRF's ``sirf.SIRF.copyto``: ``numpy.copyto(y, x)`` for arrays; for containers the values of
    ``x`` go into ``y`` (``y.fill(x)``; SIRF calls ``y.copy(x)``, which its containers do not take)."""
    if isinstance(y, np.ndarray):
        np.copyto(y, x)
    else:
        y.fill(x)
