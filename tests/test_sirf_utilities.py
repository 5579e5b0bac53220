"""stirgpu.sirf.Utilities: what SIRF's PET scripts and tests use of ``sirf.Utilities``, with SIRF's
documented behaviour -- where the example data is, test records compared with their ``.txt``, the
test runner, the operator and container checks, and the figures."""

from __future__ import annotations

import gc
import io
import subprocess
import sys
import textwrap
import unittest
import warnings

import numpy as np
import pytest
from helpers import REPO_ROOT

from stirgpu.sirf import ImageData
from stirgpu.sirf import Utilities as U
from stirgpu.sirf.errors import error

DATA_VARIABLES = ("SIRF_DATA_PATH", "SIRF_INSTALL_PATH", "SIRF_PATH")


@pytest.fixture
def no_sirf_env(monkeypatch):
    for name in DATA_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_examples_data_path_order_is_data_then_install_then_source(no_sirf_env, tmp_path):
    env = no_sirf_env
    assert U.examples_data_path("PET") == ""  # none set: SIRF answers an empty path
    env.setenv("SIRF_PATH", str(tmp_path / "src"))
    assert U.examples_data_path("PET") == str(tmp_path / "src" / "data" / "examples" / "PET")
    env.setenv("SIRF_INSTALL_PATH", str(tmp_path / "inst"))
    assert U.examples_data_path("MR") == str(tmp_path / "inst" / "share" / "SIRF-3.10" / "data" / "examples" / "MR")
    env.setenv("SIRF_DATA_PATH", str(tmp_path / "data"))
    assert U.examples_data_path("Registration") == str(tmp_path / "data" / "examples" / "Registration")
    env.setenv("SIRF_DATA_PATH", "")  # empty counts as unset
    assert U.examples_data_path("PET").startswith(str(tmp_path / "inst"))


def test_petmr_data_path_is_deprecated_and_upper_cases(no_sirf_env, tmp_path):
    no_sirf_env.setenv("SIRF_DATA_PATH", str(tmp_path))
    with pytest.warns(DeprecationWarning, match="examples_data_path"):
        assert U.petmr_data_path("pet") == str(tmp_path / "examples" / "PET")


def test_existing_filepath_is_absolute_or_a_sirf_error(tmp_path, monkeypatch):
    (tmp_path / "a.hv").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert U.existing_filepath(".", "a.hv") == str(tmp_path / "a.hv")
    with pytest.raises(error, match=r"file .*b\.hv not found"):
        U.existing_filepath(".", "b.hv")
    with pytest.raises(error):  # a folder is not a file
        U.existing_filepath(str(tmp_path.parent), tmp_path.name)


def test_re_pyext_names_a_test_files_record():
    assert U.RE_PYEXT.sub(".txt", "/a/tests_one.py") == "/a/tests_one.txt"
    assert U.RE_PYEXT.sub(".txt", "tests_one.pyc") == "tests_one.txt"
    assert U.RE_PYEXT.sub(".txt", "tests.py.bak") == "tests.py.bak"


def test_check_tolerance_is_absolute_plus_relative():
    assert U.check_tolerance(100.0, 100.19) is None  # 2e-3 relative
    assert "expected 100, got 100.3" in U.check_tolerance(100.0, 100.3)
    assert U.check_tolerance(0.0, 0.5, abstol=0.5, reltol=0) is None
    assert U.check_tolerance(0.0, 0.6, abstol=0.5, reltol=0) is not None
    assert U.check_tolerance(1.0, float("nan")) is None  # a NaN compares false: SIRF's passes it


def test_ptest_records_then_compares_with_the_record(tmp_path, capsys):
    record = tmp_path / "tests_x.txt"
    t = U.pTest(str(record), True)
    for v in (1.0, 2.5e-7, -3.0):
        t.check(v)
    del t
    gc.collect()
    assert [float(x) for x in record.read_text().split()] == [1.0, 2.5e-7, -3.0]
    t = U.pTest(str(record), False)
    t.check(1.001)  # within 2e-3
    t.check(2.5e-7)
    t.check(-3.1)  # out
    assert (t.ntest, t.failed) == (3, 1)
    assert "+++ test 2 failed: expected -3, got -3.1" in capsys.readouterr().out
    with pytest.raises(IndexError, match="no data available for test 3"):
        t.check(0.0)


def test_ptest_counts_each_kind_of_check_and_throws_where_asked(tmp_path, capsys):
    record = tmp_path / "r.txt"
    record.write_text("")
    t = U.pTest(str(record), False)
    t.verbose = False
    t.check_if_equal(3, 3)
    t.check_if_equal(3, 4)
    t.check_if_less(1, 2)
    t.check_if_less(2, 2)
    t.check_if_zero_within_tolerance(5e-4)
    t.check_if_zero_within_tolerance(2e-3)
    assert (t.ntest, t.failed) == (6, 3)
    out = capsys.readouterr().out
    assert "passed" not in out and "test 3 failed" not in out  # quiet, but a tolerance failure prints
    assert "+++ test 5 failed" in out
    c = U.CheckRaise(str(record), False)
    with pytest.raises(ValueError, match=r"\+\+\+ test 0 failed: 1 >= 0"):
        c.check_if_less(1, 0)


def test_a_failing_record_notes_its_failures(tmp_path):
    record = tmp_path / "r.txt"
    t = U.pTest(str(record), True)
    t.check(1.0)
    t.check_if_equal(1, 2)
    del t
    gc.collect()
    assert record.read_text().splitlines() == ["1.000000e+00", "1 failures"]


RUNNER_SCRIPT = '''\
"""demo
v{version}

Usage:
  demo [--help | options]

Options:
  -r, --record   record
  -v, --verbose  report each test status

{author}
{licence}
"""
import sys
from stirgpu.sirf.Utilities import runner

def main(rec=False, verb=False, throw=True, no_ret_val=True):
    print("rec", rec, "verb", verb)
    if no_ret_val:
        return
    return int(sys.argv[-1] == "--record") + 2 * ("FAIL" in sys.argv[0]), 7

runner(main, __doc__, "1.0", "me", no_ret_val=False)
'''


@pytest.mark.parametrize(
    ("name", "args", "rc", "said"),
    [
        ("demo.py", [], 0, "all 7 tests passed"),
        ("demo.py", ["-v", "--record"], 1, "1 of 7 tests failed"),
        ("FAIL.py", [], 2, "2 of 7 tests failed"),
    ],
)
def test_runner_parses_the_usage_and_exits_with_the_failures(tmp_path, name, args, rc, said):
    pytest.importorskip("docopt")
    script = tmp_path / name
    script.write_text(RUNNER_SCRIPT)
    env = {"PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == rc, proc.stderr
    assert said in proc.stdout
    assert ("verb True" in proc.stdout) == ("-v" in args)


def test_str_to_int_list_reads_ranges():
    assert U.str_to_int_list("1, 3-5,7") == [1, 3, 4, 5, 7]
    with pytest.raises(ValueError):
        U.str_to_int_list("a-b")


def test_show_3D_array_returns_sirfs_codes_and_draws_tiles(monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    monkeypatch.setattr(plt, "show", lambda: None)
    a = np.arange(4 * 3 * 5, dtype=np.float32).reshape(4, 3, 5)
    try:
        assert U.show_3D_array(a, index="0, 2-3", label="slice", xlabel="x", ylabel="y") == 0
        fig = plt.gcf()
        assert len(fig.axes) == 3
        assert [ax.get_title() for ax in fig.axes] == ["slice 0", "slice 2", "slice 3"]
        assert U.show_3D_array(a, index="0-x") == 1
        assert U.show_3D_array(a, index=[0, 4]) == 2
        assert U.show_3D_array(a, tile_shape=(1, 4), show=False, power=0.5) == 0
        U.show_2D_array("a slice", a[0])
        assert plt.gca().get_title() == "a slice"
    finally:
        plt.close("all")


class _MatrixOperator:
    """A linear operator on ImageData of a given matrix (and, where ``adjoint_matrix`` differs
    from its transpose, a wrong adjoint)."""

    def __init__(self, matrix, adjoint_matrix):
        self.matrix, self.adjoint_matrix = matrix, adjoint_matrix
        self.image = ImageData()
        self.image.initialise((1, 1, matrix.shape[1]))
        self.data = ImageData()
        self.data.initialise((1, 1, matrix.shape[0]))

    def domain_geometry(self):
        return self.image

    def range_geometry(self):
        return self.data

    def direct(self, x):
        out = self.data.clone()
        out.fill((self.matrix @ x.as_array().ravel()).reshape(1, 1, -1))
        return out

    def adjoint(self, y):
        out = self.image.clone()
        out.fill((self.adjoint_matrix @ y.as_array().ravel()).reshape(1, 1, -1))
        return out


def test_is_operator_adjoint_tells_a_true_adjoint_from_a_wrong_one(capsys):
    rng = np.random.default_rng(3)
    m = rng.random((6, 4)).astype(np.float32)
    assert U.is_operator_adjoint(_MatrixOperator(m, m.T), num_tests=2, verbose=True)
    assert "Iteration 4/4" in capsys.readouterr().out
    assert not U.is_operator_adjoint(_MatrixOperator(m, 2 * m.T), num_tests=2, verbose=False)


def _image(values):
    im = ImageData()
    im.initialise((2, 3, 4))
    im.fill(np.asarray(values, dtype=np.float32).reshape(2, 3, 4))
    return im


def test_data_container_algebra_tests_pass_on_a_correct_container(tmp_path):
    (tmp_path / "r.txt").write_text("")
    t = U.pTest(str(tmp_path / "r.txt"), False)
    t.verbose = False
    x = _image(np.linspace(0.5, 3.0, 24))
    before = x.as_array().copy()
    U.data_container_algebra_tests(t, x)
    assert t.ntest > 60 and t.failed == 0
    np.testing.assert_array_equal(x.as_array(), before)


def _wrong_sqrt(image):
    """``image`` whose sqrt is 1.5 times the image: the checks must count it."""

    def sqrt(out=None):
        result = image.multiply(1.5)
        if out is None:
            return result
        out.fill(result.as_array())
        return None

    image.sqrt = sqrt
    return image


def test_data_container_algebra_tests_count_a_wrong_operation(tmp_path):
    (tmp_path / "r.txt").write_text("")
    t = U.pTest(str(tmp_path / "r.txt"), False)
    t.verbose = False
    x = _image(np.linspace(0.5, 3.0, 24))
    U.data_container_algebra_tests(t, _wrong_sqrt(x))
    assert t.failed == 2  # sqrt, and sqrt into out=


def test_container_algebra_test_case_runs_on_image_data():
    class Case(unittest.TestCase, U.DataContainerAlgebraTests):
        def setUp(self):
            self.image1 = _image(np.linspace(0.0, 2.0, 24))
            self.image2 = _image(np.linspace(0.0, 2.0, 24))

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(Case)
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    assert result.testsRun == 11
    assert result.wasSuccessful(), result.failures + result.errors


def test_sirf_stir_star_import_gives_sirfs_utilities_names(tmp_path):
    script = tmp_path / "star.py"
    script.write_text(
        textwrap.dedent("""\
        from stirgpu.sirf import *
        print(pTest.__name__, examples_data_path.__name__, existing_filepath.__name__, error.__name__)
        """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env={"PYTHONPATH": str(REPO_ROOT)}, timeout=120
    )
    assert proc.stdout.split() == ["pTest", "examples_data_path", "existing_filepath", "error"], proc.stderr


def test_no_warning_from_a_plain_lookup(no_sirf_env, tmp_path):
    no_sirf_env.setenv("SIRF_DATA_PATH", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        U.examples_data_path("PET")
