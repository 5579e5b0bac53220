"""The GPU back projection in axial slabs against one launch over the whole image, same run.

    python3 benchmarks/back_slabs.py                                  # H200: quadra, mmr (~2 min)
    python3 benchmarks/back_slabs.py --cases quadra --planes 0,12,24 --segment-step 4

Where the image is larger than the GPU's L2 cache, ``back_chunk`` splits a chunk's back projection
into launches that each add into a slab of image planes (``stirgpu/kernels/joseph/slabs.py``), so
the voxels a launch's atomics update stay in the L2 however oblique its LORs.  This script times
the back projection of each case, data resident on the GPU (``back_chunk``, as
``subset_kernels.py`` calls it), for each slab thickness of ``--planes`` (0: one launch), and for
what ``back_chunk`` picks by itself on this GPU (``auto``: slabs of
``stirgpu.kernels.joseph.cuda.back_slab_planes`` for a subset's spread views, one launch for runs
of views);
each figure is the median of ``--repeat`` timed calls after a warm-up, the GPU synchronised
around each.  Each case has two calls: its ``full`` data and subset 0 of ``--subsets`` (STIR's
views ``0, n, 2n, ...``, one part per segment).

Cases (``lor_order.py``'s geometries):

* ``quadra`` -- Siemens Quadra span 1, maximum ring difference ``--max-ring-diff`` (85), 399
  views, 520 tangential positions, every ``--segment-step``-th segment (8: 22 of 171 segments,
  every ring difference's range, 1.3e9 LORs) in parts of 100 views; image 645 x 447 x 447 (515
  MB, eight times the H200's L2);
* ``mmr`` -- Siemens mMR span 11, all 11 segments; image 127 x 285 x 285 (41 MB: it fits the L2,
  so ``auto`` is one launch; the slabs show what they would cost there).

Reported per case, call and thickness: seconds, LOR/s and the speed-up over one launch, and the
back projection's difference from one launch's (max |diff| / max: float32 summation order only).
Output: a JSON document (``--json FILE`` also writes it), then one readable line per case.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import lor_order  # noqa: E402
import numpy as np  # noqa: E402
import subset_kernels  # noqa: E402
from timing import Device, median_seconds  # noqa: E402

CASES = ("quadra", "mmr")


@contextlib.contextmanager
def forced_planes(planes: int | None):
    """Every non-TOF back projection meanwhile takes slabs of ``planes`` (None: one launch)."""
    from stirgpu.kernels.joseph import cuda as joseph_cuda

    saved = joseph_cuda.back_slab_planes
    joseph_cuda.back_slab_planes = lambda image, spread_views: planes
    try:
        yield
    finally:
        joseph_cuda.back_slab_planes = saved


def case_chunks(name: str, args):
    """(geometry, {call: chunk}) of case ``name``."""
    from stirgpu.kernels.joseph.chunk import JosephChunk

    if name == "quadra":
        pdi = lor_order.case_geometry(name, args.views, args.tangential, args.max_ring_diff)
        nv, step = pdi.get_num_views(), args.views_per_part
        segments = args.segments or pdi.segment_nums[:: args.segment_step]
        parts = [pdi.chunk_tables(s, views=range(v, min(nv, v + step))) for s in segments for v in range(0, nv, step)]
        full = JosephChunk(parts, pdi)
    else:
        pdi = lor_order.case_geometry(name, args.views, args.tangential)
        full = lor_order.make_chunk(pdi, None)
    return pdi, {"full": full, "subset": subset_kernels.subset_chunk(pdi, args.subsets)}


def time_call(device: Device, chunk, pdi, image, frame, thicknesses: dict, repeat: int) -> dict:
    """Seconds of the back projection of ``chunk`` for each slab thickness, and its difference
    from one launch's."""
    from stirgpu.kernels import back_chunk

    values = device.xp.asarray(np.random.default_rng(3).uniform(0.5, 1.5, chunk.num_lors).astype(np.float32))
    acc = device.xp.zeros(image.shape, np.float32)
    out: dict = {"lors": chunk.num_lors, "parts": len(chunk.shapes), "thickness": {}}
    reference = None
    for label, planes in thicknesses.items():
        with forced_planes(planes) if label != "auto" else contextlib.nullcontext():

            def call():
                acc.fill(0)
                back_chunk(chunk, pdi, values, acc, frame)

            seconds = median_seconds(device, call, repeat)
            got = device.xp.asnumpy(acc) if hasattr(device.xp, "asnumpy") else np.array(acc)
        reference = got if reference is None else reference
        diff = float(np.abs(got.astype(np.float64) - reference).max() / max(np.abs(reference).max(), 1e-30))
        out["thickness"][label] = {
            "planes": planes,
            "back_s": seconds,
            "lor_per_s": chunk.num_lors / seconds,
            "diff": diff,
        }
    base = out["thickness"]["one launch"]["back_s"]
    for r in out["thickness"].values():
        r["speedup"] = base / r["back_s"]
    return out


def run_case(device: Device, name: str, args) -> dict:
    from stirgpu.kernels.joseph import cuda as joseph_cuda
    from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

    pdi, chunks = case_chunks(name, args)
    info = stir_default_image_info(pdi)
    image = device.xp.asarray(lor_order.ellipse_phantom(info.shape))
    thicknesses = {"one launch": None, **{str(p): p for p in args.planes if p}, "auto": None}
    frame = stir_image_frame(info)
    calls = {}
    for call, c in chunks.items():
        calls[call] = time_call(device, c, pdi, image, frame, thicknesses, args.repeat)
        auto = joseph_cuda.back_slab_planes(image, c.spread_views) if device.name == "cuda" else None
        calls[call]["thickness"]["auto"]["planes"] = auto
    return {"image": list(info.shape), "image_mb": image.nbytes / 1e6, "calls": calls}


def readable(name: str, r: dict) -> str:
    parts = []
    for call, c in r["calls"].items():
        figures = ", ".join(
            f"{k} ({t['planes']}) {t['back_s']:.3f} s ({t['speedup']:.2f}x, diff {t['diff']:.1e})"
            for k, t in c["thickness"].items()
        )
        parts.append(f"{call} {c['lors']:.3e} LORs: {figures}")
    return f"{name} (image {r['image_mb']:.0f} MB): " + "; ".join(parts)


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--cases", type=arguments.name_list(CASES), default=list(CASES), help=",".join(CASES))
    ap.add_argument("--planes", type=arguments.int_list, default=[8, 16, 24, 32, 48], help="slab thicknesses")
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--repeat", type=arguments.positive_int, default=3)
    ap.add_argument("--max-ring-diff", type=arguments.non_negative_int, default=85, help="the Quadra's")
    ap.add_argument("--segment-step", type=arguments.positive_int, default=8, help="the Quadra's segments taken")
    ap.add_argument("--segments", type=arguments.int_list, default=None, help="Quadra segments (not the step)")
    ap.add_argument("--views-per-part", type=arguments.positive_int, default=100)
    ap.add_argument("--views", type=arguments.positive_int, default=None, help="views of every case")
    ap.add_argument("--tangential", type=arguments.positive_int, default=None, help="tangential positions")
    ap.add_argument("--json", default=None, help="also write the JSON result here")
    args = ap.parse_args(argv)
    from stirgpu.execution import resolve_backend

    device = Device.of(resolve_backend(args.backend))  # one clear line where cupy or a GPU is missing
    result = {"backend": args.backend, "subsets": args.subsets, "cases": {}}
    for name in args.cases:
        result["cases"][name] = run_case(device, name, args)
    arguments.emit_cases(result, args.json, readable)
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
