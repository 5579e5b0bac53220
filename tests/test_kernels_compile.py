"""The one compile-and-memoise helper of the CUDA kernel modules (``cuda.compile.compiled_module``),
on the CPU: a fake ``cupy`` in ``sys.modules`` records what would be compiled, on which device,
with which options and name expressions, and can fail as NVRTC does.  What NVRTC makes of the
sources is the GPU tests' business."""

from __future__ import annotations

import importlib.resources
import sys
import types

import pytest

from stirgpu.errors import DeviceError, StirGpuError
from stirgpu.kernels.cuda import compile as cuda_compile
from stirgpu.kernels.joseph import cuda as joseph_cuda
from stirgpu.kernels.priors import RELATIVE_DIFFERENCE
from stirgpu.kernels.priors import cuda as prior_cuda
from stirgpu.kernels.tof import cuda as tof_cuda

_KERNEL_CACHES = (
    cuda_compile.compiled_module,
    joseph_cuda._kernel,
    tof_cuda._kernel,
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
    """``compiled_module`` compiles once per (device, sources, options, name expressions), on the
    device asked for (the current device restored after), the package's source with its headers
    inlined.  Guards against a module compiled for another device, or compiled anew per call."""
    opts = ("--std=c++17", "--fmad=false")
    a = cuda_compile.compiled_module(0, ("joseph.cu",), opts)
    assert cuda_compile.compiled_module(0, ("joseph.cu",), opts) is a
    assert len(fake_cupy.modules) == 1 and a.device == 0 and fake_cupy.current is None
    on_1 = cuda_compile.compiled_module(1, ("joseph.cu",), opts)
    other_options = cuda_compile.compiled_module(0, ("joseph.cu",), (*opts, "-DX=1"))
    other_source = cuda_compile.compiled_module(0, ("priors.cu",), opts)
    named = cuda_compile.compiled_module(0, ("joseph.cu",), opts, ("f<1>",))
    assert len({id(m) for m in (a, on_1, other_options, other_source, named)}) == 5
    assert len(fake_cupy.modules) == 5
    assert on_1.device == 1 and other_options.options == (*opts, "-DX=1") and named.names == ("f<1>",)
    assert a.code == cuda_compile.package_source(("joseph.cu",)) and other_source.code == _package_text("priors.cu")
    assert _package_text("warp_segsum.cuh") in a.code and '#include "warp_segsum.cuh"' not in a.code


def test_a_compile_error_is_a_device_error_naming_the_sources(fake_cupy):
    """NVRTC's error becomes a DeviceError naming the sources and the device, with NVRTC's log;
    a failure is not memoised.  Guards against a bare CompileException (or a cached failure)
    reaching the user."""
    fake_cupy.failing = True
    files = ("joseph.cu", "joseph_tof.cu")
    with pytest.raises(DeviceError, match="stirgpu/kernels/cuda/joseph_tof.cu for CUDA device 3") as info:
        cuda_compile.compiled_module(3, files, ())
    assert "stirgpu/kernels/cuda/joseph.cu + " in str(info.value)
    assert "identifier 'x' is undefined" in str(info.value)  # NVRTC's log, for the reader
    assert isinstance(info.value.__cause__, _CompileException)
    fake_cupy.failing = False  # a failure is not memoised: the next call compiles again
    assert cuda_compile.compiled_module(3, files, ()).device == 3


def test_headers_are_inlined_and_a_missing_source_is_named(fake_cupy):
    """Quoted includes of package headers are replaced by the headers (cupy's on-disk cache keys
    on the source text, so a changed header must change it); a source missing from the package
    is a StirGpuError naming it, before anything is compiled."""
    src = cuda_compile.package_source(("joseph.cu",))
    assert '#include "warp_segsum.cuh"' not in src and _package_text("warp_segsum.cuh") in src
    assert _package_text("joseph.cu") not in src  # (it held the include)
    with pytest.raises(StirGpuError, match="stirgpu/kernels/cuda/nope.cu"):
        cuda_compile.compiled_module(0, ("nope.cu",), ())
    assert fake_cupy.modules == []


def test_every_kernel_module_compiles_through_the_helper(fake_cupy):
    """The Joseph, TOF and prior kernels: their sources, options and template instantiations, on
    the device asked for, one module per (device, options) shared by its kernels.  Guards against
    a kernel compiled without ``--fmad=false`` (contracted multiply-adds: other numbers than the
    CPU's) or in another LOR order than asked."""
    fwd, back = joseph_cuda._kernel(1, "fwd_stir"), joseph_cuda._kernel(1, "back_stir")
    assert fwd[0] is back[0] and fwd[0].device == 1 and fwd[0].code == cuda_compile.package_source(("joseph.cu",))
    assert "--fmad=false" in fwd[0].options and joseph_cuda.order_option(False) in fwd[0].options
    assert fwd[0].options == joseph_cuda.compile_options(False)
    lors, name = joseph_cuda._kernel(1, "fwd_lors")
    assert lors is fwd[0] and name == "fwd_lors"  # the explicit-endpoint kernels: the same module
    axial, _ = joseph_cuda._kernel(1, "fwd_stir", True)
    assert axial is not fwd[0] and joseph_cuda.order_option(True) in axial.options  # one module per LOR order

    tof, _ = tof_cuda._kernel(0, "back", 7)
    assert tof.names == ("fwd_stir_tof<7>", "back_stir_tof<7>") and "--fmad=false" in tof.options
    assert tof.code == cuda_compile.package_source(("joseph.cu", "joseph_tof.cu"))
    wide, name = tof_cuda._kernel(0, "fwd", tof_cuda.WIDE_MAX)
    assert name == "fwd_stir_tof_wide" and wide.names == () and wide.code == tof.code
    tof_axial, _ = tof_cuda._kernel(0, "fwd", 7, True)
    assert tof_axial is not tof and joseph_cuda.order_option(True) in tof_axial.options

    prior, name = prior_cuda._kernel(0, "prior_gradient", RELATIVE_DIFFERENCE, "float32", False)
    assert name == "prior_gradient<1, float, int>" and name in prior.names and len(prior.names) == 3
    assert prior.code == _package_text("priors.cu") and "--fmad=false" in prior.options
    before = len(fake_cupy.modules)
    prior_cuda._kernel(0, "prior_value_blocks", RELATIVE_DIFFERENCE, "float32", False)
    assert len(fake_cupy.modules) == before  # the same (kind, dtype, index width): the same module
