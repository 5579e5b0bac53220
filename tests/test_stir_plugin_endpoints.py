"""The STIR plugin's projector along given LOR endpoints (``stirgpu.stir_plugin.bridge_endpoints``,
what the plugin uses for block and generic scanners), without STIR: the endpoints and the image
look-alike the C++ side hands over, made here.  Its numbers are stirgpu's explicit-endpoint Joseph
kernels' on the image zeroed outside STIR's cylindrical FOV; on a GPU the same as on the CPU.
Against STIR's Parallelproj itself: ``stir_differential/test_stir_plugin_generic.py``."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.geometry import ImageInfo
from stirgpu.kernels import apply_cylindrical_fov, cylindrical_fov_mask, joseph_back, joseph_forward
from stirgpu.stir_plugin.bridge_endpoints import EndpointSession

SHAPE, MIN_INDICES = (5, 12, 12), (0, -6, -6)
ORIGIN, VOXEL = (-1.0, -5.5, -5.5), (0.5, 1.0, 1.0)  # (units of the x voxel size, as the C++ side gives)
NUM_VIEWS, MIN_VIEW, NUM_TANG = 6, 0, 7
AXIAL = {-1: 2, 0: 3, 1: 2}  # segment: axial positions


class _ImageLookalike:
    """What the plugin's ``ImageGeometry`` look-alike answers (STIR's image in mm)."""

    def get_lengths(self):
        return SHAPE

    def get_voxel_size(self):
        return (2.0, 4.0, 4.0)

    def get_origin(self):
        return (0.0, 0.0, 0.0)

    def get_min_indices(self):
        return MIN_INDICES


def _endpoints(rng) -> dict:
    """Random LORs between points on a cylinder of radius 9 around the image, per segment (views,
    axial, tangential, 3), as the C++ side's ``lor_endpoints`` gives them; one LOR missing the FOV
    (zeros, as STIR's Parallelproj helper writes it)."""

    def points(shape):
        phi = rng.uniform(0, 2 * np.pi, shape)
        z = rng.uniform(-1.4, 1.4, shape)
        return np.stack([z, 9 * np.sin(phi), 9 * np.cos(phi)], axis=-1).astype(np.float32)

    xstart = {s: points((NUM_VIEWS, na, NUM_TANG)) for s, na in AXIAL.items()}
    xend = {s: points((NUM_VIEWS, na, NUM_TANG)) for s, na in AXIAL.items()}
    xstart[0][2, 1, 3] = xend[0][2, 1, 3] = 0
    return {
        "xstart": xstart,
        "xend": xend,
        "origin": ORIGIN,
        "voxel_size": VOXEL,
        "shape": SHAPE,
        "min_indices": MIN_INDICES,
        "min_view": MIN_VIEW,
        "min_axial": {s: 0 for s in AXIAL},
        "inner_ring_radius": 40.0,
        "description": "test scanner",
    }


def _options(backend: str) -> dict:
    return {
        "backend": backend,
        "devices": [],
        "gpu_memory_budget_mb": -1,
        "host_memory_budget_mb": -1,
        "max_views_per_chunk": -1,
        "restrict_to_cylindrical_fov": True,
        "verbosity": 0,
    }


def _masked(image: np.ndarray) -> np.ndarray:
    info = ImageInfo(SHAPE, (2.0, 4.0, 4.0), (0.0, 0.0, 0.0), MIN_INDICES)
    return apply_cylindrical_fov(image, cylindrical_fov_mask(info, 0))


def _viewgrams(value=None) -> dict:
    make = np.empty if value is None else (lambda shape, dtype: np.full(shape, value, dtype))
    return {(s, v, 0): make((na, NUM_TANG), np.float32) for s, na in AXIAL.items() for v in range(NUM_VIEWS)}


class _Access:
    """A lent STIR ProjData as the C++ ``ProjDataAccess`` offers it: viewgrams by (segment, view)."""

    def __init__(self, viewgrams: dict):
        self.viewgrams = viewgrams
        self.written: list[tuple[int, int]] = []

    def read_viewgram(self, segment, view, out, timing_pos=0):
        out[...] = self.viewgrams[(segment, view, timing_pos)]

    def write_viewgram(self, segment, view, array, timing_pos=0):
        self.viewgrams[(segment, view, timing_pos)] = np.array(array)
        self.written.append((segment, view))


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request):
    return request.param


def test_forward_and_back_are_the_explicit_endpoint_kernels_on_the_fov_masked_image(backend):
    rng = np.random.default_rng(3)
    ends = _endpoints(rng)
    image = rng.random(SHAPE, dtype=np.float32)
    session = EndpointSession(ends, _ImageLookalike(), _options(backend))
    assert session.gpus_project == (backend == "cuda")
    session.set_input(image)
    outputs = _viewgrams()
    session.forward(range(NUM_VIEWS), outputs)
    masked = _masked(image)
    for (s, v, _), got in outputs.items():
        want = joseph_forward(
            ends["xstart"][s][v].reshape(-1, 3), ends["xend"][s][v].reshape(-1, 3), masked, ORIGIN, VOXEL
        )
        np.testing.assert_array_equal(got.reshape(-1), want)  # the GPU's forward equals the CPU's bit for bit
    assert outputs[(0, 2, 0)][1, 3] == 0  # the LOR outside the FOV

    values = {k: rng.random(v.shape, dtype=np.float32) for k, v in outputs.items()}
    session.start_accumulating()
    session.back(range(NUM_VIEWS), values)
    got_image = np.empty(SHAPE, np.float32)
    session.get_output(got_image)
    want_image = np.zeros(SHAPE, np.float32)
    for (s, v, _), vals in values.items():
        xs, xe = ends["xstart"][s][v].reshape(-1, 3), ends["xend"][s][v].reshape(-1, 3)
        joseph_back(xs, xe, vals.reshape(-1), want_image, ORIGIN, VOXEL)
    want_image = _masked(want_image)
    assert np.abs(got_image - want_image).max() <= 1e-6 * np.abs(want_image).max()  # float32 summation order


def test_whole_proj_data_calls_touch_only_the_subsets_views(backend):
    rng = np.random.default_rng(4)
    session = EndpointSession(_endpoints(rng), _ImageLookalike(), _options(backend))
    image = rng.random(SHAPE, dtype=np.float32)
    session.set_input(image)
    everything = _viewgrams()
    session.forward(range(NUM_VIEWS), everything)

    out = _Access(_viewgrams(-1.0))
    session.forward_proj_data(out, 1, 3)
    assert sorted({v for _, v in out.written}) == [1, 4]
    for key, vg in out.viewgrams.items():
        np.testing.assert_array_equal(vg, everything[key] if key[1] in (1, 4) else -1.0)

    session.start_accumulating()
    session.back_proj_data(_Access(everything), 1, 3)
    subset_back = np.empty(SHAPE, np.float32)
    session.get_output(subset_back)
    session.start_accumulating()
    session.back([1, 4], {k: vg for k, vg in everything.items() if k[1] in (1, 4)})
    direct = np.empty(SHAPE, np.float32)
    session.get_output(direct)
    np.testing.assert_allclose(subset_back, direct, rtol=0, atol=1e-6 * np.abs(direct).max())


def test_calls_out_of_order_and_after_close_are_refused_by_name():
    session = EndpointSession(_endpoints(np.random.default_rng(5)), _ImageLookalike(), _options("cpu"))
    with pytest.raises(StirGpuError, match="forward projection before set_input"):
        session.forward([0], _viewgrams())
    with pytest.raises(StirGpuError, match="back projection before start_accumulating_in_new_target"):
        session.back([0], _viewgrams(1.0))
    session.close()
    with pytest.raises(StirGpuError, match="used after STIR destroyed it"):
        session.set_input(np.zeros(SHAPE, np.float32))
