"""Becoming a share-partition's leader: state rebuilt from the persisted snapshot (KIP-932).

When a broker becomes leader of a topic-partition (or first serves a share group on it), it
reads the share-partition state through the persister at its leader epoch (which fences the
previous leader's writes) and rebuilds the in-flight set:

- SPSO = the persisted start offset; if never set (-1), `share.auto.offset.reset`:
  earliest = log start offset, latest = high watermark (the LSO under read_committed),
  by_duration = first offset with timestamp >= now - duration (latest if none). The chosen
  SPSO is written at once so a second failover does not pick a different "latest".
- The SPSO is raised to the log start offset if retention passed it.
- Persisted runs at or above the SPSO become in-flight batches in their state (Available,
  Acknowledged, Archived). With redelivery backoff on, an Available run that was delivered
  before is Delayed again for its backoff from now (conservative: never earlier than the
  old leader would have released it, at most one backoff later).
- Offsets in [SPSO, last persisted offset] that no run covers were in flight on the old
  leader (acquisition is not persisted): they are delivered again with delivery count 1.
- Pending dead-letter intents come back with their sequences and are handed to the
  listener for (idempotent) re-delivery.

Errors: the persister's error, mapped by `persister.client_error` (e.g. FENCED_LEADER_EPOCH ->
NOT_LEADER_OR_FOLLOWER when a newer leader already read the state).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from coordinator.share.config import SharePartitionConfig
from coordinator.share.in_flight import InFlightState
from coordinator.share.persister import (
    UNINITIALIZED_START_OFFSET,
    Persister,
    ReadStateRequest,
    ReadStateResult,
    client_error,
)
from coordinator.share.share_partition import SharePartition, SharePartitionListener
from coordinator.share.state import RecordState
from coordinator.share.timer import ShareTimer
from protocol.errors import ErrorCode

__all__ = ["LogOffsets", "initial_start_offset", "load_share_partition", "restore_state"]


@dataclass(frozen=True, slots=True)
class LogOffsets:
    """The leader's log positions at load time.

    `offset_for_timestamp(ts_ms)` is ListOffsets' lookup: the first offset whose timestamp is
    >= ts_ms, or None past the end.
    """

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int | None = None
    offset_for_timestamp: Callable[[int], int | None] | None = None


def initial_start_offset(config: SharePartitionConfig, log: LogOffsets, wall_clock_ms: int) -> int:
    """The SPSO of a share-partition without persisted state (share.auto.offset.reset)."""
    latest = log.high_watermark
    if config.read_committed and log.last_stable_offset is not None:
        latest = log.last_stable_offset
    reset = config.auto_offset_reset
    if reset.strategy == "earliest":
        return log.log_start_offset
    if reset.strategy == "by_duration" and log.offset_for_timestamp is not None:
        found = log.offset_for_timestamp(wall_clock_ms - reset.duration_ms)
        if found is not None:
            return max(found, log.log_start_offset)
    return latest


def restore_state(sp: SharePartition, result: ReadStateResult, log: LogOffsets, wall_clock_ms: int) -> None:
    """Fill a fresh `SharePartition` from a read result (see the module docstring)."""
    start = result.start_offset
    if start == UNINITIALIZED_START_OFFSET:
        start = initial_start_offset(sp.config, log, wall_clock_ms)
    start = max(start, log.log_start_offset)
    sp.state_epoch = result.state_epoch
    sp._start = sp._end = start
    delayed = []
    for b in sorted(result.state_batches, key=lambda b: b.first_offset):
        if b.last_offset < start:
            continue
        first = max(b.first_offset, start)
        state = RecordState.from_persisted(b.delivery_state)
        st = InFlightState(state, b.delivery_count)
        if state is RecordState.AVAILABLE and b.delivery_count > 0 \
                and sp.config.redelivery_delay_ms(b.delivery_count) > 0:
            st.state = RecordState.DELAYED
            delayed.append((first, b.last_offset, st))
        sp._add_batch(first, b.last_offset, st)
    sp._start_backoff(delayed)
    sp._find_next = True
    for intent in result.dead_letters:
        sp._dead_letters[intent.sequence] = intent
    sp._next_dl_sequence = max([result.next_dead_letter_sequence]
                               + [i.sequence + 1 for i in result.dead_letters])
    sp.dead_letter_producer = result.dead_letter_producer
    sp._advance_start()


async def load_share_partition(
    group_id: str,
    topic_id: uuid.UUID,
    partition: int,
    *,
    config: SharePartitionConfig,
    timer: ShareTimer,
    persister: Persister,
    leader_epoch: int,
    log: LogOffsets,
    wall_clock_ms: int,
    listener: SharePartitionListener | None = None,
) -> SharePartition | ErrorCode:
    """Read, rebuild, persist an initial SPSO if needed; the partition or an error code."""
    try:
        result = await persister.read_state(ReadStateRequest(group_id, topic_id, partition, leader_epoch))
    except Exception:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if result.error_code != ErrorCode.NONE:
        return client_error(result.error_code)
    sp = SharePartition(group_id, topic_id, partition, config=config, timer=timer,
                        persister=persister, leader_epoch=leader_epoch, listener=listener)
    restore_state(sp, result, log, wall_clock_ms)
    if result.start_offset == UNINITIALIZED_START_OFFSET or sp.start_offset != result.start_offset:
        code = await sp.persist_start_offset()
        if code != ErrorCode.NONE:
            sp.close()
            return code
    pending = sp.pending_dead_letters()
    if pending and listener is not None:
        listener.on_dead_letters(sp, pending)
    return sp
