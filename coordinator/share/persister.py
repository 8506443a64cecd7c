"""The share-group state persister seam (Kafka's `Persister`), one share-partition per call.

A `SharePartition` reads its durable state once when it becomes leader and writes every
durable change (acknowledgements, releases, lock expiries, dead-letter progress) through a
`Persister`. Phase B implements it with the Initialize/Read/Write/Delete/ReadSummary
ShareGroupState RPCs to the share coordinator that owns the key (FindCoordinator key type 2,
key `group:topicId:partition`), batching partitions per coordinator as Kafka's
DefaultStatePersister does; `coordinator.share.local_persister` implements it in-process on a
`ShareCoordinatorShard`.

Josef's extension fields (`dead_letters_added`, `dead_letters_done`, `dead_letter_producer`)
ride in the RPCs as one tagged field (see `coordinator.share.records.JOSEF_EXTENSION_TAG`);
a Kafka share coordinator would ignore them.

Error codes (ShareGroupState RPC docs): NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS (retriable), FENCED_LEADER_EPOCH (a newer leader took over),
FENCED_STATE_EPOCH (offsets were reset / state re-initialized), GROUP_ID_NOT_FOUND,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST. `client_error` maps them to what the share
consumer sees, as Kafka's SharePartition does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from coordinator.share.state import DeadLetterIntent, StateBatch
from protocol.errors import ErrorCode

__all__ = [
    "DeleteStateRequest",
    "InitializeStateRequest",
    "Persister",
    "ReadStateRequest",
    "ReadStateResult",
    "ReadStateSummaryRequest",
    "ReadStateSummaryResult",
    "UNINITIALIZED_START_OFFSET",
    "WriteStateRequest",
    "client_error",
]

#: StartOffset of a share-partition whose start was never set (ReadShareGroupState).
UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class WriteStateRequest:
    """WriteShareGroupState for one partition (+ Josef's dead-letter extension).

    `start_offset` is the SPSO after this write (-1: unchanged). `state_batches` are disjoint
    and sorted; they overwrite the stored runs offset by offset. `dead_letters_added` become
    pending dead letters in the same record (atomically with the ARCHIVED state batches they
    explain); `dead_letters_done` are sequences whose dead letter is durably in the DLQ topic.
    `dead_letter_producer` (producer id, epoch) is stored when not None.
    """

    group_id: str
    topic_id: uuid.UUID
    partition: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...] = ()
    dead_letters_added: tuple[DeadLetterIntent, ...] = ()
    dead_letters_done: tuple[int, ...] = ()
    dead_letter_producer: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ReadStateRequest:
    """ReadShareGroupState: the new leader (at `leader_epoch`) loads the state."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ReadStateResult:
    """ReadShareGroupState result (+ the extension): start_offset -1 when uninitialized."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()
    dead_letters: tuple[DeadLetterIntent, ...] = ()
    next_dead_letter_sequence: int = 0
    dead_letter_producer: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ReadStateSummaryResult:
    """ReadShareGroupStateSummary result (DescribeShareGroupOffsets uses it)."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = UNINITIALIZED_START_OFFSET


@dataclass(frozen=True, slots=True)
class InitializeStateRequest:
    """InitializeShareGroupState: (re)start the state at `start_offset` with `state_epoch`.

    Used when a share group first gets a partition and by AlterShareGroupOffsets (a bumped
    `state_epoch` fences the leader's writes with FENCED_STATE_EPOCH until it reloads).
    """

    group_id: str
    topic_id: uuid.UUID
    partition: int
    state_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class DeleteStateRequest:
    """DeleteShareGroupState (DeleteGroups, DeleteShareGroupOffsets)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ReadStateSummaryRequest:
    """ReadShareGroupStateSummary for one partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int = -1


class Persister(Protocol):
    """What a share-partition needs from durable storage."""

    async def read_state(self, request: ReadStateRequest) -> ReadStateResult:
        """Load the state; error codes as in the module docstring."""

    async def write_state(self, request: WriteStateRequest) -> int:
        """Persist one change; NONE once it is durable (replicated), else an error code."""


_COORDINATOR_ERRORS = frozenset({
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})


def client_error(code: int) -> ErrorCode:
    """The error a share consumer gets for a persister error (Kafka's fetchPersisterError)."""
    code = ErrorCode(code) if code in ErrorCode._value2member_map_ else ErrorCode.UNKNOWN_SERVER_ERROR
    if code is ErrorCode.NONE:
        return code
    if code in _COORDINATOR_ERRORS:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.INVALID_REQUEST
    if code is ErrorCode.FENCED_STATE_EPOCH:
        return ErrorCode.FENCED_STATE_EPOCH
    if code is ErrorCode.FENCED_LEADER_EPOCH:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.UNKNOWN_SERVER_ERROR
