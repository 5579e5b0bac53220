"""Every STIR-written .par file in ../shared/fixtures either parses into stirgpu's settings or is
refused with an error naming the unsupported feature and its line -- asserted per file.

The expected lines are found in the fixture text by searching for the offending key, not by
the parser under test.  Exact comparisons (parsed values, no arithmetic).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REFERENCE_RESULTS, reference_results

from stirgpu.errors import ParFileError
from stirgpu.parfile import ProjectorOptions, ProjectorSettings, parse_par_file, read_osmaposl_par, read_projector_par
from stirgpu.parfile.priors import PriorSettings

# variables the recon_test_pack scripts export before running these files
ENV = {
    "INPUT": "in.hs",
    "ADD_SINO": "add.hs",
    "MAX_SEG_NUM": "3",
    "NORM_PROJDATA": "norm.hs",
    "SENS": "sens.hv",
    "filename": "out",
    "suffix": "_1",
    "num_subsets": "4",
}

OSMAPOSL_REFUSED = {
    # file: (text that marks the refused line, words the error must contain)
    "stir_recon_test_pack/OSMAPOSL_emml_with_projector_pair.par": (
        "Forward projector type := Ray Tracing",
        "ray-tracing forward projector",
    ),
    "stir_recon_test_pack/OSMAPOSL_test.par": ("forward projector type := Ray Tracing", "ray-tracing"),
    "stir_recon_test_pack/OSMAPOSL_test_proj.par": ("projector pair type := Matrix", "projection-matrix"),
}
PROJECTOR_FILES = {
    "stir_recon_test_pack/forward_projector_parallelproj.par": ProjectorSettings(
        "forward", ProjectorOptions(verbosity=0), None
    ),
    "stir_recon_test_pack/back_projector_parallelproj.par": ProjectorSettings(
        "back", None, ProjectorOptions(verbosity=0)
    ),
    "stir_recon_test_pack/projector_pair_parallelproj.par": ProjectorSettings(
        "pair", ProjectorOptions(), ProjectorOptions(), "Parallelproj"
    ),
}
OTHER_FILES = {"stir_recon_test_pack/generate_uniform_cylinder.par"}  # generate_image, not recon/projector
OSMAPOSL_OK = {f"{REFERENCE_RESULTS}/osem953.par", "stir_recon_test_pack/OSMAPOSL_test_sim_Parallelproj_CUDARDP.par"}


def line_of(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, s in enumerate(lines, 1) if needle.lower() in s.lower())


def test_every_fixture_par_file_is_covered(stir_fixtures):
    """The table above names every .par fixture of STIR's files and of the reference results
    the tests use, so a new fixture cannot go untested."""
    found = {p.relative_to(stir_fixtures).as_posix() for p in stir_fixtures.rglob("*.par")}
    found = {name for name in found if name.split("/")[0] in ("stir_recon_test_pack", REFERENCE_RESULTS)}
    assert found == set(OSMAPOSL_REFUSED) | set(PROJECTOR_FILES) | OTHER_FILES | OSMAPOSL_OK


@pytest.mark.parametrize("name", sorted(set(OSMAPOSL_REFUSED) | set(PROJECTOR_FILES) | OTHER_FILES | OSMAPOSL_OK))
def test_grammar_reads_every_fixture(stir_fixtures, name):
    """STIR's own files are well-formed for the grammar: one outermost block closed at the
    last non-comment line (or by the end of the file)."""
    path = stir_fixtures / name
    root = parse_par_file(path, env=ENV)
    last = max(i for i, s in enumerate(path.read_text().splitlines(), 1) if s.split(";")[0].strip())
    assert root.line == 1 and root.end_line == last


@pytest.mark.parametrize("name", sorted(OSMAPOSL_REFUSED))
def test_unsupported_osmaposl_fixtures_are_refused_at_the_right_line(stir_fixtures, name):
    """Each test-pack OSMAPOSL file asks for something stirgpu does not do (ray tracing,
    matrix projectors, a prior): refused at that line, naming it."""
    path = stir_fixtures / name
    needle, words = OSMAPOSL_REFUSED[name]
    with pytest.raises(ParFileError) as exc:
        read_osmaposl_par(path, base_dir=path.parent, env=ENV)
    assert exc.value.path == str(path)
    assert exc.value.line == line_of(path, needle), str(exc.value)
    assert words in str(exc.value)


def test_unset_variables_of_the_test_pack_are_named(stir_fixtures):
    """OSMAPOSL_test_proj.par needs ${INPUT} etc.; without them the error names the first
    unset variable and its line (STIR would substitute an empty file name)."""
    path = stir_fixtures / "stir_recon_test_pack/OSMAPOSL_test_proj.par"
    with pytest.raises(ParFileError) as exc:
        read_osmaposl_par(path, env={})
    assert exc.value.line == line_of(path, "${INPUT}") and "'INPUT'" in str(exc.value)


def test_osem953_par_parses_into_the_settings_stir_ran_with(stir_fixtures):
    """The parameter file of the STIR reference reconstruction parses completely, with the
    values STIR used (4 subsets, 8 subiterations, Parallelproj, From ProjData normalisation,
    additive term, subset sensitivities osem953_sens_K.hv that exist beside it)."""
    path = reference_results(stir_fixtures) / "osem953.par"
    d = path.parent
    s = read_osmaposl_par(path, base_dir=d, env={})
    assert s.input_file == d / "osem953_prompts.hs"
    assert s.additive_sinogram == d / "osem953_additive.hs"
    assert s.normalisation == d / "osem953_norm.hs"
    assert s.projectors == ProjectorSettings("pair", ProjectorOptions(), ProjectorOptions(), "Parallelproj")
    assert (s.num_subsets, s.num_subiterations, s.save_interval, s.start_subset_num) == (4, 8, 4, 0)
    assert (s.zoom, s.xy_output_image_size, s.z_output_image_size) == (1.0, 95, None)
    assert (s.use_subset_sensitivities, s.recompute_sensitivity, s.zero_end_planes_of_segment_0) == (True, True, False)
    assert [s.subset_sensitivity_filename(k) for k in range(4)] == [d / f"osem953_sens_{k}.hv" for k in range(4)]
    assert all(s.subset_sensitivity_filename(k).is_file() for k in range(4))
    assert s.output_filename_prefix == d / "osem953_osem"
    assert s.initial_estimate == 1.0 and s.enforce_initial_positivity
    s.check_input_files()  # prompts, additive and norm are all there


def test_rdp_test_pack_par_parses_with_its_prior(stir_fixtures):
    """The test pack's OSMAPOSL file with a Relative Difference Prior (named CUDARDP, but it asks
    for STIR's CPU 'Relative Difference Prior') parses with STIR's values: penalisation factor 0.5,
    3-D default weights, gamma 2 and epsilon 0 (STIR's defaults), additive MAP model (the default);
    the rest as written (28 subiterations, 91 pixels, zoom 0.5).  The file's own run against STIR
    is in tests/stir_differential/test_osmaposl_priors_vs_stir.py."""
    path = stir_fixtures / "stir_recon_test_pack/OSMAPOSL_test_sim_Parallelproj_CUDARDP.par"
    s = read_osmaposl_par(path, base_dir=path.parent, env=ENV)
    assert s.prior == PriorSettings("Relative Difference Prior", penalisation_factor=0.5)
    assert (s.prior.gamma, s.prior.epsilon, s.prior.only_2d, s.prior.weights) == (2.0, 0.0, False, None)
    assert s.line("prior") == line_of(path, "prior type := Relative Difference Prior")
    assert s.line("prior.penalisation_factor") == line_of(path, "penalisation factor := 0.5")
    assert s.map_model == "additive"
    assert (s.num_subiterations, s.xy_output_image_size, s.zoom, s.num_subsets) == (28, 91, 0.5, 4)


@pytest.mark.parametrize("name", sorted(PROJECTOR_FILES))
def test_projector_fixtures_parse(stir_fixtures, name):
    """STIR's Parallelproj sample files for forward_project/back_project and the pair file
    parse into the expected settings."""
    s = read_projector_par(stir_fixtures / name, env={})
    assert s == PROJECTOR_FILES[name]


@pytest.mark.parametrize("name", sorted(OTHER_FILES | set(PROJECTOR_FILES)))
def test_other_files_are_not_osmaposl_files(stir_fixtures, name):
    """Reading a non-OSMAPOSL file as OSMAPOSL (or a generate_image file as a projector file)
    says what the file is instead of failing on some key deep inside."""
    path = stir_fixtures / name
    with pytest.raises(ParFileError, match="not an OSMAPOSL parameter file") as exc:
        read_osmaposl_par(path, env={})
    assert exc.value.line == 1
    if name in OTHER_FILES:
        with pytest.raises(ParFileError, match="not a projector parameter file"):
            read_projector_par(path, env={})


def test_test_pack_filters_are_read_and_only_the_projectors_refused(stir_fixtures, tmp_path):
    """OSMAPOSL_test.par, the test-pack file with filters (an inter-update and an inter-iteration
    Separable Cartesian Metz, interval 4): its only problems are its ray-tracing forward and
    interpolation back projectors (the refusal above); with a Parallelproj pair instead, the file reads, and the
    filters carry the values written there, in (z, y, x) order."""
    from stirgpu.errors import ParFileProblems
    from stirgpu.filters import SeparableCartesianMetzFilter

    path = stir_fixtures / "stir_recon_test_pack/OSMAPOSL_test.par"
    with pytest.raises(ParFileProblems) as exc:
        read_osmaposl_par(path, base_dir=path.parent, env=ENV)
    projector_lines = [line_of(path, "forward projector type := Ray"), line_of(path, "back projector type := Interp")]
    assert [p.line for p in exc.value.problems] == projector_lines
    text = path.read_text()
    start = text.lower().index("projector pair type")
    end = text.lower().index("end projector pair using separate projectors parameters")
    end = text.index("\n", end)
    pair = (
        "projector pair type := Parallelproj\nProjector Pair Using Parallelproj Parameters :=\n"
        "End Projector Pair Using Parallelproj Parameters :="
    )
    copy = tmp_path / "OSMAPOSL_test.par"
    copy.write_text(text[:start] + pair + text[end:])
    s = read_osmaposl_par(copy, base_dir=path.parent, env=ENV)
    assert (s.inter_update_filter_interval, s.inter_iteration_filter_interval) == (4, 4)
    assert s.inter_update_filter == SeparableCartesianMetzFilter(
        fwhm=(8, 5, 5), metz_power=(1, 1, 1), max_kernel_size=(31, 129, 129)
    )
    assert s.inter_iteration_filter == SeparableCartesianMetzFilter(
        fwhm=(6, 6, 6), metz_power=(2, 2, 2), max_kernel_size=(31, 129, 129)
    )
    assert s.post_filter is None
