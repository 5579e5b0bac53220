"""stirgpu.arrays: the one registry of array kinds (no GPU library is needed to tell them apart)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu import arrays


def _object_of(module: str, name: str = "Array", **attrs):
    """An instance of a class that says it comes from ``module`` (how kinds are recognised)."""
    cls = type(name, (), attrs)
    cls.__module__ = module
    return cls()


class _CudaInterface:
    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}


class _CpuTensorLike:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("not a CUDA tensor")  # what torch CPU tensors do


class _DLPack:
    def __init__(self, device_type: int):
        self._device = (device_type, 0)

    def __dlpack_device__(self):
        return self._device


@pytest.mark.parametrize(
    "obj, kind, cuda",
    [
        (np.zeros(3, np.float32), "numpy", False),
        (np.zeros(2).view(np.recarray), "numpy", False),  # a numpy subclass
        (_object_of("cupy._core.core", "ndarray"), "cupy", True),
        (_object_of("torch", "Tensor", is_cuda=True), "torch", True),
        (_object_of("torch", "Tensor", is_cuda=False), "torch", False),
        (_CudaInterface(), "cuda", True),
        (_CpuTensorLike(), "other", False),
        (_DLPack(2), "dlpack-cuda", True),
        (_DLPack(13), "dlpack-cuda", True),
        (_DLPack(1), "other", False),
        ([1.0, 2.0], "other", False),
        (3.0, "other", False),
    ],
)
def test_array_kinds(obj, kind, cuda):
    assert arrays.array_kind(obj) == kind
    assert arrays.on_cuda(obj) is cuda
    assert arrays.is_cupy(obj) is (kind == "cupy")
    assert arrays.is_torch(obj) is (kind == "torch")


def test_library_of_names_the_top_level_package():
    assert arrays.library_of(np.zeros(1)) == "numpy"
    assert arrays.library_of(_object_of("stir.something")) == "stir"
    assert arrays.library_of(1) == "builtins"


def test_array_module_is_numpy_for_everything_but_cupy():
    assert arrays.array_module(np.zeros(1)) is np
    assert arrays.array_module([1, 2]) is np
    assert arrays.array_module(_CudaInterface()) is np


def test_no_cupy_view_of_host_arrays():
    for obj in (np.zeros(2), [1.0], _DLPack(1), _object_of("torch", "Tensor", is_cuda=False)):
        assert arrays.as_cupy_view(obj) is None


def test_in_namespace_keeps_an_array_of_the_namespace():
    a = np.arange(3, dtype=np.float32)
    assert arrays.in_namespace(np, a) is a


def test_ignoring_float_errors_silences_numpy_only_inside():
    with arrays.ignoring_float_errors(np):
        assert np.isinf(np.float32(1) / np.float32(0))
    with arrays.ignoring_float_errors(np, divide="ignore"):
        np.divide(np.ones(1), np.zeros(1))
    with pytest.warns(RuntimeWarning):
        np.divide(np.ones(1), np.zeros(1))
