"""SIRF users' own PET scripts and tests, run on ``stirgpu.sirf`` with the imports swapped as a user
would swap them (used by ``test_sirf_clients.py`` and ``benchmarks/sirf_clients_table.py``).

A copy of SIRF's files (``../shared/sirf``: examples, tests, example data) is made in a scratch
folder at run time -- nothing of it enters the checkout -- and each ``.py`` there is rewritten by
:data:`REWRITES`, the edits a SIRF user makes to run on stirgpu:

* ``sirf.STIR`` -> ``stirgpu.sirf``, ``sirf.Utilities`` -> ``stirgpu.sirf.Utilities``,
  ``sirf.SIRF`` (SIRF's engine-independent containers: ``norm``, ``dot``) -> ``stirgpu.sirf``;
* the examples' engine choice ``importlib.import_module('sirf.' + engine)`` -> ``stirgpu.sirf``;
* ``sirf.config`` (SIRF's build options) -> ``stirgpu.sirf.config``;
* ``AcquisitionModelUsingRayTracingMatrix`` -> ``AcquisitionModelUsingParallelproj``: SIRF's
  default model, the ray-tracing matrix, stays a ``NotSupported`` in stirgpu, so a user swaps it
  for the Parallelproj model stirgpu computes, and drops the ray-tracing setting
  ``set_num_tangential_LORs(n)`` made on it right after (Parallelproj has one LOR a bin).

Their own code and assertions are otherwise unchanged.  Examples run as scripts (with
``--non-interactive`` where they offer it, ``MPLBACKEND=Agg``); test files run under pytest, each
item's outcome read from pytest's JUnit report.  SIRF's data is found through
``SIRF_DATA_PATH``; five data files are absent from ``../shared/sirf``: :func:`make_absent_data`
makes those the scripts need by forward projecting SIRF's ``test_image_PM_QP_6.hv`` (an image of
that scanner) with stirgpu into the header's geometry.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# (pattern, replacement): the edits a user makes; applied in order to every .py of the copy
REWRITES: list[tuple[str, str]] = [
    (r"importlib\.import_module\('sirf\.' \+ engine\)", "importlib.import_module('stirgpu.sirf')"),
    (r"\bsirf\.Utilities\b", "stirgpu.sirf.Utilities"),
    (r"\bsirf\.STIR\b", "stirgpu.sirf"),
    (r"\bsirf\.SIRF\b", "stirgpu.sirf"),
    (r"\bsirf\.config\b", "stirgpu.sirf.config"),
    (r"\bAcquisitionModelUsingRayTracingMatrix\b", "AcquisitionModelUsingParallelproj"),
    # the ray-tracing setting made on the swapped model on the next line
    (
        r"(\n[ \t]*(\w+) *= *(?:\w+\.)?AcquisitionModelUsingParallelproj\(\)[ \t]*\n)"
        r"[ \t]*\2\.set_num_tangential_LORs\(\d+\);?[ \t]*\n",
        r"\1",
    ),
]

# the absent data files (../shared/sirf/README.md) SIRF's scripts read, made from this image
SOURCE_IMAGE = "test_image_PM_QP_6.hv"
ABSENT_DATA = ("my_forward_projection.hs", "simulated_data.hs", "Utahscat600k_ca_seg4.hs")
# Utahscat600k_ca_seg4 is measured data with 600k counts: a Poisson sample of that many
MEASURED_COUNTS = {"Utahscat600k_ca_seg4.hs": 600_000}


def rewrite(text: str) -> str:
    for pattern, replacement in REWRITES:
        text = re.sub(pattern, replacement, text)
    return text


def stirgpu_env(data_root: Path) -> dict[str, str]:
    """The environment a user's script runs in: the tree's stirgpu, SIRF's data, no display."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["SIRF_DATA_PATH"] = str(data_root)
    env["MPLBACKEND"] = "Agg"
    env.pop("SIRF_INSTALL_PATH", None)
    env.pop("SIRF_PATH", None)
    return env


@dataclasses.dataclass(frozen=True)
class Workspace:
    """The rewritten copy: ``examples`` (SIRF's PET example scripts), ``tests`` (SIRF's PET test
    files) and ``data`` (``SIRF_DATA_PATH``: ``data/examples/PET``)."""

    root: Path

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def pet_data(self) -> Path:
        return self.data / "examples" / "PET"

    def env(self) -> dict[str, str]:
        return stirgpu_env(self.data)


def make_workspace(sirf: Path, root: Path) -> Workspace:
    """Copy ``sirf`` (``../shared/sirf``) into ``root``, rewrite its Python files, make its absent data."""
    ws = Workspace(root)
    shutil.copytree(sirf / "examples" / "Python" / "PET", ws.examples)
    shutil.copytree(sirf / "tests" / "pSTIR", ws.tests)
    shutil.copytree(sirf / "data", ws.data)
    for folder, _, files in os.walk(root):  # ../shared is read-only: the copy is the user's own
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    for folder in (ws.examples, ws.tests):
        for py in folder.glob("*.py"):
            py.write_text(rewrite(py.read_text()))
    make_absent_data(ws)
    return ws


def make_absent_data(ws: Workspace) -> list[str]:
    """Make each of :data:`ABSENT_DATA` whose data file is missing: stirgpu's forward projection
    of :data:`SOURCE_IMAGE` into the header's geometry (a Poisson sample of
    :data:`MEASURED_COUNTS` where given).  The header is replaced by stirgpu's of the same
    geometry.  Returns the headers made."""
    import numpy as np

    made = []
    scratch = ws.root / "made"
    scratch.mkdir(exist_ok=True)
    for name in ABSENT_DATA:
        header = ws.pet_data / name
        if (ws.pet_data / name.replace(".hs", ".s")).is_file():
            continue
        out = scratch / name
        cmd = [sys.executable, "-m", "stirgpu", "forward-project", "--backend", "cpu", "--quiet"]
        cmd += [str(out), str(ws.pet_data / SOURCE_IMAGE), str(header)]
        proc = subprocess.run(cmd, env=ws.env(), capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"making {name}: {' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
        data = out.with_suffix(".s")
        if name in MEASURED_COUNTS:
            values = np.fromfile(data, dtype="<f4")
            scaled = values * (MEASURED_COUNTS[name] / values.sum())
            np.random.default_rng(600).poisson(scaled).astype("<f4").tofile(data)
        shutil.move(out, header)
        shutil.move(data, ws.pet_data / data.name)
        made.append(name)
    return made


@dataclasses.dataclass
class Outcome:
    """What happened: the exit status, the counts of the test file's items, the output's tail."""

    returncode: int
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    items: dict[str, str] = dataclasses.field(default_factory=dict)
    tail: str = ""

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped


def run_example(ws: Workspace, script: str, args: list[str], cwd: Path, timeout: float = 900) -> Outcome:
    """Run the rewritten example ``script`` with ``args`` in ``cwd``."""
    cmd = [sys.executable, str(ws.examples / script), *args]
    proc = subprocess.run(cmd, cwd=cwd, env=ws.env(), capture_output=True, text=True, timeout=timeout)
    return Outcome(proc.returncode, tail=(proc.stdout + proc.stderr)[-6000:])


def run_test_file(ws: Workspace, name: str, timeout: float = 900) -> Outcome:
    """pytest on the rewritten test file ``name`` (in the copy's test folder, with its own
    ``pytest.ini``); each item's outcome from the JUnit report."""
    report = ws.root / f"{name}.junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", name]
    proc = subprocess.run(cmd, cwd=ws.tests, env=ws.env(), capture_output=True, text=True, timeout=timeout)
    outcome = Outcome(proc.returncode, tail=(proc.stdout + proc.stderr)[-6000:])
    if report.is_file():
        for case in ET.parse(report).getroot().iter("testcase"):
            kind = "passed"
            for child in case:
                if child.tag in ("failure", "error"):
                    kind = "failed"
                elif child.tag == "skipped":
                    kind = "skipped"
            outcome.items[f"{case.get('classname')}::{case.get('name')}"] = kind
            setattr(outcome, kind, getattr(outcome, kind) + 1)
    return outcome


@dataclasses.dataclass(frozen=True)
class Case:
    """One SIRF file: its arguments (examples; ``{data}`` is the PET data folder) and, where it
    cannot pass yet, what it needs (the stirgpu name that is missing, or the absent SIRF file)."""

    args: tuple[str, ...] = ()
    needs: str | None = None


NON_INTERACTIVE = ("--non-interactive",)
# SIRF's PET examples (examples/Python/PET), each run as a script
EXAMPLES: dict[str, Case] = {
    "STIR_acquisition_model_using_raytracing.py": Case(
        NON_INTERACTIVE,
        "RayTracingMatrix (STIR's ray-tracing matrix, the object this example configures; a NotSupported in "
        "stirgpu, raised where the script makes it)",
    ),
    "acquisition_data.py": Case(NON_INTERACTIVE),
    "acquisition_data_from_scanner_info.py": Case(NON_INTERACTIVE),
    "acquisition_model.py": Case(NON_INTERACTIVE),
    "acquisition_sensitivity_from_attenuation.py": Case(NON_INTERACTIVE),
    "acquisition_sensitivity_from_bin_efficiencies.py": Case(NON_INTERACTIVE),
    "acquisition_sensitivity_from_ecat8.py": Case(NON_INTERACTIVE),
    "asarray.py": Case(NON_INTERACTIVE),
    "fbp2d_reconstruction.py": Case(
        NON_INTERACTIVE,
        "FBP2DReconstructor (a NotSupported in stirgpu, raised where the script makes it, which prints it: "
        "STIR's FBP2D back projects with its interpolating back projector, which stirgpu does not compute)",
    ),
    "generate_noisy_data.py": Case(NON_INTERACTIVE),
    "hkem_reconstruction.py": Case(NON_INTERACTIVE),
    "input_output.py": Case(NON_INTERACTIVE),
    "listmode_reconstruction.py": Case(
        NON_INTERACTIVE,
        "ListmodeData (where it stops), then ListmodeToSinograms, and SIRF's mMR/list.l (absent from ../shared/sirf)",
    ),
    "listmode_to_sinograms.py": Case(
        NON_INTERACTIVE,
        "ListmodeToSinograms, and SIRF's mMR/list.l (absent from ../shared/sirf)",
    ),
    "osem_reconstruction.py": Case(NON_INTERACTIVE),
    "osem_reconstruction_gpu.py": Case(NON_INTERACTIVE),
    "osl_reconstruction.py": Case(NON_INTERACTIVE),
    "ossps_reconstruction.py": Case(NON_INTERACTIVE),
    # with --non-interactive it exits before reading anything: it runs with its figure (Agg)
    "plot_measured_data.py": Case(("--file={data}/my_forward_projection.hs",)),
    "randoms_from_listmode.py": Case(
        NON_INTERACTIVE, "ListmodeToSinograms, and SIRF's mMR/list.l (absent from ../shared/sirf)"
    ),
    "scatter_estimation.py": Case(
        NON_INTERACTIVE,
        "the prompts and randoms sinograms that randoms_from_listmode.py makes from SIRF's mMR/list.l (absent "
        "from ../shared/sirf: where it stops; ScatterEstimator, which it drives next, is covered by "
        "tests/test_sirf_api_scatter_estimator.py)",
    ),
    "scatter_simulation.py": Case(
        NON_INTERACTIVE,
        "SIRF's examples/parameter_files/scatter_template.hs (not in ../shared/sirf: where it stops; "
        "SingleScatterSimulator, which it drives next, is covered by tests/test_sirf_api_scatter.py)",
    ),
    "steepest_ascent.py": Case(NON_INTERACTIVE),
    "user_osmaposl.py": Case(NON_INTERACTIVE),
}

# examples not run, and why (docs/sirf.md lists them)
EXAMPLES_NOT_RUN: dict[str, str] = {
    "get_multiplicative_sinogram.py": "needs sirf.Reg (NiftyReg registration), not a PET part",
    "reconstruct_from_listmode.py": "needs sirf.Reg (NiftyReg registration), not a PET part",
    "run_all.py": "SIRF's runner of all the examples (each is run here instead)",
    "PET_plot_functions.py": "a module of plot_measured_data.py, not a script",
}

# SIRF's PET test files (src/xSTIR/pSTIR/tests), each run under pytest
TEST_FILES: dict[str, Case] = {
    "tests_one.py": Case(
        needs="get_num_tangential_LORs on the swapped model (where it stops: it checks the ray-tracing setting "
        "the swap drops), then "
        "RayTracingMatrix and AcquisitionModelUsingMatrix (used by name: no class to swap), and SIRF's own "
        "Utahscat600k_ca_seg4.s (absent; tests_one.txt records its norm)"
    ),
    "tests_two.py": Case(
        needs="SIRF's own my_forward_projection.s (absent from ../shared/sirf): tests_two.txt records the norms "
        "of that data and of its OSEM image (4.93e4, 225.6; the data made here gives 1612, 7.37); its other "
        "checks pass"
    ),
    "tests_three.py": Case(
        needs="SIRF's own Utahscat600k_ca_seg4.s (absent from ../shared/sirf): its first check, the data's norm, "
        "fails (tests_three.txt records 3099; the data made here gives 1037), and so does the OSSPS image's "
        "(10.93; 10.82 from the made data); its other checks pass"
    ),
    "tests_four.py": Case(),
    "tests_five.py": Case(),
    "test_algebra.py": Case(),
    "test_ObjectiveFunction.py": Case(),
    "tests_qp_lc_rdp.py": Case(),
    "tests_asarray.py": Case(),
    "tests_data_container_algebra.py": Case(),
    "test_six_adjoint.py": Case(),
    "tests_view.py": Case(),
    "tests_scatter.py": Case(
        needs="SIRF's examples/parameter_files/scatter_template.hs (not in ../shared/sirf: where it stops; its "
        "SingleScatterSimulator and ScatterEstimator calls are covered by tests/test_sirf_api_scatter.py and "
        "tests/test_sirf_api_scatter_estimator.py)"
    ),
    "tests_listmode.py": Case(needs="ListmodeToSinograms, and SIRF's mMR/list.l (absent from ../shared/sirf)"),
}


def example_args(ws: Workspace, case: Case) -> list[str]:
    return [a.format(data=ws.pet_data) for a in case.args]


def example_ran(ws: Workspace, script: str, outcome: Outcome) -> bool:
    """An example ran where it exited 0 with no traceback and, where the script prints it,
    reached its '=== done with' line, or its line 'done' (SIRF's examples catch SIRF's
    ``error``, print it and exit 0: only that line tells they got to the end)."""
    text = (ws.examples / script).read_text()
    reached_end = "done with" in outcome.tail or "done with" not in text
    if "print('done')" in text:
        reached_end = "done" in (line.strip() for line in outcome.tail.splitlines())
    return outcome.returncode == 0 and "Traceback" not in outcome.tail and reached_end


# SIRF's PET test files not run, and why
TEST_FILES_NOT_RUN: dict[str, str] = {
    "test_all.py": "SIRF's runner of its test files (each is run here instead)",
    "tests_NiftyPET.py": "NiftyPET's projector (AcquisitionModelUsingNiftyPET): not part of stirgpu",
}

_PARALLELPROJ_PAIR = """projector pair type := Parallelproj
Projector Pair Using Parallelproj Parameters :=
End Projector Pair Using Parallelproj Parameters :="""

_FORWARD = """Forward Projector parameters :=
type := Parallelproj
Forward Projector Using Parallelproj Parameters :=
End Forward Projector Using Parallelproj Parameters :=
End :=
"""


def stir_osem_residual(reference_stir, data: Path, folder: Path, subsets: int = 12, subiterations: int = 2) -> float:
    """What osem_reconstruction.py prints, computed by STIR: OSMAPOSL (Parallelproj pair, a
    uniform start image of STIR's default size) on ``data``, its image forward projected by
    STIR's ``forward_project``, and ``|s |d|/|s| - d| / |d|`` of that ``s`` and the data ``d``."""
    import numpy as np

    from stirgpu.formats import read_from_file

    folder.mkdir(parents=True, exist_ok=True)
    par = [
        "OSMAPOSLParameters :=",
        "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData",
        "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=",
        f"input file := {data}",
        *_PARALLELPROJ_PAIR.splitlines(),
        "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=",
        "output filename prefix := out",
        f"number of subsets := {subsets}",
        f"number of subiterations := {subiterations}",
        f"save estimates at subiteration intervals := {subiterations}",
        "END :=",
        "",
    ]
    (folder / "osem.par").write_text("\n".join(par))
    reference_stir.run("OSMAPOSL", "osem.par", cwd=folder)
    (folder / "forward.par").write_text(_FORWARD)
    image = f"out_{subiterations}.hv"
    reference_stir.run("forward_project", "fwd.hs", image, str(data), "forward.par", cwd=folder)

    def flat(path: Path):
        with read_from_file(path) as pd:
            pdi = pd.get_proj_data_info()
            segments = [np.ravel(pd.get_segment_by_view(seg)) for seg in pdi.segment_nums]
        return np.concatenate(segments).astype(np.float64)

    d, s = flat(data), flat(folder / "fwd.hs")
    diff = s * (np.linalg.norm(d) / np.linalg.norm(s)) - d
    return float(np.linalg.norm(diff) / np.linalg.norm(d))


def stir_objective_value(stir, data: Path, info, num_subsets: int) -> float:
    """What steepest_ascent.py prints first, computed by STIR's Python classes: the Poisson
    log-likelihood (Parallelproj pair, ``num_subsets``) of ``data`` at the image of geometry
    ``info`` (a stirgpu ``ImageInfo``) filled with 1 and truncated to the cylindrical FOV by STIR's
    ``TruncateToCylindricalFOVImageProcessor``."""
    lo, shape = info.min_indices, info.shape
    hi = tuple(m + n - 1 for m, n in zip(lo, shape, strict=True))
    indices = stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi))
    image = stir.FloatVoxelsOnCartesianGrid(
        indices, stir.FloatCartesianCoordinate3D(*info.origin), stir.FloatCartesianCoordinate3D(*info.voxel_size)
    )
    image.fill(1.0)
    stir.TruncateToCylindricalFOVImageProcessor3DFloat().apply(image)
    obj = stir.PoissonLogLikelihoodWithLinearModelForMeanAndProjData3DFloat()
    obj.set_proj_data_sptr(stir.ProjData.read_from_file(str(data)))
    obj.set_projector_pair_sptr(stir.ProjectorByBinPairUsingParallelproj())
    obj.set_num_subsets(num_subsets)
    obj.set_up(image)
    return float(obj.compute_objective_function(image))
