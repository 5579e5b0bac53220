"""KernelOptions of the CUDA backend: validation, NVRTC macros, dynamic shared memory, and
the benchmark's variant tokens (CPU only: nothing here imports cupy or compiles)."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import REPO_ROOT

from stirgpu.errors import StirGpuError
from stirgpu.kernels import cuda_backend as cb
from stirgpu.kernels import cuda_compile, cuda_launch


def test_defaults():
    """The tuned defaults: shuffle-aggregated back projection, no shared memory."""
    o = cb.KernelOptions()
    assert o.back_segsum and not o.back_smem and not o.back_smem_partial
    opts = o.compile_options(back=True)
    assert "-DSG_BACK_SEGSUM" in opts
    assert "-DSG_BACK_SMEM" not in opts and "-DSG_BACK_SMEM_PARTIAL" not in opts
    assert cuda_launch.back_smem_bytes(o, 256) == 0  # no shared memory


def test_back_smem_partial_needs_back_smem():
    with pytest.raises(StirGpuError, match="back_smem_partial=True needs back_smem=True"):
        cb.KernelOptions(back_smem_partial=True)  # back_smem is off by default
    o = cb.KernelOptions(back_smem=True, back_smem_partial=True)
    opts = o.compile_options(back=True)
    assert "-DSG_BACK_SMEM" in opts and "-DSG_BACK_SMEM_PARTIAL" in opts
    assert cuda_launch.back_smem_bytes(o, 128) == 4 * 4096  # the same per-warp rows


def test_back_smem_replaces_back_segsum():
    """Shared-memory aggregation, when asked for, is compiled instead of the shuffle sums."""
    o = cb.KernelOptions(back_smem=True)
    opts = o.compile_options(back=True)
    assert "-DSG_BACK_SMEM" in opts and "-DSG_BACK_SEGSUM" not in opts
    assert cuda_launch.back_smem_bytes(o, 256) == 8 * 4096
    plain = cb.KernelOptions(back_segsum=False).compile_options(back=True)
    assert "-DSG_BACK_SEGSUM" not in plain and "-DSG_BACK_MERGE" in plain


def test_kernel_source_has_the_variants():
    """The inlined source (what cupy compiles) carries both variants' macros."""
    src = cuda_compile.kernel_source()
    assert "SG_BACK_SMEM_PARTIAL" in src and "SG_BACK_SEGSUM" in src
    assert '#include "joseph_common.cuh"' not in src


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("stirgpu_bench_kernels", REPO_ROOT / "benchmarks" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "text,want",
    [
        ("default", (False, False, True)),
        ("default+smem", (True, False, False)),
        ("default+smemp", (True, True, False)),
        ("default+segsum", (False, False, True)),
        ("segsum+smem", (True, False, False)),
        ("smemp+nosmem", (False, False, False)),
        ("smemp+segsum+bw4+i64", (False, False, True)),
    ],
)
def test_benchmark_variant_tokens(text, want):
    o = _benchmark_module().parse_variant(cb, text)
    assert (o.back_smem, o.back_smem_partial, o.back_segsum) == want
