"""Fixtures of the STIR-backed tests in this folder."""

from __future__ import annotations

import os

import pytest

from stirgpu.stir_plugin.building import PluginBuildError, build


@pytest.fixture(scope="session")
def stir_plugin(reference_stir):
    """The plugin built against the reference STIR for this Python (skipped where the toolchain
    is missing, except in CI, whose .ci/run installs it)."""
    prefix = reference_stir.bin_dir.parent if reference_stir.bin_dir is not None else None
    try:
        return build(prefix)
    except PluginBuildError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the STIR plugin cannot be built here: {e}")
