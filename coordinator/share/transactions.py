"""Which fetched offsets a share-partition must never deliver (KIP-932 "Reading transactional records").

- Control batches (commit/abort markers) are archived in both isolation levels: no consumer
  processes them, and keeping them out of `AcquiredRecords` spares a GAP acknowledgement.
- Under `share.isolation.level=read_committed`, data batches of aborted transactions are
  archived too. The caller fetched at most up to the last stable offset (LSO) and passes the
  fetch's aborted-transaction list (producer id, first offset), as a read_committed Fetch
  returns it. A transactional batch of producer P at offset o is aborted when an aborted
  transaction of P with first_offset <= o is open at o, i.e. P's abort marker (a control
  batch of P) comes after o — the same walk a read_committed consumer does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from coordinator.share.state import AbortedTransaction, FetchedBatch

__all__ = ["skipped_ranges"]


def skipped_ranges(
    batches: Sequence[FetchedBatch],
    aborted: Iterable[AbortedTransaction],
    read_committed: bool,
) -> list[tuple[int, int]]:
    """Inclusive offset ranges of `batches` to archive instead of deliver, in offset order."""
    out: list[tuple[int, int]] = []
    pending = sorted(aborted, key=lambda a: a.first_offset) if read_committed else []
    next_abort = 0
    open_aborts: set[int] = set()
    for batch in batches:
        if read_committed:
            while next_abort < len(pending) and pending[next_abort].first_offset <= batch.last_offset:
                open_aborts.add(pending[next_abort].producer_id)
                next_abort += 1
        if batch.is_control:
            # The marker closes the producer's transaction (commit or abort).
            open_aborts.discard(batch.producer_id)
            _add(out, batch.base_offset, batch.last_offset)
        elif read_committed and batch.is_transactional and batch.producer_id in open_aborts:
            _add(out, batch.base_offset, batch.last_offset)
    return out


def _add(out: list[tuple[int, int]], first: int, last: int) -> None:
    if out and out[-1][1] + 1 >= first:
        out[-1] = (out[-1][0], max(out[-1][1], last))
    else:
        out.append((first, last))
