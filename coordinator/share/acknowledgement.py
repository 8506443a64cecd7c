"""Planning acknowledgements and releases (KIP-932 "Acknowledging records"; Kafka's SharePartition.acknowledge).

A plan lists, per in-flight state, the state it moves to once the persister has the write;
planned states are marked `pending` so acquisition, other acknowledgements and lock expiry
leave them alone meanwhile. Nothing else changes until `SharePartition` commits the plan.

Acknowledgement rules (all or nothing per call):
- INVALID_REQUEST: an acknowledge type outside 0..3, first offset > last offset, a type list
  whose length is neither 1 nor the range size, batches overlapping or out of order.
- Offsets below the SPSO are skipped: they are already acknowledged or archived.
- INVALID_RECORD_STATE: an offset at or above the SPSO that is not Acquired by this member
  (past SPEO, lock expired, released, another member's, or being written right now).
- ACCEPT -> Acknowledged; REJECT -> Archived (dead-lettered with reason REJECTED when the
  group has a DLQ topic); GAP -> Archived (no record there); RELEASE -> `release_target`.

`release_target` (RELEASE, lock expiry, member departure): Archived when the record is below
the SPSO; Archived and dead-lettered (DELIVERY_COUNT_LIMIT) once delivery_count >=
`share.delivery.count.limit`; else Delayed when redelivery backoff is on, else Available.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coordinator.share.config import SharePartitionConfig
from coordinator.share.in_flight import InFlightCache, InFlightState
from coordinator.share.state import (
    AcknowledgementBatch,
    AcknowledgeType,
    DeadLetterReason,
    RecordState,
)
from protocol.errors import ErrorCode


class SharePartition(Protocol):
    """What planning reads of a `share_partition.SharePartition`."""

    cache: InFlightCache
    config: SharePartitionConfig

    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

__all__ = ["Change", "Plan", "plan_acknowledge", "plan_release_member", "release_target"]

_ACQUIRED = RecordState.ACQUIRED
_ARCHIVED = RecordState.ARCHIVED


@dataclass(slots=True)
class Change:
    state: InFlightState
    first: int
    last: int
    new_state: RecordState
    reason: int | None  # DeadLetterReason when the change dead-letters each offset


@dataclass(slots=True)
class Plan:
    changes: list[Change] = field(default_factory=list)

    def add(self, st: InFlightState, lo: int, hi: int, target: tuple[RecordState, int | None]) -> None:
        st.pending = True
        self.changes.append(Change(st, lo, hi, *target))

    def abandon(self, error: ErrorCode) -> ErrorCode:
        for c in self.changes:
            c.state.pending = False
        return error


def release_target(sp: SharePartition, st: InFlightState, last: int) -> tuple[RecordState, int | None]:
    """Where a released/expired record goes, and the dead-letter reason if any."""
    if last < sp.start_offset:
        return _ARCHIVED, None
    if st.delivery_count >= sp.config.delivery_count_limit:
        return _ARCHIVED, _dlq(sp, DeadLetterReason.DELIVERY_COUNT_LIMIT)
    if sp.config.redelivery_backoff_ms > 0:
        return RecordState.DELAYED, None
    return RecordState.AVAILABLE, None


def _dlq(sp: SharePartition, reason: DeadLetterReason) -> int | None:
    return int(reason) if sp.config.dead_letter_topic else None


def _ack_target(sp: SharePartition, ack: int, st: InFlightState, last: int) -> tuple[RecordState, int | None]:
    if ack == AcknowledgeType.ACCEPT:
        return RecordState.ACKNOWLEDGED, None
    if ack == AcknowledgeType.RELEASE:
        return release_target(sp, st, last)
    if ack == AcknowledgeType.REJECT:
        return _ARCHIVED, _dlq(sp, DeadLetterReason.REJECTED)
    return _ARCHIVED, None  # GAP: no record at this offset


def _malformed(batches: Sequence[AcknowledgementBatch]) -> bool:
    prev_last = None
    for b in batches:
        n = b.last_offset - b.first_offset + 1
        if (n <= 0 or len(b.acknowledge_types) not in (1, n)
                or any(t not in (0, 1, 2, 3) for t in b.acknowledge_types)
                or (prev_last is not None and b.first_offset <= prev_last)):
            return True
        prev_last = b.last_offset
    return False


def plan_acknowledge(sp: SharePartition, member_id: str,
                     batches: Sequence[AcknowledgementBatch]) -> Plan | ErrorCode:
    """The plan for an acknowledgement, or the error (nothing marked then)."""
    if _malformed(batches):
        return ErrorCode.INVALID_REQUEST
    plan = Plan()
    for b in batches:
        if b.last_offset < sp.start_offset:
            continue
        lo = max(b.first_offset, sp.start_offset)
        if b.last_offset >= sp.end_offset:
            return plan.abandon(ErrorCode.INVALID_RECORD_STATE)
        types = b.acknowledge_types
        pos = lo
        for batch in sp.cache.overlapping(lo, b.last_offset):
            if batch.first_offset > pos:  # an offset no batch covers: never acquired here
                return plan.abandon(ErrorCode.INVALID_RECORD_STATE)
            own = types[max(batch.first_offset, b.first_offset) - b.first_offset:
                        min(batch.last_offset, b.last_offset) - b.first_offset + 1]
            if not (batch.first_offset >= lo and batch.last_offset <= b.last_offset
                    and len(set(own)) == 1):
                batch.split()
            for s_lo, s_hi, st in batch.states(lo, b.last_offset):
                if st.state is not _ACQUIRED or st.member_id != member_id or st.pending:
                    return plan.abandon(ErrorCode.INVALID_RECORD_STATE)
                ack = types[0] if len(types) == 1 else types[s_lo - b.first_offset]
                plan.add(st, s_lo, s_hi, _ack_target(sp, ack, st, s_hi))
            pos = batch.last_offset + 1
        if pos <= b.last_offset:
            return plan.abandon(ErrorCode.INVALID_RECORD_STATE)
    return plan


def plan_release_member(sp: SharePartition, member_id: str) -> Plan:
    """Release everything `member_id` holds (no delivery count change)."""
    plan = Plan()
    for batch in sp.cache:
        st = batch.batch_state
        if st is not None:
            if not _held(st, member_id):
                continue
            if not batch.first_offset < sp.start_offset <= batch.last_offset:
                plan.add(st, batch.first_offset, batch.last_offset,
                         release_target(sp, st, batch.last_offset))
                continue
            batch.split()  # straddles the SPSO: per offset, the part below is archived
        for lo, hi, st in batch.all_states():
            if _held(st, member_id):
                plan.add(st, lo, hi, release_target(sp, st, hi))
    return plan


def _held(st: InFlightState, member_id: str) -> bool:
    return st.state is _ACQUIRED and st.member_id == member_id and not st.pending
