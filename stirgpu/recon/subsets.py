"""STIR's rules for OSMAPOSL's subsets, shared by :class:`~.osem.OSEM` and the ``.par`` runs."""

from __future__ import annotations

__all__ = ["subsets_problem"]


def subsets_problem(num_subsets: int, num_views: int) -> str | None:
    """Why STIR's OSMAPOSL refuses ``num_subsets`` subsets of ``num_views`` views, or None.

    ``OSMAPOSLReconstruction::set_up`` (STIR 6.5) refuses a number of subsets outside 1..views
    and unbalanced subsets (not every subset has as many views, for trivial symmetries: the
    number must divide the views) whatever ``use subset sensitivities`` says.  One message for
    the :class:`OSEM` class and the ``.par`` runs, so both refuse alike.
    """
    k, nv = int(num_subsets), int(num_views)
    if not 1 <= k <= nv:
        return f"number of subsets {k}: must be between 1 and the number of views ({nv})"
    if nv % k:
        divisors = ", ".join(str(d) for d in range(1, nv + 1) if nv % d == 0)
        return (
            f"{k} subsets of {nv} views are unbalanced (not every subset has as many views); STIR's "
            f"OSMAPOSL refuses this (with or without subset sensitivities): choose a number of subsets "
            f"that divides {nv} ({divisors})"
        )
    return None
