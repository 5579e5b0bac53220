"""KernelOptions of the CUDA backend: validation, NVRTC macros, dynamic shared memory, and
the benchmark's variant tokens (CPU only: nothing here imports cupy or compiles)."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import REPO_ROOT

from stirgpu.kernels import cuda_backend as cb
from stirgpu.kernels import cuda_compile


def test_defaults():
    """The tuned defaults: shuffle-aggregated back projection (merged atomics compiled in as the
    fallback, unused while segsum is on)."""
    o = cb.KernelOptions()
    assert o.back_segsum and o.back_merge
    opts = o.compile_options(back=True)
    assert "-DSG_BACK_SEGSUM" in opts and "-DSG_BACK_MERGE" in opts
    assert opts == o.compile_options(back=False)[:-1]  # the forward module adds its register cap
    assert "--maxrregcount=64" in o.compile_options(back=False)


def test_without_segsum_the_merged_atomics_remain():
    plain = cb.KernelOptions(back_segsum=False).compile_options(back=True)
    assert "-DSG_BACK_SEGSUM" not in plain and "-DSG_BACK_MERGE" in plain
    bare = cb.KernelOptions(back_segsum=False, back_merge=False).compile_options(back=True)
    assert not any(o.startswith("-DSG_BACK") for o in bare)


def test_kernel_source_has_the_variants():
    """The inlined source (what cupy compiles) carries the back projection's variants' macros."""
    src = cuda_compile.kernel_source()
    assert "SG_BACK_MERGE" in src and "SG_BACK_SEGSUM" in src
    assert '#include "joseph_common.cuh"' not in src


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("stirgpu_bench_kernels", REPO_ROOT / "benchmarks" / "kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    "text,want",
    [
        ("default", (True, True, 8)),
        ("default+nosegsum", (True, False, 8)),
        ("plain", (False, False, 8)),
        ("plain+segsum+bw4", (False, True, 4)),
        ("nosegsum+merge+i64", (True, False, 8)),
    ],
)
def test_benchmark_variant_tokens(text, want):
    o = _benchmark_module().parse_variant(cb, text)
    assert (o.back_merge, o.back_segsum, o.back_warps_per_block) == want
