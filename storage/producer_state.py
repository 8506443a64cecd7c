"""Idempotent/transactional producer state per producer id (Kafka's ProducerStateManager).

For each producer id: its epoch, the metadata of its last 5 batches (first/last sequence,
first/last offset, max timestamp) for duplicate detection, the coordinator epoch and, while a
transaction is open, the offset of its first batch (for the last stable offset).

Rules (Kafka's ProducerAppendInfo, origin "client"):
- producer epoch older than the current one -> INVALID_PRODUCER_EPOCH;
- a new (bumped) epoch must start at sequence 0 -> else OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch: base sequence must be last sequence + 1 (wrapping at int32 max), unless the
  producer has no state (expired/deleted), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a batch whose (epoch, first sequence, last sequence) equals one of the last 5 is a
  duplicate: the append is skipped and the original offsets are returned;
- transaction markers (control batches) are only checked for a fenced epoch.
Transactions: the first offset of each producer's open transaction gives the first unstable
offset (LSO); an abort marker records an `AbortedTxn` (in memory; no `.txnindex` files yet)
for READ_COMMITTED fetches.
State is rebuilt from the log on load (no `.snapshot` files yet) and truncated with the log.
"""

from __future__ import annotations

import collections
import dataclasses

from protocol.errors import ErrorCode, KafkaError
from protocol.records import RecordBatch

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT32_MAX = 0x7FFFFFFF


@dataclasses.dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclasses.dataclass(frozen=True)
class AbortedTxn:
    """An aborted transaction: its producer, first data offset and abort marker offset
    (Kafka's AbortedTxn, the `.txnindex` entry, kept in memory here)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclasses.dataclass
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == batch.base_sequence and meta.last_seq == batch.last_sequence:
                return meta
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Producer id -> `ProducerStateEntry`. Called by the owning `Log` only."""

    def __init__(self):
        self.producers: dict[int, ProducerStateEntry] = {}
        self.aborted: list[AbortedTxn] = []  # in marker-offset order

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def check(self, batch: RecordBatch, pending: dict[int, tuple[int, int]] | None = None
              ) -> BatchMetadata | None:
        """Validate a client batch against the state (plus `pending`: pid -> (epoch, last
        seq) of earlier batches of the same append). Returns the duplicate's metadata, None
        if the batch is new, or raises KafkaError(INVALID_PRODUCER_EPOCH /
        OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if pending and pid in pending:
            cur_epoch, cur_last = pending[pid]
        elif entry is not None:
            dup = entry.find_duplicate(batch)
            if dup is not None:
                return dup
            cur_epoch, cur_last = entry.producer_epoch, entry.last_seq
        else:
            cur_epoch, cur_last = NO_PRODUCER_EPOCH, -1
        epoch, first_seq = batch.producer_epoch, batch.base_sequence
        if epoch < cur_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"producer {pid}: epoch {epoch} is older than {cur_epoch}")
        if batch.is_control:
            return None  # transaction markers carry no sequence numbers
        if epoch != cur_epoch:
            if first_seq != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid}: new epoch {epoch} must start at sequence 0, "
                                 f"got {first_seq}")
        elif cur_last >= 0 and not _in_sequence(cur_last, first_seq):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {pid}: sequence {first_seq} after {cur_last} "
                             f"(epoch {epoch})")
        if pending is not None:
            pending[pid] = (epoch, batch.last_sequence)
        return None

    def update(self, batch: RecordBatch) -> None:
        """Record an appended batch (offsets already assigned). Also used when loading the
        log and for follower appends (no checks)."""
        pid = batch.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if batch.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = batch.producer_epoch
        entry.last_timestamp = batch.max_timestamp
        if batch.is_control:
            try:
                marker = batch.control_record()
            except KafkaError:
                marker = None
            if marker is not None:
                entry.coordinator_epoch = marker.coordinator_epoch
                if not marker.is_commit and entry.current_txn_first_offset is not None:
                    self.aborted.append(AbortedTxn(pid, entry.current_txn_first_offset,
                                                   batch.base_offset))
            entry.current_txn_first_offset = None
            return
        if batch.base_sequence >= 0:
            entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence,
                                               batch.base_offset, batch.last_offset,
                                               batch.max_timestamp))
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset

    def check_and_update_producer(self, batch: RecordBatch) -> BatchMetadata | None:
        """`check` then, if not a duplicate, `update`. The batch must already carry its
        assigned offsets. Returns the duplicate's metadata (nothing recorded) or None."""
        dup = self.check(batch)
        if dup is None:
            self.update(batch)
        return dup

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open transaction (the last stable offset bound)."""
        offs = [e.current_txn_first_offset for e in self.producers.values()
                if e.current_txn_first_offset is not None]
        return min(offs) if offs else None

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int
                                     ) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of aborted transactions overlapping
        [start_offset, upper_bound_offset): the FetchResponse `AbortedTransactions` for
        READ_COMMITTED consumers."""
        return [(a.producer_id, a.first_offset) for a in self.aborted
                if a.last_offset >= start_offset and a.first_offset < upper_bound_offset]

    def truncate_end(self, end_offset: int) -> None:
        """Forget batches, open transactions and aborted markers at/after `end_offset`."""
        for pid, entry in list(self.producers.items()):
            while entry.batches and entry.batches[-1].last_offset >= end_offset:
                entry.batches.pop()
            if entry.current_txn_first_offset is not None and \
                    entry.current_txn_first_offset >= end_offset:
                entry.current_txn_first_offset = None
            if not entry.batches and entry.current_txn_first_offset is None:
                del self.producers[pid]
        self.aborted = [a for a in self.aborted if a.last_offset < end_offset]

    def truncate_start(self, start_offset: int) -> None:
        """Log start advanced: drop producers and aborted markers wholly before it."""
        for pid, e in list(self.producers.items()):
            if e.last_offset < start_offset and e.current_txn_first_offset is None:
                del self.producers[pid]
        self.aborted = [a for a in self.aborted if a.last_offset >= start_offset]

    def clear(self) -> None:
        self.producers.clear()
        self.aborted = []
