"""Fixtures and collection hooks (plain helper functions are in ``helpers.py``).

* ``stir_fixtures`` -- the one way tests reach ``../shared/fixtures`` (STIR-written
  files).  They exist beside the checkout and in CI, not in a user's clone, so
  tests using them skip with a clear reason where they are absent.  Set
  ``STIRGPU_FIXTURES`` to point elsewhere.
* ``sirf_shared`` -- ``../shared/sirf`` (SIRF's PET examples, tests and data) the same way
  (``STIRGPU_SIRF`` to point elsewhere), skipping with a reason where absent.
* ``stir_reference_case`` -- one of STIR's reference projections, loaded once per module.
* ``reference_stir`` -- a real STIR build (``reference_stir.py`` says where it comes from);
  tests using it carry the ``stir`` marker and skip with a clear reason where none is found.
* ``stir`` -- STIR's Python module from that build, imported into the test process.
* ``osem_problem`` -- the OSEM tests' small simulated problem (``helpers.osem_problem``), once per module.
* ``cp`` / ``cb`` -- cupy and stirgpu's CUDA Joseph kernels (``stirgpu.kernels.joseph.cuda``),
  for the GPU tests.
* ``backend`` -- parametrises a test over the CPU and CUDA backends; CUDA cases
  carry the ``gpu`` marker and skip themselves where no GPU is usable.
* ``gpu`` / ``multi_gpu`` tests are skipped at collection where
  :func:`helpers.cuda_device_count` finds too few GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import REPO_ROOT, cuda_device_count, osem_problem, reference_results


def shared_dir(name: str, variable: str, landmark: str) -> Path | None:
    """``shared/<name>`` beside the checkout (or in it), or where ``variable`` points: the first
    holding ``landmark``; None where there is none."""
    env = os.environ.get(variable)
    candidates = [Path(env)] if env else []
    candidates.append(REPO_ROOT.parent / "shared" / name)
    candidates.append(REPO_ROOT / "shared" / name)
    for c in candidates:
        if (c / landmark).exists():
            return c
    return None


def fixtures_dir() -> Path | None:
    return shared_dir("fixtures", "STIRGPU_FIXTURES", "stir_scanners.json")


@pytest.fixture(scope="session")
def stir_fixtures() -> Path:
    d = fixtures_dir()
    if d is None:
        pytest.skip(
            "STIR fixtures not found (expected ../shared/fixtures beside the checkout, or set STIRGPU_FIXTURES)"
        )
    return d


def pytest_collection_modifyitems(config, items):
    n = cuda_device_count()
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU usable through cupy on this machine")
    skip_multi = pytest.mark.skip(reason=f"needs >= 2 CUDA GPUs, found {n}")
    for item in items:
        if "gpu" in item.keywords and n < 1:
            item.add_marker(skip_gpu)
        elif "multi_gpu" in item.keywords and n < 2:
            item.add_marker(skip_multi)


@pytest.fixture(scope="session")
def sirf_shared() -> Path:
    """``../shared/sirf``: SIRF's PET examples, tests and example data (read-only)."""
    d = shared_dir("sirf", "STIRGPU_SIRF", "examples/Python/PET")
    if d is None:
        pytest.skip("SIRF's PET files not found (expected ../shared/sirf beside the checkout, or set STIRGPU_SIRF)")
    return d


@pytest.fixture(scope="module", params=["ecat953_span3", "ecat953_arc_sino"])
def stir_reference_case(request, stir_fixtures):
    """(name, image array, ImageInfo, {segment: STIR's forward projection by view},
    ProjDataInfo, STIR's back projection) of one case of ``stir_reference``."""
    import numpy as np

    from stirgpu.formats import read_from_file, read_image

    d = reference_results(stir_fixtures)
    name = request.param
    image = read_image(d / f"{name}_image.hv")
    back = read_image(d / f"{name}_back.hv")
    with read_from_file(d / f"{name}_fwd.hs") as proj:
        pdi = proj.get_proj_data_info()
        fwd = {seg: np.ascontiguousarray(proj.get_segment_by_view(seg)) for seg in pdi.segment_nums}
    assert back.info == image.info
    return name, image.as_array(), image.info, fwd, pdi, back.as_array()


@pytest.fixture(scope="session")
def reference_stir():
    """The reference STIR (executables, Python module, environment), or a skip saying why not."""
    import reference_stir as ref

    found = ref.find()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="session")
def stir(reference_stir):
    """STIR's own Python module (``import stir``) from the reference build."""
    return reference_stir.module()


@pytest.fixture(name="osem_problem", scope="module")
def osem_problem_fixture():
    return osem_problem()


@pytest.fixture(scope="session")
def cp():
    """The cupy module, for GPU tests (they are skipped before this runs where there is none)."""
    return pytest.importorskip("cupy")


@pytest.fixture(scope="session")
def cb():
    """stirgpu's CUDA Joseph kernels' module, ``stirgpu.kernels.joseph.cuda`` (imported only by
    the GPU tests that ask for it)."""
    from stirgpu.kernels.joseph import cuda

    return cuda


@pytest.fixture(params=["image-fits-l2", "image-exceeds-l2"])
def both_lor_orders(request, monkeypatch):
    """Runs a GPU test in both LOR orders of the Joseph kernels
    (``stirgpu.kernels.joseph.cuda.axial_major``): the GPU's L2 cache taken as larger than any
    image (TOF projections view-major) and as empty (every kernel axial-major)."""
    from stirgpu.kernels.joseph import cuda as joseph_cuda

    size = 1 << 50 if request.param == "image-fits-l2" else 0
    monkeypatch.setattr(joseph_cuda, "l2_cache_bytes", lambda device_id: size)  # (TOF's order too)
    return request.param


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request) -> str:
    return request.param
