"""The Joseph kernels alone on a subset against the full data: what a subset's own
launches cost, without the engine.

    python3 benchmarks/subset_kernels.py                        # H200: dmi-tof, mmr, quadra (~1 min)
    python3 benchmarks/subset_kernels.py --backend cpu --cases dmi-tof --views 42 --tangential 61 \\
        --max-ring-diff 1                                       # small enough for 2 CPU cores

Each case is projected forward and back (``forward_chunk`` / ``back_chunk``, their TOF
versions for ``dmi-tof``), data resident on the device (on a GPU the image prepared with its
zero-framed copies, as the engine hands it to the kernels): once over all its LORs (one part per
segment; the Quadra's parts hold ``--views-per-part`` views, as the engine's 64 MiB chunks about
do) and once over subset 0 of ``--subsets`` (STIR's views ``0, n, 2n, ...``, one part per
segment).  On a GPU either is one kernel launch over all its parts
(``stirgpu.kernels.joseph.cuda.pack_parts``), so the subset's share shows what its small launch
costs beyond ``1 / --subsets``.  Figures are medians of ``--repeat`` timed calls after a warm-up
(the GPU synchronised around each); the Quadra's full calls are timed ``--quadra-repeat`` times.

Cases (``lor_order.py``'s, the sizes overridable with ``--views``, ``--tangential`` and
``--max-ring-diff``):

* ``dmi-tof`` / ``dmi`` -- GE Discovery MI 4 rings, span 1, all ring differences, 272 views, 415
  tangential positions, TOF mashing 29 (13 TOF bins) / non-TOF; STIR's default image;
* ``mmr`` -- Siemens mMR span 11, maximum ring difference 60, 252 views, 344 tangential positions;
* ``quadra`` -- Siemens Quadra span 1, maximum ring difference 10, 399 views, 520 tangential
  positions; image 645 x 447 x 447 (515 MB).

Reported per case: the LORs and parts of each call, seconds forward and back, and the subset's
share of the full call's seconds (the ideal is ``1 / --subsets``), plus the sums of the forward
projections (the full and the subset call's, in float64: a check that the work is the same from
one version of the kernels to another).

Output: a JSON document (``--json FILE`` also writes it), then one readable line per case.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import lor_order  # noqa: E402
import numpy as np  # noqa: E402
from timing import Device, median_seconds  # noqa: E402

CASES = lor_order.CASES
DEFAULT_CASES = ("dmi-tof", "mmr", "quadra")


def geometry(name: str, args):
    """(projection-data geometry, views per part of the full call or None: all) of case ``name``
    (``lor_order.py``'s, with this run's sizes)."""
    pdi = lor_order.case_geometry(name, args.views, args.tangential, args.max_ring_diff)
    return pdi, args.views_per_part if name == "quadra" else None


def subset_chunk(pdi, subsets: int):
    """Subset 0 of ``subsets``: STIR's views of it, one part per segment."""
    from stirgpu.kernels.joseph.chunk import JosephChunk

    views = range(0, pdi.get_num_views(), subsets)
    return JosephChunk([pdi.chunk_tables(s, views=views) for s in pdi.segment_nums], pdi)


def timed_call(device: Device, chunk, pdi, image, frame, repeat: int) -> dict:
    """Seconds of a forward and a back call over ``chunk``, and the forward projection's sum."""
    fwd, back, out, _ = lor_order.projections(device.xp, chunk, pdi, image, frame)
    seconds = {"forward_s": median_seconds(device, fwd, repeat), "back_s": median_seconds(device, back, repeat)}
    return {
        "lors": chunk.num_lors,
        "parts": len(chunk.shapes),
        **seconds,
        "forward_sum": float(out.astype(np.float64).sum()),
    }


def run_case(device: Device, name: str, args) -> dict:
    from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

    pdi, views_per_part = geometry(name, args)
    info = stir_default_image_info(pdi)
    image = device.xp.asarray(lor_order.ellipse_phantom(info.shape))
    if device.name == "cuda":  # as the engine hands it to the kernels: with its framed copies
        from stirgpu.kernels.cuda.images import prepare_image

        image = prepare_image(image)
    frame = stir_image_frame(info)
    full_repeat = args.quadra_repeat if name == "quadra" else args.repeat
    full = timed_call(device, lor_order.make_chunk(pdi, views_per_part), pdi, image, frame, full_repeat)
    sub = timed_call(device, subset_chunk(pdi, args.subsets), pdi, image, frame, args.repeat)
    return {
        "tof_bins": pdi.get_num_tof_poss() if pdi.is_tof_data() else 1,
        "image": list(info.shape),
        "full": full,
        "subset": sub,
        "subset_share": {k: sub[f"{k}_s"] / full[f"{k}_s"] for k in ("forward", "back")},
        "ideal_share": 1.0 / args.subsets,
    }


def readable(name: str, r: dict) -> str:
    f, s, share = r["full"], r["subset"], r["subset_share"]
    return (
        f"{name}: full {f['lors']:.3e} LORs x {r['tof_bins']} bins in {f['parts']} parts: forward "
        f"{f['forward_s']:.4f} s, back {f['back_s']:.4f} s; subset {s['lors']:.3e} LORs in {s['parts']} parts: "
        f"forward {s['forward_s']:.4f} s ({share['forward']:.4f} of full), back {s['back_s']:.4f} s "
        f"({share['back']:.4f}); ideal {r['ideal_share']:.4f}"
    )


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--cases", type=arguments.name_list(CASES), default=list(DEFAULT_CASES), help=",".join(CASES))
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--repeat", type=arguments.positive_int, default=5)
    ap.add_argument("--quadra-repeat", type=arguments.positive_int, default=1)
    ap.add_argument("--views-per-part", type=arguments.positive_int, default=100)
    ap.add_argument("--views", type=arguments.positive_int, default=None, help="views of every case")
    ap.add_argument("--tangential", type=arguments.positive_int, default=None, help="tangential positions")
    ap.add_argument("--max-ring-diff", type=arguments.non_negative_int, default=None, help="of every case")
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
