"""The projectors' model terms: ``forward_project(..., additive=a, multiplicative=f, background=b)``
is ``(A x + a) / f + b`` in the same streaming pass, and ``back_project(..., multiplicative=f)`` is
``B(y / f)``; where f == 0 the bin is left out (b, and 0 back projected).

Checked against the plain projections and numpy on the same float32 values: equal on the CPU
(the same operations in the same order), to float32 rounding on a GPU; for every chunk plan
(one view per chunk and all views at once) and for a subset (only its views written).
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.formats import ProjDataInMemory
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry


@pytest.fixture(scope="module")
def case():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    rng = np.random.default_rng(0)
    shape = ProjDataInMemory(pdi).shape
    x = rng.random(info.shape, dtype=np.float32)
    a, b, y = (rng.random(shape, dtype=np.float32) for _ in range(3))
    f = 1 + rng.random(shape, dtype=np.float32)
    f[:, :2, :5] = 0  # bins left out
    return pdi, info, x, a, f, b, y


@pytest.mark.parametrize("max_views", [1, None])
def test_model_forward_and_weighted_back(case, backend, max_views):
    pdi, info, x, a, f, b, y = case
    pp = ProjectorPair(backend=backend, max_views_per_chunk=max_views)
    pp.set_up(pdi, info)
    stores = {n: ProjDataInMemory(pdi, fill=v) for n, v in (("a", a), ("f", f), ("b", b), ("y", y))}
    g = ProjDataInMemory(pdi)
    pp.forward_project(g, x)
    ok = f != 0
    expected = np.where(ok, (g.as_array() + a) / np.where(ok, f, 1), 0) + b
    m = ProjDataInMemory(pdi)
    pp.forward_project(m, x, additive=stores["a"], multiplicative=stores["f"], background=stores["b"])
    tol = 0 if backend == "cpu" else 1e-6
    np.testing.assert_allclose(m.as_array(), expected, rtol=tol, atol=tol * expected.max())
    only_a = ProjDataInMemory(pdi)
    pp.forward_project(only_a, x, additive=stores["a"])
    np.testing.assert_allclose(only_a.as_array(), g.as_array() + a, rtol=tol, atol=tol * expected.max())
    sub = ProjDataInMemory(pdi, fill=-1.0)
    pp.forward_project(sub, x, 1, 4, multiplicative=stores["f"])
    views = pdi.subset_views(1, 4)
    got = sub.as_array()
    np.testing.assert_allclose(
        got[:, views], np.where(ok, g.as_array() / np.where(ok, f, 1), 0)[:, views], rtol=max(tol, 1e-7)
    )
    assert (np.delete(got, views, axis=1) == -1).all()
    back = pp.back_project(None, stores["y"], multiplicative=stores["f"])
    plain = pp.back_project(None, ProjDataInMemory(pdi, fill=np.where(ok, y / np.where(ok, f, 1), 0)))
    np.testing.assert_allclose(back, plain, rtol=1e-6, atol=1e-6 * plain.max())
