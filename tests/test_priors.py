"""STIR's priors in stirgpu (stirgpu.priors, kernels/prior_*): the maths against finite differences,
the host-side logic of the CUDA kernels (launch sizes, index width, names), and the objects' API.
(The CUDA kernels against the numba ones: tests/test_kernels_gpu_priors.py.)

Finite differences run on float64 images (the kernels take float64 as well as float32), with
symmetric weights (for asymmetric user weights STIR's gradient is not the value's derivative:
docs/priors.md).  The comparisons with STIR's own prior objects are in
tests/stir_differential/test_priors_vs_stir.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import DeviceError, GeometryError, StirGpuError
from stirgpu.formats import VoxelsOnCartesianGrid, read_image
from stirgpu.geometry import ImageInfo
from stirgpu.kernels.cuda import compile as cuda_compile
from stirgpu.kernels.priors import (
    LOGCOSH,
    QUADRATIC,
    RELATIVE_DIFFERENCE,
    prior_gradient,
    prior_hessian_times,
    prior_value,
)
from stirgpu.kernels.priors import cuda as prior_cuda
from stirgpu.priors import (
    LogcoshPrior,
    QuadraticPrior,
    RelativeDifferencePrior,
    centred_weights,
    make_prior,
    stir_default_weights,
)

POTENTIALS = {
    "quadratic": (QUADRATIC, 0.0, 0.0),
    "rdp": (RELATIVE_DIFFERENCE, 2.0, 0.0),
    "rdp-gamma-eps": (RELATIVE_DIFFERENCE, 0.7, 0.05),
    "logcosh": (LOGCOSH, 1.7, 0.0),
}


def _image(shape=(4, 6, 7), seed=0, dtype=np.float64, zeros=False):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 3.0, shape)
    if zeros:
        x[rng.random(shape) < 0.3] = 0.0
    return x.astype(dtype)


def _symmetric_weights(seed=1, shape=(3, 3, 3)):
    w = np.random.default_rng(seed).uniform(0.1, 1.0, shape)
    return ((w + w[::-1, ::-1, ::-1]) / 2).astype(np.float32)  # w[d] == w[-d]


@pytest.mark.parametrize("name", sorted(POTENTIALS))
@pytest.mark.parametrize("with_kappa", [False, True])
def test_gradient_is_the_derivative_of_the_value(name, with_kappa):
    """Central differences of the value (float64, h = 1e-6) match the gradient voxel by voxel to
    1e-6 of its maximum, for symmetric weights with a kappa image or without.  Guards the pair
    derivatives and the kappa products against the value's formula."""
    kind, p1, p2 = POTENTIALS[name]
    x = _image()
    w = _symmetric_weights()
    kappa = _image(seed=5) if with_kappa else None
    g = prior_gradient(x, w, kind, p1, p2, kappa=kappa)
    fd = np.zeros_like(x)
    h = 1e-6
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd[idx] = (prior_value(xp, w, kind, p1, p2, kappa=kappa) - prior_value(xm, w, kind, p1, p2, kappa=kappa)) / (
            2 * h
        )
    assert np.abs(fd - g).max() <= 1e-6 * np.abs(g).max()


@pytest.mark.parametrize("name", sorted(POTENTIALS))
def test_hessian_times_vector_is_the_derivative_of_the_gradient(name):
    """(grad(x + h v) - grad(x - h v)) / 2h matches H(x) v (accumulate into zeros) to 1e-6 of its
    maximum (float64, zero centre weight: STIR's Hessian then is the gradient's derivative)."""
    kind, p1, p2 = POTENTIALS[name]
    x = _image(seed=2)
    w = _symmetric_weights(seed=3)
    w[1, 1, 1] = 0
    kappa = _image(seed=6)
    v = np.random.default_rng(4).normal(size=x.shape)
    hv = prior_hessian_times(x, v, w, kind, p1, p2, kappa=kappa)
    h = 1e-6
    fd = (
        prior_gradient(x + h * v, w, kind, p1, p2, kappa=kappa)
        - prior_gradient(x - h * v, w, kind, p1, p2, kappa=kappa)
    ) / (2 * h)
    assert np.abs(fd - hv).max() <= 1e-6 * np.abs(hv).max()


def test_cuda_launch_covers_every_voxel_with_one_thread_each():
    """ceil(n / 256) blocks of 256 threads: the last block is partial, an empty image launches
    nothing, and an image beyond CUDA's grid limit is refused rather than truncated."""
    t = prior_cuda.THREADS_PER_BLOCK
    assert t == 256
    assert [prior_cuda.launch_blocks(n) for n in (0, 1, t, t + 1, 127 * 285 * 285)] == [0, 1, 1, 2, 40296]
    assert prior_cuda.launch_blocks((2**31 - 1) * t) == 2**31 - 1
    with pytest.raises(DeviceError, match="grid limit"):
        prior_cuda.launch_blocks((2**31 - 1) * t + 1)


def test_cuda_kernels_take_64_bit_indices_exactly_where_32_bits_would_wrap():
    """The number of threads (blocks * 256, so every thread's index and the voxel count) must fit
    in an int: 32 bits up to 2^31 - 256 voxels, 64 from the next voxel on (a Quadra image, 645 x 447
    x 447, is 32-bit; a 2^31-voxel image, whose count alone overflows an int, is not)."""
    limit = 2**31 - prior_cuda.THREADS_PER_BLOCK
    assert not prior_cuda.needs_index64(limit)
    assert prior_cuda.needs_index64(limit + 1)
    assert not prior_cuda.needs_index64(645 * 447 * 447)
    assert prior_cuda.needs_index64(2**31)
    assert prior_cuda.needs_index64(32769 * 256 * 256)  # the GPU test's image


def test_cuda_kernel_names_are_the_instantiations_of_priors_cu():
    """The C++ names cupy looks up (name expressions), for every kind, dtype and index width;
    anything else is refused before compiling.  Each name's template is in priors.cu."""
    assert prior_cuda.kernel_name("prior_gradient", RELATIVE_DIFFERENCE, np.float32, False) == (
        "prior_gradient<1, float, int>"
    )
    assert prior_cuda.kernel_name("prior_value_blocks", LOGCOSH, "float64", True) == (
        "prior_value_blocks<2, double, long long>"
    )
    source = cuda_compile.package_source(("priors.cu",))
    for op in ("prior_value_blocks", "prior_gradient", "prior_hessian_times"):
        assert f"void __launch_bounds__(SG_PRIOR_THREADS)\n    {op}(" in source
    with pytest.raises(StirGpuError, match="float32 or float64"):
        prior_cuda.kernel_name("prior_gradient", QUADRATIC, np.float16, False)
    with pytest.raises(StirGpuError, match="prior kind"):
        prior_cuda.kernel_name("prior_gradient", 3, np.float32, False)
    with pytest.raises(StirGpuError, match="prior kernel"):
        prior_cuda.kernel_name("prior_hessian", QUADRATIC, np.float32, False)


def test_importing_the_prior_kernels_loads_no_gpu_library():
    """Nothing at import: the kernel modules import neither cupy nor compile anything."""
    import subprocess
    import sys

    code = "import sys, stirgpu.kernels.priors.cuda, stirgpu.priors; print('cupy' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_kernels_refuse_bad_arguments():
    """Shapes, dtypes, even weight sizes and kinds are checked before any kernel runs."""
    x = _image()
    w = stir_default_weights((2.0, 2.0, 2.0))
    with pytest.raises(GeometryError, match="3-D"):
        prior_value(x[0], w, QUADRATIC)
    with pytest.raises(GeometryError, match="float32 or float64"):
        prior_value(x.astype(np.int32), w, QUADRATIC)
    with pytest.raises(GeometryError, match="odd sizes"):
        prior_value(x, np.ones((2, 3, 3)), QUADRATIC)
    with pytest.raises(GeometryError, match="kappa: shape"):
        prior_value(x, w, QUADRATIC, kappa=x[:2].copy())
    with pytest.raises(StirGpuError, match="prior kind"):
        prior_value(x, w, 7)
    with pytest.raises(GeometryError, match="out: dtype"):
        prior_gradient(x, w, QUADRATIC, out=np.zeros(x.shape, np.float32))
    with pytest.raises(StirGpuError, match="out: must not be the image"):
        prior_gradient(x, w, QUADRATIC, out=x)
    v = x.copy()
    with pytest.raises(StirGpuError, match="out: must not be the vector"):
        prior_hessian_times(x, v, w, QUADRATIC, out=v)


# -- weights ----------------------------------------------------------------------------------------


def test_default_weights_follow_stirs_rule():
    """vx / distance in mm, 0 at the centre, 1x3x3 with only 2D; for vx = vy the in-plane
    diagonal is 1/sqrt(2) and the plane neighbours vx / vz.  (Bit-for-bit equality with STIR's own
    weights is tested against STIR.)"""
    w = stir_default_weights((3.0, 2.0, 2.0))
    assert w.shape == (3, 3, 3) and w.dtype == np.float32 and w[1, 1, 1] == 0
    assert w[1, 1, 0] == w[1, 1, 2] == w[1, 0, 1] == 1.0
    assert w[1, 0, 0] == np.float32(1 / np.sqrt(np.float32(2)))
    assert w[0, 1, 1] == w[2, 1, 1] == np.float32(2.0) / np.float32(3.0)
    w2 = stir_default_weights((3.0, 2.0, 2.0), only_2d=True)
    assert w2.shape == (1, 3, 3) and (w2[0] == w[1]).all()
    assert stir_default_weights((3.0, 4.0, 2.0))[1, 0, 1] == np.float32(0.5)  # vx / vy


def test_even_weight_sizes_get_stirs_zero_appended():
    """STIR indexes user weights from -(n // 2): an even size reaches one less forward, i.e. a zero
    is appended at the end of that axis."""
    w = centred_weights([[[1, 2], [3, 4]]])
    assert w.shape == (1, 3, 3)
    assert (w[0] == [[1, 2, 0], [3, 4, 0], [0, 0, 0]]).all()
    with pytest.raises(GeometryError, match="regular"):
        centred_weights([[[1, 2], [3]]])


# -- the objects -------------------------------------------------------------------------------------

INFO = ImageInfo((4, 6, 7), (3.1, 2.2, 2.0))


def test_priors_need_set_up_and_give_zero_without_penalisation():
    """Like STIR: no value or gradient before set_up; with a penalisation factor of 0 the value
    and gradient are 0 and ``is_zero`` is true (OSMAPOSL then runs OSEM); the factor can be changed
    after set_up."""
    p = QuadraticPrior()
    x = _image(INFO.shape, dtype=np.float32)
    with pytest.raises(StirGpuError, match="set_up"):
        p.get_value(x)
    p.set_up(INFO)
    assert p.is_zero and p.get_value(x) == 0.0 and not p.get_gradient(x).any()
    p.set_penalisation_factor(0.4)
    assert not p.is_zero
    want = 0.4 * prior_value(x, stir_default_weights(INFO.voxel_size), QUADRATIC)
    assert p.get_value(x) == pytest.approx(want, rel=1e-7)


def test_objects_compute_what_the_kernels_compute():
    """Each class passes its parameters (float32, as STIR holds them) and STIR's default weights
    for the set-up voxel sizes to the kernels; images in give images out, arrays give arrays."""
    x = _image(INFO.shape, dtype=np.float32, zeros=True)
    kappa = _image(INFO.shape, seed=3, dtype=np.float32)
    v = _image(INFO.shape, seed=4, dtype=np.float32)
    cases = [
        (QuadraticPrior(0.5, kappa=kappa), QUADRATIC, 0.0, 0.0),
        (RelativeDifferencePrior(0.5, gamma=1.5, epsilon=0.1, kappa=kappa), RELATIVE_DIFFERENCE, 1.5, 0.1),
        (LogcoshPrior(0.5, scalar=2.5, kappa=kappa), LOGCOSH, 2.5, 0.0),
    ]
    w = stir_default_weights(INFO.voxel_size)
    for prior, kind, p1, p2 in cases:
        prior.set_up(INFO)
        p1, p2 = float(np.float32(p1)), float(np.float32(p2))
        assert prior.get_value(x) == 0.5 * prior_value(x, w, kind, p1, p2, kappa=kappa)
        g = prior.get_gradient(VoxelsOnCartesianGrid(INFO, fill=x))
        assert isinstance(g, VoxelsOnCartesianGrid)
        assert (g.array == prior_gradient(x, w, kind, p1, p2, scale=0.5, kappa=kappa)).all()
        h = prior.multiply_with_Hessian(x, v)
        assert (h == prior_hessian_times(x, v, w, kind, p1, p2, scale=0.5, kappa=kappa)).all()
        out = np.ones_like(x)
        assert prior.accumulate_Hessian_times_input(x, v, out) is out
        want = prior_hessian_times(x, v, w, kind, p1, p2, scale=0.5, kappa=kappa, out=np.ones_like(x))
        np.testing.assert_array_equal(out, want)  # added to what out held


def test_only_2d_and_user_weights():
    """only 2D gives the 1x3x3 default weights; user weights replace the default and then only 2D
    changes nothing (STIR: 'value of only_2D is ignored')."""
    p = QuadraticPrior(1.0, only_2D=True)
    p.set_up(INFO)
    assert p.get_weights().shape == (1, 3, 3)
    user = np.zeros((3, 3, 3), np.float32)
    user[0, 1, 1] = user[2, 1, 1] = 1.0
    p.set_weights(user)
    assert (p.get_weights() == user).all()
    x = _image(INFO.shape, dtype=np.float32)
    assert p.get_value(x) == pytest.approx(np.sum((x[1:] - x[:-1]).astype(np.float64) ** 2) / 2, rel=1e-6)


def test_parameters_and_images_are_checked():
    with pytest.raises(StirGpuError, match="epsilon"):
        RelativeDifferencePrior(1.0, epsilon=-1)
    with pytest.raises(StirGpuError, match="gamma"):
        RelativeDifferencePrior(1.0, gamma=-0.5)
    with pytest.raises(StirGpuError, match="scalar"):
        LogcoshPrior(1.0, scalar=0)
    with pytest.raises(StirGpuError, match="finite"):
        QuadraticPrior(float("nan"))
    with pytest.raises(StirGpuError, match="'PLS'"):
        make_prior("PLS")
    p = QuadraticPrior(1.0, kappa=np.ones((2, 2, 2), np.float32))
    with pytest.raises(GeometryError, match="kappa"):
        p.set_up(INFO)
    p = QuadraticPrior(1.0)
    p.set_up(INFO)
    with pytest.raises(GeometryError, match="shape"):
        p.get_value(np.ones((3, 3, 3), np.float32))
    other = VoxelsOnCartesianGrid(ImageInfo(INFO.shape, (1.0, 1.0, 1.0)))
    with pytest.raises(GeometryError, match="geometry"):
        p.get_gradient(other)


def test_gradient_filename_prefix_writes_one_image_per_gradient(tmp_path):
    """STIR's ``gradient filename prefix``: the n-th gradient computed goes to ``<prefix><n>.hv``
    (+ ``.v``), n from 1, holding the gradient; a prefix ending in '/' writes into that folder."""
    x = _image(INFO.shape, dtype=np.float32)
    p = RelativeDifferencePrior(0.5, gradient_filename_prefix=tmp_path / "g_")
    p.set_up(INFO)
    g1 = p.get_gradient(x)
    p.get_gradient(2 * x)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["g_1.hv", "g_1.v", "g_2.hv", "g_2.v"]
    written = read_image(tmp_path / "g_1.hv")
    assert written.info == INFO and (written.array == g1).all()
    (tmp_path / "sub").mkdir()
    p.set_gradient_filename_prefix(f"{tmp_path}/sub/")
    p.get_gradient(x)
    assert (tmp_path / "sub" / "3.hv").is_file()


def test_a_gradient_computed_without_its_file_still_counts(tmp_path):
    """``write_file=False`` (the MPI ranks other than 0: they compute the same gradients) writes
    nothing, and the next file keeps STIR's numbering; the gradient is the same."""
    x = _image(INFO.shape, dtype=np.float32)
    p = RelativeDifferencePrior(0.5, gradient_filename_prefix=tmp_path / "g_")
    p.set_up(INFO)
    quiet = p.get_gradient(x, write_file=False)
    assert list(tmp_path.iterdir()) == []
    assert (p.get_gradient(x) == quiet).all()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["g_2.hv", "g_2.v"]
