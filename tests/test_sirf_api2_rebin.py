"""SIRF's ``AcquisitionData.rebin`` against STIR 6.5's ``SSRB`` (through its Python module).

Random data of an ECAT 953 geometry (span 1 and span 3, views mashed or not), rebinned with
several ``num_segments_to_combine`` / views / trimmed tangential positions / normalisation /
maximum input segment: STIR's output geometry (segments, ring differences, axial positions,
views, tangential positions, view offset) and STIR's values (float32 sums in STIR's order, equal
to 1e-6).  Bad arguments are one-line errors naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.interop import proj_data_info_from_stir

CASES = [
    # (span, max ring diff, views), rebin arguments
    ((1, 5, 24), (3,)),
    ((1, 5, 24), (5, 2, 4, False)),
    ((1, 5, 24), (11, 1, 0, True)),
    ((3, 7, 24), (3, 3, 2, True)),
    ((3, 7, 24), (1, 2, 0, False, 1)),
    ((1, 6, 24), (3, 1, 0, True, 4)),
    ((1, 5, 24), (3, 1, 0, True, 0)),  # C's division: segment 0 still combines -1..1
]


def _stir_data(stir, geometry, seed):
    span, mrd, views = geometry
    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), span, mrd, views, 40, False
    )
    pd = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    values = np.random.default_rng(seed).random(pd.to_array().as_array().shape, dtype=np.float32) * 10
    pd.fill(values.ravel())
    return spdi, pd, values


@pytest.mark.stir
@pytest.mark.parametrize("geometry,args", CASES)
def test_rebin_is_stirs_ssrb(stir, geometry, args):
    spdi, theirs_in, values = _stir_data(stir, geometry, len(args))
    full = list(args) + [1, 0, True, -1][len(args) - 1 :]
    c, cv, trim, norm, max_in = full
    out_spdi = stir.SSRB(spdi, c, cv, trim, max_in, 1)
    theirs = stir.ProjDataInMemory(stir.ExamInfo(), out_spdi)
    stir.SSRB(theirs, theirs_in, norm)
    want = theirs.to_array().as_array()

    pdi = proj_data_info_from_stir(spdi)
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        data = pet.AcquisitionData(ProjDataInMemory(pdi, fill=values[0]))
        got = data.rebin(*args)
        assert got.get_proj_data_info() == proj_data_info_from_stir(out_spdi)
        assert got.dimensions() == want.shape
        np.testing.assert_allclose(got.as_array(), want, rtol=1e-6, atol=0)
        assert (data.as_array() == values).all()  # the input is left alone


@pytest.mark.parametrize(
    "args,match",
    [
        ((2,), "num_segments_to_combine .2. needs to be odd"),
        ((3, 5), "num_views_to_combine .5. must divide the number of views .24."),
        ((3, 1, 40), "too large number of tangential positions to trim .40."),
        ((3, 1, 0, True, 9), "max_in_segment_num_to_process .9. is too large"),
        ((13,), "num_segments_to_combine .13. needs input segments up to 6; the data have 5"),
        ((3, 1, 0, True, -1, 2), "combining TOF bins is not provided"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, match):
    from stirgpu.geometry import ProjDataInfo, Scanner

    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 1, 5, 24, 40)
    with pet.storage_scheme("memory"):
        data = pet.AcquisitionData(ProjDataInMemory(pdi, fill=1.0))
        with pytest.raises(pet.error, match=match):
            data.rebin(*args)
