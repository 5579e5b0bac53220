"""Small OSMAPOSL problems made by STIR itself, run through STIR's ``OSMAPOSL`` and stirgpu.

A :class:`Geometry` names a scanner and a sinogram layout; :func:`make_inputs` writes, into
one folder, what an OSMAPOSL run reads -- all of it produced by STIR:

* ``template.hs``: an empty projection data set (STIR's ``ProjDataInterfile``);
* ``phantom.hv``: a cylinder with a hot and a cold sphere on STIR's default image for the
  data (``FloatVoxelsOnCartesianGrid(proj_data_info, zoom, ...)``), written by STIR;
* ``fwd.hs``: STIR's ``forward_project`` of the phantom (Parallelproj, as in OSMAPOSL);
* ``norm.hs``: correction factors ``f >= 1`` (smooth in every coordinate, seeded);
* ``additive.hs``: an additive sinogram ``a`` (normalised units, smooth, > 0);
* ``prompts.hs``: ``y = (A x + a) / f``, noiseless or seeded Poisson.

:class:`TofGeometry` adds STIR's TOF mashing factor; :func:`write_non_tof_inputs` adds non-TOF
versions of a TOF case's inputs beside them.

:func:`run_both` writes one ``.par`` into two sibling folders ``stir/`` and ``gpu/`` (inputs
referenced as ``../in/...``; outputs relative to the working directory, as both programs
take them), runs STIR's ``OSMAPOSL`` in one and ``stirgpu``'s engine (CPU backend) in the
other, and returns both folders for the comparisons.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import numpy as np

import stirgpu
from stirgpu.formats import read_image

FORWARD_PAR = """Forward Projector parameters :=
type := Parallelproj
Forward Projector Using Parallelproj Parameters :=
End Forward Projector Using Parallelproj Parameters :=
end :=
"""


@dataclasses.dataclass(frozen=True)
class Geometry:
    """STIR's ``ProjDataInfo.construct_proj_data_info(scanner, span, max_delta, views, tang, arc)``.

    Views are mashed (fewer than the scanner's), so STIR adds its half-mash azimuthal offset and
    no view lies at exactly 45 or 135 degrees (where the Joseph and Parallelproj projectors
    differ by up to 1e-2 in oblique segments; the kernels' business, not OSMAPOSL's)."""

    scanner: str = "ECAT 931"
    span: int = 3
    max_delta: int = 7
    num_views: int = 16
    num_tangential_poss: int = 64
    arc_corrected: bool = False

    def proj_data_info(self, stir):
        sc = stir.Scanner.get_scanner_from_name(self.scanner)
        return stir.ProjDataInfo.construct_proj_data_info(
            sc, self.span, self.max_delta, self.num_views, self.num_tangential_poss, self.arc_corrected
        )


@dataclasses.dataclass(frozen=True)
class TofGeometry(Geometry):
    """:class:`Geometry` with STIR's TOF mashing factor (``construct_proj_data_info``'s last
    argument; 0: non-TOF)."""

    tof_mash_factor: int = 29

    def proj_data_info(self, stir):
        sc = stir.Scanner.get_scanner_from_name(self.scanner)
        return stir.ProjDataInfo.construct_proj_data_info(
            sc,
            self.span,
            self.max_delta,
            self.num_views,
            self.num_tangential_poss,
            self.arc_corrected,
            self.tof_mash_factor,
        )


def _smooth_factors(shape: tuple, rng: np.random.Generator, low: float, high: float) -> np.ndarray:
    """A positive field in [low, high] that varies smoothly over every axis of ``shape``."""
    field = np.zeros(shape, dtype=np.float64)
    for axis, n in enumerate(shape):
        if n < 2:
            continue
        u = np.linspace(0.0, np.pi, n)
        w = np.cos(rng.uniform(0.5, 2.0) * u + rng.uniform(0, np.pi))
        field += w.reshape([n if i == axis else 1 for i in range(len(shape))])
    field -= field.min()
    field /= max(field.max(), 1e-12)
    return (low + (high - low) * field).astype(np.float32)


def _write_proj_data(stir, exam, pdi, path: Path, array: np.ndarray) -> None:
    pd = stir.ProjDataInterfile(exam, pdi, str(path))
    pd.fill(np.ascontiguousarray(array, dtype=np.float32).ravel())
    del pd  # flushes and closes the file


def _phantom(stir, exam, pdi, zoom: float) -> object:
    img = stir.FloatVoxelsOnCartesianGrid(pdi, zoom)
    img.set_exam_info(exam)  # PET: STIR warns when writing an image of no modality
    arr = img.as_array()
    nz, ny, nx = arr.shape
    vz, vy, vx = (img.get_voxel_size()[i] for i in (1, 2, 3))
    z = (np.arange(nz) - (nz - 1) / 2)[:, None, None] * vz
    y = (np.arange(ny) - ny // 2)[None, :, None] * vy
    x = (np.arange(nx) - nx // 2)[None, None, :] * vx
    radius = 0.4 * nx * vx
    out = np.where(x**2 + y**2 <= radius**2, 1.0, 0.0) * np.ones_like(z)
    out[(x - 0.4 * radius) ** 2 + y**2 + z**2 <= (0.3 * radius) ** 2] = 4.0
    out[(x + 0.4 * radius) ** 2 + (y - 0.2 * radius) ** 2 + z**2 <= (0.25 * radius) ** 2] = 0.0
    img.fill(np.ascontiguousarray(out, dtype=np.float32).ravel())
    return img


def make_inputs(
    reference_stir,
    stir,
    folder: Path,
    geometry: Geometry,
    *,
    seed: int = 0,
    counts: float | None = 2e5,
    zoom: float = 1.0,
    adjust=None,
    forward_project=None,
    in_counts: bool = False,
) -> Path:
    """Write the inputs described in the module docstring into ``folder`` (created); returns it.
    ``counts`` None: noiseless prompts; else Poisson prompts scaled to about that many counts.
    ``forward_project(folder)`` (default: STIR's ``forward_project`` with Parallelproj) writes
    ``fwd.hs`` from ``phantom.hv`` and ``template.hs`` there: another projector for data STIR's
    Parallelproj cannot project (even numbers of TOF bins, ``docs/tof.md``).
    ``adjust(f, a, fwd)`` may change the factors and the additive term in place (STIR's
    ``as_array()`` layout: [TOF][axial positions of segments 0, +1, -1, ...][view][tangential])
    before the prompts are made from them.  ``in_counts``: the prompts are the Poisson counts
    themselves (not divided back by the count scale), as a scanner's are, and the additive term
    and ``phantom.hv`` are scaled with them (the image the counts come from, at a realistic
    scale for priors whose strength depends on it)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pdi = geometry.proj_data_info(stir)
    exam = stir.ExamInfo()
    exam.imaging_modality = stir.ImagingModality(stir.ImagingModality.PT)
    shape = stir.ProjDataInMemory(exam, pdi).as_array().shape
    _write_proj_data(stir, exam, pdi, folder / "template.hs", np.zeros(shape, np.float32))
    img = _phantom(stir, exam, pdi, zoom)
    img.write_to_file(str(folder / "phantom.hv"))
    if forward_project is None:
        (folder / "forward.par").write_text(FORWARD_PAR)
        reference_stir.run("forward_project", "fwd.hs", "phantom.hv", "template.hs", "forward.par", cwd=folder)
    else:
        forward_project(folder)
    fwd = stir.ProjData.read_from_file(str(folder / "fwd.hs")).as_array().astype(np.float64)
    f = _smooth_factors(shape, rng, 1.0, 3.0)
    a = _smooth_factors(shape, rng, 0.05, 0.15) * float(fwd.max())
    if adjust is not None:
        adjust(f, a, fwd)
    mean = (fwd + a) / f
    if counts is None:
        y = mean
    else:
        scale = counts / mean.sum()
        y = rng.poisson(mean * scale) / scale
        if in_counts:
            y, a = y * scale, a * scale
            img.fill(np.ascontiguousarray(img.as_array() * scale, dtype=np.float32).ravel())
            img.write_to_file(str(folder / "phantom.hv"))
    _write_proj_data(stir, exam, pdi, folder / "norm.hs", f)
    _write_proj_data(stir, exam, pdi, folder / "additive.hs", a)
    _write_proj_data(stir, exam, pdi, folder / "prompts.hs", y)
    return folder


def write_non_tof_inputs(stir, folder: Path, geometry: TofGeometry, *, seed: int = 0) -> Path:
    """Beside the TOF inputs of :func:`make_inputs` in ``folder``, the same geometry without TOF
    (all written by STIR): ``norm_nontof.hs`` (factors in [1, 3]), ``additive_nontof.hs``,
    ``prompts_nontof.hs`` (the TOF prompts summed over timing positions) and
    ``additive_position0.hs`` (timing position 0 of the TOF additive sinogram).  Returns ``folder``."""
    rng = np.random.default_rng(seed)
    pdi = dataclasses.replace(geometry, tof_mash_factor=0).proj_data_info(stir)
    exam = stir.ExamInfo()
    exam.imaging_modality = stir.ImagingModality(stir.ImagingModality.PT)
    additive = stir.ProjData.read_from_file(str(folder / "additive.hs"))
    a = additive.as_array()  # [TOF][axial positions of the segments][view][tangential]
    k0 = -additive.get_proj_data_info().get_min_tof_pos_num()  # the index of timing position 0
    shape = (1, *a.shape[1:])
    _write_proj_data(stir, exam, pdi, folder / "norm_nontof.hs", _smooth_factors(shape, rng, 1.0, 3.0))
    _write_proj_data(stir, exam, pdi, folder / "additive_nontof.hs", a.sum(axis=0, keepdims=True))
    _write_proj_data(stir, exam, pdi, folder / "additive_position0.hs", a[k0 : k0 + 1])
    y = stir.ProjData.read_from_file(str(folder / "prompts.hs")).as_array()
    _write_proj_data(stir, exam, pdi, folder / "prompts_nontof.hs", y.sum(axis=0, keepdims=True))
    return folder


#: OSMAPOSL keys: recompute and use per-subset sensitivities, written as sens_<k>.hv (the tests
#: compare them with STIR's)
SUBSET_SENSITIVITIES = {
    "use subset sensitivities": 1,
    "subset sensitivity filenames": "sens_%d.hv",
    "recompute sensitivity": 1,
}
#: the objective of a run on make_inputs' folder (linked as ../in): its additive sinogram and
#: subset sensitivities
ADDITIVE_OBJECTIVE = {"additive sinogram": "../in/additive.hs", **SUBSET_SENSITIVITIES}
#: a short run: 4 subsets, 4 subiterations, estimates saved at 2 and 4
SHORT_TOP = {
    "output filename prefix": "out",
    "number of subsets": 4,
    "number of subiterations": 4,
    "save estimates at subiteration intervals": 2,
}


PARALLELPROJ_PAIR = (
    "projector pair type := Parallelproj\n"
    "Projector Pair Using Parallelproj Parameters :=\n"
    "End Projector Pair Using Parallelproj Parameters :="
)


def osmaposl_par(
    objective: dict[str, str],
    top: dict[str, str],
    *,
    normalisation: str | None = "../in/norm.hs",
    input_file: str = "../in/prompts.hs",
    projectors: str = PARALLELPROJ_PAIR,
    extra_objective: str = "",
    extra_top: str = "",
) -> str:
    """An OSMAPOSL ``.par``; ``objective`` and ``top`` map STIR keys to values (inside the objective
    function's block / in ``OSMAPOSLParameters``), ``projectors`` is the projector block (default:
    the Parallelproj pair), ``extra_*`` are verbatim lines (blocks) added to either."""
    lines = [
        "OSMAPOSLParameters :=",
        "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData",
        "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=",
        f"input file := {input_file}",
        *projectors.splitlines(),
    ]
    if normalisation is not None:
        lines += [
            "Bin Normalisation type := From ProjData",
            "Bin Normalisation From ProjData :=",
            f"normalisation projdata filename := {normalisation}",
            "End Bin Normalisation From ProjData :=",
        ]
    lines += [f"{k} := {v}" for k, v in objective.items()] + extra_objective.splitlines()
    lines += ["End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :="]
    lines += [f"{k} := {v}" for k, v in top.items()] + extra_top.splitlines()
    lines += ["END :=", ""]
    return "\n".join(lines)


@contextlib.contextmanager
def _cwd(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def run_stir(reference_stir, folder: Path, par_text: str, name: str = "recon.par", program: str = "OSMAPOSL"):
    """STIR's ``program name`` (``OSMAPOSL``, ``OSSPS`` or ``KOSMAPOSL``) in ``folder`` (created); the completed
    process (check=False)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(par_text)
    return reference_stir.run(program, name, cwd=folder, check=False)


def run_stirgpu(folder: Path, par_text: str, name: str = "recon.par", program: str = "OSMAPOSL"):
    """stirgpu's engine for ``program`` (``OSMAPOSL``, ``OSSPS`` or ``KOSMAPOSL``; CPU backend) on the
    same file in ``folder``."""
    from stirgpu.recon.kosmaposl_run import run_kosmaposl
    from stirgpu.recon.ossps_run import run_ossps
    from stirgpu.recon.run import run_osmaposl

    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(par_text)
    run = {"OSSPS": run_ossps, "KOSMAPOSL": run_kosmaposl}.get(program, run_osmaposl)
    with _cwd(folder), stirgpu.config(backend="cpu"):
        return run(name)


def run_both(
    reference_stir, root: Path, par_text: str, *, inputs: Path | None = None, prepare=None, program: str = "OSMAPOSL"
):
    """Run ``par_text`` with STIR in ``root/stir`` and with stirgpu in ``root/gpu``.
    ``inputs``: a folder made by :func:`make_inputs`, linked as ``root/in`` (what ``../in/...``
    in the file names); ``prepare(folder)`` (optional) puts extra inputs into each folder first.
    Returns (stir folder, stirgpu folder, stirgpu's OSEMResult)."""
    root.mkdir(parents=True, exist_ok=True)
    if inputs is not None and not (root / "in").exists():
        (root / "in").symlink_to(inputs, target_is_directory=True)
    s_dir, g_dir = root / "stir", root / "gpu"
    for d in (s_dir, g_dir):
        d.mkdir(parents=True, exist_ok=True)
        if prepare is not None:
            prepare(d)
    proc = run_stir(reference_stir, s_dir, par_text, program=program)
    if proc.returncode != 0:
        raise RuntimeError(f"STIR's {program} failed in {s_dir}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result = run_stirgpu(g_dir, par_text, program=program)
    return s_dir, g_dir, result


def relative_difference(mine: Path, theirs: Path) -> float:
    """max |mine - theirs| / max |theirs| of two images (their geometries must agree)."""
    a, b = read_image(mine), read_image(theirs)
    if a.info != b.info:
        raise AssertionError(f"{mine.name}: geometry {a.info!r} differs from STIR's {b.info!r}")
    ref = b.array.astype(np.float64)
    return float(np.abs(a.array.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def image_files(folder: Path) -> set[str]:
    """Names of the Interfile images in ``folder`` (headers ``.hv`` and data ``.v``; STIR's extra
    Analyze-style ``.ahv`` headers are not counted: stirgpu does not write them)."""
    return {p.name for p in folder.iterdir() if p.suffix in (".hv", ".v")}


def differences(stir_dir: Path, gpu_dir: Path, prefix: str = "out", skip_end_planes: bool = False) -> dict[str, float]:
    """{image name: max |stirgpu - STIR| / max |STIR|} for every image STIR wrote; raises
    AssertionError when the two folders do not hold the same image files.  ``skip_end_planes``:
    the first and last plane of the estimates (``prefix_N``) are left out."""
    mine, theirs = image_files(gpu_dir), image_files(stir_dir)
    if mine != theirs:
        raise AssertionError(
            f"different files: only STIR's {sorted(theirs - mine)}, only stirgpu's {sorted(mine - theirs)}"
        )
    out = {}
    for n in sorted(theirs):
        if not n.endswith(".hv"):
            continue
        if skip_end_planes and n.startswith(f"{prefix}_"):
            a, b = read_image(gpu_dir / n).array, read_image(stir_dir / n).array.astype(np.float64)
            out[n] = float(np.abs(a[1:-1] - b[1:-1]).max() / max(np.abs(b).max(), 1e-30))
        else:
            out[n] = relative_difference(gpu_dir / n, stir_dir / n)
    return out


#: the bounds, relative to STIR's maximum (STIR linked with libparallelproj 2.0.7): estimates after
#: any saved subiteration (measured up to 3.9e-5 over the whole differential set, most cases under
#: 6e-6) and sensitivities (measured up to 1.1e-6)
ESTIMATE_TOL = 1e-4
SENSITIVITY_TOL = 1e-5


def assert_agree(
    stir_dir: Path,
    gpu_dir: Path,
    prefix: str = "out",
    *,
    estimate_tol: float = ESTIMATE_TOL,
    sensitivity_tol: float = SENSITIVITY_TOL,
    skip_end_planes: bool = False,
) -> dict[str, float]:
    """Same files, estimates (``prefix_N.hv``) within ``estimate_tol`` and every other image (the
    sensitivities) within ``sensitivity_tol`` of STIR's maximum.  Returns the differences."""
    diffs = differences(stir_dir, gpu_dir, prefix, skip_end_planes)
    bad = {n: d for n, d in diffs.items() if d > (estimate_tol if n.startswith(f"{prefix}_") else sensitivity_tol)}
    if bad:
        raise AssertionError(
            f"differences to STIR (of its maximum) over the bound: "
            f"{ {n: f'{d:.3g}' for n, d in bad.items()} }; all: "
            f"{ {n: f'{d:.3g}' for n, d in diffs.items()} }"
        )
    return diffs


# -- seeded combinations of OSMAPOSL keys ------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def random_case(seed: int, num_views: int, max_segment: int, *, max_subiterations: int = 8) -> dict:
    """A seeded draw of every OSMAPOSL key stirgpu accepts, for data with ``num_views`` views and
    segments ``-max_segment..max_segment`` (inputs as :func:`make_inputs` names them).

    Returns {"objective": {...}, "top": {...}, "normalisation": path or None, "zero_end_planes": bool}.
    Sensitivities are computed (never read: reuse has its own test), subsets balanced (what STIR
    accepts; refusals have their own test)."""
    rng = np.random.default_rng(seed)

    def pick(*options):
        return options[int(rng.integers(len(options)))]

    obj: dict[str, object] = {}
    if rng.random() < 0.8:
        obj["additive sinogram"] = "../in/additive.hs"
    zep = bool(rng.random() < 0.3)
    if zep:
        obj["zero end planes of segment 0"] = 1
    if rng.random() < 0.5:
        obj["maximum absolute segment number to process"] = int(rng.integers(0, max_segment + 1))
    obj["zoom"] = pick(1.0, 1.2, 0.8, 1.5)
    if rng.random() < 0.5:
        obj["XY output image size (in pixels)"] = int(pick(31, 40, 41, 47, 55))
    if rng.random() < 0.3:
        obj["Z output image size (in pixels)"] = int(pick(11, 13))
    if rng.random() < 0.3:
        # half a plane (3.375 mm: with a smaller Z size the image's z faces meet the LORs' planes
        # exactly) and a whole one (6.75 mm: a plane outside the scanner, seen through float32
        # rounding only) are the regimes where float64 geometry differed from STIR
        # (docs/conventions.md); stirgpu's float32 projector must reproduce them too
        obj["Z offset (in mm)"] = pick(4.5, -2.0, 1.0, 3.375, -3.375, 6.75)
    use_subsets = bool(rng.random() < 0.6)
    obj["use subset sensitivities"] = int(use_subsets)
    obj["recompute sensitivity"] = int(pick(0, 1))
    if rng.random() < 0.5:
        obj["subset sensitivity filenames"] = pick("sens_%d.hv", "sub_%02d", "s%d")
    if rng.random() < 0.5:
        obj["sensitivity filename"] = pick("total.hv", "total")
    if not obj["recompute sensitivity"]:
        # nothing to read: STIR (and stirgpu) compute them, and write nothing
        obj.pop("subset sensitivity filenames" if use_subsets else "sensitivity filename", None)

    K = int(pick(*[k for k in _divisors(num_views) if k <= 8]))
    n = int(rng.integers(1, max_subiterations + 1))
    top: dict[str, object] = {
        "output filename prefix": pick("out", "recon_osem"),
        "number of subsets": K,
        "number of subiterations": n,
        "save estimates at subiteration intervals": int(rng.integers(1, n + 1)),
    }
    if rng.random() < 0.4:
        top["start at subset"] = int(rng.integers(0, K))
    if rng.random() < 0.3:
        top["start at subiteration number"] = int(rng.integers(1, n + 1))
    if rng.random() < 0.3:
        top["initial estimate"] = pick("../in/phantom.hv", "0")
    if rng.random() < 0.3:
        top["enforce initial positivity condition"] = 0
    if rng.random() < 0.3:
        top["maximum relative change"] = pick(1.5, 3.0)
        top["minimum relative change"] = pick(0.0, 0.5)
    if rng.random() < 0.2:
        top["report objective function values interval"] = 1
    if rng.random() < 0.2:
        top["MAP model"] = "multiplicative"
    return {
        "objective": obj,
        "top": top,
        "zero_end_planes": zep,
        "normalisation": "../in/norm.hs" if rng.random() < 0.8 else None,
    }


def run_random_case(
    reference_stir, root: Path, inputs: Path, seed: int, num_views: int, max_segment: int, **kw
) -> dict[str, float]:
    """Run :func:`random_case` ``seed`` with both programs and check it (:func:`assert_agree`;
    with ``zero end planes of segment 0`` the end planes of the estimates are left out, see
    ``END_PLANE_LEAK`` in the tests).  Returns the differences."""
    case = random_case(seed, num_views, max_segment, **kw)
    par = osmaposl_par(case["objective"], case["top"], normalisation=case["normalisation"])
    s_dir, g_dir, _ = run_both(reference_stir, root, par, inputs=inputs)
    prefix = str(case["top"]["output filename prefix"])
    return assert_agree(s_dir, g_dir, prefix, skip_end_planes=case["zero_end_planes"])
