"""``stirgpu.parfile.osmaposl_par``: the OSMAPOSL file of a plain OSEM run, read back by stirgpu's
reader into the settings it was given (STIR reads it the same way:
``stir_differential/test_osmaposl_vs_stir.py``), and refusing what it cannot write."""

from __future__ import annotations

from pathlib import Path

import pytest

from stirgpu.cli.demo import DemoSettings, demo_par
from stirgpu.errors import ParFileError
from stirgpu.parfile import FilenamePattern, ProjectorOptions, ProjectorSettings, osmaposl_par, read_osmaposl_par


def _read(tmp_path: Path, text: str):
    (tmp_path / "recon.par").write_text(text)
    return read_osmaposl_par(tmp_path / "recon.par", base_dir=tmp_path, env={})


def test_the_keys_given_read_back(tmp_path):
    """Every argument reaches the settings, relative names taken from the base folder."""
    s = _read(
        tmp_path,
        osmaposl_par(
            "prompts.hs",
            output_filename_prefix="recon",
            num_subsets=4,
            num_subiterations=12,
            save_interval=3,
            normalisation="acf.hs",
            additive_sinogram="additive.hs",
            subset_sensitivity_filenames="sens_%d.hv",
            recompute_sensitivity=False,
            zero_end_planes_of_segment_0=True,
            initial_estimate="start.hv",
            start_subiteration_num=5,
            comment="a test\nof two lines",
        ),
    )
    assert s.input_file == tmp_path / "prompts.hs" and s.output_filename_prefix == tmp_path / "recon"
    assert (s.num_subsets, s.num_subiterations, s.save_interval, s.start_subiteration_num) == (4, 12, 3, 5)
    assert s.normalisation == tmp_path / "acf.hs" and s.additive_sinogram == tmp_path / "additive.hs"
    assert s.subset_sensitivity_filenames == FilenamePattern.resolve("sens_%d.hv", tmp_path)
    assert s.use_subset_sensitivities and not s.recompute_sensitivity and s.zero_end_planes_of_segment_0
    assert s.initial_estimate == tmp_path / "start.hv"
    assert s.projectors.pair_type == "Parallelproj"


def test_what_is_not_given_keeps_stirs_defaults(tmp_path):
    text = osmaposl_par("prompts.hs")
    s = _read(tmp_path, text)
    assert s.normalisation is None and s.additive_sinogram is None and s.subset_sensitivity_filenames is None
    assert s.recompute_sensitivity and s.use_subset_sensitivities and not s.zero_end_planes_of_segment_0
    assert s.initial_estimate == 1.0 and s.start_subiteration_num == 1
    assert (s.num_subsets, s.num_subiterations, s.save_interval) == (1, 1, 1)
    for key in ("zero end planes", "Bin Normalisation", "additive sinogram", "subset sensitivit", "initial estimate"):
        assert key not in text


def test_a_stirgpu_pair_with_execution_settings(tmp_path):
    options = ProjectorOptions(type="stirgpu", backend="cpu", devices=(0, 1), max_views_per_chunk=3)
    pair = ProjectorSettings("pair", options, options, "stirgpu")
    s = _read(tmp_path, osmaposl_par("prompts.hs", projectors=pair))
    assert s.projectors == pair


def test_the_demo_writes_its_settings(tmp_path):
    s = _read(tmp_path, demo_par())
    d = DemoSettings
    assert (s.num_subsets, s.num_subiterations, s.save_interval) == (d.subsets, d.subiterations, d.save)
    assert s.normalisation == tmp_path / "acf.hs" and s.additive_sinogram == tmp_path / "additive.hs"


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(input_file="a;b.hs"), "cannot write 'a;b.hs'"),
        (dict(additive_sinogram="${HOME}/a.hs"), "cannot write"),
        (dict(output_filename_prefix="two\nlines"), "cannot write"),
        (dict(normalisation="folder\\"), "cannot write"),
        (dict(num_subsets=0), "num_subsets must be at least 1, not 0"),
        (dict(save_interval=0), "save_interval must be at least 1"),
        (dict(start_subiteration_num=0), "start_subiteration_num must be at least 1"),
        (dict(comment="ends in a backslash\\"), "may not end in"),
    ],
)
def test_what_cannot_be_written_is_refused(kw, words):
    args = {"input_file": "prompts.hs", **kw}
    with pytest.raises(ParFileError) as exc:
        osmaposl_par(args.pop("input_file"), **args)
    assert words in str(exc.value)
