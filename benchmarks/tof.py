"""TOF forward and back projection: stirgpu's kernels against libparallelproj's TOF sinogram projector.

    python3 benchmarks/tof.py --lib ../shared/anchors/libparallelproj-2.0.3-cuda-sm90.so   # H200
    python3 benchmarks/tof.py                                  # stirgpu alone (no baseline)
    python3 benchmarks/tof.py --backend cpu --views 8 --tangential 31 --max-ring-difference 1 \\
        --lib PREFIX/lib/libparallelproj.so                    # CPU smoke test (OpenMP build)

The case (default: GE Discovery MI 4 rings, span 1, all ring differences, 272 views, 415
tangential positions, TOF mashing 29: 13 TOF bins) is projected with STIR's numerics over all of
its LORs and TOF bins, data resident where the backend computes (GPU memory for ``cuda``):

* ``stirgpu`` -- ``forward_chunk_stir_tof`` / ``back_chunk_stir_tof`` on the chunk of all
  segments (``StirChunk``: the endpoints computed in the kernels from per-view tables), one walk
  per LOR for all its TOF bins;
* ``libparallelproj`` (the baseline, with ``--lib``) -- ``joseph3d_tof_sino_fwd`` /
  ``joseph3d_tof_sino_back`` of the given library on the same LORs: STIR's float32 endpoints
  precomputed (24 bytes per LOR, start and end swapped as STIR's Parallelproj projector passes
  them), the same image, bin width, sigma and 4 sigmas; its values are [LOR][TOF bin], compared
  with stirgpu's [TOF bin][LOR] after a transpose.

Each figure is the median of ``--repeat`` timed calls after a warm-up (compilation, first
touch); the GPU is synchronised around each.  Reported: seconds, LOR-bins/s (LORs x TOF bins
per second), the ratio stirgpu / libparallelproj for forward and back, their agreement (max
|diff| / max), the GPU kernel chosen (its register window of TOF bins), and stirgpu's non-TOF
projection of the same LORs (``stirgpu_non_tof``: what TOF costs on top; on a GPU its forward
reads the image's zero-framed copies, as the engine's projections do), against libparallelproj's
``joseph3d_fwd`` / ``joseph3d_back`` there too.

Output: a JSON document (``--json FILE`` also writes it), then readable lines.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

import arguments  # noqa: E402
import numpy as np  # noqa: E402
from timing import Device, median_seconds  # noqa: E402


class TofLibparallelproj:
    """libparallelproj's ``joseph3d_tof_sino_fwd`` / ``_back`` through ctypes; pointers are host
    arrays (the OpenMP build) or device arrays (the CUDA build), as the library takes either."""

    def __init__(self, path: str):
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as exc:
            raise arguments.BadArgument(f"--lib {path}: cannot load it ({exc})") from None
        for name in ("joseph3d_tof_sino_fwd", "joseph3d_tof_sino_back"):
            if not hasattr(self.lib, name):
                raise arguments.BadArgument(f"--lib {path}: no {name} (not libparallelproj 2?)")
            fn = getattr(self.lib, name)
            fn.restype = None
            fn.argtypes = (
                [ctypes.c_void_p] * 6
                + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p]
                + [ctypes.c_float, ctypes.c_short, ctypes.c_ubyte, ctypes.c_ubyte, ctypes.c_int, ctypes.c_int]
            )
        for fn in (self.lib.joseph3d_fwd, self.lib.joseph3d_back):
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.path = path

    def non_tof(self, fn, xs, xe, img, origin, vox, values, dims) -> None:
        """``joseph3d_fwd`` / ``joseph3d_back`` (``fn``) on the same LORs (STIR's order: start first)."""
        fn(_ptr(xs), _ptr(xe), _ptr(img), _ptr(origin), _ptr(vox), _ptr(values), len(xs), _ptr(dims), 0, 64)

    def _call(self, fn, xs, xe, img, origin, vox, values, dims, tof, nb):
        width, sigma, n_sigmas, _ = (float(v) for v in tof)
        # sigma and the centre offset are arrays (one value for all LORs: not LOR-dependent)
        fn(
            _ptr(xs), _ptr(xe), _ptr(img), _ptr(origin), _ptr(vox), _ptr(values), len(xs), _ptr(dims),
            width, _ptr(self.sigma), _ptr(self.offset), n_sigmas, nb, 0, 0, 0, 64,
        )  # fmt: skip

    def prepare(self, xp, tof) -> None:
        self.sigma = xp.asarray(np.array([tof[1]], np.float32))
        self.offset = xp.zeros(1, np.float32)

    def forward(self, *args) -> None:
        self._call(self.lib.joseph3d_tof_sino_fwd, *args)

    def back(self, *args) -> None:
        self._call(self.lib.joseph3d_tof_sino_back, *args)


def _ptr(a) -> int:
    return a.data.ptr if hasattr(a, "device") and not isinstance(a, np.ndarray) else a.ctypes.data


def make_case(args):
    from stirgpu.geometry import ProjDataInfo, Scanner
    from stirgpu.kernels.stir_lors import stir_default_image_info, stir_image_frame

    sc = Scanner.from_name(args.scanner)
    mrd = sc.num_rings - 1 if args.max_ring_difference is None else args.max_ring_difference
    pdi = ProjDataInfo.construct(sc, args.span, mrd, args.views, args.tangential, tof_mash_factor=args.tof_mash)
    if not pdi.is_tof_data():
        raise arguments.BadArgument(f"--scanner {args.scanner!r}: not a TOF scanner")
    info = stir_default_image_info(pdi)
    nz, ny, nx = info.shape
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n, dtype=np.float32) for n in (nz, ny, nx)), indexing="ij")
    img = (((x / 0.7) ** 2 + (y / 0.6) ** 2 <= 1) * (1 + 0.5 * np.cos(3 * x) * np.sin(2 * y))).astype(np.float32)
    return pdi, info, img, stir_image_frame(info)


def baseline_endpoints(backend: Device, chunk, frame):
    """STIR's float32 endpoints of every LOR times rescale, (n, 3) each, where the backend computes."""
    if backend.name == "cuda":
        from stirgpu.kernels.cuda_stir import endpoints

        return endpoints(chunk.device(backend.xp.cuda.Device().id), frame[2], backend.xp.cuda.Device().id)
    from stirgpu.kernels.cpu_stir import endpoints_array

    ends = [endpoints_array(t) for t in chunk.host]
    return tuple(
        np.ascontiguousarray(np.concatenate([e[i].reshape(-1, 3) for e in ends]) * np.float32(frame[2])) for i in (0, 1)
    )


def lor_major(xp, flat, chunk, nb: int):
    """stirgpu's values of a chunk (per part [TOF bin][LOR], parts one after the other) as
    libparallelproj lays them out: (LORs, TOF bins), C order."""
    out = xp.empty((chunk.num_lors, nb), np.float32)
    o = 0
    for nv, na, nt in chunk.shapes:
        k = nv * na * nt
        out[o : o + k] = flat[nb * o : nb * (o + k)].reshape(nb, k).T
        o += k
    return out


def relative_difference(xp, a, b) -> float:
    """max |a - b| / max |b|, where the arrays are (no host copies of GPU data)."""
    scale = float(xp.abs(b).max())
    return float(xp.abs(a.reshape(-1) - b.reshape(-1)).max()) / max(scale, 1e-30)


def run(args) -> dict:
    from stirgpu.kernels.cuda_stir_tof import kernel_name, plane_window
    from stirgpu.kernels.stir_api import StirChunk, back_chunk_stir, forward_chunk_stir
    from stirgpu.kernels.stir_tof_api import back_chunk_stir_tof, forward_chunk_stir_tof, stir_tof_tables

    backend = Device.of(args.backend)
    xp = backend.xp
    pdi, info, host_img, frame = make_case(args)
    t0 = time.perf_counter()
    chunk = StirChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    tables_s = time.perf_counter() - t0
    tof, _, nb = stir_tof_tables(pdi, frame[2])
    n = chunk.num_lors
    img = xp.asarray(host_img)
    out = xp.empty(nb * n, np.float32)
    acc = xp.zeros(info.shape, np.float32)
    fwd = median_seconds(backend, lambda: forward_chunk_stir_tof(chunk, pdi, img, frame, out=out), args.repeat)

    def back_call():
        acc.fill(0)
        back_chunk_stir_tof(chunk, pdi, out, acc, frame)

    back = median_seconds(backend, back_call, args.repeat)
    non_tof = xp.empty(n, np.float32)
    img1 = img
    if args.backend == "cuda":  # the image as the engine hands it to the kernels: with its framed copies
        from stirgpu.kernels.cuda_workspaces import prepare_image

        img1 = prepare_image(img)
    fwd1 = median_seconds(backend, lambda: forward_chunk_stir(chunk, pdi, img1, frame, out=non_tof), args.repeat)

    acc1 = xp.zeros(info.shape, np.float32)

    def back1_call():
        acc1.fill(0)
        back_chunk_stir(chunk, pdi, non_tof, acc1, frame)

    back1 = median_seconds(backend, back1_call, args.repeat)
    res = {
        "backend": args.backend,
        "case": {
            "scanner": args.scanner, "span": args.span, "segments": pdi.get_num_segments(),
            "views": args.views, "tangential": args.tangential, "tof_mash_factor": args.tof_mash,
            "tof_bins": nb, "lors": n, "lor_bins": n * nb, "image": list(info.shape),
        },  # fmt: skip
        "window_bins": plane_window(tof),
        "gpu_kernel": kernel_name("fwd", plane_window(tof)) if args.backend == "cuda" else None,
        "tables_seconds": tables_s,
        "stirgpu": {
            "forward_s": fwd, "back_s": back,
            "forward_lor_bins_per_s": n * nb / fwd, "back_lor_bins_per_s": n * nb / back,
        },
    }  # fmt: skip
    res["stirgpu_non_tof"] = {
        "forward_s": fwd1, "back_s": back1, "forward_lor_per_s": n / fwd1, "back_lor_per_s": n / back1,
    }  # fmt: skip
    if args.lib:
        res["libparallelproj"] = baseline(args, backend, chunk, frame, tof, nb, img, out, acc)
        lpp = res["libparallelproj"]
        ours1 = res["stirgpu_non_tof"]
        res["ratio"] = {
            "forward": lpp["forward_s"] / fwd, "back": lpp["back_s"] / back,
            "non_tof_forward": lpp["non_tof"]["forward_s"] / ours1["forward_s"],
            "non_tof_back": lpp["non_tof"]["back_s"] / ours1["back_s"],
        }  # fmt: skip
    return res


def baseline(args, backend, chunk, frame, tof, nb, img, ours_fwd, ours_back) -> dict:
    xp = backend.xp
    lpp = TofLibparallelproj(args.lib)
    lpp.prepare(xp, tof)
    xs, xe = baseline_endpoints(backend, chunk, frame)
    origin, vox = (xp.asarray(np.asarray(v, np.float32)) for v in frame[:2])
    dims = xp.asarray(np.array(img.shape, np.int32))
    lors = (xs, xe, img, origin, vox, dims)
    res = {"library": args.lib, **_baseline_tof(args, backend, lpp, lors, chunk, tof, nb, ours_fwd, ours_back)}
    res["non_tof"] = _baseline_non_tof(args, backend, lpp, lors)
    return res


def _baseline_tof(args, backend, lpp, lors, chunk, tof, nb, ours_fwd, ours_back) -> dict:
    xp = backend.xp
    xs, xe, img, origin, vox, dims = lors
    n = xs.shape[0]
    out = xp.zeros(n * nb, np.float32)  # libparallelproj leaves LORs that miss the image untouched
    acc = xp.zeros(img.shape, np.float32)
    # STIR passes xend as the start for TOF (docs/tof.md)
    fwd = median_seconds(backend, lambda: lpp.forward(xe, xs, img, origin, vox, out, dims, tof, nb), args.repeat)
    values = lor_major(xp, ours_fwd, chunk, nb)  # stirgpu's values in libparallelproj's layout
    fwd_agree = relative_difference(xp, values, out)

    def back_call():
        acc.fill(0)
        lpp.back(xe, xs, acc, origin, vox, values, dims, tof, nb)

    back = median_seconds(backend, back_call, args.repeat)
    return {
        "forward_s": fwd, "back_s": back,
        "forward_lor_bins_per_s": n * nb / fwd, "back_lor_bins_per_s": n * nb / back,
        "forward_agreement": fwd_agree, "back_agreement": relative_difference(xp, ours_back, acc),
    }  # fmt: skip


def _baseline_non_tof(args, backend, lpp, lors) -> dict:
    """libparallelproj's non-TOF projection of the same LORs (STIR's order: start first)."""
    xs, xe, img, origin, vox, dims = lors
    n = xs.shape[0]
    values = backend.xp.zeros(n, np.float32)
    acc = backend.xp.zeros(img.shape, np.float32)

    def fwd_call():
        lpp.non_tof(lpp.lib.joseph3d_fwd, xs, xe, img, origin, vox, values, dims)

    def back_call():
        acc.fill(0)
        lpp.non_tof(lpp.lib.joseph3d_back, xs, xe, acc, origin, vox, values, dims)

    fwd, back = median_seconds(backend, fwd_call, args.repeat), median_seconds(backend, back_call, args.repeat)
    return {"forward_s": fwd, "back_s": back, "forward_lor_per_s": n / fwd, "back_lor_per_s": n / back}


def main(argv=None) -> int:
    p = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    p.add_argument("--lib", default=None, help="libparallelproj 2 (.so) to compare with (CUDA build for cuda)")
    p.add_argument("--scanner", default="GE Discovery MI 4 rings")
    p.add_argument("--span", type=arguments.positive_int, default=1)
    p.add_argument("--max-ring-difference", type=arguments.non_negative_int, default=None, help="default: all")
    p.add_argument("--views", type=arguments.positive_int, default=272)
    p.add_argument("--tangential", type=arguments.positive_int, default=415)
    p.add_argument("--tof-mash", type=arguments.positive_int, default=29, help="TOF mashing factor")
    p.add_argument("--repeat", type=arguments.positive_int, default=5)
    p.add_argument("--json", default=None, help="also write the JSON result here")
    args = p.parse_args(argv)
    if args.lib and not Path(args.lib).is_file():
        raise arguments.BadArgument(f"--lib {args.lib}: no such file")
    if args.backend == "cuda":
        from stirgpu.execution import resolve_backend

        resolve_backend("cuda")  # a clear error without cupy or a GPU
    res = run(args)
    arguments.emit_json(res, args.json)
    c, s = res["case"], res["stirgpu"]
    print(
        f"TOF {c['scanner']} span {c['span']}, {c['lors']:.3g} LORs x {c['tof_bins']} TOF bins ({args.backend}): "
        f"stirgpu forward {s['forward_lor_bins_per_s']:.3g} back {s['back_lor_bins_per_s']:.3g} LOR-bins/s"
    )
    if "ratio" in res:
        b, r = res["libparallelproj"], res["ratio"]
        print(
            f"  libparallelproj forward {b['forward_lor_bins_per_s']:.3g} back {b['back_lor_bins_per_s']:.3g} "
            f"LOR-bins/s; stirgpu / libparallelproj: forward {r['forward']:.2f}x, back {r['back']:.2f}x "
            f"(agreement {b['forward_agreement']:.1e}, {b['back_agreement']:.1e}); non-TOF on the same LORs: "
            f"forward {r['non_tof_forward']:.2f}x, back {r['non_tof_back']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(arguments.run(main))
