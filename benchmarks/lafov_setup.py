"""``lafov.py --setup-only``: the set-up of each projector call at the run's geometry, without
projecting.

The data file is sparse (``ProjDataFromFile.create`` sizes it with ``ftruncate``: holes, read
as zeros, no disk space), so the full Quadra needs only room for its image.  Each call, in its
own process after :func:`lafov.warm_up`, is stopped at its first chunk's device step (the
engine's ``allocation_hook`` is called there with ``"chunk temporaries"``; it raises a marker
exception, which ends the call as any failure does, its outputs discarded) and timed from its
start to there: the projector's planning, the lanes' set-up, the first chunk's read (of holes)
and, on a GPU, its tables built and queued for upload.  Each call runs twice (the second
finds what the engine kept: plans, buffers, the image's copy).  Reported beside it: the
projector's ``set_up`` and, for calls with an input image, ``set_input`` (counted in the
set-up).

The helpers shared with the full runs come from ``lafov`` (passed in as ``common``: this module
is imported by it, not the other way round).
"""

from __future__ import annotations

import time

#: the calls timed, each in its own process
CALLS = ("forward_disk", "back_disk", "subset_back_disk", "osem_disk")


class FirstChunk(Exception):
    """Raised at the first chunk's device step: the set-up is over."""


def _stop_at_first_chunk(projector) -> dict:
    """Make ``projector``'s calls stop at their first chunk's device step; the returned dict
    gets the ``perf_counter`` time of that moment as ``"first_chunk"``."""
    marks: dict = {}

    def hook(lane: str, what: str, nbytes: int) -> None:
        if what == "chunk temporaries":
            marks.setdefault("first_chunk", time.perf_counter())
            raise FirstChunk(f"{lane}: first chunk reached")

    projector.session.engine.allocation_hook = hook
    return marks


def _timed_to_first_chunk(call, marks: dict) -> float:
    t0 = time.perf_counter()
    try:
        call()
    except Exception:
        if "first_chunk" not in marks:
            raise
    else:
        raise RuntimeError("the call completed without a chunk reaching its device step")
    return marks["first_chunk"] - t0


def make(args, common) -> dict:
    """The phantom image and a sparse data file of the run's geometry."""
    from stirgpu.formats import ProjDataFromFile

    made = common.make(args)
    ProjDataFromFile.create(common._paths(args.dir)["data"], common.template(args)).close()
    return made


def run(args, call: str, common) -> dict:
    """One call's set-up (``call``: one of :data:`CALLS`)."""
    np, _ = common._stirgpu()
    from stirgpu.formats import ProjDataFromFile, read_from_file, read_image
    from stirgpu.projectors import BackProjector, ForwardProjector, ProjectorPair

    warm = common.warm_up(args)
    p = common._paths(args.dir)
    image = read_image(p["image"])
    with common._configured(args), read_from_file(p["data"]) as store:
        pdi = store.get_proj_data_info()
        projector = {"forward_disk": ForwardProjector, "osem_disk": ProjectorPair}.get(call, BackProjector)()
        t0 = time.perf_counter()
        projector.set_up(pdi, image.info)
        set_up = time.perf_counter() - t0
        marks = _stop_at_first_chunk(projector)
        x = image.as_array() if call == "forward_disk" else np.ones(image.shape, np.float32)
        if call == "forward_disk":

            def project():
                with ProjDataFromFile.create(p["data"].with_name("forward.hs"), pdi) as out:
                    projector.forward_project(out)
        elif call == "osem_disk":

            def project():
                projector.forward_back_ratio(None, store, 0, args.subsets)
        else:
            subset = (0, args.subsets) if call == "subset_back_disk" else (0, 1)

            def project():
                projector.back_project(None, store, *subset)

        seconds, uploads = [], []
        for _ in range(2):  # the first call, then the same call again (what the engine kept)
            marks.clear()
            t0 = time.perf_counter()
            if call in ("forward_disk", "osem_disk"):
                projector.set_input(x)
            uploads.append(time.perf_counter() - t0 if call in ("forward_disk", "osem_disk") else 0.0)
            seconds.append(uploads[-1] + _timed_to_first_chunk(project, marks))
    return {
        "set_up_seconds": set_up,
        "input_seconds": uploads[0],
        "to_first_chunk_seconds": seconds[0],
        "again_input_seconds": uploads[1],
        "again_to_first_chunk_seconds": seconds[1],
        "warm_up_seconds": warm,
        "peak_rss_mb": common.peak_rss_mb(),
    }


def readable(result: dict) -> str:
    g = result["geometry"]
    lines = [
        f"{g['scanner']} span {g['span']}, max ring difference {g['max_ring_diff']}: {g['segments']} segments, "
        f"{g['bins']:.3e} bins ({g['data_bytes'] / 1e9:.2f} GB, sparse); image {' x '.join(map(str, g['image']))}; "
        f"backend {g['backend']}; set-up only"
    ]
    for name, run in result["setup"].items():
        lines.append(
            f"{name}: to the first chunk {run['to_first_chunk_seconds']:.3f} s (image upload "
            f"{run['input_seconds']:.3f} s), again {run['again_to_first_chunk_seconds']:.3f} s "
            f"({run['again_input_seconds']:.3f} s), projector set_up {run['set_up_seconds']:.3f} s, "
            f"warm-up {run['warm_up_seconds']:.2f} s, peak RSS {run['peak_rss_mb']:.0f} MB"
        )
    return "\n".join(lines)
