"""OSMAPOSL parameter files -> OsmaposlSettings (stirgpu.parfile.osmaposl).

Each test writes its own small .par file into tmp_path.  Values are compared exactly (they
are parsed, not computed); the defaults asserted are STIR's (OSMAPOSLReconstruction,
IterativeReconstruction, Reconstruction, PoissonLogLikelihoodWithLinearModelForMean[AndProjData]).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

import stirgpu
from stirgpu.errors import ParFileError, ParFileProblems
from stirgpu.parfile import FilenamePattern, OsmaposlSettings, read_osmaposl_par
from stirgpu.parfile.projectors import ProjectorOptions, ProjectorSettings

PAIR = (
    "projector pair type := Parallelproj\n"
    "Projector Pair Using Parallelproj Parameters :=\n"
    "End Projector Pair Using Parallelproj Parameters :=\n"
)


def par(
    objective: str = "",
    top: str = "",
    *,
    projector: str = PAIR,
    input_file: str = "input file := prompts.hs\n",
    prefix: str = "output filename prefix := out\n",
) -> str:
    return (
        "OSMAPOSLParameters :=\n"
        "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
        "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        f"{input_file}{projector}{objective}"
        "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        f"{prefix}{top}"
        "END :=\n"
    )


def write(tmp_path: Path, text: str, name: str = "recon.par") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def read(tmp_path: Path, text: str, **kw) -> OsmaposlSettings:
    return read_osmaposl_par(write(tmp_path, text), base_dir=kw.pop("base_dir", tmp_path), env=kw.pop("env", {}))


def refused(tmp_path: Path, text: str, **kw) -> ParFileError:
    with pytest.raises(ParFileError) as exc:
        read(tmp_path, text, **kw)
    return exc.value


def line_of(text: str, needle: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if needle.lower() in s.lower())


def test_minimal_file_gets_stirs_defaults(tmp_path):
    """With only the required keys, every setting has STIR's default (set_defaults() of the
    five STIR classes involved): a wrong default would silently change a reconstruction."""
    s = read(tmp_path, par())
    pp = ProjectorOptions()
    assert s.input_file == tmp_path / "prompts.hs"
    assert s.projectors == ProjectorSettings("pair", pp, pp, "Parallelproj")
    assert s.output_filename_prefix == tmp_path / "out"
    expected = dict(
        additive_sinogram=None,
        normalisation=None,
        max_segment_num_to_process=None,
        zero_end_planes_of_segment_0=False,
        zoom=1.0,
        xy_output_image_size=None,
        z_output_image_size=None,
        z_offset_mm=0.0,
        time_frame_definition_filename=None,
        time_frame_number=1,
        sensitivity_filename=None,
        subset_sensitivity_filenames=None,
        recompute_sensitivity=False,
        use_subset_sensitivities=True,
        num_subsets=1,
        num_subiterations=1,
        start_subiteration_num=1,
        start_subset_num=0,
        save_interval=1,
        initial_estimate=1.0,
        enforce_initial_positivity=True,
        map_model="additive",
        maximum_relative_change=float(np.finfo(np.float32).max),
        minimum_relative_change=0.0,
        disable_output=False,
        verbosity=None,
        report_objective_function_values_interval=0,
        inter_update_filter=None,
        inter_update_filter_interval=0,
        inter_iteration_filter=None,
        inter_iteration_filter_interval=0,
        post_filter=None,
        objective_function="PoissonLogLikelihoodWithLinearModelForMeanAndProjData",
    )
    assert {k: getattr(s, k) for k in expected} == expected
    assert s.sensitivity_must_be_computed  # STIR computes it when no file is given
    assert s.path == tmp_path / "recon.par"


FULL = par(
    objective=(
        "maximum absolute segment number to process := 2\n"
        "zero end planes of segment 0 := 1\n"
        "zoom := .5\n"
        "XY output image size (in pixels) := 91\n"
        "Z output image size (in pixels) := 15\n"
        "Z offset (in mm) := -2.5\n"
        "additive sinogram := sub/add.hs\n"
        "Bin Normalisation type := from projdata\n"
        "Bin Normalisation From ProjData :=\n"
        "  normalisation projdata filename := /abs/norm.hs\n"
        "End Bin Normalisation From ProjData :=\n"
        "time frame definition filename := frames.fdef\n"
        "time frame number := 2\n"
        "sensitivity filename := sens.hv\n"
        "subset sensitivity filenames := sens_%02d.hv\n"
        "recompute sensitivity := 1\n"
        "use_subset_sensitivities := 1\n"
        "prior type := None\n"
    ),
    top=(
        "verbosity := 2\n"
        "disable output := 0\n"
        "number of subsets := 6\n"
        "start at subset := 5\n"
        "number of subiterations := 12\n"
        "start at subiteration number := 3\n"
        "save estimates at subiteration intervals := 6\n"
        "initial estimate := init.hv\n"
        "enforce initial positivity condition := 0\n"
        "MAP model := multiplicative\n"
        "maximum relative change := 10\n"
        "minimum relative change := 0.1\n"
        "report objective function values interval := 3\n"
        "inter-iteration filter subiteration interval := 0\n"
        "inter-update filter subiteration interval := 0\n"
        "uniformly randomise subset order := 0\n"
        "write update image := 0\n"
        "post-filter type := None\n"
        "output file format type := Interfile\n"
        "Interfile Output File Format Parameters :=\n"
        "number format := float\n"
        "number_of_bytes_per_pixel := 4\n"
        "End Interfile Output File Format Parameters :=\n"
    ),
)


def test_every_supported_key_is_read_with_its_meaning(tmp_path):
    """A file setting every supported key: each value lands in its field with STIR's meaning
    (-1 sizes -> None, relative names from base_dir, '%02d' pattern formatted per subset)."""
    s = read(tmp_path, FULL)
    assert (s.max_segment_num_to_process, s.zero_end_planes_of_segment_0, s.zoom) == (2, True, 0.5)
    assert (s.xy_output_image_size, s.z_output_image_size, s.z_offset_mm) == (91, 15, -2.5)
    assert s.additive_sinogram == tmp_path / "sub" / "add.hs"
    assert s.normalisation == Path("/abs/norm.hs")
    assert (s.time_frame_definition_filename, s.time_frame_number) == (tmp_path / "frames.fdef", 2)
    assert s.sensitivity_filename == tmp_path / "sens.hv"
    assert s.subset_sensitivity_filename(3) == tmp_path / "sens_03.hv"
    assert (s.recompute_sensitivity, s.use_subset_sensitivities) == (True, True)
    assert (s.num_subsets, s.start_subset_num, s.num_subiterations, s.start_subiteration_num, s.save_interval) == (
        6,
        5,
        12,
        3,
        6,
    )
    assert s.initial_estimate == tmp_path / "init.hv"
    assert (s.enforce_initial_positivity, s.map_model) == (False, "multiplicative")
    assert (s.maximum_relative_change, s.minimum_relative_change) == (10.0, 0.1)
    assert (s.verbosity, s.report_objective_function_values_interval, s.disable_output) == (2, 3, False)
    assert s.where("num_subsets") == (tmp_path / "recon.par", line_of(FULL, "number of subsets"))


def test_round_trip_through_to_par(tmp_path):
    """read(write(settings)) == settings, for the full file and the minimal one, and also when
    read back from another folder (written names are absolute): the writer and the reader
    agree on every key, value format and special value."""
    for text in (FULL, par(top="initial estimate := 0\ndisable output := 1\n", prefix="")):
        s = read(tmp_path, text)
        other = tmp_path / "elsewhere"
        other.mkdir(exist_ok=True)
        back = read_osmaposl_par(write(other, s.to_par(), "copy.par"), base_dir=other, env={})
        assert back == s
        compared = [f.name for f in dataclasses.fields(s) if f.compare]
        assert [getattr(back, f) for f in compared] == [getattr(s, f) for f in compared]
        assert back.path == other / "copy.par"


def test_round_trip_of_stirgpu_and_separate_projectors(tmp_path):
    """Projector settings survive to_par/read for stirgpu's own block and for Separate
    Projectors mixing both types."""
    gpu = ProjectorOptions(
        type="stirgpu",
        restrict_to_cylindrical_fov=False,
        backend="cuda",
        devices=(1, 0),
        gpu_memory_budget_mb=512,
        host_memory_budget_mb=2048,
        max_views_per_chunk=8,
    )
    base = read(tmp_path, par())
    for proj in (
        ProjectorSettings("pair", gpu, gpu, "stirgpu"),
        ProjectorSettings("pair", ProjectorOptions(verbosity=0, num_gpu_chunks=3), gpu, "Separate Projectors"),
    ):
        s = dataclasses.replace(base, projectors=proj)
        back = read_osmaposl_par(write(tmp_path, s.to_par(), "rt.par"), env={})
        assert back.projectors == proj and back == s


def test_relative_names_follow_the_current_directory_like_stir(tmp_path, monkeypatch):
    """STIR opens file names as written, i.e. relative to the process's current directory, not
    to the .par file: that is the default; base_dir overrides it."""
    sub = tmp_path / "pars"
    sub.mkdir()
    p = write(sub, par())
    monkeypatch.chdir(tmp_path)
    assert read_osmaposl_par(p, env={}).input_file == tmp_path / "prompts.hs"
    assert read_osmaposl_par(p, base_dir=sub, env={}).input_file == sub / "prompts.hs"


@pytest.mark.parametrize(
    "objective, top, needle, words",
    [
        ("", "number of subsets := four\n", "number of subsets", "expects an integer, got 'four'"),
        ("", "number of subsets := 0\n", "number of subsets", "must be at least 1"),
        ("zoom := 0\n", "", "zoom", "must be positive"),
        ("zoom := nan\n", "", "zoom", "expects a number"),
        ("recompute sensitivity := yes\n", "", "recompute sensitivity", "expects 0 or 1"),
        ("XY output image size (in pixels) := 0\n", "", "XY output", "at least 1 (or -1)"),
        ("", "start at subset := 4\nnumber of subsets := 4\n", "start at subset", "must be below"),
        ("", "save estimates at subiteration intervals := 3\n", "save estimates", "must not exceed"),
        ("", "MAP model := both\n", "MAP model", "'additive' or 'multiplicative'"),
        ("", "minimum relative change := 2\nmaximum relative change := 1.5\n", "minimum relative", "exceeds"),
        ("subset sensitivity filenames := sens.hv\n", "", "subset sensitivity", "no subset number directive"),
        ("subset sensitivity filenames := s_%d_%d.hv\n", "", "subset sensitivity", "more than one directive"),
        ("", "number of subsets := 2\nnumber of subsets := 3\n", "number of subsets := 3", "given twice"),
    ],
)
def test_wrong_values_name_file_line_and_key(tmp_path, objective, top, needle, words):
    """Wrong types and out-of-range values (STIR: silently the default, or a failure after
    reading the data) are ParFileErrors at the offending line, naming the key."""
    text = par(objective, top)
    err = refused(tmp_path, text)
    assert err.line == line_of(text, needle), str(err)
    assert err.path == str(tmp_path / "recon.par")
    assert words in str(err)


@pytest.mark.parametrize(
    "objective, top, needle, words",
    [
        ("", "numbr of subsets := 4\n", "numbr", "did you mean 'number of subsets'"),
        ("", "sensitivity filename := s.hv\n", "sensitivity filename", "belongs inside"),
        ("number of subsets := 4\n", "", "number of subsets", "belongs in 'OSMAPOSLParameters'"),
        ("", "uniform initial estimate := 1\n", "uniform initial", "'initial estimate := 1'"),
        (
            "",
            "Some Filter Parameters :=\nEnd Some Filter Parameters :=\n",
            "Some Filter Parameters :=",
            "unexpected block",
        ),
    ],
)
def test_unknown_keys_and_blocks_are_refused_with_a_hint(tmp_path, objective, top, needle, words):
    """STIR warns about unknown keys and carries on; stirgpu refuses them (a typo must not
    silently become a default), suggesting the intended key or block."""
    text = par(objective, top)
    err = refused(tmp_path, text)
    assert err.line == line_of(text, needle) and words in str(err), str(err)


@pytest.mark.parametrize(
    "objective, top, needle, words",
    [
        (
            "prior type := PLS\nPLS Prior Parameters :=\npenalisation factor := 1\nEnd PLS Prior Parameters :=\n",
            "",
            "prior type",
            "prior 'PLS' is not implemented",
        ),
        (
            "Bin Normalisation type := From ECAT7\nBin Normalisation From ECAT7 :=\n"
            "End Bin Normalisation From ECAT7 :=\n",
            "",
            "Bin Normalisation type",
            "'From ProjData'",
        ),
        (
            "",
            "inter-iteration filter subiteration interval := 2\ninter-iteration filter type := Median\n"
            "Median Filter Parameters :=\nEnd Median Filter Parameters :=\n",
            "inter-iteration filter type",
            "stirgpu implements the filters 'Separable Cartesian Metz', 'Separable Gaussian'",
        ),
        (
            "",
            "inter-update filter type := Median\nMedian Filter Parameters :=\nEnd Median Filter Parameters :=\n"
            "inter-update filter subiteration interval := 1\n",
            "inter-update filter type",
            "is enabled by",
        ),
        (
            "",
            "post-filter type := Median\nMedian Filter Parameters :=\nEnd Median Filter Parameters :=\n",
            "post-filter",
            "stirgpu implements the filters",
        ),
        ("", "uniformly randomise subset order := 1\n", "randomise", "irreproducible"),
        ("", "write update image := 1\n", "write update image", "update images"),
        ("", "output file format type := ITK\n", "output file format", "Interfile images only"),
        (
            "",
            "output file format type := Interfile\nInterfile Output File Format Parameters :=\n"
            "number format := signed integer\nEnd Interfile Output File Format Parameters :=\n",
            "number format",
            "only 'float'",
        ),
        ("sensitivity filename := 1\n", "", "sensitivity filename", "all ones"),
    ],
)
def test_unsupported_features_are_refused_naming_the_line(tmp_path, objective, top, needle, words):
    """Everything that would make stirgpu compute something else than STIR is refused before
    any work, at the line that asks for it."""
    text = par(objective, top)
    err = refused(tmp_path, text)
    assert err.line == line_of(text, needle) and words in str(err), str(err)


def test_disabled_filters_are_accepted_like_stir_ignores_them(tmp_path):
    """A filter whose subiteration interval is 0 is never applied by STIR, so such a file is
    accepted (it is how users switch filtering off)."""
    s = read(
        tmp_path,
        par(
            top="inter-iteration filter type := Separable Cartesian Metz\n"
            "Separable Cartesian Metz Filter Parameters :=\nx-dir filter FWHM (in mm):= 5\n"
            "END Separable Cartesian Metz Filter Parameters :=\n"
            "inter-iteration filter subiteration interval := 0\n"
        ),
    )
    assert s.num_subsets == 1


@pytest.mark.parametrize(
    "projector, words",
    [
        (
            "projector pair type := Matrix\nProjector Pair Using Matrix Parameters :=\nMatrix type := Ray Tracing\n"
            "Ray tracing matrix parameters :=\nEnd Ray tracing matrix parameters :=\n"
            "End Projector Pair Using Matrix Parameters :=\n",
            "projection-matrix",
        ),
        (
            "projector pair type := Separate Projectors\nProjector Pair Using Separate Projectors Parameters :=\n"
            "Forward projector type := Parallelproj\nForward Projector Using Parallelproj Parameters :=\n"
            "End Forward Projector Using Parallelproj Parameters :=\nBack projector type := Interpolation\n"
            "Back Projector Using Interpolation Parameters :=\nEnd Back Projector Using Interpolation Parameters :=\n"
            "End Projector Pair Using Separate Projectors Parameters :=\n",
            "interpolating back projector",
        ),
        ("projector pair type := Mystery\n", "stirgpu supports: Parallelproj, stirgpu, Separate Projectors"),
        ("projector pair type := Parallelproj\nzoom := 1\n", "must be followed by the block"),
        (
            "projector pair type := Parallelproj\nProjector Pair Using stirgpu Parameters :=\n"
            "End Projector Pair Using stirgpu Parameters :=\n",
            "must be followed by the block",
        ),
        ("", "needs 'projector pair type :='"),
    ],
)
def test_projectors_other_than_parallelproj_are_refused(tmp_path, projector, words):
    """Only Parallelproj/stirgpu projectors compute STIR's Parallelproj numbers; STIR's default
    (no key: ray tracing) is refused too."""
    err = refused(tmp_path, par(projector=projector))
    assert words in str(err), str(err)
    assert err.line is not None


@pytest.mark.parametrize(
    "text, words",
    [
        (par(input_file=""), "needs 'input file :='"),
        (par(prefix=""), "needs 'output filename prefix :='"),
        ("OSMAPOSLParameters :=\nnumber of subsets := 2\nEND :=\n", "needs 'objective function type"),
        (
            "OSMAPOSLParameters :=\n"
            "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndListModeData\nEND :=\n",
            "PoissonLogLikelihoodWithLinearModelForMeanAndProjData' only",
        ),
        (
            "OSMAPOSLParameters :=\nobjective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
            "END :=\n",
            "must be followed by the block",
        ),
        (
            par(
                objective="Bin Normalisation type := From ProjData\nBin Normalisation From ProjData :=\n"
                "End Bin Normalisation From ProjData :=\n"
            ),
            "needs 'normalisation projdata filename",
        ),
        ("OSMAPSOLParameters :=\nEND :=\n", "not an OSMAPOSL parameter file"),
    ],
)
def test_missing_required_keys_are_refused(tmp_path, text, words):
    """Required keys and blocks (STIR: error after reading data, or a silent default
    projector) are reported up front with a line."""
    err = refused(tmp_path, text)
    assert words in str(err) and err.line is not None, str(err)


def test_stirs_special_values(tmp_path):
    """STIR's magic values: 'additive sinogram := 0' is none, 'initial estimate := 0/1' are
    constant images, -1 means 'default' for sizes and the segment limit, an empty value keeps
    the default, 'disable output' makes the prefix optional."""
    s = read(
        tmp_path,
        par(
            objective="additive sinogram := 0\nXY output image size (in pixels) := -1\n"
            "maximum absolute segment number to process := -1\nzoom :=\n",
            top="initial estimate := 0\ndisable output := 1\n",
            prefix="",
        ),
    )
    assert s.additive_sinogram is None and s.xy_output_image_size is None
    assert s.max_segment_num_to_process is None and s.zoom == 1.0
    assert s.initial_estimate == 0.0 and s.output_filename_prefix is None and s.disable_output


def test_environment_variables_in_an_osmaposl_file(tmp_path):
    """${VAR} works in values (STIR's recon_test_pack relies on it) and an unset one is named."""
    text = par(input_file="input file := ${DATA}/prompts.hs\n", top="number of subsets := ${N}\n")
    s = read(tmp_path, text, env={"DATA": "/d", "N": "3"})
    assert s.input_file == Path("/d/prompts.hs") and s.num_subsets == 3
    err = refused(tmp_path, text, env={"DATA": "/d"})
    assert "'N'" in str(err) and err.line == line_of(text, "${N}")


def test_subset_sensitivity_patterns():
    """boost::format patterns as STIR uses them: %d, %02d and %1% take the subset number,
    '%%' is a literal percent sign (also where it comes from the folder name)."""
    assert FilenamePattern("/s/sens_%d.hv").format(7) == Path("/s/sens_7.hv")
    assert FilenamePattern("/s/sens_%03d.hv").format(7) == Path("/s/sens_007.hv")
    assert FilenamePattern("/s/%1%/sens_%1%.hv").format(2) == Path("/s/2/sens_2.hv")
    assert FilenamePattern.resolve("sens_%d.hv", "/a/100%").format(1) == Path("/a/100%/sens_1.hv")
    for bad in ("sens.hv", "sens_%d_%d.hv", "50% sens_%d.hv"):
        with pytest.raises(ValueError):
            FilenamePattern(bad)


def test_check_input_files_points_at_the_key(tmp_path):
    """Missing input files are reported at the line of their key; sensitivity files count as
    inputs only when they are read (not recomputed)."""
    text = par(
        objective="use subset sensitivities := 1\nsubset sensitivity filenames := sens_%d.hv\n",
        top="number of subsets := 2\n",
    )
    s = read(tmp_path, text)
    with pytest.raises(ParFileError) as exc:
        s.check_input_files()
    assert exc.value.line == line_of(text, "input file") and "prompts.hs" in str(exc.value)
    (tmp_path / "prompts.hs").write_text("x")
    (tmp_path / "sens_0.hv").write_text("x")
    with pytest.raises(ParFileError) as exc:
        s.check_input_files()
    assert exc.value.line == line_of(text, "subset sensitivity filenames") and "sens_1.hv" in str(exc.value)
    (tmp_path / "sens_1.hv").write_text("x")
    s.check_input_files()
    assert not s.sensitivity_must_be_computed
    assert s.error("num_subsets", "unbalanced").line == line_of(text, "number of subsets")


def test_stirgpu_projector_block_feeds_the_scoped_config(tmp_path):
    """stirgpu's own block sets backend, devices and budgets; config_changes() turns them into
    stirgpu.config() arguments (MB = 2**20 bytes)."""
    s = read(
        tmp_path,
        par(
            projector="projector pair type := stirgpu\n"
            "Projector Pair Using stirgpu Parameters :=\n"
            "backend := CPU\ndevices := {0, 2}\nGPU memory budget (MB) := 256\n"
            "host memory budget (MB) := 1024\nmaximum views per chunk := 4\n"
            "restrict to cylindrical FOV := 0\n"
            "End Projector Pair Using stirgpu Parameters :=\n"
        ),
    )
    opts = s.projectors.forward
    assert s.projectors.pair_type == "stirgpu" and s.projectors.back == opts
    assert not opts.restrict_to_cylindrical_fov
    with stirgpu.config(**opts.config_changes()) as cfg:
        assert (cfg.backend, cfg.devices, cfg.gpu_memory_budget, cfg.host_memory_budget, cfg.max_views_per_chunk) == (
            "cpu",
            (0, 2),
            256 * 2**20,
            1024 * 2**20,
            4,
        )


def test_image_info_is_stirs_default_image(tmp_path):
    """image_info() is STIR's VoxelsOnCartesianGrid(proj_data_info, zoom, (z offset, 0, 0),
    sizes): the given sizes, voxel = bin size / zoom, ring spacing / 2, origin z = Z offset."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    s = read(tmp_path, par(objective="zoom := 2\nXY output image size (in pixels) := 64\nZ offset (in mm) := 1.5\n"))
    scanner = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(scanner, span=3, max_ring_diff=4)
    info = s.image_info(pdi)
    assert info.shape == (2 * scanner.num_rings - 1, 64, 64)
    assert np.allclose(
        info.voxel_size, (scanner.ring_spacing / 2, scanner.default_bin_size / 2, scanner.default_bin_size / 2)
    )
    assert np.allclose(info.origin, (1.5, 0, 0))


def test_settings_are_immutable(tmp_path):
    """Settings are frozen, picklable values (safe to share between threads and processes),
    and keep their line numbers through pickling."""
    s = read(tmp_path, par())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_subsets = 3
    assert os.fspath(s.where("input_file")[0]) == str(tmp_path / "recon.par")
    assert pickle.loads(pickle.dumps(s)) == s and pickle.loads(pickle.dumps(s)).lines == s.lines


def test_settings_built_in_code_are_checked_too(tmp_path):
    """Settings made without a file (by the OSEM code or a user) get STIR's default projector
    (Parallelproj) and the same range checks as the reader, so no invalid value can reach a run."""
    s = OsmaposlSettings(input_file=tmp_path / "p.hs", output_filename_prefix=tmp_path / "out")
    assert s.projectors == read(tmp_path, par()).projectors and s.lines == () and s.line("zoom") is None
    for bad in (
        dict(num_subsets=0),
        dict(start_subset_num=1),
        dict(save_interval=2),
        dict(zoom=0.0),
        dict(initial_estimate=0.5),
        dict(map_model="x"),
        dict(minimum_relative_change=-1.0),
        dict(output_filename_prefix=None),
        dict(xy_output_image_size=0),
        dict(projectors=ProjectorSettings("forward", ProjectorOptions(), None)),
    ):
        with pytest.raises(ValueError):
            dataclasses.replace(s, **bad)


def test_keys_stir_lists_are_accepted_at_their_defaults(tmp_path):
    """A key STIR itself prints in its parameter listing ('z zoom') is read at STIR's default,
    and any other value is refused at its line (stirgpu reproduces only the default).  Guards
    against refusing a listing STIR wrote."""
    key, good, bad = "z zoom", "1", "2"
    assert read(tmp_path, par(objective=f"{key} := {good}\n")) == read(tmp_path, par())
    text = par(objective=f"{key} := {bad}\n")
    assert refused(tmp_path, text).line == line_of(text, key)


def test_use_tof_sensitivities_is_read_and_written(tmp_path):
    """'use time-of-flight sensitivities' (STIR's default 0) is read as a boolean, written back
    by to_par, and a value that is not one is refused at its line."""
    assert read(tmp_path, par()).use_tof_sensitivities is False
    assert read(tmp_path, par(objective="use time-of-flight sensitivities := 0\n")) == read(tmp_path, par())
    s = read(tmp_path, par(objective="use time-of-flight sensitivities := 1\n"))
    assert s.use_tof_sensitivities is True
    assert "use time-of-flight sensitivities := 1" in s.to_par()
    text = par(objective="use time-of-flight sensitivities := maybe\n")
    assert refused(tmp_path, text).line == line_of(text, "use time-of-flight sensitivities")


def test_interfile_output_block_takes_stirs_four_keys(tmp_path):
    """'Interfile Output File Format Parameters' as STIR lists it (byte order, number format,
    bytes per pixel, scale to write data) is accepted at the defaults; big-endian output or a
    scale factor is refused at its line."""
    block = (
        "output file format type := Interfile\n"
        "interfile output file format parameters :=\n"
        "byte order := {order}\nnumber format := float\nnumber of bytes per pixel := 4\n"
        "scale to write data := {scale}\n"
        "end interfile output file format parameters :=\n"
    )
    assert read(tmp_path, par(top=block.format(order="LITTLEENDIAN", scale="0"))) == read(tmp_path, par())
    for order, scale, key in (("BIGENDIAN", "0", "byte order"), ("littleendian", "2", "scale to write data")):
        text = par(top=block.format(order=order, scale=scale))
        assert refused(tmp_path, text).line == line_of(text, key)


# -- every problem in one run ------------------------------------------------------------------


def _problems(exc) -> list[tuple[int | None, str]]:
    return [(p.line, p.reason) for p in exc.problems]


def test_every_problem_is_reported_at_once(tmp_path):
    """One file with six different problems -- an unknown key, an unsupported feature (a prior),
    an out-of-range value, a value of the wrong type, values that contradict each other, a
    missing input file and a missing output folder -- gives one ParFileProblems listing them
    all, each at its line and in file order, and a str() of one line per problem plus a count
    line.  Before, a user fixed one problem per run."""
    text = par(
        objective="prior type := PLS\nzoom := -2\n",
        top=(
            "number of subiterations := 2\nsave estimates at subiteration intervals := 3\n"
            "number of sbusets := 4\nenforce initial positivity condition := yes\n"
        ),
        prefix="output filename prefix := nowhere/out\n",
    )
    path = write(tmp_path, text)
    with pytest.raises(ParFileProblems) as exc:
        read_osmaposl_par(path, base_dir=tmp_path, env={}, check_files=True)
    got = _problems(exc.value)
    want_lines = [
        line_of(text, "input file"),
        line_of(text, "prior type"),
        line_of(text, "zoom"),
        line_of(text, "output filename prefix"),
        line_of(text, "save estimates"),
        line_of(text, "sbusets"),
        line_of(text, "enforce initial"),
    ]
    assert [line for line, _ in got] == want_lines, got
    words = [
        "file not found: " + str(tmp_path / "prompts.hs"),
        "prior 'PLS' is not implemented",
        "must be positive",
        f"output folder {tmp_path / 'nowhere'} does not exist",
        "must not exceed 'number of subiterations' (2)",
        "unknown key 'number of sbusets'",
        "expects 0 or 1",
    ]
    for (_, reason), w in zip(got, words, strict=True):
        assert w in reason, (reason, w)
    lines = str(exc.value).splitlines()
    assert lines[:-1] == [f"{path}:{n}: {r}" for n, r in got]
    assert lines[-1] == f"7 problems in {path}"
    assert isinstance(exc.value, ParFileError) and isinstance(exc.value, stirgpu.errors.StirGpuError)
    assert (exc.value.path, exc.value.line) == (str(path), want_lines[0])
    back = pickle.loads(pickle.dumps(exc.value))  # (e.g. from a worker process)
    assert str(back) == str(exc.value) and _problems(back) == got


def test_without_check_files_only_the_file_is_read(tmp_path):
    """read_osmaposl_par without check_files reports the file's own problems and looks at no
    other file; a single problem has no count line."""
    text = par(top="number of subsets := 0\n")
    with pytest.raises(ParFileProblems) as exc:
        read(tmp_path, text)
    assert _problems(exc.value) == [
        (line_of(text, "number of subsets"), "'number of subsets' must be at least 1, got 0")
    ]
    assert (
        str(exc.value) == f"{tmp_path / 'recon.par'}:{line_of(text, 'number of subsets')}: "
        "'number of subsets' must be at least 1, got 0"
    )


def test_follow_on_problems_are_not_reported(tmp_path):
    """A problem is reported once, not again as a consequence: a misspelt required key is not
    also 'missing'; a block after an unsupported type is not also 'unexpected'; a check across
    keys is skipped when one of its keys could not be read."""
    text = par(
        prefix="outptu filename prefix := out\n",
        projector=(
            "projector pair type := Matrix\nProjector Pair Using Matrix Parameters :=\n"
            "End Projector Pair Using Matrix Parameters :=\n"
        ),
        top="number of subsets := four\nstart at subset := 2\n",
    )
    got = _problems(refused(tmp_path, text))
    assert [line for line, _ in got] == [
        line_of(text, "projector pair type"),
        line_of(text, "outptu"),
        line_of(text, "number of subsets"),
    ], got
    assert "did you mean 'output filename prefix'" in got[1][1] and "expects an integer" in got[2][1]


def test_check_files_lists_every_missing_file(tmp_path):
    """check_input_files lists all missing inputs at once (here: the data and two of three
    subset sensitivities), each at its key's line."""
    text = par(
        objective="use subset sensitivities := 1\nsubset sensitivity filenames := sens_%d.hv\n",
        top="number of subsets := 3\n",
    )
    s = read(tmp_path, text)
    (tmp_path / "sens_1.hv").write_text("x")
    with pytest.raises(ParFileProblems) as exc:
        s.check_input_files()
    sens = line_of(text, "subset sensitivity filenames")
    assert [(p.line, p.reason) for p in exc.value.problems] == [
        (line_of(text, "input file"), f"file not found: {tmp_path / 'prompts.hs'}"),
        (sens, f"file not found: {tmp_path / 'sens_0.hv'}"),
        (sens, f"file not found: {tmp_path / 'sens_2.hv'}"),
    ]
