"""``stirgpu.scatter.simulate_from_parameters`` (what ``stirgpu simulate-scatter`` runs): the keys
``simulate_scatter`` needs, named together; images holding NaN refused, naming the file; an
existing output kept unless overwriting, with nothing else written; the scatter-point image
written when asked for, as the zoomed attenuation image.  (The numbers: the STIR comparison in
``tests/stir_differential/test_scatter_vs_stir.py``.)"""

from __future__ import annotations

import numpy as np
import pytest
from scatter_templates import scatter_scanner, write_scatter_template

from stirgpu.errors import FormatError, NonFiniteError, ParFileError
from stirgpu.formats import read_from_file, read_image, write_image
from stirgpu.geometry import ImageInfo, ProjDataInfo
from stirgpu.parfile.scatter import ScatterParameters
from stirgpu.scatter import simulate_from_parameters


@pytest.fixture
def inputs(tmp_path):
    pdi = ProjDataInfo.construct(scatter_scanner(3, 32, resolution=0.2), 1, 0)
    write_scatter_template(tmp_path, pdi, window=(400.0, 600.0), name="t")
    info = ImageInfo((5, 21, 21), (8.0, 8.0, 8.0))
    mu = np.zeros(info.shape, np.float32)
    mu[:, 5:16, 5:16] = 0.096
    act = mu * 10
    write_image(tmp_path / "mu.hv", mu, info)
    write_image(tmp_path / "act.hv", act, info)
    return ScatterParameters(
        template=tmp_path / "t.hs",
        attenuation_image=tmp_path / "mu.hv",
        activity_image=tmp_path / "act.hv",
        output_prefix=str(tmp_path / "out"),
        randomly_place_scatter_points=False,
    )


def test_writes_output_and_scatter_point_image(inputs, tmp_path):
    p = ScatterParameters(**{**inputs.__dict__, "scatter_point_image_output": tmp_path / "points.hv"})
    run = simulate_from_parameters(p)
    out = read_from_file(run.output)
    assert run.output == tmp_path / "out.hs"
    assert out.as_array().max() > 0
    assert run.total == pytest.approx(float(out.as_array().sum(dtype=np.float64)), rel=1e-6)
    points = read_image(run.scatter_point_image)
    assert np.count_nonzero(points.as_array() >= 0.01) == run.num_scatter_points > 0


def test_required_keys_named_together(inputs):
    p = ScatterParameters(**{**inputs.__dict__, "template": None, "output_prefix": None})
    with pytest.raises(ParFileError, match="'template projdata filename', 'output filename prefix'"):
        simulate_from_parameters(p)


def test_non_finite_image_refused(inputs, tmp_path):
    act = read_image(tmp_path / "act.hv")
    values = act.as_array().copy()
    values[2, 10, 10] = np.nan
    write_image(tmp_path / "act.hv", values, act.info, overwrite=True)
    with pytest.raises(NonFiniteError, match="act.hv holds 1 non-finite value"):
        simulate_from_parameters(inputs)
    assert not (tmp_path / "out.hs").exists()


def test_existing_output_kept(inputs, tmp_path):
    first = simulate_from_parameters(inputs)
    before = (tmp_path / "out.s").read_bytes()
    p = ScatterParameters(**{**inputs.__dict__, "scatter_point_image_output": tmp_path / "points.hv"})
    with pytest.raises(FormatError, match="already exists"):
        simulate_from_parameters(p)
    assert (tmp_path / "out.s").read_bytes() == before and not (tmp_path / "points.hv").exists()
    assert simulate_from_parameters(p, overwrite=True).total == pytest.approx(first.total)
