"""The one compile-and-memoise helper of the CUDA kernel modules (``cuda_compile.compiled_module``),
on the CPU: a fake ``cupy`` in ``sys.modules`` records what would be compiled, on which device,
with which options and name expressions, and can fail as NVRTC does.  What NVRTC makes of the
sources is the GPU tests' business."""

from __future__ import annotations

import importlib.resources
import sys
import types

import pytest

from stirgpu.errors import DeviceError, StirGpuError
from stirgpu.kernels import cuda_compile, cuda_stir, cuda_stir_tof, prior_cuda
from stirgpu.kernels.cuda_options import DEFAULT_OPTIONS
from stirgpu.kernels.prior_api import RELATIVE_DIFFERENCE

_KERNEL_CACHES = (
    cuda_compile.compiled_module,
    cuda_compile.get_kernel,
    cuda_stir._kernel,
    cuda_stir_tof._kernel,
    prior_cuda._kernel,
)


class _CompileException(Exception):
    """Stands for ``cupy.cuda.compiler.CompileException``."""


class _FakeCupy(types.ModuleType):
    """What ``compiled_module`` uses of cupy: ``cuda.Device`` (a context), ``RawModule``
    (``compile``, ``get_function``) and ``cuda.compiler.CompileException``."""

    def __init__(self):
        super().__init__("cupy")
        self.current: int | None = None
        self.modules: list[_FakeModule] = []
        self.failing = False
        fake = self

        class Device:
            def __init__(self, device_id):
                self.id = device_id

            def __enter__(self):
                self.previous, fake.current = fake.current, self.id

            def __exit__(self, *exc):
                fake.current = self.previous

        self.cuda = types.SimpleNamespace(
            Device=Device, compiler=types.SimpleNamespace(CompileException=_CompileException)
        )
        self.RawModule = lambda **kw: _FakeModule(fake, **kw)


class _FakeModule:
    def __init__(self, cupy: _FakeCupy, code: str, options: tuple[str, ...], name_expressions=()):
        self.cupy, self.code, self.options, self.names = cupy, code, options, tuple(name_expressions)
        self.device: int | None = None
        cupy.modules.append(self)

    def compile(self):
        self.device = self.cupy.current
        if self.cupy.failing:
            raise _CompileException("joseph.cu(12): error: identifier 'x' is undefined")

    def get_function(self, name: str):
        if self.device is None:
            self.compile()
        if "<" in name and name not in self.names:
            raise KeyError(f"{name} was not instantiated")
        return (self, name)


@pytest.fixture
def fake_cupy(monkeypatch):
    """A fake cupy for the test; every kernel memo is emptied before and after, so that no fake
    module is ever handed to a later test (nor a real one to this)."""
    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    for cache in _KERNEL_CACHES:
        cache.cache_clear()
    yield fake
    for cache in _KERNEL_CACHES:
        cache.cache_clear()


def _package_text(name: str) -> str:
    return importlib.resources.files("stirgpu.kernels").joinpath("cuda", name).read_text(encoding="utf-8")


def test_a_module_is_compiled_once_per_device_source_and_options(fake_cupy):
    opts = ("--std=c++17", "--fmad=false")
    a = cuda_compile.compiled_module(0, ("joseph_stir.cu",), opts)
    assert cuda_compile.compiled_module(0, ("joseph_stir.cu",), opts) is a
    assert len(fake_cupy.modules) == 1 and a.device == 0 and fake_cupy.current is None
    on_1 = cuda_compile.compiled_module(1, ("joseph_stir.cu",), opts)
    other_options = cuda_compile.compiled_module(0, ("joseph_stir.cu",), (*opts, "-DX=1"))
    other_source = cuda_compile.compiled_module(0, ("priors.cu",), opts)
    named = cuda_compile.compiled_module(0, ("joseph_stir.cu",), opts, ("f<1>",))
    assert len({id(m) for m in (a, on_1, other_options, other_source, named)}) == 5
    assert len(fake_cupy.modules) == 5
    assert on_1.device == 1 and other_options.options == (*opts, "-DX=1") and named.names == ("f<1>",)
    assert a.code == cuda_compile.package_source(("joseph_stir.cu",)) and other_source.code == _package_text(
        "priors.cu"
    )
    assert _package_text("warp_segsum.cuh") in a.code and '#include "warp_segsum.cuh"' not in a.code


def test_a_compile_error_is_a_device_error_naming_the_sources(fake_cupy):
    fake_cupy.failing = True
    files = ("joseph_stir.cu", "joseph_stir_tof.cu")
    with pytest.raises(DeviceError, match="stirgpu/kernels/cuda/joseph_stir_tof.cu for CUDA device 3") as info:
        cuda_compile.compiled_module(3, files, ())
    assert "stirgpu/kernels/cuda/joseph_stir.cu + " in str(info.value)
    assert "identifier 'x' is undefined" in str(info.value)  # NVRTC's log, for the reader
    assert isinstance(info.value.__cause__, _CompileException)
    fake_cupy.failing = False  # a failure is not memoised: the next call compiles again
    assert cuda_compile.compiled_module(3, files, ()).device == 3


def test_headers_are_inlined_and_a_missing_source_is_named(fake_cupy):
    src = cuda_compile.package_source(("joseph.cu",))
    assert '#include "joseph_common.cuh"' not in src and _package_text("joseph_common.cuh") in src
    assert cuda_compile.kernel_source() == src
    with pytest.raises(StirGpuError, match="stirgpu/kernels/cuda/nope.cu"):
        cuda_compile.compiled_module(0, ("nope.cu",), ())
    assert fake_cupy.modules == []


def test_every_kernel_module_compiles_through_the_helper(fake_cupy):
    """The Joseph, STIR-numerics, TOF and prior kernels: their sources, options and template
    instantiations, on the device asked for, one module per (device, options) shared by its kernels."""
    mod, name = cuda_compile.get_kernel(2, DEFAULT_OPTIONS, "fwd_chunk_tiled<int>")
    assert name == "fwd_chunk_tiled<int>" and mod.device == 2 and mod.code == cuda_compile.kernel_source()
    assert mod.options == DEFAULT_OPTIONS.compile_options(back=False) and "back_chunk_tiled<long long>" in mod.names

    fwd, back = cuda_stir._kernel(1, "fwd_stir"), cuda_stir._kernel(1, "back_stir")
    assert fwd[0] is back[0] and fwd[0].device == 1 and fwd[0].code == cuda_compile.package_source(("joseph_stir.cu",))
    assert "--fmad=false" in fwd[0].options and cuda_stir.order_option(False) in fwd[0].options
    axial, _ = cuda_stir._kernel(1, "fwd_stir", True)
    assert axial is not fwd[0] and cuda_stir.order_option(True) in axial.options  # one module per LOR order

    tof, _ = cuda_stir_tof._kernel(0, "back", 7)
    assert tof.names == ("fwd_stir_tof<7>", "back_stir_tof<7>") and "--fmad=false" in tof.options
    assert tof.code == cuda_compile.package_source(("joseph_stir.cu", "joseph_stir_tof.cu"))
    wide, name = cuda_stir_tof._kernel(0, "fwd", cuda_stir_tof.WIDE_MAX)
    assert name == "fwd_stir_tof_wide" and wide.names == () and wide.code == tof.code
    tof_axial, _ = cuda_stir_tof._kernel(0, "fwd", 7, True)
    assert tof_axial is not tof and cuda_stir.order_option(True) in tof_axial.options

    prior, name = prior_cuda._kernel(0, "prior_gradient", RELATIVE_DIFFERENCE, "float32", False)
    assert name == "prior_gradient<1, float, int>" and name in prior.names and len(prior.names) == 3
    assert prior.code == _package_text("priors.cu") and "--fmad=false" in prior.options
    before = len(fake_cupy.modules)
    prior_cuda._kernel(0, "prior_value_blocks", RELATIVE_DIFFERENCE, "float32", False)
    assert len(fake_cupy.modules) == before  # the same (kind, dtype, index width): the same module
