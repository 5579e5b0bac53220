"""STIR's ``Truncate To Cylindrical FOV`` and ``Chained Data Processor``: stirgpu's against
STIR 6.5's own (its Python module's ``TruncateToCylindricalFOVImageProcessor3DFloat`` parsed from
the block a ``.par`` gives; inside OSMAPOSL for the chain, which STIR's module does not wrap).

Truncation is an exact zeroing, so the images must be STIR's bit for bit, on even and odd,
square and non-square images (the centre and radius come from STIR's integer index arithmetic).
The chain runs inside OSMAPOSL as STIR's test pack's MRP file has it (a truncation, a Metz
filter, a truncation that keeps the rim), with the Parallelproj pair, against STIR's OSMAPOSL.
"""

from __future__ import annotations

import numpy as np
import osmaposl_cases as oc
import pytest
from test_filters_vs_stir import _image

from stirgpu.filters import TruncateToCylindricalFOV
from stirgpu.formats import VoxelsOnCartesianGrid, read_image
from stirgpu.geometry import ImageInfo
from stirgpu.parfile import read_osmaposl_par

pytestmark = pytest.mark.stir

TRUNCATE = "Truncate To Cylindrical FOV Parameters :=\n{}END Truncate To Cylindrical FOV Parameters :=\n"


@pytest.mark.parametrize("shape", [(3, 16, 16), (2, 15, 15), (2, 12, 17), (1, 21, 14)])
@pytest.mark.parametrize("strict", [None, 1, 0])
def test_truncation_is_stirs_bit_for_bit(stir, tmp_path, shape, strict):
    """STIR's processor parsed from the block (no key: its default) on seeded random values, with
    STIR's index range (x, y from -(n/2)); stirgpu's through a VoxelsOnCartesianGrid of the same."""
    block = TRUNCATE.format("" if strict is None else f"strictly_less_than_radius := {strict}\n")
    (tmp_path / "t.par").write_text(block)
    processor = stir.TruncateToCylindricalFOVImageProcessor3DFloat()
    assert processor.parse(str(tmp_path / "t.par"))
    values = np.random.default_rng(sum(shape)).uniform(0.5, 2.0, shape).astype(np.float32)
    img = _image(stir, shape, (2.0, 3.0, 3.0))
    img.fill(values.ravel())
    processor.apply(img)
    theirs = img.as_array()

    nz, ny, nx = shape
    info = ImageInfo(shape=shape, voxel_size=(2.0, 3.0, 3.0), min_indices=(0, -(ny // 2), -(nx // 2)))
    ours = TruncateToCylindricalFOV(strict != 0).apply(VoxelsOnCartesianGrid(info, fill=values))
    assert np.array_equal(ours.as_array(), theirs)
    assert 0 < np.count_nonzero(theirs == 0) < theirs.size  # the cylinder cuts the image


CHAIN = """inter-iteration filter subiteration interval := 3
inter-iteration filter type := Chained Data Processor
Chained Data Processor Parameters :=
Data Processor to apply first := Chained Data Processor
Chained Data Processor Parameters :=
Data Processor to apply first := Truncate To Cylindrical FOV
Truncate To Cylindrical FOV Parameters :=
strictly_less_than_radius := 1
End Truncate To Cylindrical FOV Parameters :=
Data Processor to apply second := Separable Cartesian Metz
Separable Cartesian Metz Filter Parameters :=
x-dir filter FWHM (in mm) := 9
y-dir filter FWHM (in mm) := 7.5
z-dir filter FWHM (in mm) := 6
x-dir filter Metz power := 2
y-dir filter Metz power := 1
END Separable Cartesian Metz Filter Parameters :=
END Chained Data Processor Parameters :=
Data Processor to apply second := Truncate To Cylindrical FOV
Truncate To Cylindrical FOV Parameters :=
strictly_less_than_radius := 0
End Truncate To Cylindrical FOV Parameters :=
END Chained Data Processor Parameters :="""


def test_chained_processors_in_osmaposl_match_stir(reference_stir, stir, tmp_path):
    """The test pack's MRP chain as the inter-iteration filter (interval 3, 8 subiterations, saved
    every 3): STIR's files, estimates within 1e-4 of its maximum.  Right after the chain (``out_3``)
    the ring at the radius, which Parallelproj's own strict truncation and the chain's first step
    zero, holds what the Metz filter spread into it (the last step keeps the radius), and only
    STIR's positivity threshold lies beyond it; and the chain reads back from the file stirgpu writes."""
    geometry = oc.Geometry(span=3, max_delta=3, num_views=16, num_tangential_poss=64)
    data = oc.make_inputs(reference_stir, stir, tmp_path / "in_data", geometry, seed=5)
    top = {
        "output filename prefix": "out",
        "number of subsets": 4,
        "number of subiterations": 8,
        "save estimates at subiteration intervals": 3,
    }
    par = oc.osmaposl_par(oc.ADDITIVE_OBJECTIVE, top, extra_top=CHAIN)
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path / "run", par, inputs=data)
    diffs = oc.assert_agree(s_dir, g_dir)
    assert {"out_3.hv", "out_6.hv", "out_8.hv"} <= set(diffs)
    filtered = read_image(s_dir / "out_3.hv")
    inside = TruncateToCylindricalFOV(True).prepare_for(filtered.info).mask
    kept = TruncateToCylindricalFOV(False).prepare_for(filtered.info).mask
    values = filtered.as_array()
    tiny = 1e-5 * values.max()  # STIR's positivity threshold after the filter lifts zeros to about 1e-6 of it
    assert np.all(values[:, ~kept] < tiny) and np.any(values[:, kept & ~inside] > 100 * tiny)
    settings = read_osmaposl_par(g_dir / "recon.par", base_dir=g_dir, env={})
    (g_dir / "again.par").write_text(settings.to_par())
    again = read_osmaposl_par(g_dir / "again.par", base_dir=g_dir, env={})
    assert again.inter_iteration_filter == settings.inter_iteration_filter
