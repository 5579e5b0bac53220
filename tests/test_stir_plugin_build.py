"""Building the STIR plugin: finding STIR, and the clear errors when something is missing
(no STIR, a wrong STIR version, no cmake, no compiler, no boost headers, not built yet).
The build itself and the plugin at work: tests/stir_differential/test_stir_plugin.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from helpers import REPO_ROOT

from stirgpu.cli.main import main
from stirgpu.stir_plugin import build as build_plugin
from stirgpu.stir_plugin.building import PluginBuildError, find_build, find_stir_prefix, stir_version


def _fake_stir(root, version="6.5.0", with_osmaposl=False):
    cfg = root / "lib" / "cmake" / f"STIR-{version.rsplit('.', 1)[0]}"
    cfg.mkdir(parents=True)
    (cfg / "STIRConfig.cmake").write_text("# fake\n")
    (cfg / "STIRConfigVersion.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')
    if with_osmaposl:
        (root / "bin").mkdir()
        _executable(root / "bin" / "OSMAPOSL")
    return root


def _executable(path, text="#!/bin/sh\nexit 0\n"):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def no_stir_env(monkeypatch, tmp_path):
    """A PATH with nothing of STIR's, no CMAKE_PREFIX_PATH, a private cache."""
    monkeypatch.delenv("CMAKE_PREFIX_PATH", raising=False)
    monkeypatch.setenv("STIRGPU_CACHE_DIR", str(tmp_path / "cache"))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def test_stir_is_found_from_the_argument_cmake_prefix_path_or_osmaposl(no_stir_env, tmp_path, monkeypatch):
    a = _fake_stir(tmp_path / "a")
    assert find_stir_prefix(a) == a.resolve()
    monkeypatch.setenv("CMAKE_PREFIX_PATH", os.pathsep.join([str(tmp_path / "nothing"), str(a)]))
    assert find_stir_prefix() == a.resolve()
    monkeypatch.delenv("CMAKE_PREFIX_PATH")
    b = _fake_stir(tmp_path / "b", with_osmaposl=True)
    monkeypatch.setenv("PATH", str(b / "bin"))
    assert find_stir_prefix() == b.resolve()
    assert stir_version(b) == "6.5.0"


def test_no_stir_is_a_clear_error(no_stir_env, tmp_path):
    with pytest.raises(PluginBuildError, match="no STIR found: put STIR's bin/ on PATH"):
        find_stir_prefix()
    with pytest.raises(PluginBuildError, match=r"--stir .*: no STIR installation there"):
        find_stir_prefix(tmp_path)


def test_a_wrong_stir_version_is_refused_before_building(no_stir_env, tmp_path):
    old = _fake_stir(tmp_path / "old", version="6.4.0")
    with pytest.raises(PluginBuildError, match=r"STIR 6\.4\.0 at .*needs STIR 6\.5 or a later 6\.x"):
        build_plugin(old)
    new = _fake_stir(tmp_path / "new", version="7.0.0")
    with pytest.raises(PluginBuildError, match=r"STIR 7\.0\.0 .*needs STIR 6\.5"):
        build_plugin(new)


def test_missing_cmake_and_compiler_are_named_with_their_packages(no_stir_env, tmp_path, monkeypatch):
    stir = _fake_stir(tmp_path / "stir")
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(PluginBuildError, match=r"no cmake on PATH: install it \(Debian/Ubuntu: apt-get install cmake"):
        build_plugin(stir)
    _executable(no_stir_env / "cmake")
    with pytest.raises(PluginBuildError, match=r"no C\+\+ compiler .*apt-get install g\+\+"):
        build_plugin(stir)


def test_missing_boost_headers_are_named(no_stir_env, tmp_path, monkeypatch):
    stir = _fake_stir(tmp_path / "stir")
    for tool in ("cmake", "c++"):
        _executable(no_stir_env / tool)
    pytest.importorskip("pybind11")
    monkeypatch.setattr("stirgpu.stir_plugin.building._boost_found", lambda prefix: False)
    with pytest.raises(PluginBuildError, match=r"no boost headers .*apt-get install libboost-dev"):
        build_plugin(stir)


def test_path_and_stir_commands_say_the_plugin_is_not_built(no_stir_env, tmp_path, capsys):
    stir = _fake_stir(tmp_path / "stir", with_osmaposl=True)
    with pytest.raises(PluginBuildError, match=rf"not built for STIR at {stir.resolve()}.*stirgpu stir-plugin build"):
        find_build(stir)
    assert main(["stir-plugin", "path", "--stir", str(stir)]) == 2
    assert "stirgpu stir-plugin build --stir" in capsys.readouterr().err
    assert main(["stir", "--stir", str(stir), "OSMAPOSL", "x.par"]) == 2
    assert "is not built" in capsys.readouterr().err
    assert main(["stir", "--stir", str(stir), "no_such_program"]) == 2
    assert "STIR program 'no_such_program' not found" in capsys.readouterr().err


def test_stir_targets_naming_missing_include_folders_are_refused_by_name(tmp_path):
    """A STIR built elsewhere whose exported targets name that machine's folders (STIR's CUDA
    build names /tmp/b, its build machine's boost headers): the error names the file and the
    folders before CMake fails on them; folders relative to the install and existing ones pass."""
    from stirgpu.stir_plugin.building import check_stir_targets

    prefix = _fake_stir(tmp_path / "stir")
    targets = next(prefix.glob("lib/cmake/STIR-*")) / "STIRTargets.cmake"
    gone = tmp_path / "build-machine" / "boost"
    targets.write_text(
        "set_target_properties(stir_buildblock PROPERTIES\n"
        f'  INTERFACE_INCLUDE_DIRECTORIES "${{_IMPORT_PREFIX}}/include/STIR-6.5;{gone};{tmp_path}"\n)\n'
    )
    with pytest.raises(PluginBuildError) as err:
        check_stir_targets(prefix)
    assert str(targets) in str(err.value) and str(gone) in str(err.value) and f"mkdir -p {gone}" in str(err.value)
    assert f"{tmp_path}," not in str(err.value)  # an existing folder is not named
    gone.mkdir(parents=True)
    check_stir_targets(prefix)  # nothing missing any more


def _build_folder_as_seen_by(python, stir, env) -> str:
    code = "import sys; from pathlib import Path; from stirgpu.stir_plugin.building import build_folder; "
    code += "print(build_folder(Path(sys.argv[1])))"
    proc = subprocess.run([str(python), "-c", code, str(stir)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip()


def test_python_and_python3_of_one_environment_find_one_build_and_another_environment_its_own(no_stir_env, tmp_path):
    """The build is keyed by what the plugin's ABI and embedded interpreter depend on (Python's
    ABI, libpython, the environment), not by the name the interpreter was started under:
    ``python`` and ``python3`` of one virtual environment (symlinks to one interpreter) find the
    same build; the interpreter outside that environment has its own (its own site-packages)."""
    stir = _fake_stir(tmp_path / "stir")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    assert (venv / "bin" / "python").resolve() == (venv / "bin" / "python3").resolve()
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    seen = {name: _build_folder_as_seen_by(venv / "bin" / name, stir, env) for name in ("python", "python3")}
    assert seen["python"] == seen["python3"]
    assert seen["python"].startswith(str(tmp_path / "cache" / "stir-plugin" / "6.5.0-cp"))
    assert _build_folder_as_seen_by(sys.executable, stir, env) != seen["python"]
