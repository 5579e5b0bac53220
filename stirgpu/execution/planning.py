"""The plan of a program on an engine's lanes: sizing, memory budgets, and the kept plans.

:func:`stirgpu.execution.plan.make_plan` cuts views into chunks for given buffer counts and
budgets.  :class:`Planner` says what those are for one program on one engine: how many host
and device buffers a slot needs (a store copied directly needs no host staging buffer; a
program's temporaries exist once per chunk computing at once), which images are fixed
memory, how many compute streams a GPU may use, and the default budgets from the memory free
now.  It keeps the plans it made by their request (OSEM asks for the same subsets' plans
every iteration) and gives a kept one again while it still fits the budgets.

Imports: numpy, ``stirgpu.errors``, :mod:`.plan`, :mod:`.identity` (and :mod:`.program` for its type).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..errors import PlanError
from .identity import STRONG, IdentityCache
from .plan import Plan, default_host_budget, make_plan, views_by_segment
from .program import ChunkProgram

__all__ = ["Planner"]

#: plans kept at most
PLANS_KEPT = 256
#: the smallest first chunk of a call whose inputs are all copied directly (see Planner._plan_for)
DIRECT_HEAD_BYTES = 1 << 20


class Planner:
    """Plans for an engine of ``lanes`` lanes of ``backend`` with ``compute_streams`` compute
    streams per GPU; ``gpu_budget()`` gives the default per-device GPU budget (None on the CPU).

    ``budgets_recent``: default budgets measured less than this long ago (seconds) are taken as
    they are for a kept plan -- measuring them (reading /proc/meminfo, asking each GPU) costs
    as much as an OSEM subset's whole engine overhead."""

    budgets_recent = 1.0

    def __init__(self, backend: str, lanes: int, compute_streams: int, gpu_budget: Callable[[], int | None]):
        self.backend = backend
        self.lanes = int(lanes)
        self.compute_streams = int(compute_streams)
        self._gpu_budget = gpu_budget
        # by the geometry object (held: its id is not reused meanwhile) and the request
        self._kept = IdentityCache((STRONG,), max_entries=PLANS_KEPT)
        self._measured: tuple | None = None  # (monotonic time, default host budget, default GPU budget)

    def clear(self) -> None:
        """Forget the kept plans and the last measured budgets."""
        self._kept.clear()
        self._measured = None

    def plan(
        self,
        program: ChunkProgram,
        proj_data_info,
        segments,
        views,
        image_shape: tuple[int, int, int],
        host_budget: int | None = None,
        gpu_budget: int | None = None,
        max_views_per_chunk: int | None = None,
        depth: int = 2,
        target_chunk_bytes: int | None = None,
        direct=(),
    ) -> Plan:
        """What :meth:`stirgpu.execution.Engine.make_plan` returns (see there)."""
        if isinstance(views, Mapping):  # views per segment (a process's share under MPI)
            views = views_by_segment(segments, views)
            views_key: object = tuple((s, v.tobytes()) for s, v in sorted(views.items()))
        else:
            views = np.asarray(views, dtype=np.int64).reshape(-1)
            views_key = views.tobytes()
        direct = frozenset(direct) if self.backend == "cuda" else frozenset()
        request = (
            type(program),
            program.inputs,
            program.outputs,
            program.scratch,
            program.workspace,
            program.image_workspace,
            program.uses_image,
            program.accumulates_image,
            tuple(int(s) for s in segments),
            views_key,
            tuple(int(n) for n in image_shape),
            host_budget,
            gpu_budget,
            max_views_per_chunk,
            int(depth),
            target_chunk_bytes,
            direct,
        )
        kept = self._kept.get((proj_data_info,), request)
        host, gpu = self.budgets(host_budget, gpu_budget, recent=kept is not None)
        if kept is not None and kept.host_bytes <= host and (gpu is None or kept.device_bytes_per_lane <= gpu):
            return kept
        plan = self._new_plan(
            program,
            proj_data_info,
            segments,
            views,
            image_shape,
            host,
            gpu,
            max_views_per_chunk,
            depth,
            target_chunk_bytes,
            direct,
        )
        self._kept.put((proj_data_info,), plan, request)
        return plan

    def budgets(self, host_budget, gpu_budget, recent: bool) -> tuple[int, int | None]:
        """(host, GPU) budgets of a plan: the explicit ones, else the defaults -- measured now,
        or, with ``recent``, the last measurement when it is recent enough."""
        host, gpu = host_budget, gpu_budget
        if host is not None and (gpu is not None or self.backend != "cuda"):
            return int(host), gpu
        now = time.monotonic()
        last = self._measured
        if not (recent and last is not None and now - last[0] < self.budgets_recent):
            last = self._measured = (now, default_host_budget(), self._gpu_budget())
        return (last[1] if host is None else int(host)), (last[2] if gpu is None else gpu)

    def _new_plan(
        self,
        program,
        proj_data_info,
        segments,
        views,
        image_shape,
        host_budget,
        gpu_budget,
        max_views_per_chunk,
        depth,
        target_chunk_bytes,
        direct,
    ) -> Plan:
        # several compute streams only where only the GPU sets the pace (every store copied
        # directly); one where chunks move through host staging (disk, foreign stores), whose
        # reads, copies and writes set it -- there a chunk computed alone is done, downloaded
        # and written sooner, and overlapping kernels gain nothing
        staged = [n for n in program.inputs + program.outputs if n not in direct]
        streams = self.compute_streams if self.backend == "cuda" and not staged else 1
        args = (
            program,
            proj_data_info,
            segments,
            views,
            image_shape,
            host_budget,
            gpu_budget,
            max_views_per_chunk,
            depth,
            target_chunk_bytes,
            direct,
        )
        if streams > 1 and program.workspace:
            # each chunk computing at once has its own temporaries: a budget that fits one
            # chunk's but not several gets the plan of one compute stream
            try:
                return self._plan_for(streams, *args)
            except PlanError:
                streams = 1
        return self._plan_for(streams, *args)

    def _plan_for(
        self,
        streams,
        program,
        proj_data_info,
        segments,
        views,
        image_shape,
        host_budget,
        gpu_budget,
        max_views_per_chunk,
        depth,
        target_chunk_bytes,
        direct,
    ) -> Plan:
        nz, ny, nx = (int(n) for n in image_shape)
        image_bytes = 4 * nz * ny * nx
        padded_bytes = 4 * (nz + 2) * (ny + 2) * (nx + 2)
        n_io = len(program.inputs) + len(program.outputs)
        # temporaries exist once per chunk computing at a time (``streams``): spread over the slots
        extra = program.scratch + -(-int(program.workspace) * streams // max(int(depth), 1))
        images_per_lane = int(program.uses_image) + int(program.accumulates_image)
        # small first chunks (the device starts sooner) and small last ones (a short drain:
        # the last kernel, download and write); see make_plan
        shape: dict[str, Any] = dict(ramp_up=True, taper=True)
        if program.inputs and all(n in direct for n in program.inputs):
            # the first kernel waits for the first chunk's upload alone, and direct uploads
            # need no read: a smaller first chunk starts the device sooner (a subset's too)
            shape["min_head_bytes"] = DIRECT_HEAD_BYTES
        lanes = self.lanes
        if self.backend == "cpu":
            # CPU lanes share one input image; each keeps its own accumulation image
            host_fixed = image_bytes * (
                int(program.uses_image) + lanes * int(program.accumulates_image) + int(program.accumulates_image)
            )
            return make_plan(
                proj_data_info,
                segments,
                views,
                lanes=lanes,
                host_buffers_per_slot=n_io + extra,
                device_buffers_per_slot=None,
                host_budget=host_budget,
                gpu_budget=None,
                host_fixed_bytes=host_fixed,
                depth=depth,
                max_views_per_chunk=max_views_per_chunk,
                target_chunk_bytes=target_chunk_bytes,
                **shape,
            )
        # host: the reduced result and one pinned staging copy of the image; staging buffers
        # only for the stores that are not copied directly
        host_fixed = image_bytes * (int(program.accumulates_image) + int(program.uses_image))
        staged = sum(1 for n in program.inputs + program.outputs if n not in direct)
        plan = make_plan(
            proj_data_info,
            segments,
            views,
            lanes=lanes,
            host_buffers_per_slot=staged,
            device_buffers_per_slot=n_io + extra,
            host_budget=host_budget,
            gpu_budget=gpu_budget,
            host_fixed_bytes=host_fixed,
            device_fixed_bytes=image_bytes * images_per_lane + padded_bytes * program.image_workspace,
            depth=depth,
            max_views_per_chunk=max_views_per_chunk,
            target_chunk_bytes=target_chunk_bytes,
            **shape,
        )
        return dataclasses.replace(plan, concurrency=streams)
