"""What the STIR plugin's tests share: STIR's executables run with the plugin preloaded
(``conftest.py`` builds it: the ``stir_plugin`` fixture), and the plugin's trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from helpers import REPO_ROOT

#: STIR's lone projector blocks: FORWARD_PAR.format(type=..., keys=...)
FORWARD_PAR = """Forward Projector parameters :=
type := {type}
Forward Projector Using {type} Parameters :=
{keys}End Forward Projector Using {type} Parameters :=
end :=
"""
BACK_PAR = FORWARD_PAR.replace("Forward", "Back")
STIRGPU_CPU = "backend := cpu\n"
STIRGPU_PAIR = (
    "projector pair type := stirgpu\nProjector Pair Using stirgpu Parameters :=\nbackend := cpu\n"
    "End Projector Pair Using stirgpu Parameters :="
)


def plugin_env(reference_stir, trace: Path | None = None) -> dict:
    env = reference_stir.env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("STIRGPU_STIR_PLUGIN_TRACE", None)
    if trace is not None:
        env["STIRGPU_STIR_PLUGIN_TRACE"] = str(trace)
    return env


def plugin_command(reference_stir, program: str, *args) -> list[str]:
    """The command line of ``stirgpu stir PROGRAM ARGS``: a STIR executable, the plugin preloaded."""
    prefix = [sys.executable, "-m", "stirgpu.cli.main", "stir", "--stir", str(reference_stir.bin_dir.parent)]
    return [*prefix, program, *map(str, args)]


def run_with_plugin(reference_stir, program: str, *args, cwd: Path, trace: Path | None = None, env=None, **kw):
    """:func:`plugin_command`, completed; ``env`` (default :func:`plugin_env`) is the
    environment it runs in."""
    env = plugin_env(reference_stir, trace) if env is None else env
    cmd = plugin_command(reference_stir, program, *args)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)


def read_inputs(stir, folder: Path):
    """A test folder's prompts (``prompts.hs``) and image (``phantom.hv``), read by STIR: its
    ProjData and FloatVoxelsOnCartesianGrid."""
    prompts = stir.ProjData.read_from_file(str(folder / "prompts.hs"))
    return prompts, stir.FloatVoxelsOnCartesianGrid.read_from_file(str(folder / "phantom.hv"))


def read_trace(path: Path, kind: str = "projection") -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [line for line in lines if line["kind"] == kind]


def rel_max(a: np.ndarray, b: np.ndarray) -> float:
    b = b.astype(np.float64)
    return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())
