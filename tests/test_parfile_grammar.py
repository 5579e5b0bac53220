"""The STIR parameter-file grammar (stirgpu.parfile.grammar).

Exact checks throughout (text in, tree out): there is no arithmetic, so no tolerance.
Each test says which STIR rule it pins down and which mistake it guards against.
"""

from __future__ import annotations

import os

import pytest

from stirgpu.errors import ParFileError, ParFileProblems
from stirgpu.parfile import Block, Entry, canonical_key, parse_par_file, parse_par_string, split_list


def parse(text: str, **kw) -> Block:
    return parse_par_string(text, path="test.par", env=kw.pop("env", {}), **kw)


def test_canonical_key_ignores_case_spaces_underscores_and_bang():
    """STIR (Interfile 3.3): case, blanks, '_' and '!' are not significant in keys, so all
    spellings of one key must compare equal -- and different keys must not."""
    spellings = ["num_gpu_chunks", "Num GPU Chunks", "!NUM_GPU_CHUNKS", " num\tgpu  chunks ", "numGPUchunks"]
    assert {canonical_key(s) for s in spellings} == {"numgpuchunks"}
    assert canonical_key("number of subsets") != canonical_key("number of subiterations")


def test_entries_keep_value_and_line_and_keys_match_in_any_spelling():
    """Values are the stripped text after ':=' and every entry knows its 1-based line; lookup
    through Block.get/find works with any spelling (guards against exact-string matching)."""
    b = parse(
        "OSMAPOSLParameters :=\n"
        "\n"
        "  Number_Of  Subsets:=   4   \n"
        "!output filename prefix := my prefix/with spaces\n"
        "END :=\n"
    )
    assert b.key == "osmaposlparameters" and b.line == 1 and b.end_line == 5
    e = b.find("NUMBER OF_SUBSETS")
    assert isinstance(e, Entry) and e.value == "4" and e.line == 3 and e.raw_key == "Number_Of  Subsets"
    assert b.get("output filename prefix") == "my prefix/with spaces"
    assert b.get("absent key", "dflt") == "dflt"


def test_comments_are_removed_everywhere():
    """';' starts a comment on its own line, after a value and before the first block; a
    commented-out key must not exist in the tree (guards against a 'key' named ';...')."""
    b = parse(
        "; leading comment\n"
        "OSMAPOSLParameters := ; the start key\n"
        ";maximum absolute segment number to process := 3\n"
        "zero end planes of segment 0:= 0 ; segment 0 has direct and indirect planes\n"
        "input file := data.hs;comment without space\n"
        "End :=\n"
    )
    assert [c.key for c in b.children] == ["zeroendplanesofsegment0", "inputfile"]
    assert b.get("zero end planes of segment 0") == "0"
    assert b.get("input file") == "data.hs"


def test_empty_value_is_an_entry_without_value_not_a_block():
    """'additive sinogram :=' with nothing after it is STIR's "no value" (keep the default):
    an Entry with value None, not a block that would swallow the following keys."""
    b = parse("OSMAPOSLParameters :=\nadditive sinogram :=\nzoom := 2\nEnd :=\n")
    assert [type(c).__name__ for c in b.children] == ["Entry", "Entry"]
    assert b.find("additive sinogram").value is None
    assert b.get("zoom") == "2"


def test_nested_blocks_with_stirs_end_variants():
    """Blocks nest; 'end <Name> :=' in any case/spacing closes <Name>, a bare 'End :=' closes the
    innermost block (STIR's top-level 'END :=' and shape blocks), and a block named without
    'Parameters' (Bin Normalisation From ProjData) is recognised by its matching End line."""
    text = (
        "OSMAPOSLParameters :=\n"  # 1
        "projector pair type := Parallelproj\n"  # 2
        "Projector Pair Using Parallelproj Parameters:=\n"  # 3
        "  verbosity := 0\n"  # 4
        "end projector_pair using PARALLELPROJ parameters:=\n"  # 5
        "Bin Normalisation type := From ProjData\n"  # 6
        "Bin Normalisation From ProjData :=\n"  # 7
        "normalisation projdata filename:= norm.hs\n"  # 8
        "End Bin Normalisation From ProjData:=\n"  # 9
        "Ellipsoidal Cylinder Parameters:=\n"  # 10
        "origin (in mm):={70,10,20}\n"  # 11
        "END:=\n"  # 12
        "zoom := 1\n"  # 13
        "END :=\n"
    )  # 14
    b = parse(text)
    kinds = [(type(c).__name__, c.key) for c in b.children]
    assert kinds == [
        ("Entry", "projectorpairtype"),
        ("Block", "projectorpairusingparallelprojparameters"),
        ("Entry", "binnormalisationtype"),
        ("Block", "binnormalisationfromprojdata"),
        ("Block", "ellipsoidalcylinderparameters"),
        ("Entry", "zoom"),
    ]
    pp, norm, cyl = list(b.blocks())
    assert (pp.line, pp.end_line, norm.line, norm.end_line, cyl.line, cyl.end_line) == (3, 5, 7, 9, 10, 12)
    assert pp.get("verbosity") == "0" and norm.get("normalisation projdata filename") == "norm.hs"
    assert split_list(cyl.get("origin (in mm)")) == ["70", "10", "20"]
    assert b.end_line == 14


def test_top_level_block_may_end_with_the_file():
    """STIR stops parsing at the end of the input, so a file without the final 'End :=' is
    accepted (end_line None); a nested block left open is an error naming its opening line."""
    b = parse("OSMAPOSLParameters :=\nzoom := 1\n")
    assert b.end_line is None and b.get("zoom") == "1"
    with pytest.raises(ParFileError) as exc:
        parse("OSMAPOSLParameters :=\nA Parameters :=\nzoom := 1\n")
    assert exc.value.line == 2 and "A Parameters" in str(exc.value) and "never closed" in str(exc.value)


def test_lists_with_and_without_braces():
    """'{a, b}' lists as STIR reads them: items trimmed, a bare value is a 1-list; malformed
    lists are errors rather than half-parsed values."""
    assert split_list("{0, 1 ,2}") == ["0", "1", "2"]
    assert split_list("{ a b , c }") == ["a b", "c"]
    assert split_list("7") == ["7"]
    assert split_list("{}") == []
    for bad in ("{0, 1", "0, 1}", "{0,,1}", "{{0}}"):
        with pytest.raises(ValueError):
            split_list(bad)


def test_environment_variables_are_substituted():
    """'${NAME}' is replaced by the variable (anywhere in a line, several per line); the
    value is not expanded again, and a reference inside a comment is not looked up."""
    env = {"DIR": "/data", "N": "4", "WEIRD": "${N}"}
    b = parse(
        "OSMAPOSLParameters :=\n"
        "input file := ${DIR}/prompts_${N}.hs\n"
        "number of subsets := ${N} ; ${UNSET_IN_COMMENT}\n"
        "output filename prefix := ${WEIRD}\n"
        "End :=\n",
        env=env,
    )
    assert b.get("input file") == "/data/prompts_4.hs"
    assert b.get("number of subsets") == "4"
    assert b.get("output filename prefix") == "${N}"


def test_undefined_environment_variable_names_variable_and_line():
    """STIR silently substitutes an empty string for an unset variable; stirgpu refuses and
    says which variable on which line."""
    with pytest.raises(ParFileError) as exc:
        parse("OSMAPOSLParameters :=\nzoom := 1\ninput file := ${INPUT}\nEnd :=\n", env={})
    assert exc.value.line == 3 and exc.value.path == "test.par"
    assert "INPUT" in str(exc.value) and "test.par:3" in str(exc.value)
    for bad in ("x := ${A", "x := ${}"):
        with pytest.raises(ParFileError) as exc:
            parse(f"OSMAPOSLParameters :=\n{bad}\n", env={"A": "1"})
        assert exc.value.line == 2


def test_environment_defaults_to_os_environ(monkeypatch):
    """Without an explicit env mapping, ${VAR} comes from the process environment."""
    monkeypatch.setenv("STIRGPU_TEST_PARFILE_VAR", "from-env")
    b = parse_par_string("OSMAPOSLParameters :=\nx := ${STIRGPU_TEST_PARFILE_VAR}\n")
    assert b.get("x") == "from-env"


def test_backslash_continues_a_line():
    """STIR joins a line ending in '\\' with the next; the entry keeps the first line's number
    and later line numbers stay exact."""
    b = parse("OSMAPOSLParameters :=\ninput file := long/\\\npath.hs\nzoom := 2\n")
    assert b.find("input file").value == "long/path.hs" and b.find("input file").line == 2
    assert b.find("zoom").line == 4


def test_dos_line_endings_and_indexed_keys():
    """CRLF files parse like LF files; 'key[n] :=' keeps its index (STIR's vectored keys)."""
    b = parse("OSMAPOSLParameters :=\r\nmatrix size [2] := 5\r\nEnd :=\r\n")
    e = b.find("matrix size")
    assert e.index == 2 and e.value == "5" and e.line == 2


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("zoom := 1\n", 1, "must start with a block"),
        ("OSMAPOSLParameters :=\n := 3\n", 2, "missing key"),
        ("OSMAPOSLParameters :=\nx [1 := 3\n", 2, "malformed index"),
        ("OSMAPOSLParameters :=\nEnd := now\n", 2, "takes no value"),
        ("OSMAPOSLParameters :=\nA Parameters :=\nEnd OSMAPOSLParameters :=\n", 3, "still open"),
        ("OSMAPOSLParameters :=\nEnd :=\nzoom := 1\n", 3, "after the end"),
        ("; only a comment\n\n", None, "no parameters"),
    ],
)
def test_malformed_text_is_refused_with_its_line(text, line, words):
    """Every structural mistake is a ParFileError with the line to look at (not a warning and
    a silently different tree, as STIR would give)."""
    with pytest.raises(ParFileError) as exc:
        parse(text)
    assert exc.value.line == line
    assert words in str(exc.value)


def test_parse_par_file_reads_files_and_reports_unreadable_ones(tmp_path):
    """Files are read with their path in every message; missing and binary files are refused
    up front; latin-1 text (old STIR files) is read rather than rejected, a name keeping its bytes
    (the name of the file STIR would write), UTF-8 text as its characters."""
    p = tmp_path / "a.par"
    p.write_bytes("OSMAPOSLParameters :=\noutput filename prefix := caf\xe9\nEnd :=\n".encode("latin-1"))
    b = parse_par_file(p, env={})
    assert b.path == str(p) and os.fsencode(b.get("output filename prefix")) == b"caf\xe9"
    p.write_bytes("OSMAPOSLParameters :=\noutput filename prefix := caf\xe9 \xf6\nEnd :=\n".encode())
    assert parse_par_file(p, env={}).get("output filename prefix") == "caf\xe9 \xf6"
    with pytest.raises(ParFileError) as exc:
        parse_par_file(tmp_path / "missing.par")
    assert "missing.par" in str(exc.value)
    (tmp_path / "bin.par").write_bytes(b"\0\1\2")
    with pytest.raises(ParFileError, match="binary"):
        parse_par_file(tmp_path / "bin.par")
    p.write_text("OSMAPOSLParameters :=\nx := ${}\n")
    with pytest.raises(ParFileError) as exc:
        parse_par_file(p)
    assert exc.value.path == str(p) and exc.value.line == 2


def test_every_unreadable_line_is_reported_at_once():
    """Lines that cannot be read (an empty ${}, an unset ${VAR}, a malformed index, an 'End' with a
    value) are all listed in one ParFileProblems, in file order, each with its line."""
    text = "OSMAPOSLParameters :=\nsubsets := ${}\ninput file := ${NOT_SET}\nzoom[1 := 2\nEnd := 3\n"
    with pytest.raises(ParFileProblems) as exc:
        parse(text)
    assert [p.line for p in exc.value.problems] == [2, 3, 4, 5]
    lines = str(exc.value).splitlines()
    assert len(lines) == 5 and lines[-1] == "4 problems in test.par"
    assert "empty environment variable" in lines[0] and "'NOT_SET'" in lines[1] and "malformed index" in lines[2]


def test_a_line_without_assignment_is_skipped_with_a_warning(caplog):
    """STIR reads a line without ':=' as a keyword it does not know, warns and goes on (STIR's
    OSMAPOSL_QuadraticPrior.par has "' value of only_2D is ignored" inside the prior block): the
    line is left out of the tree and a warning names the file, the line and its text; an
    'End Name' line without ':=' still closes Name (STIR's end keys take no value)."""
    text = (
        "OSMAPOSLParameters :=\n"  # 1
        "Quadratic Prior Parameters :=\n"  # 2
        "  ' value of only_2D is ignored\n"  # 3
        "  penalisation factor := 0.5\n"  # 4
        "END Quadratic Prior Parameters\n"  # 5
        "zoom 2\n"  # 6
        "END :=\n"  # 7
    )
    with caplog.at_level("WARNING", logger="stirgpu.parfile"):
        b = parse(text)
    (prior,) = b.blocks()
    assert [c.key for c in prior.children] == ["penalisationfactor"] and (prior.line, prior.end_line) == (2, 5)
    assert [c.key for c in b.children] == ["quadraticpriorparameters"] and b.end_line == 7
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert warnings[0].startswith('test.par:3: skipped "\' value of only_2D is ignored"') and "no ':='" in warnings[0]
    assert warnings[1].startswith("test.par:6: skipped 'zoom 2'")


def test_an_end_naming_no_open_block_is_skipped_and_the_block_stays_open(caplog):
    """STIR closes a block only with the end key its object registered, matched by name
    (``End Singles Rates From ECAT7`` after ``Singles Rates From ECAT7 File :=`` in STIR's
    OSMAPOSL_osem_with_interfiltering.par is an unrecognised keyword there): the line is skipped
    with a warning and the keys after it stay in the open block until its own End."""
    text = (
        "OSMAPOSLParameters :=\n"  # 1
        "Bin Normalisation From ECAT7 :=\n"  # 2
        "Singles Rates From ECAT7 File :=\n"  # 3
        "ECAT7_filename := s.S\n"  # 4
        "End Singles Rates From ECAT7 :=\n"  # 5
        "use dead time := 0\n"  # 6
        "End Bin Normalisation From ECAT7 :=\n"  # 7
        "zoom := 1\n"  # 8
        "END :=\n"
    )
    with caplog.at_level("WARNING", logger="stirgpu.parfile"):
        b = parse(text)
    (norm,) = b.blocks()
    assert (norm.line, norm.end_line) == (2, 7)
    assert [c.key for c in norm.children] == ["singlesratesfromecat7file", "ecat7filename", "usedeadtime"]
    assert b.get("zoom") == "1"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith("test.par:5: skipped 'End Singles Rates From ECAT7'")
    assert "'Bin Normalisation From ECAT7' (opened at line 2) stays open" in warning


def test_an_end_naming_an_enclosing_block_is_refused():
    """An 'End' of an outer block while an inner block is open: STIR's inner object would read the
    rest of the file, so this is refused at its line rather than read another way."""
    with pytest.raises(ParFileError) as exc:
        parse("OSMAPOSLParameters :=\nA Parameters :=\nEnd OSMAPOSLParameters :=\n")
    assert exc.value.line == 3 and "rest of the file" in str(exc.value)


def test_the_skipped_lines_show_on_the_command_line(tmp_path):
    """The CLI shows the grammar's warnings (stderr), with the file and line."""
    import subprocess
    import sys

    par = tmp_path / "recon.par"
    par.write_text("OSMAPOSLParameters :=\nnumber of subsets 4\nEND :=\n")
    proc = subprocess.run(
        [sys.executable, "-m", "stirgpu", "osmaposl", str(par)], capture_output=True, text=True, cwd=tmp_path
    )
    assert f"{par}:2: skipped 'number of subsets 4'" in proc.stderr
