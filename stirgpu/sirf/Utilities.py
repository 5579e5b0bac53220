"""What SIRF's PET scripts and tests use of ``sirf.Utilities``: ``from stirgpu.sirf.Utilities import ...``.

* :func:`examples_data_path`, :func:`petmr_data_path`, :func:`existing_filepath` -- where SIRF's
  example data is (``SIRF_DATA_PATH``, ``SIRF_INSTALL_PATH``, ``SIRF_PATH``) and a file there;
* :class:`pTest`, :class:`CheckRaise`, :func:`check_tolerance`, :func:`runner`, :data:`RE_PYEXT` --
  SIRF's test records: values written to a ``.txt`` when recording, else compared with the
  stored ones; the runner of a test file's ``__main__``;
* :func:`is_operator_adjoint`, :func:`data_container_algebra_tests`,
  :class:`DataContainerAlgebraTests` -- SIRF's generic checks of operators and containers
  (:mod:`.algebra_checks`);
* :func:`show_2D_array`, :func:`show_3D_array` -- SIRF's figures of arrays (matplotlib);
* :class:`error` -- SIRF's error class (:mod:`.errors`).

This is the script side of SIRF, so, as SIRF's, it prints its test reports and shows figures
(the one module of the layer that does: the rest returns and logs).  Nothing happens at import.
"""

from __future__ import annotations

import math
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from .algebra_checks import DataContainerAlgebraTests, data_container_algebra_tests, is_operator_adjoint
from .errors import error

__all__ = [
    "__licence__",
    "__license__",
    "RE_PYEXT",
    "SIRF_VERSION",
    "examples_data_path",
    "petmr_data_path",
    "existing_filepath",
    "check_tolerance",
    "pTest",
    "CheckRaise",
    "runner",
    "show_2D_array",
    "show_3D_array",
    "str_to_int_list",
    "is_operator_adjoint",
    "data_container_algebra_tests",
    "DataContainerAlgebraTests",
    "error",
]

__licence__ = """stirgpu's SIRF-compatible layer (stirgpu.sirf).
Licensed under the Apache License, Version 2.0: http://www.apache.org/licenses/LICENSE-2.0"""
__license__ = __licence__

# a test file's own name with .txt for its ending: RE_PYEXT.sub(".txt", __file__) (SIRF's tests)
RE_PYEXT = re.compile(r"\.(py[co]?)$")

# the SIRF release whose PET interface this layer follows: SIRF_INSTALL_PATH's data folder
# is share/SIRF-<major>.<minor>
SIRF_VERSION = (3, 10)


def examples_data_path(data_type: str) -> str:
    """The folder of SIRF's example data of ``data_type`` ('PET', 'MR', 'Registration'), as SIRF
    finds it: ``$SIRF_DATA_PATH/examples/<type>``, else
    ``$SIRF_INSTALL_PATH/share/SIRF-<major>.<minor>/data/examples/<type>``, else
    ``$SIRF_PATH/data/examples/<type>``; an empty variable counts as unset, and with none set the
    answer is ``''`` (SIRF's)."""
    data_path = os.environ.get("SIRF_DATA_PATH", "")
    if data_path:
        return os.path.join(data_path, "examples", data_type)
    install_path = os.environ.get("SIRF_INSTALL_PATH", "")
    if install_path:
        release = "SIRF-{}.{}".format(*SIRF_VERSION)
        return os.path.join(install_path, "share", release, "data", "examples", data_type)
    source_path = os.environ.get("SIRF_PATH", "")
    if source_path:
        return os.path.join(source_path, "data", "examples", data_type)
    return ""


def petmr_data_path(petmr: str) -> str:
    """SIRF's deprecated spelling of :func:`examples_data_path` (``'pet'`` -> ``'PET'``)."""
    warnings.warn("petmr_data_path is deprecated: use examples_data_path()", DeprecationWarning, stacklevel=2)
    return examples_data_path(petmr.upper())


def existing_filepath(data_path: str, file_name: str) -> str:
    """``file_name`` in the folder ``data_path`` (made absolute); :class:`error` if no such file."""
    full_name = os.path.join(os.path.abspath(data_path), file_name)
    if not os.path.isfile(full_name):
        raise error(f"file {full_name} not found")
    return full_name


def check_tolerance(expected: float, actual: float, abstol: float = 0, reltol: float = 2e-3) -> str | None:
    """None where ``|expected - actual| <= abstol + reltol |expected|``, else what differs."""
    tol = abstol + reltol * abs(expected)
    if abs(expected - actual) > tol:  # so a NaN passes, as in SIRF
        return f"expected {expected:.4g}, got {actual:.4g} (tolerance {tol:.3g})"
    return None


class pTest:  # noqa: N801 -- SIRF's name
    """SIRF's test record.  Recording (``record=True``), :meth:`check` writes each value to
    ``filename`` (one ``%e`` a line); otherwise it compares each value with the next stored one
    (:func:`check_tolerance`).  Every ``check_if_*`` counts a test (``ntest``) and a failure
    (``failed``), prints ``+++ test N passed/failed`` where ``verbose`` (failures of a tolerance
    check always), and raises ``ValueError`` on a failure where ``throw``."""

    def __init__(self, filename: str, record: bool, throw: bool = False) -> None:
        self.record = record
        self.throw = throw
        self.verbose = True
        self.ntest = 0
        self.nrec = 0
        self.failed = 0
        self.data: list[float] = []
        self.file = None
        if record:
            self.file = open(filename, "w")  # closed when the record goes (SIRF's)
        else:
            with open(filename) as f:
                self.data = [float(line.strip()) for line in f]
        self.size = len(self.data)

    def __del__(self) -> None:
        file = getattr(self, "file", None)
        if file is None:
            return
        if self.failed:
            file.write(f"{self.failed} failures\n")
        file.close()

    def check(self, value: float, abs_tol: float = 0, rel_tol: float = 2e-3) -> None:
        """Record ``value``, or compare it with the next stored value (IndexError past the last)."""
        if self.record:
            assert self.file is not None
            self.file.write(f"{value:e}\n")
        elif self.nrec >= self.size:
            raise IndexError(f"no data available for test {self.ntest}")
        else:
            self.check_if_equal_within_tolerance(self.data[self.nrec], value, abs_tol, rel_tol)
        self.nrec += 1

    def check_if_equal(self, expected, value) -> None:
        """Passes where ``value == expected``."""
        if value != expected:
            self._fail(f"expected {expected!r}, got {value!r}", always_print=False)
        else:
            self._pass()

    def check_if_equal_within_tolerance(self, expected, value, abs_tol: float = 0, rel_tol: float = 2e-3) -> None:
        """Passes where :func:`check_tolerance` finds ``value`` close enough to ``expected``."""
        err = check_tolerance(expected, value, abs_tol, rel_tol)
        if err is not None:
            self._fail(err, always_print=True)
        else:
            self._pass()

    def check_if_zero_within_tolerance(self, value, abs_tol: float = 1e-3) -> None:
        """Passes where ``|value| <= abs_tol``."""
        self.check_if_equal_within_tolerance(0, value, abs_tol)

    def check_if_less(self, value, comp) -> None:
        """Passes where ``value < comp``."""
        if value >= comp:
            self._fail(f"{value!r} >= {comp!r}", always_print=False)
        else:
            self._pass()

    def _pass(self) -> None:
        if self.verbose:
            print(f"+++ test {self.ntest} passed")
        self.ntest += 1

    def _fail(self, why: str, always_print: bool) -> None:
        # SIRF prints a failed tolerance check whatever `verbose` says (and once more if verbose)
        self.failed += 1
        msg = f"+++ test {self.ntest} failed: {why}"
        if always_print:
            print(msg)
        if self.throw:
            raise ValueError(msg)
        if self.verbose:
            print(msg)
        self.ntest += 1


class CheckRaise(pTest):
    """A :class:`pTest` that raises on the first failure."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["throw"] = True
        super().__init__(*args, **kwargs)


def runner(
    main_test: Callable, doc: str, version: str, author: str = "", licence: str | None = None, no_ret_val: bool = True
) -> None:
    """A SIRF test file's ``__main__``: parse its docopt usage ``doc`` (``--record``,
    ``--verbose``), run ``main_test(record, verbose, throw=False)``; with ``no_ret_val=False`` it
    returns ``(failed, ntest)``, reported, and the process exits with ``failed`` where non-zero."""
    from docopt import docopt

    text = licence or __licence__
    args = docopt(doc.format(version=version, author=author, licence=text, license=text), version=version)
    record, verbose = args["--record"], args["--verbose"]
    if no_ret_val:
        main_test(record, verbose, throw=False)
        return
    failed, ntest = main_test(record, verbose, throw=False, no_ret_val=False)
    if failed:
        print(f"{failed} of {ntest} tests failed")
        sys.exit(failed)
    print(f"{ntest} measurements recorded" if record else f"all {ntest} tests passed")


def str_to_int_list(text: str) -> list[int]:
    """``'a, b-c, ...'`` -> ``[a, b, b+1, ..., c, ...]`` (ValueError on anything else)."""
    out: list[int] = []
    for item in text.split(","):
        first, dash, last = item.partition("-")
        out.extend(range(int(first), int(last) + 1) if dash else [int(item)])
    return out


def show_2D_array(title: str, array, scale: tuple[float, float] | None = None, colorbar: bool = True) -> None:  # noqa: N802
    """A figure of a 2-D array (with a colour bar, else in grey), shown with ``plt.show()``."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found, cannot plot the array")
        return
    vmin, vmax = (np.amin(array), np.amax(array)) if scale is None else scale
    plt.figure()
    plt.title(title)
    if colorbar:
        plt.imshow(array, vmin=vmin, vmax=vmax)
        plt.colorbar()
    else:
        plt.imshow(array, cmap="gray", vmin=vmin, vmax=vmax)
    print(f"You may need to close Figure {plt.get_fignums()[-1]} window to continue...")
    plt.show()


def _tile_grid(n: int, ny: int, nx: int, tile_shape: tuple[int, int] | None) -> tuple[int, int, int]:
    """(rows, columns, last row) of ``n`` tiles of ``ny x nx``: about square overall unless given."""
    if tile_shape is not None:
        rows, cols = tile_shape
        assert rows * cols >= n, "tile rows x columns must be not less than the number of images"
        return rows, cols, (n - 1) // cols
    rows = min(max(int(round(math.sqrt(n * nx / ny))), 1), n)
    return rows, (n - 1) // rows + 1, rows - 1


def _slices(nz: int, index) -> list[int] | int:
    """The slices to show, or the error return of :func:`show_3D_array` (1: an unreadable
    index string; k + 1: the k-th index is out of range)."""
    if index is None:
        return list(range(nz))
    if isinstance(index, str):
        try:
            index = str_to_int_list(index)
        except ValueError:
            return 1
    for k, z in enumerate(index):
        if z < 0 or z >= nz:
            return k + 1
    return list(index)


def show_3D_array(  # noqa: N802
    array,
    index=None,
    tile_shape: tuple[int, int] | None = None,
    scale: tuple[float, float] | None = None,
    power: float | None = None,
    suptitle: str | None = None,
    titles: Sequence[str] | None = None,
    title_size=None,
    zyx: tuple[int, int, int] | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    label: str | None = None,
    cmap=None,
    show: bool = True,
) -> int | None:
    """z slices of a 3-D array as tiles of one figure (SIRF's arguments: ``index`` a list or
    ``'a, b-c'``, ``power`` shows ``|array|**power``, ``zyx`` transposes first).  Returns 0, or
    non-zero for a bad ``index`` (see :func:`_slices`)."""
    try:
        import matplotlib as mpl
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not found, cannot plot the array")
        return None
    if zyx is not None:
        array = np.transpose(array, zyx)
    slices = _slices(array.shape[0], index)
    if isinstance(slices, int):
        return slices
    ny, nx = array.shape[1], array.shape[2]
    rows, cols, last_row = _tile_grid(len(slices), ny, nx, tile_shape)
    shown = array if power is None else np.power(np.abs(array), power)
    if scale is not None:
        vmin, vmax = scale
    elif power is None:
        vmin, vmax = np.amin(array), np.amax(array)
    else:  # SIRF's: the extremes of |array| raised to the power (swapped for a negative one)
        vmin, vmax = np.power(np.amin(np.abs(array)), power), np.power(np.amax(np.abs(array)), power)
    small = "small"
    with mpl.rc_context(
        {"axes.titlesize": small, "axes.labelsize": small, "xtick.labelsize": small, "ytick.labelsize": small}
    ):
        fig = plt.figure()
        if suptitle is not None:
            fig.suptitle(suptitle, **({} if title_size is None else {"fontsize": title_size}))
        for k, z in enumerate(slices):
            ax = fig.add_subplot(rows, cols, k + 1)
            if titles is not None:
                ax.set_title(titles[k])
            elif label is not None and array.shape[0] > 1:
                ax.set_title(f"{label} {z}")
            row, col = divmod(k, cols)
            if (xlabel is None and ylabel is None) or row < last_row or col > 0:
                ax.set_axis_off()
            else:
                _label_axes(ax, xlabel, ylabel, nx, ny)
            ax.imshow(shown[z], cmap, vmin=vmin, vmax=vmax)
        if show:
            last = plt.get_fignums()[-1]
            windows = f"Figures' 1 - {last} windows" if last > 1 else "Figure 1 window"
            print(f"You may need to close {windows} to continue...")
            plt.show()
    return 0


def _label_axes(ax, xlabel: str | None, ylabel: str | None, nx: int, ny: int) -> None:
    """Axis labels and end ticks on the bottom-left tile."""
    ax.set_axis_on()
    if xlabel is not None:
        ax.set_xlabel(xlabel)
        ax.set_xticks([0, nx - 1], [0, nx - 1])
    if ylabel is not None:
        ax.set_ylabel(ylabel)
        ax.set_yticks([0, ny - 1], [0, ny - 1])
