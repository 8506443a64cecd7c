"""Acquiring fetched records for a member (KIP-932 "Fetching records"; Kafka's SharePartition.acquire).

`acquire_records` walks the fetched offset range [max(first fetched, SPSO), last fetched]
(under read_committed, at most LSO - 1) in offset order:

- Cached in-flight batches: Available records are re-acquired (delivery count + 1). A batch
  whose state is shared and lies wholly inside the range is taken whole; otherwise it is
  split per offset and its Available offsets are taken, consecutive ones with the same
  delivery count reported as one `AcquiredRecords`.
- Holes in [SPSO, SPEO) (offsets no batch covers after a load: records that were in flight
  when the previous leader stopped) and the range past SPEO are new records: delivery count
  1. Past SPEO they are capped by the lock window SPSO + max_record_locks (hard) and by
  `max_records`, rounded up to the end of the fetched batch holding the limit (soft).
  `batch_size` (ShareFetch v1 BatchSize) cuts new runs into in-flight batches of at most
  that many records, each its own `AcquiredRecords`.
- Offsets of control batches and, under read_committed, of aborted transactions are archived
  instead (`coordinator.share.transactions`), never handed out.
- If the fetch starts past SPEO (the offsets between no longer exist: compaction, log start
  moved), that gap is archived so the SPSO can pass it.

Only `SharePartition.acquire` calls this; it owns the lock timeout passed in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Protocol

from coordinator.share.config import SharePartitionConfig
from coordinator.share.in_flight import InFlightBatch, InFlightCache, InFlightState, RangeTimeout
from coordinator.share.state import AbortedTransaction, AcquiredRecords, FetchedBatch, RecordState
from coordinator.share.transactions import skipped_ranges


class SharePartition(Protocol):
    """What acquisition reads and moves of a `share_partition.SharePartition`: its in-flight
    window [`_start`, `_end`) and the batches in it."""

    cache: InFlightCache
    config: SharePartitionConfig
    _start: int
    _end: int

    def _add_batch(self, first: int, last: int, st: InFlightState) -> InFlightBatch: ...

__all__ = ["acquire_records"]

_AVAILABLE = RecordState.AVAILABLE
_ACQUIRED = RecordState.ACQUIRED
_ARCHIVED = RecordState.ARCHIVED


class _Walk:
    """State of one acquisition: the partition, inputs, and what was taken so far."""

    __slots__ = ("sp", "member_id", "batches", "bases", "skips", "lock", "batch_size", "out", "count")

    def __init__(self, sp, member_id, batches, skips, lock, batch_size) -> None:
        self.sp = sp
        self.member_id = member_id
        self.batches = batches
        self.bases = [b.base_offset for b in batches]
        self.skips = skips
        self.lock = lock
        self.batch_size = batch_size if batch_size and batch_size > 0 else None
        self.out: list[AcquiredRecords] = []
        self.count = 0

    def skipped(self, offset: int) -> bool:
        i = bisect.bisect_right(self.skips, (offset, float("inf"))) - 1
        return i >= 0 and self.skips[i][0] <= offset <= self.skips[i][1]

    def skips_overlap(self, first: int, last: int) -> bool:
        return any(lo <= last and hi >= first for lo, hi in self.skips)

    def fetched_batch_end(self, offset: int) -> int:
        """Last offset of the fetched batch holding `offset` (the offset itself if none)."""
        i = bisect.bisect_right(self.bases, offset) - 1
        if i >= 0 and self.batches[i].last_offset >= offset:
            return self.batches[i].last_offset
        return offset

    def lock_state(self, st: InFlightState) -> None:
        st.state = _ACQUIRED
        st.member_id = self.member_id
        st.lock = self.lock
        self.lock.holders += 1


def acquire_records(
    sp: SharePartition,
    member_id: str,
    batches: Sequence[FetchedBatch],
    max_records: int,
    batch_size: int | None,
    last_stable_offset: int | None,
    aborted_transactions: Iterable[AbortedTransaction],
    lock: RangeTimeout,
) -> list[AcquiredRecords]:
    """Acquire for `member_id`; returns the AcquiredRecords (see the module docstring)."""
    read_committed = sp.config.read_committed
    first = max(batches[0].base_offset, sp._start)
    last = batches[-1].last_offset
    if read_committed and last_stable_offset is not None:
        last = min(last, last_stable_offset - 1)
    if last < first:
        return []
    walk = _Walk(sp, member_id, batches,
                 skipped_ranges(batches, aborted_transactions, read_committed), lock, batch_size)
    if first > sp._end:
        if sp.cache:
            sp._add_batch(sp._end, first - 1, InFlightState(_ARCHIVED, 0))
        else:
            sp._start = first
        sp._end = first
    pos = first
    for batch in sp.cache.overlapping(first, last):
        if walk.count >= max_records:
            return walk.out
        if batch.first_offset > pos:
            _take_new(walk, pos, min(batch.first_offset - 1, last), max_records)
            if walk.count >= max_records:
                return walk.out
        _take_cached(walk, batch, max(pos, batch.first_offset), last)
        pos = batch.last_offset + 1
    if walk.count < max_records and pos <= last:
        _take_new(walk, pos, last, max_records)
    return walk.out


def _take_cached(walk: _Walk, batch: InFlightBatch, lo: int, hi: int) -> None:
    sp = walk.sp
    lo = max(lo, sp._start)
    if batch.offset_states is None:
        st = batch.batch_state
        assert st is not None
        if st.state is not _AVAILABLE or st.pending:
            return
        if (batch.first_offset >= lo and batch.last_offset <= hi
                and not walk.skips_overlap(batch.first_offset, batch.last_offset)):
            st.delivery_count += 1
            walk.lock_state(st)
            walk.out.append(AcquiredRecords(batch.first_offset, batch.last_offset, st.delivery_count))
            walk.count += batch.last_offset - batch.first_offset + 1
            return
        batch.split()
    run: list[int] | None = None  # [first, last, delivery_count]
    for off, _hi, st in batch.states(lo, hi):
        if st.state is not _AVAILABLE or st.pending or walk.skipped(off):
            if st.state is _AVAILABLE and not st.pending:
                st.state = _ARCHIVED  # a control record / aborted: never delivered
            run = _flush(walk, run)
            continue
        st.delivery_count += 1
        walk.lock_state(st)
        walk.count += 1
        if run is not None and run[1] + 1 == off and run[2] == st.delivery_count:
            run[1] = off
        else:
            run = _flush(walk, run)
            run = [off, off, st.delivery_count]
    _flush(walk, run)


def _flush(walk: _Walk, run: list[int] | None) -> None:
    if run is not None:
        walk.out.append(AcquiredRecords(run[0], run[1], run[2]))
    return None


def _take_new(walk: _Walk, lo: int, hi: int, max_records: int) -> None:
    """Acquire never-delivered records [lo, hi] within the limits."""
    sp = walk.sp
    if lo >= sp._end:
        hi = min(hi, sp._start + sp.config.max_record_locks - 1)
    remaining = max_records - walk.count
    if remaining <= 0 or hi < lo:
        return
    limit = lo + remaining - 1
    if limit < hi:
        hi = min(hi, walk.fetched_batch_end(limit))
    seg = lo
    for s_lo, s_hi in walk.skips:
        if s_hi < seg:
            continue
        if s_lo > hi:
            break
        if seg < s_lo:
            _new_acquired(walk, seg, s_lo - 1)
        arch_hi = min(s_hi, hi)
        sp._add_batch(max(s_lo, seg), arch_hi, InFlightState(_ARCHIVED, 0))
        seg = arch_hi + 1
        if seg > hi:
            return
    if seg <= hi:
        _new_acquired(walk, seg, hi)


def _new_acquired(walk: _Walk, lo: int, hi: int) -> None:
    size = walk.batch_size or (hi - lo + 1)
    for c_lo in range(lo, hi + 1, size):
        c_hi = min(c_lo + size - 1, hi)
        st = InFlightState(_ACQUIRED, 1)
        walk.lock_state(st)
        walk.sp._add_batch(c_lo, c_hi, st)
        walk.out.append(AcquiredRecords(c_lo, c_hi, 1))
        walk.count += c_hi - c_lo + 1
