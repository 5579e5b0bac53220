"""The order in which the Joseph GPU kernels' threads take LORs: view-major against
axial-major (``STIR_AXIAL_MAJOR`` in ``stirgpu/kernels/cuda/joseph.cu``), same run.

    python3 benchmarks/lor_order.py                           # all cases below (H200: ~3 min)
    python3 benchmarks/lor_order.py --cases quadra --quadra-max-ring-diff 20

Each case is projected forward and back over all of its LORs, data resident on the GPU
(``forward_chunk`` / ``back_chunk``, their TOF versions for ``dmi-tof``; the image prepared with
its zero-framed copies, as the engine hands it to the kernels), in each order in turn
(``--rounds`` times, alternating), whatever ``stirgpu.kernels.joseph.cuda.axial_major`` would
pick; each figure is the median of ``--repeat`` timed calls after a warm-up, the GPU synchronised
around each.  Cases:

* ``dmi`` / ``dmi-tof`` -- GE Discovery MI 4 rings, span 1, all ring differences, 272 views, 415
  tangential positions (TOF mashing 29: 13 TOF bins); one part per segment; image 71 x 323 x 323;
* ``mmr`` -- Siemens mMR span 11, maximum ring difference 60, 252 views, 344 tangential
  positions; one part per segment; image 127 x 285 x 285;
* ``quadra`` -- Siemens Quadra span 1, maximum ring difference ``--quadra-max-ring-diff``, 399
  views, 520 tangential positions, parts of ``--views-per-part`` views (the engine's 64 MiB parts
  hold about 100); image 645 x 447 x 447 (515 MB, ten times the H200's L2 cache).

Reported per case and order: seconds and LOR/s forward and back, the speed-up of axial-major,
whether the forward projections are equal bit for bit (they must be: each LOR is its own sum),
the back projections' difference (max |diff| / max: float32 summation order), and the order
``stirgpu.kernels.joseph.cuda.axial_major`` picks for the case on this GPU.

Output: a JSON document (``--json FILE`` also writes it), then one readable line per case.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
from timing import Device, median_seconds  # noqa: E402

ORDERS = {"view-major": False, "axial-major": True}


@contextlib.contextmanager
def forced_order(axial: bool):
    """Every Joseph kernel (TOF or not) launched meanwhile takes LORs in the given order."""
    from stirgpu.kernels.joseph import cuda as joseph_cuda

    saved = joseph_cuda.axial_major  # (which joseph_cuda.lor_order asks, for the TOF kernels too)
    joseph_cuda.axial_major = lambda *args, **kwargs: axial
    try:
        yield
    finally:
        joseph_cuda.axial_major = saved


def ellipse_phantom(shape) -> np.ndarray:
    nz, ny, nx = shape
    y, x = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in (ny, nx)), indexing="ij")
    plane = (((x / 0.7) ** 2 + (y / 0.6) ** 2 <= 1) * (1 + 0.5 * np.cos(3 * x) * np.sin(2 * y))).astype(np.float32)
    return np.broadcast_to(plane, (nz, ny, nx)) * np.linspace(0.5, 1.5, nz, dtype=np.float32)[:, None, None]


#: per case: scanner, span, maximum ring difference (None: all), views, tangential positions, TOF mashing
CASE_GEOMETRIES = {
    "dmi": ("GE Discovery MI 4 rings", 1, None, 272, 415, None),
    "dmi-tof": ("GE Discovery MI 4 rings", 1, None, 272, 415, 29),
    "mmr": ("Siemens mMR", 11, 60, 252, 344, None),
    "quadra": ("Siemens Quadra", 1, 10, 399, 520, None),
}
CASES = tuple(CASE_GEOMETRIES)


def case_geometry(name: str, views=None, tangential=None, max_ring_diff=None):
    """The projection-data geometry of case ``name``, its sizes replaced where given."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    scanner, span, mrd, nv, nt, mash = CASE_GEOMETRIES[name]
    sc = Scanner.from_name(scanner)
    mrd = max_ring_diff if max_ring_diff is not None else (sc.num_rings - 1 if mrd is None else mrd)
    return ProjDataInfo.construct(sc, span, mrd, views or nv, tangential or nt, tof_mash_factor=mash)


def geometry(name: str, args):
    """(projection-data geometry, views per part or None: all) of case ``name``."""
    if name == "quadra":
        return case_geometry(name, max_ring_diff=args.quadra_max_ring_diff), args.views_per_part
    return case_geometry(name), None


def make_chunk(pdi, views_per_part):
    from stirgpu.kernels.joseph.chunk import JosephChunk

    nv = pdi.get_num_views()
    step = views_per_part or nv
    parts = [
        pdi.chunk_tables(s, views=range(v, min(nv, v + step))) for s in pdi.segment_nums for v in range(0, nv, step)
    ]
    return JosephChunk(parts, pdi)


def projections(cp, chunk, pdi, image, frame):
    """(forward call, back call, forward output, back output) of the case on the GPU."""
    from stirgpu.kernels import back_chunk, forward_chunk
    from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof

    tof = pdi.is_tof_data()
    nb = pdi.get_num_tof_poss() if tof else 1
    out = cp.empty(nb * chunk.num_lors, np.float32)
    acc = cp.zeros(image.shape, np.float32)
    fwd, back = (forward_chunk_tof, back_chunk_tof) if tof else (forward_chunk, back_chunk)

    def back_call():
        acc.fill(0)
        back(chunk, pdi, out, acc, frame)

    return (lambda: fwd(chunk, pdi, image, frame, out=out)), back_call, out, acc


def policy(pdi, image) -> dict:
    from stirgpu.kernels.joseph import cuda as joseph_cuda

    return {kind: joseph_cuda.lor_order(kind, image, pdi.is_tof_data()) for kind in ("fwd", "back")}


def run_case(cp, name: str, args) -> dict:
    from stirgpu.kernels.cuda.images import prepare_image
    from stirgpu.kernels.joseph import cuda as joseph_cuda
    from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

    pdi, views_per_part = geometry(name, args)
    info = stir_default_image_info(pdi)
    chunk = make_chunk(pdi, views_per_part)
    image = cp.asarray(ellipse_phantom(info.shape))
    prepared = prepare_image(image)  # as the engine hands it to the kernels: with its framed copies
    repeat = args.quadra_repeat if name == "quadra" else args.repeat
    times: dict[str, dict[str, list[float]]] = {o: {"forward_s": [], "back_s": []} for o in ORDERS}
    kept = {}
    for _ in range(args.rounds):
        for order, axial in ORDERS.items():
            with forced_order(axial):
                fwd, back, out, acc = projections(cp, chunk, pdi, prepared, stir_image_frame(info))
                times[order]["forward_s"].append(median_seconds(Device(cp), fwd, repeat))
                times[order]["back_s"].append(median_seconds(Device(cp), back, repeat))
            kept.setdefault(order, (out, acc))
    (f0, b0), (f1, b1) = kept["view-major"], kept["axial-major"]
    n = chunk.num_lors
    res = {
        "lors": n, "tof_bins": pdi.get_num_tof_poss() if pdi.is_tof_data() else 1, "parts": len(chunk.shapes),
        "image": list(info.shape), "image_mb": image.nbytes / 1e6, "policy_axial_major": policy(pdi, image),
        "l2_cache_mb": joseph_cuda.l2_cache_bytes(image.device.id) / 1e6,
    }  # fmt: skip
    for order, t in times.items():
        fs, bs = statistics.median(t["forward_s"]), statistics.median(t["back_s"])
        res[order] = {"forward_s": fs, "back_s": bs, "forward_lor_per_s": n / fs, "back_lor_per_s": n / bs}
    res["speedup_axial_major"] = {
        k: res["view-major"][f"{k}_s"] / res["axial-major"][f"{k}_s"] for k in ("forward", "back")
    }
    res["forward_equal"] = bool(cp.array_equal(f0, f1))
    res["back_difference"] = float(cp.abs(b0 - b1).max() / cp.abs(b0).max())
    del kept, f0, f1, b0, b1, image, prepared
    cp.get_default_memory_pool().free_all_blocks()
    return res


def readable(name: str, r: dict) -> str:
    v, a, s = r["view-major"], r["axial-major"], r["speedup_axial_major"]
    return (
        f"{name}: {r['lors']:.3e} LORs x {r['tof_bins']} bins, image {r['image_mb']:.0f} MB; forward "
        f"{v['forward_s']:.3f} -> {a['forward_s']:.3f} s ({s['forward']:.2f}x), back {v['back_s']:.3f} -> "
        f"{a['back_s']:.3f} s ({s['back']:.2f}x) view- -> axial-major; forward equal {r['forward_equal']}, "
        f"back difference {r['back_difference']:.1e}; the policy takes axial-major for {r['policy_axial_major']}"
    )


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=arguments.name_list(CASES), default=list(CASES), help=",".join(CASES))
    ap.add_argument("--rounds", type=arguments.positive_int, default=2, help="alternations of the two orders")
    ap.add_argument("--repeat", type=arguments.positive_int, default=3)
    ap.add_argument("--quadra-repeat", type=arguments.positive_int, default=1)
    ap.add_argument("--quadra-max-ring-diff", type=arguments.non_negative_int, default=10)
    ap.add_argument("--views-per-part", type=arguments.positive_int, default=100)
    ap.add_argument("--json", default=None, help="also write the JSON result here")
    args = ap.parse_args(argv)
    from stirgpu.execution import resolve_backend

    resolve_backend("cuda")  # one clear line where cupy or a GPU is missing
    import cupy as cp

    result = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cases": {}}
    for name in args.cases:
        result["cases"][name] = run_case(cp, name, args)
    arguments.emit_cases(result, args.json, readable)
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
