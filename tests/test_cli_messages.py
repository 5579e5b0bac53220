"""What the command line says: plain-text help with examples, option texts that belong to their
own subcommand, singular and plural counts, and the last line naming what a command wrote.

(The projection and reconstruction commands' final lines are checked where they run:
test_cli_project.py, test_cli_recon.py.)
"""

from __future__ import annotations

import argparse
import re

import pytest
from helpers import back_args, reference_results

from stirgpu.cli.main import build_parser, main
from stirgpu.execution.stats import RunStats

#: reST/Sphinx markup that must not reach a terminal
REST = re.compile(r"``|:(?:func|class|mod|meth|data|attr|ref|doc):|::\s*$", re.MULTILINE)
#: a file name in capitals as the help texts use them (OUTPUT.hs, PROJECTOR.par, FILE.png, ...)
FILE_TOKEN = re.compile(r"\b[A-Z][A-Z_]*\.(?:hs|hv|par|png|s|v)\b")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBCOMMANDS = sorted(_subparsers())


def test_every_subcommand_is_covered():
    assert SUBCOMMANDS == sorted(
        [
            "info",
            "forward-project",
            "back-project",
            "osmaposl",
            "ossps",
            "simulate-scatter",
            "kosmaposl",
            "plan",
            "demo",
            "stir-plugin",
            "stir",
        ]
    )


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_is_plain_text_with_examples(name, capsys):
    """``stirgpu NAME --help`` exits 0 and prints no reST markup, and its epilog shows the
    command in use."""
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert not REST.search(text), REST.search(text).group(0)
    examples = text[text.index("examples:") :]
    assert f"stirgpu {name} " in examples or examples.rstrip().endswith(f"stirgpu {name}")


def test_top_level_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert not REST.search(text) and "stirgpu demo" in text and "--help" in text


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_names_only_this_commands_files(name):
    """A capitalised file name in a subcommand's help (OUTPUT.hs, PROJECTOR.par, FILE.png ...)
    is one of its own arguments (or that argument's Interfile data file: OUTPUT.s for
    OUTPUT.hs) -- e.g. demo's options do not talk about a PROJECTOR.par it does not take."""
    p = _subparsers()[name]
    own = set()
    for a in p._actions:
        for m in a.metavar if isinstance(a.metavar, tuple) else (a.metavar,):
            own |= set(FILE_TOKEN.findall(m or "")) | set(re.findall(r"[A-Z][A-Z_]*\.\w+", m or ""))
    stems = {t.split(".")[0] for t in own}
    text = p.format_help()
    for token in FILE_TOKEN.findall(text):
        assert token in own or token.split(".")[0] in stems, f"{name} --help mentions {token}"


def test_demo_options_mention_no_parameter_file_block(capsys):
    """The demo takes no .par: none of its options speaks of one (the description only says it
    writes osem.par)."""
    p = _subparsers()["demo"]
    helps = " ".join(a.help or "" for a in p._actions)
    assert ".par" not in helps and "block" not in helps and "FILE.par" not in p.format_help()


def test_backend_help_says_what_runs_there():
    helps = {
        name: next(a.help for a in p._actions if "--backend" in a.option_strings)
        for name, p in _subparsers().items()
        if any("--backend" in a.option_strings for a in p._actions)
    }
    assert "where to project" in helps["forward-project"] and "where to project" in helps["back-project"]
    assert all("where to reconstruct" in helps[name] for name in ("osmaposl", "ossps", "kosmaposl"))
    assert "where to simulate and reconstruct" in helps["demo"]
    assert "plan for" in helps["plan"]


def test_shared_options_have_one_text_and_one_parser():
    """--devices and --memory-budget (cli/options.py) read and explain themselves the same way in
    every command that takes them; --memory-budget may add a note."""
    from stirgpu.cli.options import DEVICES_HELP, MEMORY_BUDGET_HELP, parse_devices

    seen = set()
    for name, p in _subparsers().items():
        for a in p._actions:
            if "--devices" in a.option_strings:
                assert a.help == DEVICES_HELP and a.type is parse_devices, name
            elif "--memory-budget" in a.option_strings:
                assert a.help.startswith(MEMORY_BUDGET_HELP), name
            else:
                continue
            seen.add((name, a.option_strings[0]))
    for name in ("forward-project", "back-project", "osmaposl", "demo", "plan"):
        assert {(name, "--devices"), (name, "--memory-budget")} <= seen


def test_subset_help_differs_for_forward_and_back():
    def subset_help(name):
        return next(a.help for a in _subparsers()[name]._actions if "--subset" in a.option_strings)

    assert "other views are 0" in subset_help("forward-project")
    assert "back project only" in subset_help("back-project")


# -- singular and plural ----------------------------------------------------------------------
def test_stats_summary_counts_in_words():
    """One chunk is '1 chunk', an idle lane says so, and nothing reads '(s)'."""
    st = RunStats(
        operation="back projection",
        subset_num=2,
        num_subsets=4,
        backend="cpu",
        lanes=("cpu0", "cpu1"),
        chunks=1,
        chunks_per_lane={"cpu0": 1, "cpu1": 0},
        bins=1,
        busy={"cpu0": {"read": 0.01, "compute": 0.1}, "cpu1": {}},
        wall_seconds=0.2,
    )
    text = st.summary()
    assert text.startswith("back projection, subset 2 of 4 on cpu (cpu0, cpu1): 1 chunk, 1 bin, wall")
    assert "cpu0: 1 chunk; busy s: read 0.010, compute 0.100" in text and "cpu1: 0 chunks; idle" in text
    assert "(s)" not in text and "GPU" not in text  # no GPU memory line on the CPU
    st.chunks, st.bins = 3, 7
    assert "3 chunks, 7 bins" in st.summary()
    assert RunStats(operation="forward projection").what == "forward projection"  # all views: no subset


def test_plan_command_with_one_worker_is_singular(stir_fixtures, capsys):
    hs = reference_results(stir_fixtures) / "ecat953_span3_fwd.hs"
    assert main(["plan", str(hs), "--backend", "cpu", "--devices", "0", "--subsets", "96"]) == 0
    out = capsys.readouterr().out
    assert "backend: cpu (1 CPU worker); subset 0 of 96 (1 of 96 views)" in out
    assert "1 chunk of at most" in out and "1 CPU worker x 2 slots" in out and "(s)" not in out


def test_info_and_plan_write_nothing_and_say_no_wrote(stir_fixtures, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hs = reference_results(stir_fixtures) / "ecat953_span3_fwd.hs"
    for argv in (["info", str(hs)], ["plan", str(hs), "--backend", "cpu"]):
        assert main(argv) == 0
        assert not capsys.readouterr().out.splitlines()[-1].startswith("wrote")
    assert list(tmp_path.iterdir()) == []


# -- the final line ---------------------------------------------------------------------------
def test_back_project_ends_with_what_it_wrote(stir_fixtures, tmp_path, capsys):
    ref = reference_results(stir_fixtures)
    out = tmp_path / "b.hv"
    assert main(back_args(ref, out)) == 0
    from stirgpu.execution import format_bytes

    size = out.stat().st_size + out.with_suffix(".v").stat().st_size
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {out} (+ b.v, {format_bytes(size)})"


def test_osmaposl_wrote_line_counts():
    """The osmaposl summary names the final estimate and counts estimates and sensitivities in
    words (its file and size come from describe_interfile, tested through the command)."""
    from pathlib import Path

    from stirgpu.cli.osmaposl import wrote_line

    assert wrote_line([], [], no_estimate="why") == "wrote nothing (why)"
    assert wrote_line([], [Path("s.hv")], no_estimate="why") == "wrote 1 sensitivity image; no estimate (why)"


def test_osmaposl_says_why_no_estimate_was_written():
    """Output disabled, or a start subiteration after the last one: the line names the keys."""
    from types import SimpleNamespace

    from stirgpu.cli.osmaposl import no_estimate_reason

    def settings(disable, start, last):
        return SimpleNamespace(disable_output=disable, start_subiteration_num=start, num_subiterations=last)

    assert no_estimate_reason(settings(True, 1, 4)) == "output disabled in the parameter file: 'disable output := 1'"
    assert no_estimate_reason(settings(False, 5, 4)) == (
        "no subiteration ran: 'start at subiteration number := 5' comes after the last one, "
        "'number of subiterations := 4'"
    )
