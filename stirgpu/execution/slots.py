"""Slots: the chunk buffers of each lane, allocated for a plan and kept from call to call.

A lane has ``plan.depth`` slots, so at most that many of its chunks are in flight.  A slot
holds one chunk's buffers: ``host`` (pinned on GPUs; one per store that is staged, not copied
directly) and ``dev`` (the program's inputs, outputs and scratch, flat float32; on CPU lanes
the host buffers themselves), and on GPUs the CUDA events of the chunk's stages.  Slots that fit
a new plan are used again (repeated calls -- OSEM subiterations -- allocate nothing), unless they
are far larger than it needs.

Imports: numpy, :mod:`.plan` (the plan's sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .plan import Plan

if TYPE_CHECKING:
    from ..array_types import Array

__all__ = ["Slot", "SlotKeeper", "EVENTS"]

#: CUDA events of a chunk's stages: copy-in start/end, compute start/end, copy-out start/end
EVENTS = ("h2d0", "h2d1", "c0", "c1", "d0", "d1")


class Slot:
    """Chunk buffers of one slot: ``host`` (pinned on GPUs; one per staged store) and ``dev``
    flat float32 arrays, and on GPUs the CUDA events of the chunk's stages."""

    def __init__(self, lane, capacity: int, n_host: int, n_dev: int):
        self.capacity = int(capacity)
        self.host: list[np.ndarray] = [lane.alloc_host(capacity) for _ in range(n_host)]
        self.dev: Sequence[Array] = (
            self.host if lane.shares_host_buffers else [lane.alloc_device(capacity) for _ in range(n_dev)]
        )
        if lane.shares_host_buffers:
            self.events = None
        else:
            # the stage events of the slot's chunk, recorded again for every chunk (the writer
            # has read them before it hands the slot back)
            self.events = {k: lane.new_event() for k in EVENTS}
        self._views: dict[tuple[int, int], Array] = {}

    def dev_view(self, i: int, n: int) -> Array:
        """The first ``n`` elements of device buffer ``i``, made once per size (slicing a cupy
        array costs microseconds of Python, several times per chunk)."""
        v = self._views.get((i, n))
        if v is None:
            if len(self._views) >= 256:  # chunk sizes of many different plans
                self._views.clear()
            v = self._views[(i, n)] = self.dev[i][:n]
        return v

    @property
    def device_bytes(self) -> int:
        """Device memory of the slot's chunk buffers (0 where they are the host buffers)."""
        return 4 * self.capacity * (len(self.dev) if self.dev is not self.host else 0)


class SlotKeeper:
    """The slots of every lane of an engine, kept between calls."""

    def __init__(self):
        self._slots: dict[int, list[Slot]] = {}
        self._fit: dict[int, tuple] = {}  # per lane: the (plan, n_host, n_dev) its slots last fitted

    def clear(self) -> None:
        self._slots.clear()
        self._fit.clear()

    def device_bytes(self, k: int) -> int:
        """Device memory held by lane ``k``'s slots."""
        return sum(s.device_bytes for s in self._slots.get(k, []))

    def for_lane(self, k: int, lane: Any, plan: Plan, n_host: int, n_dev: int) -> list[Slot]:
        """Lane ``k``'s ``plan.depth`` slots with ``n_host`` host and ``n_dev`` device buffers
        of the plan's capacity: the kept ones when they fit, else new ones."""
        cached = self._slots.get(k)
        fit = self._fit.get(k)
        if cached is not None and fit is not None and fit[0] is plan and fit[1:] == (n_host, n_dev):
            return cached  # checked for this very plan already (OSEM asks for the same plans)
        capacity = plan.buffer_bytes // 4
        if (
            cached is not None
            and len(cached) == plan.depth
            and all(s.capacity >= capacity and len(s.host) >= n_host and len(s.dev) >= n_dev for s in cached)
            and cached[0].capacity <= 2 * capacity
        ):  # do not sit on far too much memory
            self._fit[k] = (plan, n_host, n_dev)
            return cached
        self._slots.pop(k, None)
        self._fit.pop(k, None)
        lane.free_cached_memory()
        with lane.activate():
            slots = [Slot(lane, capacity, n_host, n_dev) for _ in range(plan.depth)]
        self._slots[k] = slots
        self._fit[k] = (plan, n_host, n_dev)
        return slots
