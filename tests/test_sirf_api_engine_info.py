"""SIRF's engine functions on stirgpu: verbosity (what it silences), the engine's version, its
folders, and STIR's scanner list (against the reference STIR's ``Scanner::list_all_names``)."""

from __future__ import annotations

import contextvars
import logging
import threading
from pathlib import Path

import pytest

import stirgpu
import stirgpu.sirf as pet


def _isolated(func):
    """Run ``func`` in a copy of the current context, so a verbosity it sets does not leak."""
    return contextvars.copy_context().run(func)


def test_verbosity_is_stirs_default_and_kept_per_thread():
    """Default 1 (STIR's); ``set_verbosity`` changes it for the current thread only (like the
    storage scheme); the value read back is the value set."""

    def body():
        assert pet.get_verbosity() == 1
        pet.set_verbosity(0)
        seen = []
        t = threading.Thread(target=lambda: seen.append(pet.get_verbosity()))
        t.start()
        t.join()
        assert pet.get_verbosity() == 0 and seen == [1]
        pet.set_verbosity(3)
        return pet.get_verbosity()

    assert _isolated(body) == 3
    assert pet.get_verbosity() == 1


@pytest.mark.parametrize("bad", ["1", 1.5, None])
def test_verbosity_refuses_what_is_not_an_integer(bad):
    with pytest.raises(pet.error, match="set_verbosity: verbosity must be an integer"):
        _isolated(lambda: pet.set_verbosity(bad))


def test_verbosity_0_silences_information_but_not_warnings(tmp_path):
    """Through a MessageRedirector: with verbosity 0 no INFO record reaches the info file; a
    warning still reaches the warn file; at verbosity 1 both do."""
    log = logging.getLogger("stirgpu.sirf")

    def run(verbosity, tag):
        pet.set_verbosity(verbosity)
        info, warn = tmp_path / f"info{tag}.txt", tmp_path / f"warn{tag}.txt"
        with pet.MessageRedirector(str(info), str(warn), None):
            log.info("an information message")
            log.warning("a warning")
        return info.read_text(), warn.read_text()

    assert _isolated(lambda: run(0, "0")) == ("", "a warning\n")
    assert _isolated(lambda: run(1, "1")) == ("an information message\n", "a warning\n")


def test_engine_version_names_stirgpu_and_the_stir_numbers_it_targets():
    text = pet.get_engine_version_string()
    assert text.startswith(f"stirgpu {stirgpu.__version__} ")
    assert "STIR 6.5" in text and "libparallelproj 2.0.7" in text


def test_engine_folders_are_stirgpus_in_a_checkout():
    """In this source tree: its ``docs`` and ``examples`` folders (SIRF prints them)."""
    root = Path(stirgpu.__file__).resolve().parents[1]
    assert pet.get_engine_doc_dir() == str(root / "docs")
    assert pet.get_engine_examples_dir() == str(root / "examples")


def test_scanner_names_lists_stirgpus_scanners():
    """Every scanner stirgpu projects appears, under every one of its names."""
    lines = pet.scanner_names().splitlines()
    assert "ECAT 953" in lines and "Siemens mMR , mMR , 2008" in lines
    for name in stirgpu.geometry.Scanner.names():
        assert any(line.split(" , ")[0] == name for line in lines)


@pytest.mark.stir
def test_scanner_names_is_stirs_list_all_names(stir):
    """Character for character STIR's ``Scanner::list_all_names()``, which SIRF returns."""
    assert pet.scanner_names() == stir.Scanner.list_all_names()
