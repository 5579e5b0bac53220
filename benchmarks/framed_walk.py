"""The Joseph forward kernel reading the image itself (every sample bounds-checked: the
kernel's path before the framed walk) against reading its zero-framed copies (the path the
engine's prepared images take), same run, data resident on the GPU.

    python3 benchmarks/framed_walk.py                           # mmr, dmi, quadra (H200: ~1 min)
    python3 benchmarks/framed_walk.py --cases mmr --repeat 15

Each case is projected forward (``forward_chunk``) over all of its LORs
(one part per segment; the Quadra's parts hold ``--views-per-part`` views, as the engine's 64 MiB
chunks about do) and over subset 0 of ``--subsets`` (STIR's views ``0, n, 2n, ...``, one part per
segment), with a plain cupy image and with the same image prepared
(``stirgpu.kernels.cuda.images.prepare_image``: the zero-framed (z, y, x) and (z, x, y) copies) in turn, in
``--repeat`` rounds after a warm-up (``timing.rounds``; medians reported; the Quadra's full
calls ``--quadra-repeat``).  The two outputs must be equal bit for bit.

Cases (``lor_order.py``'s): ``mmr`` (Siemens mMR span 11, MRD 60, 252 views, 344 tangential
positions, image 127 x 285 x 285), ``dmi`` (GE Discovery MI 4 rings span 1, 272 x 415, image
71 x 323 x 323), ``quadra`` (Siemens Quadra span 1, MRD ``--quadra-max-ring-diff``, 399 x 520,
image 645 x 447 x 447: 515 MB, beyond the H200's L2 cache).

Output: a JSON document (``--json FILE`` also writes it), then one readable line per case.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import lor_order  # noqa: E402
import numpy as np  # noqa: E402
from subset_kernels import subset_chunk  # noqa: E402
from timing import Device, rounds  # noqa: E402

CASES = ("mmr", "dmi", "quadra")
WAYS = ("checked", "framed")


def timed_ways(device: Device, chunk, pdi, images: dict, frame, repeat: int) -> dict:
    """Median seconds of the forward call over ``chunk`` for each way's image, and whether the
    outputs are equal bit for bit."""
    from stirgpu.kernels import forward_chunk

    cp = device.xp
    outs = {way: cp.empty(chunk.num_lors, np.float32) for way in WAYS}
    calls = {way: (lambda w=way: forward_chunk(chunk, pdi, images[w], frame, out=outs[w])) for way in WAYS}
    seconds = rounds(device, calls, repeat)
    res = {"lors": chunk.num_lors, "parts": len(chunk.shapes)}
    for way in WAYS:
        s = statistics.median(seconds[way])
        res[way] = {"forward_s": s, "lor_per_s": chunk.num_lors / s, "seconds": seconds[way]}
    res["speedup"] = res["checked"]["forward_s"] / res["framed"]["forward_s"]
    res["equal"] = bool(cp.array_equal(outs["checked"], outs["framed"]))
    return res


def run_case(device: Device, name: str, args) -> dict:
    from stirgpu.kernels.cuda.images import prepare_image
    from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

    cp = device.xp
    pdi, views_per_part = lor_order.geometry(name, args)
    info = stir_default_image_info(pdi)
    image = cp.asarray(lor_order.ellipse_phantom(info.shape))
    images = {"checked": image, "framed": prepare_image(image)}
    frame = stir_image_frame(info)
    repeat = args.quadra_repeat if name == "quadra" else args.repeat
    full = timed_ways(device, lor_order.make_chunk(pdi, views_per_part), pdi, images, frame, repeat)
    sub = timed_ways(device, subset_chunk(pdi, args.subsets), pdi, images, frame, args.repeat)
    del images, image
    cp.get_default_memory_pool().free_all_blocks()
    return {"image": list(info.shape), "full": full, "subset": sub}


def readable(name: str, r: dict) -> str:
    line = f"{name} (image {'x'.join(map(str, r['image']))}):"
    for key in ("full", "subset"):
        c = r[key]
        line += (
            f" {key} {c['lors']:.3e} LORs {c['checked']['forward_s']:.4f} -> {c['framed']['forward_s']:.4f} s "
            f"({c['speedup']:.2f}x, {c['framed']['lor_per_s']:.2e} LOR/s, equal {c['equal']});"
        )
    return line.rstrip(";") + " (checked -> framed)"


def main(argv=None) -> int:
    ap = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=arguments.name_list(CASES), default=list(CASES), help=",".join(CASES))
    ap.add_argument("--repeat", type=arguments.positive_int, default=7, help="rounds, each timing both ways")
    ap.add_argument("--quadra-repeat", type=arguments.positive_int, default=3)
    ap.add_argument("--quadra-max-ring-diff", type=arguments.non_negative_int, default=10)
    ap.add_argument("--views-per-part", type=arguments.positive_int, default=100)
    ap.add_argument("--subsets", type=arguments.positive_int, default=21)
    ap.add_argument("--json", default=None, help="also write the JSON result here")
    args = ap.parse_args(argv)
    from stirgpu.execution import resolve_backend

    resolve_backend("cuda")  # one clear line where cupy or a GPU is missing
    import cupy as cp

    device = Device(cp)
    result = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "cases": {}}
    for name in args.cases:
        result["cases"][name] = run_case(device, name, args)
    arguments.emit_cases(result, args.json, readable)
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
