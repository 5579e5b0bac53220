"""The reference STIR helper itself: it finds a STIR whose executables run and whose module imports.

Guards against a helper that "finds" a STIR that cannot run (wrong config folder, missing
libraries): every differential test would then fail for the wrong reason, or skip silently.
"""

import pytest
from helpers import reference_results

pytestmark = pytest.mark.stir


def test_executable_reads_a_stir_header(reference_stir, stir_fixtures):
    hs = reference_results(stir_fixtures) / "ecat953_span3_fwd.hs"
    out = reference_stir.run("list_projdata_info", "--geom", hs).stdout
    assert "ECAT 953" in out and "Number of Views" in out


def test_module_builds_a_proj_data_info(stir):
    scanner = stir.Scanner.get_scanner_from_name("ECAT 953")
    pdi = stir.ProjDataInfo.construct_proj_data_info(scanner, 3, 4, 96, 128, False)
    assert pdi.get_num_views() == 96 and pdi.get_max_segment_num() == 1
