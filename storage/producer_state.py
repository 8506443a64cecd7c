"""Idempotent/transactional producer state per producer id (Kafka's ProducerStateManager and
ProducerAppendInfo, KIP-98 / KIP-890).

For each producer id: its epoch, the metadata of its last 5 batches (first/last sequence,
first/last offset, max timestamp) for duplicate detection, the coordinator epoch of its last
transaction marker and, while a transaction is open, the offset of its first batch.

Validation of client batches (`check`, Kafka's ProducerAppendInfo, origin "client"):
- producer epoch older than the current one -> INVALID_PRODUCER_EPOCH;
- a new (bumped) epoch must start at sequence 0 -> else OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch: base sequence must be last sequence + 1 (wrapping at int32 max), unless the
  producer has no state (expired/deleted), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a batch whose (epoch, first sequence, last sequence) equals one of the last 5 is a
  duplicate: the append is skipped and the original offsets are returned;
- a non-transactional batch while the producer's transaction is open -> INVALID_TXN_STATE;
- KIP-890 part 1: with `verification_enabled`, a transactional batch that would start a
  transaction must carry the `VerificationGuard` created by `maybe_start_verification` when
  the leader asked the coordinator (else INVALID_TXN_STATE); a batch with a sequence above
  the lowest one being verified -> OUT_OF_ORDER_SEQUENCE_NUMBER;
- transaction markers (control batches, origin "coordinator") are checked for a fenced
  producer epoch (INVALID_PRODUCER_EPOCH) and an older coordinator epoch than the last
  marker's (TRANSACTION_COORDINATOR_FENCED).
Coordinator-origin data batches (transactional offset commits) skip the sequence checks.

Transactions (the last stable offset): `ongoing` maps each open transaction's first offset to
it (ascending); a marker completes it (`update` returns a `CompletedTxn`, the Log writes an
ABORT to the segment's `.txnindex` with `last_stable_offset_after`, then calls
`complete_txn`) and it moves to `unreplicated` until the high watermark passes its marker
(`on_high_watermark_updated`). `first_unstable_offset()` is the smallest first offset of
either (O(1)); the Log's LSO is min(that, HW).

Snapshots: `take_snapshot(offset)` writes `<offset>.snapshot` (storage.producer_snapshot);
`load_snapshot(max_offset)` restores the newest one at or below `max_offset`, deleting
corrupt ones. Called by the owning `Log` only (event-loop thread; load in the executor).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os

from protocol.errors import ErrorCode, KafkaError
from protocol.records import RecordBatch
from storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
INT32_MAX = 0x7FFFFFFF
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclasses.dataclass
class TxnMetadata:
    """An open (or completed but not yet replicated) transaction of one producer."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None  # the marker's offset once completed


@dataclasses.dataclass(frozen=True)
class CompletedTxn:
    """A marker ended a producer's transaction that had data (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker
    is_aborted: bool


class VerificationGuard:
    """Identity token of one KIP-890 verification round (Kafka's VerificationGuard)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"VerificationGuard@{id(self):x}"


@dataclasses.dataclass
class VerificationStateEntry:
    guard: VerificationGuard
    timestamp: int
    lowest_sequence: int
    epoch: int


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

    def to_snapshot(self) -> SnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return SnapshotEntry(
            self.producer_id, self.producer_epoch, last.last_seq if last else -1,
            last.last_offset if last else -1,
            (last.last_seq - last.first_seq) if last else 0, self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset)

    @classmethod
    def from_snapshot(cls, s: SnapshotEntry) -> ProducerStateEntry:
        e = cls(s.producer_id, s.epoch, coordinator_epoch=s.coordinator_epoch,
                current_txn_first_offset=None if s.current_txn_first_offset < 0
                else s.current_txn_first_offset, last_timestamp=s.timestamp)
        if s.last_offset >= 0:
            first_seq = s.last_sequence - s.offset_delta
            e.batches.append(BatchMetadata(first_seq, s.last_sequence,
                                           s.last_offset - s.offset_delta, s.last_offset,
                                           s.timestamp))
        return e


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class _NoEntries(dict):
    """The shared empty table of every ProducerStateManager that has no entries of a kind
    yet (most partitions never see an idempotent producer, and four empty dicts per log cost
    ~300 bytes at 100,000 logs): reads, `pop` and `clear` work; a write raises instead of
    reaching another log's state (the manager swaps in its own dict before writing)."""

    __slots__ = ()

    def _read_only(self, *args, **kwargs):
        raise TypeError("the shared empty producer-state table is read-only")

    __setitem__ = setdefault = update = __ior__ = _read_only


_NO_ENTRIES: dict = _NoEntries()


class ProducerStateManager:
    """Producer id -> `ProducerStateEntry`, open transactions, snapshots (module docstring).

    `dir_path` None: no snapshots (tools, tests)."""

    def __init__(self, dir_path: str | None = None, *, verification_enabled: bool = False,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 names: list[str] | None = None):
        self.dir = dir_path
        # each table is the shared `_NO_ENTRIES` until its first write
        self.producers: dict[int, ProducerStateEntry] = _NO_ENTRIES
        self.ongoing: dict[int, TxnMetadata] = _NO_ENTRIES  # first offset -> open txn, ascending
        #: completed, marker >= HW, ascending
        self.unreplicated: dict[int, TxnMetadata] = _NO_ENTRIES
        self.verification_states: dict[int, VerificationStateEntry] = _NO_ENTRIES
        self.verification_enabled = verification_enabled
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.snapshot_offsets: list[int] = list_snapshots(dir_path, names) if dir_path \
            else []
        self.unsynced_snapshots: list[str] = []

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def has_ongoing_transaction(self, producer_id: int, epoch: int | None = None) -> bool:
        e = self.producers.get(producer_id)
        return e is not None and e.current_txn_first_offset is not None and \
            (epoch is None or e.producer_epoch == epoch)

    # --- validation ------------------------------------------------------------------------
    def check(self, batch: RecordBatch, pending: dict[int, tuple[int, int, bool]] | None = None,
              origin: str = "client", verification_guard: VerificationGuard | None = None
              ) -> BatchMetadata | None:
        """Validate a batch against the state (plus `pending`: pid -> (epoch, last seq,
        transaction open) after earlier batches of the same append). Returns the duplicate's
        metadata, None if the batch is new, or raises KafkaError(INVALID_PRODUCER_EPOCH,
        OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE, TRANSACTION_COORDINATOR_FENCED)."""
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if pending and pid in pending:
            cur_epoch, cur_last, in_txn = pending[pid]
        elif entry is not None:
            if origin == "client":
                dup = entry.find_duplicate(batch)
                if dup is not None:
                    return dup
            cur_epoch, cur_last = entry.producer_epoch, entry.last_seq
            in_txn = entry.current_txn_first_offset is not None
        else:
            cur_epoch, cur_last, in_txn = NO_PRODUCER_EPOCH, -1, False
        epoch, first_seq = batch.producer_epoch, batch.base_sequence
        if epoch < cur_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"producer {pid}: epoch {epoch} is older than {cur_epoch}")
        if batch.is_control:
            if entry is not None and not (pending and pid in pending):
                self._check_coordinator_epoch(batch, entry)
            if pending is not None:
                pending[pid] = (epoch, cur_last, False)
            return None
        if origin == "client":
            vstate = self.verification_states.get(pid)
            if vstate is not None and first_seq > vstate.lowest_sequence and \
                    batch.is_transactional and not in_txn:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid}: sequence {first_seq} is above the earliest "
                                 f"sequence being verified ({vstate.lowest_sequence})")
            if epoch != cur_epoch:
                if first_seq != 0 and cur_epoch != NO_PRODUCER_EPOCH:
                    raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {pid}: new epoch {epoch} must start at "
                                     f"sequence 0, got {first_seq}")
            elif cur_last >= 0 and not _in_sequence(cur_last, first_seq):
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {pid}: sequence {first_seq} after {cur_last} "
                                 f"(epoch {epoch})")
        if in_txn and not batch.is_transactional:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"producer {pid}: non-transactional batch while its transaction "
                             "is open")
        if batch.is_transactional and not in_txn and origin != "replication" and \
                self.verification_enabled:
            vstate = self.verification_states.get(pid)
            if verification_guard is None or vstate is None or \
                    vstate.guard is not verification_guard:
                raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                 f"producer {pid}: record was not part of an ongoing "
                                 "transaction (partition not verified with the coordinator)")
        if pending is not None:
            pending[pid] = (epoch, batch.last_sequence, in_txn or batch.is_transactional)
        return None

    @staticmethod
    def _check_coordinator_epoch(batch: RecordBatch, entry: ProducerStateEntry) -> None:
        try:
            marker = batch.control_record()
        except KafkaError:
            return
        if marker is not None and entry.coordinator_epoch > marker.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"producer {batch.producer_id}: coordinator epoch "
                             f"{marker.coordinator_epoch} is older than "
                             f"{entry.coordinator_epoch}")

    # --- KIP-890 verification --------------------------------------------------------------
    def maybe_start_verification(self, producer_id: int, sequence: int, epoch: int,
                                 now_ms: int) -> VerificationGuard | None:
        """None when the producer already has an open transaction at this epoch (no
        verification needed); else the guard of its (new or updated) verification state. A
        batch of a newer epoch is verified even while an older transaction is open: with
        transaction version 2 each transaction has its own epoch, and the previous one's
        marker may not have arrived yet (Kafka checks the epoch too)."""
        if self.has_ongoing_transaction(producer_id, epoch):
            return None
        v = self.verification_states.get(producer_id)
        if v is None:
            if self.verification_states is _NO_ENTRIES:
                self.verification_states = {}
            v = self.verification_states[producer_id] = VerificationStateEntry(
                VerificationGuard(), now_ms, sequence, epoch)
        elif epoch > v.epoch:
            v.epoch, v.lowest_sequence = epoch, sequence
        elif epoch == v.epoch and 0 <= sequence < v.lowest_sequence:
            v.lowest_sequence = sequence
        return v.guard

    def verification_guard(self, producer_id: int) -> VerificationGuard | None:
        v = self.verification_states.get(producer_id)
        return v.guard if v is not None else None

    def clear_verification_state(self, producer_id: int) -> None:
        self.verification_states.pop(producer_id, None)

    # --- updates -----------------------------------------------------------------------------
    def _guard_outlives(self, batch: RecordBatch, entry: ProducerStateEntry) -> bool:
        """True when `batch` is the marker of a transaction older than the one the producer's
        verification guard was made for: with transaction version 2 the next transaction's
        first batch (epoch e + 1) can reach the leader before the marker (also at e + 1) of
        the open one (data at e), and the coordinator adds the partition as soon as that
        marker is written; spending the guard there would refuse the verified batch with
        INVALID_TXN_STATE. A guard of the transaction the marker ends (epoch <= its data
        epoch, or no transaction open here) is spent as before."""
        if not batch.is_control or entry.current_txn_first_offset is None:
            return False
        v = self.verification_states.get(batch.producer_id)
        return v is not None and v.epoch > entry.producer_epoch and \
            v.epoch >= batch.producer_epoch

    def update(self, batch: RecordBatch) -> CompletedTxn | None:
        """Record an appended batch (offsets already assigned); also used when loading the
        log and for follower appends (no checks). Returns the transaction a marker completed
        (only for a transaction with data), which the caller passes to `complete_txn`."""
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            if self.producers is _NO_ENTRIES:
                self.producers = {}
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if batch.is_transactional and not self._guard_outlives(batch, entry):
            # a marker ends the transaction, a data batch opened it: either way the
            # verification guard is spent (Kafka's updateProducers; no stale guard survives
            # an abort to start the next transaction - the KIP-890 ABA case)
            self.verification_states.pop(pid, None)
        if batch.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = batch.producer_epoch
        entry.last_timestamp = batch.max_timestamp
        if batch.is_control:
            completed = None
            try:
                marker = batch.control_record()
            except KafkaError:
                marker = None
            if marker is not None:
                entry.coordinator_epoch = marker.coordinator_epoch
                if entry.current_txn_first_offset is not None:
                    completed = CompletedTxn(pid, entry.current_txn_first_offset,
                                             batch.base_offset, not marker.is_commit)
            entry.current_txn_first_offset = None
            return completed
        if batch.base_sequence >= 0:
            entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence,
                                               batch.base_offset, batch.last_offset,
                                               batch.max_timestamp))
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset
            if self.ongoing is _NO_ENTRIES:
                self.ongoing = {}
            self.ongoing[batch.base_offset] = TxnMetadata(pid, batch.base_offset)
        return None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO right after `completed`'s marker: the first offset of the earliest other
        open transaction, else the marker offset + 1 (the `.txnindex` entry's field)."""
        for txn in self.ongoing.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self.ongoing.pop(completed.first_offset, None)
        if txn is None:
            txn = TxnMetadata(completed.producer_id, completed.first_offset)
        txn.last_offset = completed.last_offset
        if self.unreplicated is _NO_ENTRIES:
            self.unreplicated = {}
        self.unreplicated[completed.first_offset] = txn
        if len(self.unreplicated) > 1 and \
                next(reversed(self.unreplicated)) < next(iter(self.unreplicated)):
            self.unreplicated = dict(sorted(self.unreplicated.items()))

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the HW stop bounding the LSO."""
        if self.unreplicated:
            for first, txn in list(self.unreplicated.items()):
                if txn.last_offset is not None and txn.last_offset < high_watermark:
                    del self.unreplicated[first]

    def check_and_update_producer(self, batch: RecordBatch) -> BatchMetadata | None:
        """`check` then, if not a duplicate, `update` (and complete its transaction). The
        batch must already carry its assigned offsets. Returns the duplicate or None."""
        dup = self.check(batch)
        if dup is None:
            completed = self.update(batch)
            if completed is not None:
                self.complete_txn(completed)
        return dup

    def first_unstable_offset(self) -> int | None:
        """Smallest first offset of an open or unreplicated transaction (LSO bound)."""
        a = next(iter(self.ongoing), None)
        b = next(iter(self.unreplicated), None)
        if a is None:
            return b
        return a if b is None else min(a, b)

    def first_undecided_offset(self) -> int | None:
        return next(iter(self.ongoing), None)

    # --- truncation --------------------------------------------------------------------------
    def truncate_start(self, start_offset: int) -> None:
        """Log start advanced: drop producers wholly before it, completed transactions whose
        marker is before it, and snapshots below it."""
        for pid, e in list(self.producers.items()):
            if e.last_offset < start_offset and e.current_txn_first_offset is None:
                del self.producers[pid]
        for first, txn in list(self.unreplicated.items()):
            if txn.last_offset is not None and txn.last_offset < start_offset:
                del self.unreplicated[first]
        self.delete_snapshots_before(start_offset)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verification_states.clear()

    def truncate_fully(self) -> None:
        """Forget everything, snapshots included (the log restarts elsewhere)."""
        self.clear()
        for off in list(self.snapshot_offsets):
            self._delete_snapshot(off)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Drop producers without an open transaction idle for `producer.id.expiration.ms`
        and stale verification states. Returns how many producers were removed."""
        limit = self.producer_id_expiration_ms
        gone = [pid for pid, e in self.producers.items()
                if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= limit]
        for pid in gone:
            del self.producers[pid]
        for pid, v in list(self.verification_states.items()):
            if now_ms - v.timestamp >= limit:
                del self.verification_states[pid]
        return len(gone)

    # --- snapshots -----------------------------------------------------------------------------
    @property
    def latest_snapshot_offset(self) -> int | None:
        return self.snapshot_offsets[-1] if self.snapshot_offsets else None

    def take_snapshot(self, offset: int, sync: bool = False) -> str | None:
        """Write `<offset>.snapshot` (the state after every batch below `offset`) unless it
        exists. Without `sync` the path is remembered for `sync_snapshots` (blocking)."""
        if self.dir is None or offset in self.snapshot_offsets:
            return None
        path = snapshot_path(self.dir, offset)
        write_snapshot(path, [e.to_snapshot() for e in self.producers.values()], sync=sync)
        self.snapshot_offsets.append(offset)
        self.snapshot_offsets.sort()
        if not sync:
            self.unsynced_snapshots.append(path)
        return path

    def sync_snapshots(self) -> None:
        """fsync snapshots written without `sync` (blocking: run off the loop)."""
        paths, self.unsynced_snapshots = self.unsynced_snapshots, []
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def load_snapshot(self, max_offset: int, min_offset: int = 0, readonly: bool = False
                      ) -> int | None:
        """Replace the state with the newest snapshot in [min_offset, max_offset]; snapshots
        above `max_offset` are deleted, corrupt ones deleted and skipped (neither with
        `readonly`). Returns its offset (the caller replays the log from there) or None
        (state cleared)."""
        self.clear()
        if not readonly:
            for off in [o for o in self.snapshot_offsets if o > max_offset]:
                self._delete_snapshot(off)
        for off in reversed(list(self.snapshot_offsets)):
            if off > max_offset:
                continue
            if off < min_offset:
                break
            path = snapshot_path(self.dir, off)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as e:
                if not readonly:
                    log.warning("deleting unreadable producer snapshot %s: %s", path, e)
                    self._delete_snapshot(off)
                continue
            if entries and self.producers is _NO_ENTRIES:
                self.producers = {}
            for s in entries:
                e = ProducerStateEntry.from_snapshot(s)
                self.producers[e.producer_id] = e
                if e.current_txn_first_offset is not None:
                    if self.ongoing is _NO_ENTRIES:
                        self.ongoing = {}
                    self.ongoing[e.current_txn_first_offset] = TxnMetadata(
                        e.producer_id, e.current_txn_first_offset)
            if len(self.ongoing) > 1:
                self.ongoing = dict(sorted(self.ongoing.items()))
            return off
        return None

    def delete_snapshots_before(self, offset: int) -> None:
        for off in [o for o in self.snapshot_offsets if o < offset]:
            self._delete_snapshot(off)

    def delete_snapshots_after(self, offset: int) -> None:
        for off in [o for o in self.snapshot_offsets if o > offset]:
            self._delete_snapshot(off)

    def _delete_snapshot(self, offset: int) -> None:
        if offset in self.snapshot_offsets:
            self.snapshot_offsets.remove(offset)
        if self.dir is None:
            return
        path = snapshot_path(self.dir, offset)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
