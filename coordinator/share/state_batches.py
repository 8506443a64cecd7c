"""Merging persisted state batches (the job of Kafka's PersisterStateBatchCombiner).

A share-partition's durable state is a set of non-overlapping `StateBatch` runs at or above
the share-partition start offset (SPSO). A write or a ShareUpdate carries new runs that may
overlap the old ones; the newer run wins offset by offset. `overlay` applies a sequence of
runs in order (later wins), drops everything below `start_offset`, trims runs straddling
it, and coalesces adjacent runs with the same state and delivery count, so snapshots stay
small. Pure functions over immutable batches: one linear merge when the updates are sorted
and disjoint (what a share-partition writes), O(n) per update run otherwise.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from coordinator.share.state import StateBatch

__all__ = ["coalesce", "overlay"]


def overlay(
    base: Sequence[StateBatch], updates: Iterable[StateBatch], start_offset: int = -1
) -> list[StateBatch]:
    """`base` with each of `updates` painted over it in order; result sorted, disjoint.

    `start_offset` -1 keeps every offset; otherwise offsets below it are dropped.
    """
    runs = _clip(base, start_offset)  # sorted, disjoint
    upd = _clip([u for u in updates if u.last_offset >= u.first_offset], start_offset,
                keep_order=True)
    if not _sorted_disjoint(upd):
        resolved: list[StateBatch] = []
        for u in upd:
            resolved = _paint(resolved, u)
        upd = resolved
    return coalesce(_merge(runs, upd))


def coalesce(runs: Sequence[StateBatch]) -> list[StateBatch]:
    """Join adjacent runs (sorted, disjoint) that share state and delivery count."""
    out: list[StateBatch] = []
    for run in runs:
        if out:
            prev = out[-1]
            if (prev.last_offset + 1 == run.first_offset
                    and prev.delivery_state == run.delivery_state
                    and prev.delivery_count == run.delivery_count):
                out[-1] = StateBatch(prev.first_offset, run.last_offset, run.delivery_state,
                                     run.delivery_count)
                continue
        out.append(run)
    return out


def _clip(runs: Iterable[StateBatch], start_offset: int, keep_order: bool = False) -> list[StateBatch]:
    out = list(runs) if keep_order else sorted(runs, key=lambda b: b.first_offset)
    if start_offset < 0:
        return out
    clipped = []
    for b in out:
        if b.last_offset < start_offset:
            continue
        if b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        clipped.append(b)
    return clipped


def _sorted_disjoint(runs: Sequence[StateBatch]) -> bool:
    return all(a.last_offset < b.first_offset for a, b in zip(runs, runs[1:], strict=False))


def _merge(base: list[StateBatch], upd: list[StateBatch]) -> list[StateBatch]:
    """Sorted, disjoint `base` overwritten by sorted, disjoint `upd`, in one sweep."""
    if not upd:
        return base
    if not base:
        return upd
    out: list[StateBatch] = []
    i = 0
    for u in upd:
        # Base runs wholly before u survive; the part of one that starts before u is cut.
        while i < len(base) and base[i].first_offset < u.first_offset:
            b = base[i]
            if b.last_offset < u.first_offset:
                out.append(b)
                i += 1
                continue
            out.append(StateBatch(b.first_offset, u.first_offset - 1, b.delivery_state,
                                  b.delivery_count))
            break
        out.append(u)
        # Skip what u covers; keep the tail of a run that outlasts it for the next step.
        while i < len(base) and base[i].first_offset <= u.last_offset:
            b = base[i]
            if b.last_offset > u.last_offset:
                base[i] = StateBatch(u.last_offset + 1, b.last_offset, b.delivery_state,
                                     b.delivery_count)
                break
            i += 1
    out.extend(base[i:])
    return out


def _paint(runs: list[StateBatch], upd: StateBatch) -> list[StateBatch]:
    """Replace the offsets `upd` covers; `runs` sorted and disjoint, result too."""
    firsts = [b.first_offset for b in runs]
    # First run that may overlap: the one starting at or before upd.first_offset.
    lo = max(bisect.bisect_right(firsts, upd.first_offset) - 1, 0)
    hi = bisect.bisect_right(firsts, upd.last_offset)
    middle: list[StateBatch] = []
    for b in runs[lo:hi]:
        if b.last_offset < upd.first_offset or b.first_offset > upd.last_offset:
            middle.append(b)
            continue
        if b.first_offset < upd.first_offset:
            middle.append(StateBatch(b.first_offset, upd.first_offset - 1, b.delivery_state,
                                     b.delivery_count))
        if b.last_offset > upd.last_offset:
            middle.append(StateBatch(upd.last_offset + 1, b.last_offset, b.delivery_state,
                                     b.delivery_count))
    middle.append(upd)
    middle.sort(key=lambda b: b.first_offset)
    return runs[:lo] + middle + runs[hi:]
