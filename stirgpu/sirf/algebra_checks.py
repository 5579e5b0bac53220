"""SIRF's generic checks of operators and data containers (``sirf.Utilities``), for SIRF's tests.

* :func:`is_operator_adjoint` -- the dot-product test ``<A x, y> = <x, A* y>`` on random data;
* :func:`data_container_algebra_tests` -- a container's reductions, arithmetic (also with numpy
  arrays and scalars, either side), ``out=``, ``sapyb``, ``maximum``/``minimum`` and its
  element-wise functions against numpy on its own array, each counted on a :class:`pTest`;
* :class:`DataContainerAlgebraTests` -- the same as ``unittest`` methods of a mixin whose test
  case sets ``image1`` and ``image2`` (two containers of the same shape).

Nothing here prints except :func:`is_operator_adjoint` where ``verbose`` (SIRF's report).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["is_operator_adjoint", "data_container_algebra_tests", "DataContainerAlgebraTests"]


def is_operator_adjoint(operator, num_tests: int = 5, max_err: float = 10e-5, verbose: bool = True) -> bool:
    """True where, for ``num_tests`` random ``x`` (of ``operator.domain_geometry()``) times
    ``num_tests`` random ``y`` (of ``range_geometry()``), ``|<A x, y> - <x, A* y>|`` over the mean
    of their magnitudes is at most ``max_err``; False at the first pair that is not."""
    name = type(operator).__name__
    for i in range(num_tests):
        x = operator.domain_geometry().allocate(value="random")
        ax = operator.direct(x)
        for j in range(num_tests):
            if verbose:
                print(f"Testing {name}: Iteration {i * num_tests + j + 1}/{num_tests**2}")
            y = operator.range_geometry().allocate(value="random")
            aty = operator.adjoint(y)
            lhs, rhs = np.conj(ax.dot(y)), aty.dot(x)
            err = abs(lhs - rhs) / (abs(lhs) * 0.5 + abs(rhs) * 0.5)
            if err > max_err:
                if verbose:
                    print(f"{name} is not adjoint, with normalized error of {err} (max: {max_err})")
                return False
            if verbose:
                print(f"Pass, with a with normalized error of {err} (max: {max_err})")
    return True


def _finite(a: np.ndarray) -> np.ndarray:
    """``a`` with NaN and infinities as 0 (numpy's and the container's log/power of 0 may differ there)."""
    return np.nan_to_num(a, nan=0.0, posinf=0.0, neginf=0.0)


def _each_way(x, method: str, *args, like):
    """``x.method(*args)``, then the same into a zeroed ``like`` through ``out=``: both results."""
    first = getattr(x, method)(*args)
    like *= 0
    getattr(x, method)(*args, out=like)
    return first, like


def _check_close(test, got, want: np.ndarray, eps: float) -> None:
    """Relative agreement, in norm, of a container ``got`` with numpy's ``want`` (as SIRF's, a
    NaN residual, from a quotient by 0, passes: pTest's comparison is false for NaN)."""
    g = got.as_array()
    test.check_if_zero_within_tolerance(np.linalg.norm(g - want), eps * np.linalg.norm(g))


def _check_zero(test, got) -> None:
    """An identity that holds exactly: its residual container has norm 0."""
    test.check_if_equal(0, got.norm())


def _reductions(test, x, ax: np.ndarray, eps: float) -> None:
    ones = x.clone()
    ones.fill(np.ones_like(ax))
    # sums over the whole container: a looser tolerance for large data (SIRF's)
    test.check_if_equal_within_tolerance(np.linalg.norm(ax), x.norm(), 0, eps * 10)
    test.check_if_equal_within_tolerance(np.max(ax), x.max(), 0, eps)
    test.check_if_equal_within_tolerance(np.min(ax), x.min(), 0, eps)
    test.check_if_equal_within_tolerance(np.sum(ax), x.sum(), 0, eps)
    test.check_if_equal_within_tolerance(np.vdot(np.ones_like(ax), ax), x.dot(ones), 0, eps * 10)
    test.check_if_equal_within_tolerance(np.vdot(np.ones_like(ax), ax), x.dot(np.ones_like(ax)), 0, eps * 10)


def _arithmetic(test, x, ax: np.ndarray, eps: float):
    """Products, sums, differences and quotients; returns ``(x + 1, x / (x + 1))`` for later checks."""
    for x2 in _each_way(x, "multiply", 2, like=x.clone()):
        _check_close(test, x2, 2 * ax, eps)
    t = x2.norm()
    x2 -= x * 2
    test.check_if_zero_within_tolerance(x2.norm(), eps * t)
    for xx in _each_way(x, "multiply", x, like=x.clone()):
        _check_close(test, xx, ax * ax, eps)
    axx = xx.as_array()
    for product in (x * xx, x * axx, axx * x):
        _check_close(test, product, ax * axx, eps)
    _check_close(test, x + 1, ax + 1, eps)
    y = 1 + x
    test.check_if_equal(type(y), type(x))
    _check_close(test, y, ax + 1, eps)
    _check_close(test, x + ax, ax + ax, eps)
    y = ax + x
    test.check_if_equal(type(y), type(x))
    _check_close(test, y, ax + ax, eps)
    t = np.linalg.norm(y.as_array())
    test.check_if_zero_within_tolerance(np.linalg.norm((x - ax).as_array()), eps * t)
    y = ax - x
    test.check_if_equal(type(y), type(x))
    test.check_if_zero_within_tolerance(np.linalg.norm(y.as_array()), eps * t)
    y = x.clone()
    y *= 0
    x.add(1, out=y)
    _check_close(test, y, ax + 1, eps)
    ay = y.as_array()
    _check_close(test, x / y, ax / ay, eps)
    _check_close(test, x / ay, ax / ay, eps)
    z = ay / x
    test.check_if_equal(type(z), type(x))
    _check_close(test, z, ay / ax, eps)
    _check_close(test, x / 2, ax / 2, eps)
    z = 2 / x
    test.check_if_equal(type(z), type(x))
    _check_close(test, z, 2 / ax, eps)
    z *= 0
    x.divide(y, out=z)
    _check_close(test, z, ax / ay, eps)
    return y, z


def _sapyb(test, x, z) -> None:
    """``a x + b y`` with scalar and container coefficients, each an exact identity."""
    for a, y, b in ((1, x, -1), (z, x, -z), (x, x * x, -1)):
        for got in _each_way(x, "sapyb", a, y, b, like=x.clone()):
            _check_zero(test, got)
    xx = x * x
    for got in _each_way(xx, "sapyb", 1, x, -x, like=x.clone()):
        _check_zero(test, got)


def _extremes(test, x, ax: np.ndarray, z) -> None:
    az = z.as_array()
    for method, ref in (("maximum", np.maximum), ("minimum", np.minimum)):
        for other, aother in ((z, az), (0, 0)):
            for got in _each_way(x, method, other, like=x.clone()):
                test.check_if_equal(0, np.linalg.norm(got.as_array() - ref(ax, aother)))


def _elementwise(test, x, ax: np.ndarray, eps: float) -> None:
    for method, ref in (("exp", np.exp), ("sqrt", np.sqrt), ("sign", np.sign), ("abs", np.abs)):
        for got in _each_way(x, method, like=x.clone()):
            test.check_if_zero_within_tolerance(np.linalg.norm(got.as_array() - ref(ax)), eps * got.norm())
    log_ax = _finite(np.log(ax))
    for got in _each_way(x, "log", like=x.clone()):
        residual = _finite(got.as_array()) - log_ax
        test.check_if_zero_within_tolerance(np.linalg.norm(residual), eps * np.linalg.norm(log_ax))
    halves = x.clone()
    halves.fill(-np.ones_like(ax) / 2)
    for p, ap in ((-0.5, -0.5), (halves, halves.as_array())):
        for got in _each_way(x, "power", p, like=x.clone()):
            ag = _finite(got.as_array())
            residual = _finite(ag - np.power(ax, ap))
            test.check_if_zero_within_tolerance(np.linalg.norm(residual), eps * np.linalg.norm(ag))


def data_container_algebra_tests(test, x, eps: float = 1e-4) -> None:
    """SIRF's algebra checks of the container ``x`` against numpy on ``x.as_array()``, counted
    on ``test`` (a :class:`~stirgpu.sirf.Utilities.pTest`); ``x`` itself is left as it was."""
    ax = x.as_array()
    _reductions(test, x, ax, eps)
    _, z = _arithmetic(test, x, ax, eps)
    _sapyb(test, x, z)
    _extremes(test, x, ax, z)
    _elementwise(test, x, ax, eps)


class DataContainerAlgebraTests:
    """A ``unittest.TestCase`` mixin: the test case's ``setUp`` sets ``image1`` and ``image2``
    (containers of one shape; ``cwd``, where set, is entered first).  Each method checks one
    operation three ways: the operator, the method, and the method with ``out=``.

    SIRF's class also has ``test_division_by_scalar_zero`` and
    ``test_division_by_datacontainer_zero``, whose bodies return before testing anything; they
    are left out here."""

    image1: Any
    image2: Any

    def _enter(self) -> None:
        if hasattr(self, "cwd"):
            os.chdir(self.cwd)

    def test_divide_scalar(self):
        self._enter()
        image1, image2 = self.image1, self.image2
        image1.fill(1.0)
        image2.fill(2.0)
        tmp = image1 / 1.0
        np.testing.assert_array_equal(image1.as_array(), tmp.as_array())
        np.testing.assert_array_equal(tmp.as_array(), image1.divide(1.0).as_array())
        image1.divide(1.0, out=image2)
        np.testing.assert_array_equal(tmp.as_array(), image2.as_array())
        image2.fill(2)
        image2 /= 2.0
        np.testing.assert_array_equal(image1.as_array(), image2.as_array())

    def test_divide_datacontainer(self):
        self._enter()
        # + 1: the data has zeros
        image1, image2 = self.image1 + 1, self.image2 + 1
        ones = np.ones(image1.shape, dtype=np.float32)
        np.testing.assert_array_almost_equal(ones, (image1 / image2).as_array())
        tmp = image1.divide(image2)
        np.testing.assert_array_almost_equal(ones, tmp.as_array())
        tmp.fill(2.0)
        image1.divide(image2, out=tmp)
        np.testing.assert_array_almost_equal(ones, tmp.as_array())
        image1 /= image2
        np.testing.assert_array_almost_equal(ones, image1.as_array())

    def test_multiply_scalar(self):
        self._enter()
        image1, image2 = self.image1, self.image2
        image2.fill(2.0)
        tmp = image1 * 1.0
        np.testing.assert_array_equal(image1.as_array(), tmp.as_array())
        np.testing.assert_array_equal(tmp.as_array(), image1.multiply(1.0).as_array())
        image1.multiply(1.0, out=image2)
        np.testing.assert_array_equal(tmp.as_array(), image2.as_array())

    def test_multiply_datacontainer(self):
        self._enter()
        image1, image2 = self.image1, self.image2
        image2.fill(1.0)
        np.testing.assert_array_almost_equal(image1.as_array(), (image1 * image2).as_array())
        tmp = image1.multiply(image2)
        np.testing.assert_array_almost_equal(image1.as_array(), tmp.as_array())
        tmp.fill(2.0)
        image1.multiply(image2, out=tmp)
        np.testing.assert_array_almost_equal(image1.as_array(), tmp.as_array())

    def test_add_scalar(self):
        self._enter()
        self._scalar_case("add", 0, 1, 1.0)

    def test_subtract_scalar(self):
        self._enter()
        self._scalar_case("subtract", 2, 1, 1.0)

    def _scalar_case(self, method: str, first: float, want: float, scalar: float) -> None:
        """``image1`` filled with ``first``, ``method`` with ``scalar`` gives ``want`` each way."""
        image1, image2 = self.image1, self.image2
        image1.fill(first)
        image2.fill(want)
        symbol = {"add": image1 + scalar, "subtract": image1 - scalar}[method]
        np.testing.assert_array_equal(image2.as_array(), symbol.as_array())
        tmp = getattr(image1, method)(scalar)
        np.testing.assert_array_equal(symbol.as_array(), tmp.as_array())
        tmp.fill(0)
        getattr(image1, method)(scalar, out=tmp)
        np.testing.assert_array_equal(tmp.as_array(), image2.as_array())

    def test_add_datacontainer(self):
        self._enter()
        image1, image2 = self.image1, self.image2
        image1.fill(0.0)
        image2.fill(1.0)
        self._container_case("add", np.ones(image1.shape, dtype=np.float32), image1 + image2)

    def test_subtract_datacontainer(self):
        self._enter()
        image1, image2 = self.image1, self.image2
        self._container_case("subtract", np.zeros(image1.shape, dtype=np.float32), image1 - image2)

    def _container_case(self, method: str, want: np.ndarray, symbol) -> None:
        image1, image2 = self.image1, self.image2
        np.testing.assert_array_almost_equal(want, symbol.as_array())
        tmp = getattr(image1, method)(image2)
        np.testing.assert_array_almost_equal(want, tmp.as_array())
        tmp.fill(2.0)
        getattr(image1, method)(image2, out=tmp)
        np.testing.assert_array_almost_equal(want, tmp.as_array())

    def test_sapyb_scalars(self):
        self._sapyb_case(lambda image: 2.0, lambda image: -3.0)

    def test_sapyb_vectors(self):
        self._sapyb_case(_filled(2), _filled(-3))

    def test_sapyb_mixed(self):
        self._sapyb_case(lambda image: 2.0, _filled(-3))

    def _sapyb_case(self, make_a, make_b) -> None:
        """``a x + b y`` with ``x = 0, 1, 2, ...`` and ``y = -x``: new, into ``out``, and with
        ``out`` one of the operands; the operands left as they were."""
        image1, image2 = self.image1.copy(), self.image2.copy()
        arr = np.arange(0, image1.size).reshape(image1.shape)
        image1.fill(arr)
        image2.fill(-arr)
        a, b = make_a(image1), make_b(image1)
        gold = _value(a) * arr - _value(b) * arr
        out = image1.sapyb(a, image2, b)
        self._assert_sapyb(out, gold, image1, arr, image2)
        out.fill(0)
        image1.sapyb(a, image2, b, out=out)
        self._assert_sapyb(out, gold, image1, arr, image2)
        out.fill(arr)
        out.sapyb(a, image2, b, out=out)
        self._assert_sapyb(out, gold, None, arr, image2)
        out.fill(-arr)
        image1.sapyb(a, out, b, out=out)
        self._assert_sapyb(out, gold, image1, arr, None)

    @staticmethod
    def _assert_sapyb(out, gold, image1, arr, image2) -> None:
        np.testing.assert_allclose(out.as_array(), gold)
        if image1 is not None:
            np.testing.assert_allclose(image1.as_array(), arr)
        if image2 is not None:
            np.testing.assert_allclose(image2.as_array(), -arr)


def _filled(value: float):
    """A coefficient maker: a copy of the image filled with ``value``."""

    def make(image):
        c = image.copy()
        c.fill(value)
        return c

    return make


def _value(coefficient):
    return coefficient.as_array() if hasattr(coefficient, "as_array") else coefficient
