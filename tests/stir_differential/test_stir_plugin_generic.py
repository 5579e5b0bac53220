"""The STIR plugin on block and generic scanners (STIR's ``ProjDataInfoBlocksOnCylindricalNoArcCorr``
and ``ProjDataInfoGenericNoArcCorr``): projected along the LOR endpoints STIR gives, as STIR's
Parallelproj projector does, and equal to it.

The scanners are small ones written here from STIR's documented Interfile scanner keys: 4 rings
of 16 blocks of 4 crystals on a cylinder, and the same number of flat panels given as a crystal
map (``Scanner geometry := Generic``).  The panels are turned by a few degrees so that no LOR
lies at exactly 45 degrees in x and y, where stirgpu's Joseph kernel and the reference's
libparallelproj build pick the principal axis differently in oblique segments (up to 1e-2 of
the maximum in single bins; ``osmaposl_cases.Geometry`` avoids those views for the same reason).
"""

from __future__ import annotations

import math

import numpy as np
import osmaposl_cases as oc
import pytest
from plugin_runs import BACK_PAR, FORWARD_PAR, STIRGPU_CPU, STIRGPU_PAIR, read_trace, rel_max, run_with_plugin

from stirgpu.formats import read_image

pytestmark = pytest.mark.stir

RINGS, PANELS, CRYSTALS, PITCH_MM, RADIUS_MM = 4, 16, 4, 4.0, 45.0
#: the panels' turn (degrees): no LOR at exactly 45 degrees (see the module docstring)
TURN_DEG = 7.0

#: STIR's geometry class for each scanner geometry
PDI_CLASS = {
    "BlocksOnCylindrical": "ProjDataInfoBlocksOnCylindricalNoArcCorr",
    "Generic": "ProjDataInfoGenericNoArcCorr",
}

HEADER = """!INTERFILE  :=
!imaging modality := PT
name of data file := {name}.s
originating system := {name}
!version of keys := STIR6.0
!GENERAL DATA :=
!GENERAL IMAGE DATA :=
!type of data := PET
imagedata byte order := LITTLEENDIAN
!PET STUDY (General) :=
!PET data type := Emission
applied corrections := {{None}}
!number format := float
!number of bytes per pixel := 4
number of dimensions := 4
matrix axis label [4] := segment
!matrix size [4] := 3
matrix axis label [3] := view
!matrix size [3] := 32
matrix axis label [2] := axial coordinate
!matrix size [2] := {{ 3,4,3}}
matrix axis label [1] := tangential coordinate
!matrix size [1] := 24
minimum ring difference per segment := {{ -1,0,1}}
maximum ring difference per segment := {{ -1,0,1}}
Scanner parameters :=
  Scanner type := {name}
  Number of rings := 4
  Number of detectors per ring := 64
  Inner ring diameter (cm) := 8.6
  Average depth of interaction (cm) := 0.5
  Distance between rings (cm) := 0.4
  Default bin size (cm) := 0.4
  View offset (degrees) := 0
  Maximum number of non-arc-corrected bins := 24
  Default number of arc-corrected bins := 24
  Number of blocks per bucket in transaxial direction := 1
  Number of blocks per bucket in axial direction := 1
  Number of crystals per block in axial direction := 4
  Number of crystals per block in transaxial direction := 4
  Number of detector layers := 1
  Number of crystals per singles unit in axial direction := 1
  Number of crystals per singles unit in transaxial direction := 1
{extra}  Scanner geometry (BlocksOnCylindrical/Cylindrical/Generic) := {geometry}
  Distance between crystals in axial direction (cm) := 0.4
  Distance between crystals in transaxial direction (cm) := 0.4
  Distance between blocks in axial direction (cm) := 1.7
  Distance between blocks in transaxial direction (cm) := 1.7
End scanner parameters :=
number of time frames := 1
!END OF INTERFILE :=
"""


def _crystal_map() -> str:
    """Flat panels of crystals (ring, detector, layer, x, y, z in mm), turned by TURN_DEG."""
    lines = ["#ring\t#detector\t#layer\tx\ty\tz"]
    for ring in range(RINGS):
        for panel in range(PANELS):
            phi = 2 * math.pi * panel / PANELS + math.radians(TURN_DEG)
            for k in range(CRYSTALS):
                t = (k - (CRYSTALS - 1) / 2) * PITCH_MM
                x = RADIUS_MM * math.cos(phi) - t * math.sin(phi)
                y = RADIUS_MM * math.sin(phi) + t * math.cos(phi)
                z = (ring - (RINGS - 1) / 2) * PITCH_MM
                lines.append(f"{ring}\t{CRYSTALS * panel + k}\t0\t{x:.4f}\t{y:.4f}\t{z:.4f}")
    return "\n".join(lines) + "\n"


#: a scanner's TOF keys (STIR 6.5 reads TOF data of block scanners from no file: such data are
#: made in Python, with set_tof_mash_factor)
TOF_KEYS = """  Maximum number of (unmashed) TOF time bins := 5
  Size of unmashed TOF time bins (ps) := 100
  TOF timing resolution (ps) := 300
"""


def _write_template(folder, geometry: str, extra: str = "") -> str:
    name = f"small_{geometry.lower()}"
    if geometry == "Generic":
        (folder / "crystals.txt").write_text(_crystal_map())
        extra += "  Name of crystal map := crystals.txt\n  Scanner orientation (X or Y) := Y\n"
    (folder / f"{name}.hs").write_text(HEADER.format(name=name, geometry=geometry, extra=extra))
    np.zeros(32 * 10 * 24, np.float32).tofile(folder / f"{name}.s")
    return f"{name}.hs"


@pytest.fixture(params=["BlocksOnCylindrical", "Generic"])
def scanner_folder(request, stir, tmp_path, monkeypatch):
    """A folder with the scanner's template (``template``), a random image (``image.hv``) on
    STIR's default grid for it and a zero image of that grid (``zeros.hv``)."""
    template = _write_template(tmp_path, request.param)
    monkeypatch.chdir(tmp_path)  # (STIR finds the crystal map from the working folder)
    proj_data = stir.ProjData.read_from_file(template)  # (held while its geometry is used)
    pdi = proj_data.get_proj_data_info()
    assert type(pdi).__name__ == PDI_CLASS[request.param]
    image = stir.FloatVoxelsOnCartesianGrid(pdi, 1.0)
    image.fill(np.random.default_rng(5).random(image.shape()).astype(np.float32).flat)
    image.write_to_file("image.hv")
    image.fill(0.0)
    image.write_to_file("zeros.hv")
    return tmp_path, template


def test_block_and_generic_scanners_are_projected_as_parallelproj_does(reference_stir, stir_plugin, scanner_folder):
    """forward_project and back_project through the plugin equal STIR's Parallelproj runs to
    1e-5 of the maximum, and the plugin says it projected every view."""
    folder, template = scanner_folder
    fov = "restrict to cylindrical FOV := 1\n"  # (STIR 6.5's lone Parallelproj back projector leaves it unset)
    for kind, par in (("forward", FORWARD_PAR), ("back", BACK_PAR)):
        (folder / f"pp_{kind}.par").write_text(par.format(type="Parallelproj", keys=fov))
        (folder / f"sg_{kind}.par").write_text(par.format(type="stirgpu", keys=STIRGPU_CPU))
    reference_stir.run("forward_project", "pp.hs", "image.hv", template, "pp_forward.par", cwd=folder)
    trace = folder / "trace.jsonl"
    proc = run_with_plugin(
        reference_stir, "forward_project", "sg.hs", "image.hv", template, "sg_forward.par", cwd=folder, trace=trace
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (the data files as STIR wrote them: float32, one order; stirgpu's readers take cylindrical scanners)
    reference, mine = (np.fromfile(folder / f"{run}.s", np.float32) for run in ("pp", "sg"))
    assert np.abs(reference).max() > 0
    assert rel_max(mine, reference) <= 1e-5
    assert sorted(v for c in read_trace(trace) for v in c["views"]) == list(range(32))

    reference_stir.run("back_project", "pp.hv", "pp.hs", "zeros.hv", "pp_back.par", cwd=folder)
    proc = run_with_plugin(reference_stir, "back_project", "sg.hv", "pp.hs", "zeros.hv", "sg_back.par", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference_image = read_image(folder / "pp.hv").array
    assert np.abs(reference_image).max() > 0
    assert rel_max(read_image(folder / "sg.hv").array, reference_image) <= 1e-5


def test_tof_data_of_a_block_scanner_are_refused_with_one_line(stir, stir_plugin, tmp_path, monkeypatch):
    """TOF data of a block scanner (made in STIR's Python module: no file format of STIR 6.5
    holds them) are a STIR error naming the scanner and the reason, at set_up."""
    import stirgpu.stir_plugin as sp

    sp.load()
    monkeypatch.chdir(tmp_path)
    template = _write_template(tmp_path, "BlocksOnCylindrical", TOF_KEYS)
    proj_data = stir.ProjData.read_from_file(template)
    pdi = proj_data.get_proj_data_info().clone()
    pdi.set_tof_mash_factor(1)
    assert pdi.get_num_tof_poss() == 5
    image = stir.FloatVoxelsOnCartesianGrid(proj_data.get_proj_data_info(), 1.0)
    with pytest.raises(RuntimeError) as refused:
        sp.forward_projector(backend="cpu").set_up(pdi, image)
    assert str(refused.value).strip() == (
        "ERROR: stirgpu: set_up: scanner 'small_blocksoncylindrical' (geometry BlocksOnCylindrical): these are "
        "TOF data, and stirgpu projects the TOF data of cylindrical scanners only"
    )


def test_osmaposl_on_block_and_generic_scanners_equals_parallelproj(reference_stir, stir_plugin, scanner_folder):
    """STIR's OSMAPOSL (STIR's per-viewgram calls: the plugin's batches) with the stirgpu pair
    against the Parallelproj pair, on the forward projection of the image as prompts: subset
    sensitivities to 1e-5 and estimates to 1e-4 of the maximum (``osmaposl_cases``' bars)."""
    folder, template = scanner_folder
    (folder / "fwd.par").write_text(FORWARD_PAR.format(type="Parallelproj", keys=""))
    reference_stir.run("forward_project", "prompts.hs", "image.hv", template, "fwd.par", cwd=folder)
    for name, pair in (("pp", oc.PARALLELPROJ_PAIR), ("sg", STIRGPU_PAIR)):
        objective = {**oc.SUBSET_SENSITIVITIES, "subset sensitivity filenames": f"{name}_sens_%d.hv"}
        top = {
            "output filename prefix": f"{name}_out",
            "number of subsets": 2,
            "number of subiterations": 2,
            "save estimates at subiteration intervals": 2,
        }
        (folder / f"{name}.par").write_text(
            oc.osmaposl_par(objective, top, normalisation=None, input_file="prompts.hs", projectors=pair)
        )
    reference_stir.run("OSMAPOSL", "pp.par", cwd=folder)
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "sg.par", cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for image, bar in (("sens_0", oc.SENSITIVITY_TOL), ("sens_1", oc.SENSITIVITY_TOL), ("out_2", oc.ESTIMATE_TOL)):
        reference = read_image(folder / f"pp_{image}.hv").array
        assert np.abs(reference).max() > 0
        assert rel_max(read_image(folder / f"sg_{image}.hv").array, reference) <= bar, image
