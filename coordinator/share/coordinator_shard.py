"""The share coordinator's state for one `__share_group_state` partition (Kafka's ShareCoordinatorShard).

Model: per `ShareStateKey` a `ShareGroupOffset` (the state a share-partition leader reads),
rebuilt by `replay` from the partition's records: a ShareSnapshot replaces the state, a
ShareUpdate merges into it (its runs painted over the stored ones, start/leader epoch moved
when not -1, dead-letter intents added/removed), a ShareSnapshot tombstone deletes the key.

Operations (KIP-932 "Share group state persistence", the *ShareGroupState RPCs) are pure
functions of the model: they return the records to append and the answer, and change
nothing. The runtime (phase B) appends the records to the partition (acks=all) and replays
each at its offset before answering; it runs one operation per key at a time, or replays
immediately and `restore`s on an append failure (`save`/`restore`).

    write_state       a ShareSnapshot for a new key and every
                      `snapshot_update_records_per_snapshot` updates (default 500, Kafka's
                      share.coordinator.snapshot.update.records.per.snapshot), else a
                      ShareUpdate with the request's runs. FENCED_LEADER_EPOCH if a newer
                      leader epoch was recorded, FENCED_STATE_EPOCH if a newer state epoch.
    read_state        the state (start offset -1 when never set). A higher leader epoch is
                      recorded durably (a ShareUpdate, or a ShareSnapshot for a new key), so
                      the old leader's later writes are fenced even after a coordinator
                      failover. FENCED_LEADER_EPOCH for an older leader.
    read_state_summary  state epoch, leader epoch, start offset (no records).
    initialize_state  a fresh ShareSnapshot at the given start offset and a strictly newer
                      state epoch (else FENCED_STATE_EPOCH); pending dead letters are kept.
    delete_state      tombstones for the key (both record types); nothing if unknown.

All answer INVALID_REQUEST for a zero topic id or a negative partition, and (except delete)
UNKNOWN_TOPIC_OR_PARTITION when `partition_exists` says the partition does not exist.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from coordinator.share.persister import (
    UNINITIALIZED_START_OFFSET,
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryRequest,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    DeadLetterExtension,
    ShareRecord,
    ShareSnapshotValue,
    ShareStateKey,
    ShareUpdateValue,
)
from coordinator.share.state import DeadLetterIntent, StateBatch
from coordinator.share.state_batches import overlay
from protocol.errors import ErrorCode
from protocol.types import ZERO_UUID

__all__ = ["DEFAULT_SNAPSHOT_UPDATE_RECORDS", "ShareCoordinatorShard", "ShareGroupOffset"]

DEFAULT_SNAPSHOT_UPDATE_RECORDS = 500


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One key's state after replay (Kafka's ShareGroupOffset + Josef's outbox)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...] = ()
    dead_letters: tuple[DeadLetterIntent, ...] = ()
    next_dead_letter_sequence: int = 0
    dead_letter_producer: tuple[int, int] | None = None

    def snapshot_value(self) -> ShareSnapshotValue:
        pid, pepoch = self.dead_letter_producer or (-1, -1)
        ext = DeadLetterExtension(self.dead_letters, (), self.next_dead_letter_sequence, pid, pepoch)
        return ShareSnapshotValue(self.snapshot_epoch, self.state_epoch, self.leader_epoch,
                                  self.start_offset, self.create_timestamp, self.write_timestamp,
                                  self.state_batches, ext)


class ShareCoordinatorShard:
    """Replayed model + the ShareGroupState operations for one state-topic partition."""

    def __init__(
        self,
        *,
        snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS,
        time_ms: Callable[[], int] | None = None,
        partition_exists: Callable[[uuid.UUID, int], bool] | None = None,
    ) -> None:
        if snapshot_update_records_per_snapshot < 0:
            raise ValueError("share.coordinator.snapshot.update.records.per.snapshot must be >= 0")
        self.updates_per_snapshot = snapshot_update_records_per_snapshot
        self._time_ms = time_ms or (lambda: int(time.time() * 1000))
        self._partition_exists = partition_exists
        self._states: dict[ShareStateKey, ShareGroupOffset] = {}
        self._updates_since_snapshot: dict[ShareStateKey, int] = {}
        self._snapshot_offsets: dict[ShareStateKey, int] = {}

    # ------------------------------------------------------------------ model
    def state(self, key: ShareStateKey) -> ShareGroupOffset | None:
        return self._states.get(key)

    def keys(self) -> list[ShareStateKey]:
        return list(self._states)

    def updates_since_snapshot(self, key: ShareStateKey) -> int:
        return self._updates_since_snapshot.get(key, 0)

    def prunable_offset(self) -> int | None:
        """Records below this log offset are redundant: every live key has a snapshot at or
        after it (Kafka prunes `__share_group_state` with DeleteRecords there). None if no key."""
        return min(self._snapshot_offsets.values()) if self._snapshot_offsets else None

    def save(self, key: ShareStateKey) -> tuple:
        """An undo point for `key` (see the module docstring)."""
        return (key, self._states.get(key), self._updates_since_snapshot.get(key),
                self._snapshot_offsets.get(key))

    def restore(self, saved: tuple) -> None:
        key, *values = saved
        for table, value in zip((self._states, self._updates_since_snapshot,
                                 self._snapshot_offsets), values, strict=True):
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value

    def replay(self, offset: int, record: ShareRecord) -> None:
        """Apply one record read from (or just appended to) the partition at `offset`."""
        key, value = record.key, record.value
        if value is None:
            if record.record_type == SHARE_SNAPSHOT:
                self._states.pop(key, None)
                self._updates_since_snapshot.pop(key, None)
                self._snapshot_offsets.pop(key, None)
            return
        if isinstance(value, ShareSnapshotValue):
            ext = value.extension
            self._states[key] = ShareGroupOffset(
                value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                value.create_timestamp, value.write_timestamp, tuple(value.state_batches),
                tuple(sorted(ext.dead_letters, key=lambda i: i.sequence)),
                max(ext.next_sequence, _next_sequence(ext.dead_letters, 0)),
                _producer(ext, None))
            self._updates_since_snapshot[key] = 0
            self._snapshot_offsets[key] = offset
            return
        cur = self._states.get(key)
        if cur is None:
            # An update without a snapshot (only after pruning went wrong): start from it.
            cur = ShareGroupOffset(value.snapshot_epoch, 0, -1, UNINITIALIZED_START_OFFSET, 0, 0)
        self._states[key] = _merge(cur, value)
        self._updates_since_snapshot[key] = self._updates_since_snapshot.get(key, 0) + 1

    # ------------------------------------------------------------------ operations
    def write_state(self, req: WriteStateRequest) -> tuple[list[ShareRecord], int]:
        """WriteShareGroupState: the record to append, and the error code."""
        err = self._check(req.topic_id, req.partition)
        if err:
            return [], err
        key = ShareStateKey(req.group_id, req.topic_id, req.partition)
        cur = self._states.get(key)
        if cur is not None and cur.leader_epoch > req.leader_epoch:
            return [], ErrorCode.FENCED_LEADER_EPOCH
        if cur is not None and cur.state_epoch > req.state_epoch:
            return [], ErrorCode.FENCED_STATE_EPOCH
        now = self._time_ms()
        ext = DeadLetterExtension(
            req.dead_letters_added, req.dead_letters_done, -1,
            *(req.dead_letter_producer or (-1, -1)))
        if cur is None or self._updates_since_snapshot.get(key, 0) >= self.updates_per_snapshot:
            base = cur or ShareGroupOffset(-1, req.state_epoch, req.leader_epoch,
                                           UNINITIALIZED_START_OFFSET, now, now)
            update = ShareUpdateValue(base.snapshot_epoch, req.leader_epoch, req.start_offset,
                                      tuple(req.state_batches), ext)
            merged = replace(_merge(base, update), snapshot_epoch=base.snapshot_epoch + 1,
                             state_epoch=max(base.state_epoch, req.state_epoch),
                             write_timestamp=now)
            return [ShareRecord(SHARE_SNAPSHOT, key, merged.snapshot_value())], ErrorCode.NONE
        batches = tuple(overlay((), req.state_batches, req.start_offset))
        value = ShareUpdateValue(cur.snapshot_epoch, req.leader_epoch, req.start_offset, batches, ext)
        return [ShareRecord(SHARE_UPDATE, key, value)], ErrorCode.NONE

    def read_state(self, req: ReadStateRequest) -> tuple[list[ShareRecord], ReadStateResult]:
        """ReadShareGroupState: records fencing older leaders, and the state."""
        err = self._check(req.topic_id, req.partition)
        if err:
            return [], ReadStateResult(err)
        key = ShareStateKey(req.group_id, req.topic_id, req.partition)
        cur = self._states.get(key)
        if cur is not None and cur.leader_epoch > req.leader_epoch:
            return [], ReadStateResult(ErrorCode.FENCED_LEADER_EPOCH)
        records: list[ShareRecord] = []
        if cur is None:
            now = self._time_ms()
            cur = ShareGroupOffset(0, 0, req.leader_epoch, UNINITIALIZED_START_OFFSET, now, now)
            if req.leader_epoch >= 0:
                records.append(ShareRecord(SHARE_SNAPSHOT, key, cur.snapshot_value()))
        elif req.leader_epoch > cur.leader_epoch:
            records.append(ShareRecord(SHARE_UPDATE, key, ShareUpdateValue(
                cur.snapshot_epoch, req.leader_epoch, UNINITIALIZED_START_OFFSET)))
        return records, ReadStateResult(
            ErrorCode.NONE, None, cur.state_epoch, cur.start_offset, cur.state_batches,
            cur.dead_letters, cur.next_dead_letter_sequence, cur.dead_letter_producer)

    def read_state_summary(self, req: ReadStateSummaryRequest) -> ReadStateSummaryResult:
        err = self._check(req.topic_id, req.partition)
        if err:
            return ReadStateSummaryResult(err)
        cur = self._states.get(ShareStateKey(req.group_id, req.topic_id, req.partition))
        if cur is None:
            return ReadStateSummaryResult()
        return ReadStateSummaryResult(ErrorCode.NONE, None, cur.state_epoch, cur.leader_epoch,
                                      cur.start_offset)

    def initialize_state(self, req: InitializeStateRequest) -> tuple[list[ShareRecord], int]:
        err = self._check(req.topic_id, req.partition)
        if err:
            return [], err
        key = ShareStateKey(req.group_id, req.topic_id, req.partition)
        cur = self._states.get(key)
        if cur is not None and cur.state_epoch >= req.state_epoch:
            return [], ErrorCode.FENCED_STATE_EPOCH
        now = self._time_ms()
        fresh = ShareGroupOffset(
            cur.snapshot_epoch + 1 if cur else 0, req.state_epoch,
            cur.leader_epoch if cur else -1, req.start_offset, now, now, (),
            cur.dead_letters if cur else (), cur.next_dead_letter_sequence if cur else 0,
            cur.dead_letter_producer if cur else None)
        return [ShareRecord(SHARE_SNAPSHOT, key, fresh.snapshot_value())], ErrorCode.NONE

    def delete_state(self, req: DeleteStateRequest) -> tuple[list[ShareRecord], int]:
        err = self._check(req.topic_id, req.partition, check_exists=False)
        if err:
            return [], err
        key = ShareStateKey(req.group_id, req.topic_id, req.partition)
        if key not in self._states:
            return [], ErrorCode.NONE
        return [ShareRecord(SHARE_SNAPSHOT, key, None), ShareRecord(SHARE_UPDATE, key, None)], ErrorCode.NONE

    def _check(self, topic_id: uuid.UUID | None, partition: int, check_exists: bool = True) -> int:
        if topic_id is None or topic_id == ZERO_UUID or partition < 0:
            return ErrorCode.INVALID_REQUEST
        if check_exists and self._partition_exists is not None \
                and not self._partition_exists(topic_id, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NONE


def _merge(cur: ShareGroupOffset, upd: ShareUpdateValue) -> ShareGroupOffset:
    """`cur` with a ShareUpdate applied."""
    start = upd.start_offset if upd.start_offset != UNINITIALIZED_START_OFFSET else cur.start_offset
    leader = upd.leader_epoch if upd.leader_epoch != -1 else cur.leader_epoch
    ext = upd.extension
    done = set(ext.done)
    pending = {i.sequence: i for i in cur.dead_letters}
    pending.update((i.sequence, i) for i in ext.dead_letters)
    dead_letters = tuple(pending[s] for s in sorted(pending) if s not in done)
    return ShareGroupOffset(
        cur.snapshot_epoch, cur.state_epoch, max(cur.leader_epoch, leader), start,
        cur.create_timestamp, cur.write_timestamp,
        tuple(overlay(cur.state_batches, upd.state_batches, start)),
        dead_letters, _next_sequence(ext.dead_letters, cur.next_dead_letter_sequence),
        _producer(ext, cur.dead_letter_producer))


def _next_sequence(intents: Iterable[DeadLetterIntent], floor: int) -> int:
    return max([floor] + [i.sequence + 1 for i in intents])


def _producer(ext: DeadLetterExtension, default: tuple[int, int] | None) -> tuple[int, int] | None:
    return (ext.producer_id, ext.producer_epoch) if ext.producer_id >= 0 else default
