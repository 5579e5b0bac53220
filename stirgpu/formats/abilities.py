"""What a projection-data store can do: :class:`StoreAbilities`, declared by every store.

Callers (the projectors, the execution engine, the CLI) decide by a store's ``abilities``,
never by its type or by looking for attributes: a store says what it can do, in the spirit of
zarr v3's store ABC, whose stores declare ``supports_writes`` and the like.  A store that does
not know an answer gives the safe one: the one whose failure is a clear error and never lost
or wrong data.
"""

from __future__ import annotations

import dataclasses
import enum

from ..errors import StoreAbilityError

__all__ = ["Residence", "StoreAbilities"]


class Residence(enum.Enum):
    """Where a store's bins are."""

    #: in this process's memory (numpy arrays)
    MEMORY = "in memory"
    #: in a file, read and written on demand (the page cache matters)
    DISK = "on disk"
    #: computed from other stores on every read; nothing held
    COMPUTED = "computed"
    #: held by another library's object (a STIR ProjData, in memory or in a file: it does not say)
    FOREIGN = "held by another library"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreAbilities:
    """What a store can do *now* (``store.abilities``; it may change over the store's life: a
    new file is abortable until committed, a closed store is neither readable nor writable).

    Every field is stated by the store; none has a default.

    ``readable``
        Reads (``read_views``, ``get_viewgram``, ``as_array``, ...) give the store's values.
        False for a template or a closed file.  The projectors call ``check_readable()`` on
        every input before any work; it raises :class:`~stirgpu.errors.StoreAbilityError`
        naming the store (and its file) when this is False.
    ``writable``
        Writes (``write_views``, ``set_viewgram``, ``fill``, ...) store values that later reads
        return.  False for a file opened read-only, a template, a closed file, a computed view,
        viewgrams the caller gave read-only, a STIR ProjData lent as input; every write call
        then raises StoreAbilityError without changing a value, and the projectors refuse such
        an output before any work (``check_writable()``).  A STIR ProjData says True: STIR's
        Python API does not tell whether its stream was opened for writing, and a refused
        ``set_viewgram`` is a StirGpuError naming it, before any value changes.
    ``parallel_reads``
        Reads from several threads run at the same time, none waiting for another (positioned
        file reads, numpy copies): the engine splits each chunk's reads over its I/O threads.
        False: the store runs its calls one at a time (a STIR ProjData shares one stream), so
        splitting gains nothing.  Either way a store accepts calls from several threads: each
        of the engine's lanes reads and writes from threads of its own.
    ``parallel_writes``
        The same for writes of disjoint views (the engine's writers never write one view twice).
    ``write_behind``
        ``start_writeback()`` starts writing what was written so far to the disk now
        (asynchronously); the data are complete on disk at commit / ``close()``, as without it.
        The projectors call it after every 64 MiB written to an output, so disk time overlaps
        the projection instead of following it.  False: ``start_writeback()`` raises
        StoreAbilityError.
    ``abortable``
        The store holds new data not yet committed: ``abort()`` discards them -- no file
        appears under the output's name and a file it was to replace is left as it was -- and
        closes the store.  The projectors abort such an output when its projection fails (a
        store updated in place keeps what was written: writes in place cannot be undone).
        False: ``abort()`` raises StoreAbilityError (except on a store already aborted, where
        it does nothing).
    ``template``
        Geometry only, no values (a header whose data file is absent or empty): neither
        readable nor writable; reading it is a StoreAbilityError saying it is a template.
    ``host_memory``
        ``host_array(segment, timing_pos)`` is the store's own float32 view-order host memory
        (the data themselves) for every segment and timing position, each apart from the
        others: the engine page-locks it and copies chunks straight between it and the GPUs
        (TOF data: one copy per part and timing position), with no staging copy.  False:
        ``host_array`` returns None.
    ``residence``
        Where the bins are (:class:`Residence`).  Informational: the engine decides by the
        fields above; reports and messages say it.
    """

    readable: bool
    writable: bool
    parallel_reads: bool
    parallel_writes: bool
    write_behind: bool
    abortable: bool
    template: bool
    host_memory: bool
    residence: Residence

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "residence":
                if not isinstance(v, Residence):
                    raise StoreAbilityError(f"StoreAbilities: residence must be a Residence, not {v!r}")
            elif not isinstance(v, bool):
                raise StoreAbilityError(f"StoreAbilities: {f.name} must be True or False, not {v!r}")
        implied = [
            ("parallel_reads", "readable"),
            ("parallel_writes", "writable"),
            ("write_behind", "writable"),
            ("abortable", "writable"),
            ("host_memory", "readable"),
            ("host_memory", "writable"),
        ]
        for ability, needs in implied:
            if getattr(self, ability) and not getattr(self, needs):
                raise StoreAbilityError(f"StoreAbilities: {ability} needs {needs}")
        if self.template and (self.readable or self.writable):
            raise StoreAbilityError("StoreAbilities: a template has no values (neither readable nor writable)")
        if self.host_memory and self.residence is not Residence.MEMORY:
            raise StoreAbilityError("StoreAbilities: host_memory needs residence MEMORY")

    @classmethod
    def computed_from(cls, *sources: StoreAbilities) -> StoreAbilities:
        """A read-only view computed from stores with these abilities: readable (and in
        parallel) when every source is, a template's view when one source is a template."""
        return cls(
            readable=all(s.readable for s in sources),
            writable=False,
            parallel_reads=all(s.parallel_reads for s in sources),
            parallel_writes=False,
            write_behind=False,
            abortable=False,
            template=any(s.template for s in sources),
            host_memory=False,
            residence=Residence.COMPUTED,
        )

    def __str__(self) -> str:
        said = [f.name.replace("_", " ") for f in dataclasses.fields(self) if getattr(self, f.name) is True]
        return ", ".join([*said, self.residence.value]) if said else self.residence.value
