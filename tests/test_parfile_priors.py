"""``prior type :=`` in OSMAPOSL parameter files (stirgpu.parfile.priors): STIR's keys and defaults,
every problem at its line, the files a prior reads and writes, writing the block back.

STIR's defaults themselves are checked against STIR's objects in
tests/stir_differential/test_priors_vs_stir.py; STIR's reading of the keys through its OSMAPOSL in
test_osmaposl_priors_vs_stir.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stirgpu.errors import ParFileError, ParFileProblems
from stirgpu.parfile import osmaposl_settings_from_block, parse_par_string, read_osmaposl_par
from stirgpu.parfile.priors import PriorSettings, parse_weights

HEAD = (
    "OSMAPOSLParameters :=\n"
    "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
    "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
    "input file := prompts.hs\n"
    "projector pair type := Parallelproj\n"
    "Projector Pair Using Parallelproj Parameters :=\n"
    "End Projector Pair Using Parallelproj Parameters :=\n"
)
TAIL = "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\noutput filename prefix := out\n"


def par(prior: str, top: str = "") -> str:
    return f"{HEAD}{prior}{TAIL}{top}END :=\n"


def block(prior_type: str, body: str = "") -> str:
    name = f"{prior_type} Parameters" if prior_type.startswith("Relative") else f"{prior_type} Prior Parameters"
    return f"prior type := {prior_type}\n{name} :=\n{body}END {name} :=\n"


def read(tmp_path: Path, text: str, **kw):
    p = tmp_path / "recon.par"
    p.write_text(text)
    return read_osmaposl_par(p, base_dir=tmp_path, env={}, **kw)


def problems(tmp_path: Path, text: str, **kw) -> list[tuple[int, str]]:
    with pytest.raises(ParFileProblems) as exc:
        read(tmp_path, text, **kw)
    return [(p.line, p.reason) for p in exc.value.problems]


def line_of(text: str, needle: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if needle.lower() in s.lower())


def test_no_prior_by_default_and_none(tmp_path):
    assert read(tmp_path, par("")).prior is None
    assert read(tmp_path, par("prior type := None\n")).prior is None


@pytest.mark.parametrize("prior_type", ["Quadratic", "Relative Difference Prior", "Logcosh"])
def test_an_empty_block_gives_stirs_defaults(tmp_path, prior_type):
    """Penalisation factor 0 (so STIR's prior_is_zero), 3-D default weights, no kappa, no gradient
    files, gamma 2 / epsilon 0 (RDP), scalar 1 (Logcosh)."""
    s = read(tmp_path, par(block(prior_type)))
    assert s.prior == PriorSettings(prior_type)
    p = s.prior
    assert (p.penalisation_factor, p.only_2d, p.kappa_filename, p.weights, p.gradient_filename_prefix) == (
        0.0,
        False,
        None,
        None,
        None,
    )
    assert (p.gamma, p.epsilon, p.scalar) == (2.0, 0.0, 1.0) and p.is_zero


def test_every_key_of_each_block(tmp_path):
    """STIR's spellings (any case, blanks or underscores, as STIR's keys), names relative to the
    base folder, the prefix kept as written (a trailing '/' means a folder)."""
    body = (
        "Penalisation_Factor := 0.25\nonly 2D := 1\nkappa filename := k.hv\n"
        "weights := {{{0,1,0},{1,0,1},{0,1,0}}}\ngradient filename prefix := grads/\n"
        "gamma value := 1.5\nepsilon value := 1e-4\n"
    )
    text = par(block("Relative Difference Prior", body))
    s = read(tmp_path, text)
    assert s.prior == PriorSettings(
        "Relative Difference Prior",
        penalisation_factor=0.25,
        only_2d=True,
        kappa_filename=tmp_path / "k.hv",
        weights=(((0.0, 1.0, 0.0), (1.0, 0.0, 1.0), (0.0, 1.0, 0.0)),),
        gradient_filename_prefix=f"{tmp_path}/grads/",
        gamma=1.5,
        epsilon=1e-4,
    )
    assert s.line("prior") == line_of(text, "prior type")
    assert s.line("prior.epsilon") == line_of(text, "epsilon value")
    lc = read(tmp_path, par(block("Logcosh", "scalar := 3\npenalisation factor := 2\n"))).prior
    assert (lc.scalar, lc.penalisation_factor) == (3.0, 2.0)


def test_settings_write_back_to_the_same_settings(tmp_path):
    body = "penalisation factor := 0.5\nweights := {{{1,2},{3,4}}}\nkappa filename := k.hv\nscalar := 0.5\n"
    s = read(tmp_path, par(block("Logcosh", body), "MAP model := multiplicative\n"))
    again = osmaposl_settings_from_block(parse_par_string(s.to_par()), base_dir=tmp_path)
    assert again == s and again.prior == s.prior and again.map_model == "multiplicative"


def test_problems_are_reported_at_their_lines(tmp_path):
    """A key of another prior, values out of range, unreadable weights: each at its line, all at once."""
    text = par(
        block(
            "Logcosh",
            "gamma value := 1\nscalar := 0\nonly 2D := 2\nweights := {{0,1},{1,0}}\npenalisation factor := x\n",
        )
    )
    got = problems(tmp_path, text)
    want = [
        (line_of(text, "gamma value"), "unknown key 'gamma value'"),
        (line_of(text, "scalar"), "must be positive"),
        (line_of(text, "only 2D"), "expects 0 or 1"),
        (line_of(text, "weights"), "expects a 3-D list"),
        (line_of(text, "penalisation factor"), "expects a number"),
    ]
    assert [line for line, _ in got] == [line for line, _ in want]
    for (_, reason), (_, words) in zip(got, want, strict=True):
        assert words in reason, reason
    got = problems(tmp_path, par(block("Relative Difference Prior", "epsilon value := -1e-3\n")))
    assert "must be >= 0" in got[0][1]


@pytest.mark.parametrize(
    "text, words",
    [
        ("{{{1,2},{3}}}", "regular 3-D array"),
        ("{{{1,2},{3,4}},{{5,6}}}", "regular 3-D array"),
        ("{{{1,{2}}}}", "mixed numbers and lists"),
        ("{{{1,2}}", "unbalanced braces"),
        ("{{{1,a}}}", "expects numbers"),
        ("{{{1 2}}}", "expects ',' or '}'"),
    ],
)
def test_weights_that_stir_cannot_take_are_refused(text, words):
    with pytest.raises(ValueError, match=words.replace("{", r"\{").replace("}", r"\}")):
        parse_weights(text)


def test_weights_parse_and_empty_means_default():
    assert parse_weights("{}") is None
    assert parse_weights(" { { {1, -2.5e-1} } } ") == (((1.0, -0.25),),)


@pytest.mark.parametrize(
    "value, words",
    [
        (
            "PLS",
            "prior 'PLS' is not implemented by stirgpu; STIR runs it with stirgpu's plugin: stirgpu stir OSMAPOSL ",
        ),
        ("Cuda Gibbs Relative Difference", "CPU version of it is 'Gibbs Relative Difference'"),
        ("Cuda Relative Difference Prior", "CPU version of it is 'Relative Difference Prior'"),
        ("Huber", "unknown prior type"),
    ],
)
def test_other_priors_are_refused_at_the_type_line(tmp_path, value, words):
    """STIR's priors stirgpu does not implement, and names STIR does not know, are refused at the
    'prior type' line (the block after them is not reported again)."""
    text = par(f"prior type := {value}\n{value} Parameters :=\npenalisation factor := 1\nEnd {value} Parameters :=\n")
    got = problems(tmp_path, text)
    assert len(got) == 1 and got[0][0] == line_of(text, "prior type") and words in got[0][1], got


def test_a_missing_block_is_named(tmp_path):
    got = problems(tmp_path, par("prior type := Quadratic\n"))
    assert "must be followed by the block 'Quadratic Prior Parameters :='" in got[0][1]


def test_map_model_spelling_with_and_without_a_prior(tmp_path):
    """STIR compares MAP model exactly only when the prior is not zero: 'Multiplicative' is refused
    there (STIR errors too), accepted (as multiplicative) without a prior or with a zero factor."""
    text = par(block("Quadratic", "penalisation factor := 1\n"), "MAP model := Multiplicative\n")
    got = problems(tmp_path, text)
    assert got[0][0] == line_of(text, "MAP model") and "lower case" in got[0][1]
    assert read(tmp_path, par("", "MAP model := Multiplicative\n")).map_model == "multiplicative"
    assert read(tmp_path, par(block("Quadratic"), "MAP model := Additive\n")).map_model == "additive"


def test_kappa_file_and_gradient_folder_are_checked_before_any_work(tmp_path):
    """A missing kappa image and a missing folder for the gradient images are listed with the
    other file problems, each at its key's line."""
    text = par(block("Quadratic", "kappa filename := nokappa.hv\ngradient filename prefix := nowhere/g_\n"))
    (tmp_path / "prompts.hs").write_text("")
    got = problems(tmp_path, text, check_files=True)
    assert (line_of(text, "kappa filename"), f"file not found: {tmp_path / 'nokappa.hv'}") in got
    assert (line_of(text, "gradient filename prefix"), f"output folder {tmp_path / 'nowhere'} does not exist") in got
    with pytest.raises(ParFileError):
        read(tmp_path, text).check_input_files()


def gibbs(kind: str, body: str = "") -> str:
    name = f"Gibbs {kind} Penalty Parameters"
    return f"prior type := Gibbs {kind}\n{name} :=\n{body}END {name} :=\n"


def test_the_gibbs_penalties_read_stirs_keys_and_defaults(tmp_path):
    """STIR 6.3's blocks ('<name> Penalty Parameters'), the keys GibbsPenalty parses (penalisation
    factor, only 2D, kappa filename, weights, gradient filename prefix; gamma and epsilon for the
    RDP), and its defaults: epsilon 1e-7 for the Gibbs RDP (0 for STIR's older RDP)."""
    s = read(tmp_path, par(gibbs("Relative Difference")))
    assert s.prior == PriorSettings("Gibbs Relative Difference") and s.prior.epsilon == 1e-7
    assert PriorSettings("Relative Difference Prior").epsilon == 0.0
    body = "penalisation factor := 0.5\nonly 2D := 1\nkappa filename := k.hv\nweights := {{{1,0,1}}}\n"
    q = read(tmp_path, par(gibbs("Quadratic", body))).prior
    assert (q.type, q.penalisation_factor, q.only_2d, q.kappa_filename, q.weights) == (
        "Gibbs Quadratic",
        0.5,
        True,
        tmp_path / "k.hv",
        (((1.0, 0.0, 1.0),),),
    )
    r = read(tmp_path, par(gibbs("Relative Difference", "gamma value := 1\nepsilon value := 0.01\n"))).prior
    assert (r.gamma, r.epsilon) == (1.0, 0.01)
    assert q.parameters()["gradient_filename_prefix"] is None


def test_a_zero_gibbs_epsilon_is_refused_at_its_line(tmp_path):
    """STIR's Gibbs RDP divides 0 by 0 where two neighbours are 0 when epsilon is 0 (NaN in every
    image with zeros): refused at the line, naming the older RDP that takes 0."""
    text = par(gibbs("Relative Difference", "epsilon value := 0\n"))
    ((line, reason),) = problems(tmp_path, text)
    assert line == line_of(text, "epsilon value") and "must be > 0" in reason and "Relative Difference Prior" in reason


def test_filter_root_prior_with_a_median_filter(tmp_path):
    """STIR's MRP block: 'Filter type := Median' and its radii (any missing radius is STIR's 0),
    'None' (no filter), and the radii written back by to_par()."""
    text = par(
        "prior type := FilterRootPrior\nFilterRootPrior Parameters :=\npenalisation factor := .2\n"
        "Filter type := median\nMedian Filter Parameters :=\nmask radius x := 1\nmask radius y := 2\n"
        "End Median Filter Parameters :=\nEND FilterRootPrior Parameters :=\n"
    )
    s = read(tmp_path, text)
    assert s.prior == PriorSettings("FilterRootPrior", penalisation_factor=0.2, median_mask_radius=(0, 2, 1))
    assert s.prior.parameters() == {"penalisation_factor": 0.2, "median_mask_radius": (0, 2, 1)}
    again = tmp_path / "again.par"
    again.write_text(s.to_par())
    assert read_osmaposl_par(again, env={}).prior == s.prior
    none = par(
        "prior type := FilterRootPrior\nFilterRootPrior Parameters :=\nFilter type := None\n"
        "END FilterRootPrior Parameters :=\n"
    )
    assert read(tmp_path, none).prior == PriorSettings("FilterRootPrior")


def test_filter_root_prior_refuses_other_filters_and_neighbourhood_keys(tmp_path):
    """Another filter type is refused at its line (stirgpu has STIR's Median); keys of the
    neighbourhood priors do not belong in STIR's FilterRootPrior block."""
    text = par(
        "prior type := FilterRootPrior\nFilterRootPrior Parameters :=\nonly 2D := 1\n"
        "Filter type := Separable Gaussian\nSeparable Gaussian Filter Parameters :=\n"
        "End Separable Gaussian Filter Parameters :=\nEND FilterRootPrior Parameters :=\n"
    )
    got = problems(tmp_path, text)
    assert [line for line, _ in got] == [line_of(text, "only 2D"), line_of(text, "Filter type")]
    assert "'Median' filter" in got[1][1]
