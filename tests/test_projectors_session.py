"""Projectors over sessions: the adjoint of every projector kind, and what a session shares.

* The dot-product test ``<A x, y> = <x, B y>`` (float64 sums of float32 projections) for a
  lone ForwardProjector and a lone BackProjector (each tested with its adjoint on its own
  session), a ProjectorPair, and the pair's ``.forward`` / ``.back`` objects, with and without
  the cylindrical FOV and in both units; on CPU, and on CUDA where a GPU is present.
* A session is shared: one ``set_up`` / ``set_input`` on a pair serves its parts, its options
  (budgets, FOV, segments) apply to both directions, and an unchanged image is uploaded once
  (``ProjectionSession.uploads``).  Lone projectors keep their own sessions.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import cylindrical_fov_mask, stir_rim
from stirgpu.projectors import (
    BackProjector,
    ForwardProjector,
    ProjectionSession,
    ProjectorPair,
    StreamingProjector,
    adjointness_test,
)

#: <A x, y> vs <x, B y>: float32 projections of ~10^5 bins, summed in float64
ADJOINT_RTOL = 1e-5


def geometry():
    """ECAT 953, span 1, max ring difference 2 (5 segments), 12 views, 24 tangential positions;
    an 11 x 25 x 25 image with a shifted origin (voxels outside STIR's FOV cylinder)."""
    pdi = ProjDataInfo.construct(
        Scanner.from_name("ECAT 953"), span=1, max_ring_diff=2, num_views=12, num_tangential_poss=24
    )
    return pdi, ImageInfo((11, 25, 25), (6.75, 6.0, 6.0), origin=(1.0, 2.0, -3.0))


def image(info, seed=1):
    return np.random.default_rng(seed).random(info.shape, dtype=np.float32) + 0.5


def measured(pdi, seed=2):
    rng = np.random.default_rng(seed)
    pd = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        shape = (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
        pd.write_views(rng.random(shape, dtype=np.float32) + 0.1, s, range(pdi.get_num_views()))
    return pd


def views_of(pd, s):
    return pd.read_views(s, range(pd.get_num_views()))


def same_data(a, b, pdi):
    return all(np.array_equal(views_of(a, s), views_of(b, s)) for s in pdi.segment_nums)


def forward_of(pdi, info, img, **options):
    """A fresh lone forward projector's projection of ``img`` (the reference)."""
    fp = ForwardProjector(**options)
    fp.set_up(pdi, info)
    return fp.forward_project(ProjDataInMemory(pdi), img)


# --------------------------------------------------------------------------------------
# adjointness of every projector kind
# --------------------------------------------------------------------------------------
KINDS = ["lone forward", "lone back", "pair", "pair parts", "parts of one session"]


def _adjoint_difference(kind, backend, seed, **options):
    pdi, info = geometry()
    if kind == "lone forward":
        p = ForwardProjector(backend=backend, **options)
        p.set_up(pdi, info)
        return p.adjointness_test(seed)
    if kind == "lone back":
        p = BackProjector(backend=backend, **options)
        p.set_up(pdi, info)
        return p.adjointness_test(seed)
    if kind == "parts of one session":
        session = ProjectionSession(backend=backend, **options)
        fp, bp = ForwardProjector(session=session), BackProjector(session=session)
        fp.set_up(pdi, info)
        return adjointness_test(fp, bp, seed)
    pair = ProjectorPair(backend=backend, **options)
    pair.set_up(pdi, info)
    return pair.adjointness_test(seed) if kind == "pair" else adjointness_test(pair.forward, pair.back, seed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("units", ["stir", "mm"])
@pytest.mark.parametrize("fov", [True, False])
def test_every_projector_kind_is_adjoint(backend, kind, units, fov):
    """<A x, y> == <x, B y> to float32 rounding for every way of holding the two directions, in
    STIR's x-voxel units and in mm (the same kernels on another frame); the FOV restriction (when
    on) is part of both operators.  Guards against a direction that drops the FOV mask, the
    session's units or a segment the other keeps."""
    assert _adjoint_difference(kind, backend, 3, units=units, restrict_to_cylindrical_fov=fov) < ADJOINT_RTOL


def test_adjointness_with_a_segment_limit(backend):
    """With max_segment_num_to_process both directions leave out the same segments."""
    assert _adjoint_difference("pair parts", backend, 4, max_segment_num_to_process=1) < ADJOINT_RTOL


def test_adjointness_test_finds_a_mismatched_pair():
    """The test can fail: a forward projector without the FOV restriction and a back
    projector with it are not adjoint (the image has mass outside the FOV cylinder)."""
    pdi, info = geometry()
    fp = ForwardProjector(backend="cpu", restrict_to_cylindrical_fov=False)
    bp = BackProjector(backend="cpu", restrict_to_cylindrical_fov=True)
    fp.set_up(pdi, info)
    bp.set_up(pdi, info)
    assert adjointness_test(fp, bp, seed=3) > 1e-3
    bp.set_up(pdi.replace(num_views=6), info)
    with pytest.raises(StirGpuError, match="different set-ups"):
        adjointness_test(fp, bp)


# --------------------------------------------------------------------------------------
# what a session shares
# --------------------------------------------------------------------------------------
def test_one_set_up_serves_the_pair_and_its_parts():
    """The parts, taken before set_up, are set up by the pair's set_up, and follow a later one
    (another geometry); all three are over one session."""
    pdi, info = geometry()
    pair = ProjectorPair(backend="cpu")
    forward, back = pair.forward, pair.back
    assert pair.get_forward_projector() is forward and pair.get_back_projector() is back
    assert isinstance(forward, ForwardProjector) and not isinstance(forward, BackProjector)
    assert isinstance(back, BackProjector) and not isinstance(back, ForwardProjector)
    assert forward.session is pair.session is back.session
    assert not forward.is_set_up()
    pair.set_up(pdi, info)
    assert forward.get_proj_data_info() == pdi and back.get_image_info() == info
    assert forward.devices == back.devices == pair.devices
    other = pdi.replace(num_views=6)
    back.set_up(other, info)
    assert pair.get_proj_data_info() == other == forward.get_proj_data_info()
    img = image(info)
    assert same_data(forward.forward_project(ProjDataInMemory(other), img), forward_of(other, info, img), other)


def test_one_set_input_serves_both_directions_and_uploads_once():
    """One set_input on the pair is the input of its forward part, of the pair's own forward
    projection and of its fused step: one upload for all (ProjectionSession.uploads), none
    counted in the calls' statistics; the results equal those of projectors given the image."""
    pdi, info = geometry()
    img = image(info)
    data = measured(pdi)
    pair = ProjectorPair(backend="cpu")
    pair.set_up(pdi, info)
    assert pair.session.uploads == 0
    pair.set_input(img)
    by_part = pair.forward.forward_project(ProjDataInMemory(pdi))
    by_pair = pair.forward_project(ProjDataInMemory(pdi))
    ratio = pair.forward_back_ratio(None, data)
    assert pair.session.uploads == 1
    assert pair.last_stats.bytes_uploaded == 0 and pair.forward.last_stats.bytes_uploaded == 0
    want = forward_of(pdi, info, img)
    assert same_data(by_part, want, pdi) and same_data(by_pair, want, pdi)
    fresh = ProjectorPair(backend="cpu")
    fresh.set_up(pdi, info)
    np.testing.assert_array_equal(ratio, fresh.forward_back_ratio(img, data))
    pair.back.back_project(None, data)  # the back projection neither uses nor replaces it
    pair.forward.forward_project(ProjDataInMemory(pdi))
    assert pair.session.uploads == 1
    pair.forward.forward_project(ProjDataInMemory(pdi), img)  # a numpy array given: uploaded again
    assert pair.session.uploads == 2
    pair.set_up(pdi, info)  # a new set-up forgets the input, for every part
    for call in (
        lambda: pair.forward.forward_project(ProjDataInMemory(pdi)),
        lambda: pair.forward_back_ratio(None, data),
    ):
        with pytest.raises(StirGpuError, match="set_input"):
            call()


def test_cpu_uploads_reuse_one_host_copy_and_give_each_images_projection():
    """On the CPU every upload is written into the one host copy of the last image (same
    shape), masked afresh: each forward projection is its own image's, also after an image
    with values outside the FOV and a float64 image; a refused upload leaves the last image
    whole."""
    pdi, info = geometry()
    fp = ForwardProjector(backend="cpu")
    fp.set_up(pdi, info)
    residency = fp.session.engine.residency
    first = image(info, seed=3)
    first[:, 0, 0] = np.nan  # outside STIR's cylinder: masked to 0
    fp.set_input(first)
    kept = residency.input_image(0)
    last = image(info, seed=5).astype(np.float64)
    for img in (first, image(info, seed=4), last):
        got = fp.forward_project(ProjDataInMemory(pdi), img)
        assert residency.input_image(0) is kept
        assert same_data(got, forward_of(pdi, info, img), pdi)

    class Broken:
        shape, dtype, ndim = info.shape, np.dtype(np.float32), 3

        def __array__(self, dtype=None, copy=None):
            raise ValueError("no values")

    with pytest.raises((ValueError, StirGpuError)):
        fp.set_input(Broken())
    assert same_data(fp.forward_project(ProjDataInMemory(pdi)), forward_of(pdi, info, last), pdi)


def test_lone_projectors_keep_their_own_sessions():
    """A lone ForwardProjector and BackProjector each make a session of their own: setting up
    or feeding one leaves the other as it was, and each projects on its own with the pair's
    numbers."""
    pdi, info = geometry()
    img, data = image(info), measured(pdi)
    fp, bp = ForwardProjector(backend="cpu"), BackProjector(backend="cpu")
    assert fp.session is not bp.session
    fp.set_up(pdi, info)
    assert not bp.is_set_up()
    fp.set_input(img)
    bp.set_up(pdi, info)
    assert fp.session.uploads == 1 and bp.session.uploads == 0
    pair = ProjectorPair(backend="cpu")
    pair.set_up(pdi, info)
    assert same_data(fp.forward_project(ProjDataInMemory(pdi)), pair.forward_project(ProjDataInMemory(pdi), img), pdi)
    np.testing.assert_array_equal(bp.back_project(None, data), pair.back_project(None, data))


def test_options_and_budgets_apply_to_both_directions():
    """The pair's options are its parts': chunks of at most max_views_per_chunk views (and
    within the host budget) both ways, segments beyond max_segment_num_to_process untouched
    by the forward part and ignored by the back part, and the FOV restriction on the forward
    part's input and the back part's output."""
    pdi, info = geometry()
    options = dict(max_views_per_chunk=2, host_memory_budget=150_000, max_segment_num_to_process=1)
    pair = ProjectorPair(backend="cpu", **options)
    for part in (pair.forward, pair.back):
        assert part.session.options is pair.session.options
        assert (part.max_views_per_chunk, part.host_memory_budget, part.max_segment_num_to_process) == (2, 150_000, 1)
        assert part.restrict_to_cylindrical_fov
    pair.set_up(pdi, info)
    assert pair.back.segments_to_process() == (-1, 0, 1)
    mask = cylindrical_fov_mask(info, stir_rim(info.shape[2], pdi.get_scanner().inner_ring_radius))
    assert not mask.all()
    img = image(info)
    out = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        shape = (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
        out.write_views(np.full(shape, -1.0, np.float32), s, range(pdi.get_num_views()))
    pair.forward.forward_project(out, img)
    want = forward_of(pdi, info, img * mask, restrict_to_cylindrical_fov=False, max_segment_num_to_process=1)
    for s in pdi.segment_nums:
        if abs(s) <= 1:
            np.testing.assert_array_equal(views_of(out, s), views_of(want, s))
        else:
            assert np.all(views_of(out, s) == -1.0)
    data = measured(pdi)
    back = pair.back.back_project(None, data)
    assert np.all(back[:, ~mask] == 0) and np.all(back[:, mask] > 0)
    zeroed = measured(pdi)
    for s in (-2, 2):  # the segments left out contribute nothing
        zeroed.write_views(np.zeros_like(views_of(zeroed, s)), s, range(pdi.get_num_views()))
    np.testing.assert_array_equal(back, pair.back.back_project(None, zeroed))
    for part in (pair.forward, pair.back):
        chunks = part.last_plan.chunks
        assert len(chunks) > 1 and max(len(p.views) for c in chunks for p in c.parts) <= 2
        assert part.last_plan.host_budget == 150_000 and part.last_plan.host_bytes <= 150_000


def test_statistics_are_each_projectors_own():
    """last_stats / last_plan belong to the projector that made the call: the pair's own
    calls are the pair's, its parts' are theirs."""
    pdi, info = geometry()
    pair = ProjectorPair(backend="cpu")
    pair.set_up(pdi, info)
    pair.forward.forward_project(ProjDataInMemory(pdi), image(info))
    assert pair.forward.last_stats.operation == "forward projection"
    assert pair.last_stats is None and pair.back.last_stats is None
    pair.sensitivity()
    assert pair.last_stats.operation == "sensitivity"
    assert pair.forward.last_stats.operation == "forward projection"


def test_a_session_takes_no_other_options():
    """A projector made on a session projects with the session's options: others given beside
    it are refused, naming them."""
    session = ProjectionSession(backend="cpu", units="mm")
    assert ForwardProjector(session=session).units == "mm"
    with pytest.raises(StirGpuError, match="units"):
        ForwardProjector(session=session, units="mm")
    with pytest.raises(StirGpuError, match="max_views_per_chunk, restrict_to_cylindrical_fov"):
        ProjectorPair(session=session, restrict_to_cylindrical_fov=False, max_views_per_chunk=4)


def test_projectors_and_sessions_take_the_same_options():
    """The projectors' option keywords (and their defaults) are the session's."""
    session = inspect.signature(ProjectionSession).parameters
    projector = dict(inspect.signature(StreamingProjector).parameters)
    assert projector.pop("session").kind is inspect.Parameter.KEYWORD_ONLY
    assert [(p.name, p.default) for p in projector.values()] == [(p.name, p.default) for p in session.values()]


def test_a_refused_set_up_changes_nothing():
    """A set-up that fails (a projection-data geometry or an image geometry that is none, here)
    leaves the session as it was: not set up before the first set-up, the earlier set-up after
    it.  Guards against a set-up that records part of a refused geometry."""
    pdi, info = geometry()
    pair = ProjectorPair(backend="cpu")
    with pytest.raises(StirGpuError, match="proj_data_info"):
        pair.set_up("not a geometry", info)
    assert not pair.forward.is_set_up()
    pair.set_up(pdi, info)
    with pytest.raises(StirGpuError, match="proj_data_info"):
        pair.back.set_up(object(), info)
    with pytest.raises(StirGpuError, match="image_info"):
        pair.back.set_up(pdi.replace(num_views=6), np.zeros(info.shape, np.float32))
    assert pair.forward.get_proj_data_info() == pdi and pair.back.get_image_info() == info


def test_forward_project_into_none_returns_new_data_as_back_project_returns_an_image():
    """``forward_project(None, image)`` mirrors ``back_project(None, data)``: a new
    ProjDataInMemory of the set-up's geometry holding the projection (bit for bit what a store
    given in its place receives, the other subsets' views 0), for a lone projector and a pair;
    before any set-up it says to call set_up (an array carries no geometry)."""
    pdi, info = geometry()
    img = image(info)
    with pytest.raises(StirGpuError, match=r"call set_up\(proj_data_info, image_info\) first"):
        ForwardProjector(backend="cpu").forward_project(None, img)
    for projector in (ForwardProjector(backend="cpu"), ProjectorPair(backend="cpu")):
        projector.set_up(pdi, info)
        whole = projector.forward_project(None, img)
        assert isinstance(whole, ProjDataInMemory) and whole.get_proj_data_info() == pdi
        assert same_data(whole, projector.forward_project(ProjDataInMemory(pdi), img), pdi)
        subset = projector.forward_project(None, img, subset_num=1, num_subsets=3)
        for s in pdi.segment_nums:
            views = views_of(subset, s)
            np.testing.assert_array_equal(views[1::3], views_of(whole, s)[1::3])
            assert not views[0::3].any() and not views[2::3].any() and views[1::3].any()
