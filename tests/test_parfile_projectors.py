"""Projector blocks and standalone projector .par files (stirgpu.parfile.projectors).

Exact comparisons of parsed values (no arithmetic, no tolerance).
"""

from __future__ import annotations

import pickle

import pytest

import stirgpu
from stirgpu.errors import ParFileError, ParFileProblems
from stirgpu.parfile import ProjectorOptions, ProjectorSettings, read_projector_par


def write(tmp_path, text, name="proj.par"):
    p = tmp_path / name
    p.write_text(text)
    return p


def line_of(text: str, needle: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if needle.lower() in s.lower())


def forward(block: str, type_: str = "Parallelproj") -> str:
    return (
        f"Forward Projector parameters :=\ntype := {type_}\n"
        f"Forward Projector Using {type_} Parameters :=\n{block}"
        f"End Forward Projector Using {type_} Parameters :=\nEnd :=\n"
    )


def test_parallelproj_defaults_are_stirs():
    """STIR's Parallelproj defaults: cylindrical FOV on, one GPU chunk; the execution settings
    are left to stirgpu.config (None/auto), so config_changes() is empty."""
    o = ProjectorOptions()
    assert (o.type, o.restrict_to_cylindrical_fov, o.num_gpu_chunks, o.backend, o.devices) == (
        "Parallelproj",
        True,
        1,
        "auto",
        None,
    )
    assert o.config_changes() == {}


def test_parallelproj_keys_in_any_spelling(tmp_path):
    """The Parallelproj keys STIR accepts, spelled freely (case, '_' vs ' ')."""
    s = read_projector_par(
        write(tmp_path, forward("Restrict_To_Cylindrical_FOV := 0\nNUM GPU CHUNKS := 4\nverbosity := 0\n"))
    )
    assert s.role == "forward" and s.back is None and s.pair_type is None
    assert s.forward == ProjectorOptions(restrict_to_cylindrical_fov=False, num_gpu_chunks=4, verbosity=0)


def test_stirgpu_block(tmp_path):
    """stirgpu's own block: backend (case-insensitive), device list, budgets in MB (2**20 bytes),
    views per chunk; config_changes() gives exactly the stirgpu.config arguments."""
    text = forward(
        "backend := CUDA\ndevices := {1}\nGPU memory budget (MB) := 100\nmaximum views per chunk := 2\n", "stirgpu"
    )
    s = read_projector_par(write(tmp_path, text))
    o = s.forward
    assert (o.type, o.backend, o.devices, o.gpu_memory_budget_mb, o.host_memory_budget_mb) == (
        "stirgpu",
        "cuda",
        (1,),
        100,
        None,
    )
    assert o.config_changes() == {
        "backend": "cuda",
        "devices": (1,),
        "gpu_memory_budget": 100 * 2**20,
        "max_views_per_chunk": 2,
    }
    with stirgpu.config(**o.config_changes()) as cfg:
        assert cfg.gpu_memory_budget == 100 * 2**20 and cfg.devices == (1,)


@pytest.mark.parametrize(
    "block, type_, needle, words",
    [
        ("backend := opencl\n", "stirgpu", "backend", "must be one of auto, cpu, cuda"),
        ("devices := {0, 0}\n", "stirgpu", "devices", "distinct"),
        ("devices := {}\n", "stirgpu", "devices", "at least one device"),
        ("devices := {a}\n", "stirgpu", "devices", "list of integers"),
        ("GPU memory budget (MB) := 0\n", "stirgpu", "GPU memory", "at least 1"),
        ("num_gpu_chunks := 0\n", "Parallelproj", "num_gpu_chunks", "at least 1"),
        ("restrict to cylindrical FOV := 2\n", "Parallelproj", "restrict", "0 or 1"),
        ("backend := cpu\n", "Parallelproj", "backend", "stirgpu's own projector blocks"),
        ("num_gpu_chunks := 2\n", "stirgpu", "num_gpu_chunks", "unknown key"),
        ("CUDA device := 1\n", "Parallelproj", "CUDA device", "unknown key"),
        ("pre data processor := Separable Cartesian Metz\n", "Parallelproj", "pre data", "smoothing"),
    ],
)
def test_bad_projector_keys_are_refused_at_their_line(tmp_path, block, type_, needle, words):
    """Wrong values, keys of the other projector type, and STIR's smoothing options are
    refused with the line (STIR would warn or silently use a default)."""
    text = forward(block, type_)
    with pytest.raises(ParFileError) as exc:
        read_projector_par(write(tmp_path, text))
    assert exc.value.line == line_of(text, needle) and words in str(exc.value), str(exc.value)


def test_pre_data_processor_none_is_accepted(tmp_path):
    """'pre data processor := None' is STIR's default (no smoothing): accepted."""
    s = read_projector_par(write(tmp_path, forward("pre data processor := None\n")))
    assert s.forward == ProjectorOptions()


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "Forward Projector parameters :=\ntype := Ray Tracing\nForward Projector Using Ray Tracing Parameters :=\n"
            "End Forward Projector Using Ray Tracing Parameters :=\nEnd :=\n",
            "ray-tracing",
        ),
        ("Back Projector parameters :=\ntype := Interpolation\nEnd :=\n", "interpolating"),
        ("Back Projector parameters :=\ntype := Matrix\nEnd :=\n", "projection-matrix"),
        ("Forward Projector parameters :=\nEnd :=\n", "needs 'type :='"),
        ("Forward Projector parameters :=\ntype := Parallelproj\nEnd :=\n", "must be followed by the block"),
        ("OSMAPOSLParameters :=\nEnd :=\n", "not a projector parameter file"),
        (
            "projector pair parameters :=\nprojector pair type := Separate Projectors\n"
            "Projector Pair Using Separate Projectors Parameters :=\nForward projector type := Parallelproj\n"
            "Forward Projector Using Parallelproj Parameters :=\n"
            "End Forward Projector Using Parallelproj Parameters :=\n"
            "End Projector Pair Using Separate Projectors Parameters :=\nEnd projector pair parameters :=\n",
            "needs 'Back projector type :='",
        ),
    ],
)
def test_unsupported_or_incomplete_projector_files(tmp_path, text, words):
    """Other STIR projectors, missing type keys or blocks, and non-projector files are refused
    with a line."""
    with pytest.raises(ParFileError) as exc:
        read_projector_par(write(tmp_path, text))
    assert words in str(exc.value) and exc.value.line is not None, str(exc.value)


@pytest.mark.parametrize(
    "settings",
    [
        ProjectorSettings("forward", ProjectorOptions(num_gpu_chunks=2, verbosity=1), None),
        ProjectorSettings(
            "back",
            None,
            ProjectorOptions(
                type="stirgpu", backend="cpu", host_memory_budget_mb=64, restrict_to_cylindrical_fov=False
            ),
        ),
        ProjectorSettings("pair", ProjectorOptions(), ProjectorOptions(), "Parallelproj"),
        ProjectorSettings(
            "pair",
            ProjectorOptions(type="stirgpu", devices=(0, 1)),
            ProjectorOptions(type="stirgpu", devices=(0, 1)),
            "stirgpu",
        ),
        ProjectorSettings("pair", ProjectorOptions(), ProjectorOptions(type="stirgpu"), "Separate Projectors"),
    ],
)
def test_round_trip_through_to_par(tmp_path, settings):
    """read_projector_par(to_par(s)) == s for every role and type (writer and reader agree),
    and settings pickle (they travel to worker processes)."""
    back = read_projector_par(write(tmp_path, settings.to_par()))
    assert back == settings
    assert back.path == tmp_path / "proj.par" and back.line == 2
    assert pickle.loads(pickle.dumps(back)) == back


def test_invalid_settings_objects_are_rejected():
    """The dataclasses refuse combinations no file can produce (a pair without a back
    projector, a Parallelproj pair with stirgpu options, unknown types)."""
    with pytest.raises(ValueError):
        ProjectorSettings("pair", ProjectorOptions(), None, "Parallelproj")
    with pytest.raises(ValueError):
        ProjectorSettings("pair", ProjectorOptions(type="stirgpu"), ProjectorOptions(type="stirgpu"), "Parallelproj")
    with pytest.raises(ValueError):
        ProjectorSettings("forward", ProjectorOptions(), None, "Parallelproj")
    with pytest.raises(ValueError):
        ProjectorOptions(type="Ray Tracing")
    with pytest.raises(ValueError):
        ProjectorOptions(backend="gpu")


def test_every_problem_of_a_projector_file_at_once(tmp_path):
    """An unknown key, an out-of-range value, a bad backend and a refused smoothing step in one
    stirgpu block: all four in one ParFileProblems, each at its line, plus a count line."""
    text = forward(
        "restrict to cylindrical FOV := 2\nbackend := opencl\ncolour := blue\n"
        "pre data processor := Separable Gaussian\n",
        "stirgpu",
    )
    path = write(tmp_path, text)
    with pytest.raises(ParFileProblems) as exc:
        read_projector_par(path)
    got = [(p.line, p.reason) for p in exc.value.problems]
    assert [line for line, _ in got] == [
        line_of(text, "restrict"),
        line_of(text, "backend"),
        line_of(text, "colour"),
        line_of(text, "pre data"),
    ], got
    assert "expects 0 or 1" in got[0][1] and "auto, cpu, cuda" in got[1][1]
    assert "unknown key 'colour'" in got[2][1] and "smoothing" in got[3][1]
    assert str(exc.value).splitlines()[-1] == f"4 problems in {path}"
