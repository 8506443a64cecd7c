"""The transaction side of `storage.log.Log` (a mixin): the last stable offset, aborted
transactions for READ_COMMITTED fetches, KIP-890 verification guards and the producer state
reload after a truncation (Kafka's UnifiedLog transaction methods, KIP-98).

Byte formats are in storage.transaction_index (`.txnindex`) and storage.producer_snapshot
(`.snapshot`). Uses the Log's `segments`, `_floor_segment`, `producer_state`,
`_high_watermark`, `log_end_offset`, `recovery_point` and `time_ms`.
"""

from __future__ import annotations

import itertools

from storage.loader import replay_producer_state
from storage.producer_state import VerificationGuard

#: Unique, increasing stamps for "something changed" markers written from the loop and from
#: executor threads: `next()` is atomic under the GIL, and a value is stored at most once,
#: so a reader that saw stamp s sees a different one after any later change, even when a
#: slower thread stores an older stamp last (a plain ``+= 1`` could repeat a value).
CHANGE_STAMPS = itertools.count(1)


class LogTransactions:
    """Mixin of `Log`; see the module docstring."""

    #: a fresh stamp after every high-watermark change (read by the log manager's periodic
    #: checkpoint, which skips gathering while it stays put); see `CHANGE_STAMPS`
    _hw_changes = 0

    @staticmethod
    def high_watermark_changes() -> int:
        return LogTransactions._hw_changes

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        """Set by the partition (replication) code; transactions whose marker it passed stop
        bounding the last stable offset."""
        if value != self._high_watermark:
            self._high_watermark = value
            LogTransactions._hw_changes = next(CHANGE_STAMPS)
        if self.producer_state.unreplicated:
            self.producer_state.on_high_watermark_updated(value)

    @property
    def last_stable_offset(self) -> int:
        """LSO: the high watermark, or the first offset of the earliest open (or completed
        but not yet replicated) transaction if that is lower (READ_COMMITTED consumers read
        up to here)."""
        first = self.producer_state.first_unstable_offset()
        hw = self._high_watermark
        return hw if first is None or first > hw else first

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions overlapping [start_offset,
        upper_bound_offset), from the `.txnindex` of the segment holding `start_offset`
        onwards (FetchResponse `AbortedTransactions`, Kafka's collectAbortedTransactions)."""
        return [(t.producer_id, t.first_offset)
                for t in self.aborted_transactions_in(start_offset, upper_bound_offset)]

    def aborted_transactions_in(self, start_offset: int, upper_bound_offset: int) -> list:
        """The `.txnindex` entries (AbortedTxn) overlapping [start_offset,
        upper_bound_offset), searching forward until an entry's last stable offset reaches
        the bound (the cleaner uses them whole)."""
        out = []
        segments = list(self.segments)
        i = max(self._floor_segment(start_offset), 0)
        for seg in segments[i:]:
            found, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def fetch_upper_bound(self, start_offset: int) -> int:
        """The bound Kafka uses for a read's aborted transactions: the next segment's base
        offset, else the log end offset."""
        i = self._floor_segment(start_offset)
        if 0 <= i < len(self.segments) - 1:
            return self.segments[i + 1].base_offset
        return self.log_end_offset

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int,
                                             epoch: int) -> VerificationGuard | None:
        """KIP-890: None when the producer has an open transaction here, else the guard to
        pass to `append_as_leader` once the coordinator confirmed the partition."""
        return self.producer_state.maybe_start_verification(producer_id, sequence, epoch,
                                                            self.time_ms())

    def _reload_producer_state(self) -> None:
        """After a truncation: the newest snapshot at or below the new log end, then the
        batches after it (Kafka's truncateAndReload + loadProducerState); transactions whose
        marker was cut are open again."""
        ps = self.producer_state
        leo = self.log_end_offset
        start = self.segments[0].base_offset
        snap = ps.load_snapshot(leo, min_offset=start)
        replay_producer_state(self, ps, snap if snap is not None else start, leo)
        ps.on_high_watermark_updated(min(self._high_watermark, leo))

    def _retain_snapshots(self) -> None:
        """Keep the producer snapshots a crash could need: those from the segment holding the
        recovery point on, plus the newest one before it."""
        offs = self.producer_state.snapshot_offsets
        if len(offs) <= 2:
            return
        i = self._floor_segment(self.recovery_point)
        keep_from = self.segments[i].base_offset if i >= 0 else 0
        older = [o for o in offs if o < keep_from]
        if len(older) > 1:
            self.producer_state.delete_snapshots_before(older[-1])
