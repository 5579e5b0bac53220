"""The command line with any file name: spaces and non-ASCII letters in arguments, in parameter
files and in headers (UTF-8, or Latin-1 as older STIR wrote them), and a console that cannot
show them (``LANG=C``, ``PYTHONIOENCODING=ascii``).

The data are small (ECAT 953, span 3, 12 views, 16 tangential positions; STIR's default image
for them), written into a folder named 'dir ü é'; every command is run once on them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO_ROOT, cli

from stirgpu.formats import ProjDataFromFile, VoxelsOnCartesianGrid, read_from_file, read_image, write_image
from stirgpu.formats.testing import small_proj_data_info
from stirgpu.geometry import ImageInfo
from stirgpu.parfile import osmaposl_par

CPU = ["--backend", "cpu", "--quiet"]


@pytest.fixture
def folder(tmp_path):
    """'dir ü é' with an image 'bild ä.hv' and positive projection data 'prompts ü.hs'."""
    d = tmp_path / "dir ü é"
    d.mkdir()
    pdi = small_proj_data_info()
    info = ImageInfo.default_for(pdi)
    write_image(d / "bild ä.hv", VoxelsOnCartesianGrid(info, fill=1.0))
    with ProjDataFromFile.create(d / "prompts ü.hs", pdi) as prompts:
        prompts.fill(np.random.default_rng(3).uniform(1.0, 5.0, prompts.shape).astype(np.float32))
    return d


def _files(d) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_info_forward_back_and_plan_with_non_ascii_names(folder, capsys):
    """info, forward-project, back-project and plan on names with spaces and non-ASCII letters:
    exit 0, outputs whose headers are UTF-8 and read back, the names printed as given."""
    for name in ("bild ä.hv", "prompts ü.hs"):
        code, out, err = cli(["info", str(folder / name)], capsys)
        assert code == 0 and f"{folder / name}" in out, err

    fwd = folder / "vorwärts ö.hs"
    code, out, err = cli(
        ["forward-project", str(fwd), str(folder / "bild ä.hv"), str(folder / "prompts ü.hs"), *CPU], capsys
    )
    assert code == 0, err
    assert "name of data file := vorwärts ö.s\n" in fwd.read_bytes().decode("utf-8")
    with read_from_file(fwd) as pd:
        assert pd.as_array().max() > 0
    assert out.splitlines()[-1].startswith(f"wrote {fwd} (+ vorwärts ö.s,")

    back = folder / "rück ü.hv"
    code, out, err = cli(["back-project", str(back), str(fwd), str(folder / "bild ä.hv"), *CPU], capsys)
    assert code == 0, err
    assert read_image(back).array.max() > 0 and f"wrote {back}" in out

    code, out, err = cli(["plan", str(folder / "prompts ü.hs"), "--backend", "cpu"], capsys)
    assert code == 0 and "forward projection" in out, err
    assert not any(".tmp-" in n for n in _files(folder))


def test_osmaposl_with_non_ascii_names_in_a_utf8_parameter_file(folder, capsys, monkeypatch):
    """A UTF-8 parameter file 'osem ü.par' reading 'prompts ü.hs', writing the prefix 'ösem' and
    sensitivities 'sens ä_%d.hv': the estimates and sensitivities appear under those names and
    nothing else is left (a prefix 'ösem' used to leave 16 files behind)."""
    monkeypatch.chdir(folder)
    text = osmaposl_par(
        "prompts ü.hs",
        output_filename_prefix="ösem",
        subset_sensitivity_filenames="sens ä_%d.hv",
        num_subsets=2,
        num_subiterations=2,
        save_interval=1,
    )
    (folder / "osem ü.par").write_bytes(text.encode("utf-8"))
    before = _files(folder)
    code, out, err = cli(["osmaposl", "osem ü.par", *CPU], capsys)
    assert code == 0, err
    new = _files(folder) - before
    want = {f"{n}.{e}" for n in ("ösem_1", "ösem_2", "sens ä_0", "sens ä_1") for e in ("hv", "v")}
    assert new == want
    assert read_image("ösem_2.hv").array.max() > 0 and "ösem_2.hv" in out


def test_osmaposl_with_a_latin1_parameter_file_uses_the_names_bytes(folder, capsys, monkeypatch):
    """A Latin-1 parameter file (as older STIR set-ups have) naming b'pr\\xfcmpts.hs' and the prefix
    b'\\xf6sem' reads and writes the files whose names have exactly those bytes, as STIR does."""
    monkeypatch.chdir(folder)
    with read_from_file("prompts ü.hs") as pd:
        ProjDataFromFile.create(os.fsdecode(b"pr\xfcmpts.hs"), pd.get_proj_data_info(), fill=pd).close()
    text = osmaposl_par("PROMPTS", output_filename_prefix="PREFIX", num_subsets=1, num_subiterations=1)
    par = text.encode("latin-1").replace(b"PROMPTS", b"pr\xfcmpts.hs").replace(b"PREFIX", b"\xf6sem")
    (folder / "latin.par").write_bytes(par)
    code, _, err = cli(["osmaposl", "latin.par", *CPU], capsys)
    assert code == 0, err
    assert os.path.isfile(b"\xf6sem_1.hv") and os.path.isfile(b"\xf6sem_1.v")
    with open(b"\xf6sem_1.hv", "rb") as f:
        assert b"name of data file := \xf6sem_1.v\n" in f.read()
    assert read_image(os.fsdecode(b"\xf6sem_1.hv")).array.max() > 0


def test_a_latin1_header_opens_its_latin1_named_data_file(folder, capsys):
    """A Latin-1 header (its name and its 'name of data file' b'tr\\xfcth im.v' not valid UTF-8)
    is described with its values and projected: the data file STIR would open is opened."""
    image = read_image(folder / "bild ä.hv")
    (folder / os.fsdecode(b"tr\xfcth im.v")).write_bytes(image.array.tobytes())
    text = (folder / "bild ä.hv").read_text(encoding="utf-8").replace("bild ä.v", "DATA")
    header = folder / os.fsdecode(b"l\xe4tin.hv")
    header.write_bytes(text.encode("latin-1").replace(b"DATA", b"tr\xfcth im.v"))
    code, out, err = cli(["info", str(header), "--stats"], capsys)
    assert code == 0, err
    assert "(absent)" not in out and "sum" in out
    fwd = folder / "fwd.hs"
    code, _, err = cli(["forward-project", str(fwd), str(header), str(folder / "prompts ü.hs"), *CPU], capsys)
    assert code == 0, err


def _run_with(env_changes: dict, *argv) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONIOENCODING")}
    env.update(env_changes, PYTHONPATH=str(REPO_ROOT))
    cmd = [sys.executable, "-m", "stirgpu.cli.main", *argv]
    return subprocess.run(cmd, capture_output=True, cwd=REPO_ROOT, env=env, timeout=300)


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"LANG": "C", "LC_ALL": "C"}], ids=["ascii", "LANG=C"])
def test_a_console_that_cannot_show_the_names_gets_them_escaped(folder, env):
    """With a console encoding that lacks 'ö' the commands finish (output written, exit 0) and
    print the names escaped ('\\xf6') or as they are; an error on such a name is one line
    (forward-project used to end in a UnicodeEncodeError traceback after writing its output)."""
    fwd = folder / "fwd ö.hs"
    r = _run_with(env, "forward-project", str(fwd), str(folder / "bild ä.hv"), str(folder / "prompts ü.hs"), *CPU)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"Traceback" not in r.stderr and fwd.is_file() and (folder / "fwd ö.s").is_file()
    last = r.stdout.decode("utf-8").splitlines()[-1]
    assert last.startswith("wrote ") and ("fwd \\xf6.hs" in last or "fwd ö.hs" in last)

    r = _run_with(env, "info", str(folder / "fehlt ü.hv"))
    assert r.returncode == 2 and b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1
    assert b"fehlt \\xfc.hv" in r.stderr or "fehlt ü.hv".encode() in r.stderr


def test_a_folder_named_as_data_file_is_one_line_saying_so(folder, capsys):
    """A header whose 'name of data file' is a folder: exit 2, one line naming the folder and the
    header and saying it is a folder (it said 'truncated: it has 4096 bytes')."""
    (folder / "daten").mkdir()
    for name, data in (("prompts ü.hs", "prompts ü.s"), ("bild ä.hv", "bild ä.v")):
        header = folder / name
        header.write_text(header.read_text(encoding="utf-8").replace(data, "daten"), encoding="utf-8")
        code, out, err = cli(["info", str(header)], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1
        want = f"is a folder, not a data file (the header {header} names it as its data file)"
        assert err == f"stirgpu info: error: {folder / 'daten'}: {want}\n"


def test_a_key_given_twice_with_different_values_is_one_line_naming_it(folder, capsys):
    """'!matrix size [1]' given twice with different values: exit 2, one line naming the header,
    the key and both lines (it was reported as a data file of the wrong size)."""
    header = folder / "bild ä.hv"
    text = header.read_text(encoding="utf-8")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("!matrix size [1]")) + 1
    old = lines[at - 1]
    header.write_text(text.replace(old + "\n", f"{old}\n!matrix size [1] := 7\n"), encoding="utf-8")
    code, out, err = cli(
        ["forward-project", str(folder / "f.hs"), str(header), str(folder / "prompts ü.hs"), *CPU], capsys
    )
    assert code == 2 and err.count("\n") == 1 and "bytes" not in err
    value = old.split(":=")[1].strip()
    assert err.startswith(
        f"stirgpu forward-project: error: {header}: key 'matrix size [1]': given twice with different values"
    )
    assert f"line {at} '{value}'" in err and f"line {at + 1} '7'" in err


@pytest.mark.slow
def test_demo_writes_into_a_non_ascii_folder(tmp_path, capsys):
    """``stirgpu demo --output 'démo ü'``: every file is written there, the parameter file is UTF-8
    and runs, and the last line names the folder."""
    out = tmp_path / "démo ü"
    code, text, err = cli(["demo", "--output", str(out), *CPU], capsys)
    assert code == 0, err
    assert {"prompts.hs", "truth.hv", "osem.par", "osem_24.hv", "slices.png"} <= _files(out)
    (out / "osem.par").read_bytes().decode("utf-8")
    assert text.splitlines()[-1].startswith(f"wrote {out}{os.sep}:")
