"""Value types shared by the share-partition and the share coordinator (KIP-932).

Record states (KIP-932 "In-flight records"; the ids are the `DeliveryState` values of the
ShareSnapshot/ShareUpdate records and the WriteShareGroupState RPC):

    AVAILABLE     0   may be acquired by any member
    ACQUIRED      1   locked for one member until acknowledged or its lock expires (never
                      persisted: a crash forgets in-flight deliveries, as in Kafka)
    ACKNOWLEDGED  2   ACCEPTed: done
    ARCHIVED      4   REJECTed, a gap, past the delivery-count limit, aborted, or a control
                      record: done, never delivered again
    DELAYED      64   Josef only: released or lock-expired, waiting for its redelivery backoff
                      (`share.redelivery.backoff.ms`); persisted as AVAILABLE

Acknowledge types (ShareFetch/ShareAcknowledge `AcknowledgeTypes`): 0 GAP, 1 ACCEPT,
2 RELEASE, 3 REJECT.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "AbortedTransaction",
    "AcknowledgeType",
    "AcknowledgementBatch",
    "AcquiredRecords",
    "DeadLetterIntent",
    "DeadLetterReason",
    "FetchedBatch",
    "RecordState",
    "StateBatch",
]


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4
    DELAYED = 64

    @property
    def terminal(self) -> bool:
        """ACKNOWLEDGED or ARCHIVED: the SPSO may move past the record."""
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED

    @property
    def persisted(self) -> int:
        """The DeliveryState written for this state (DELAYED is written as AVAILABLE)."""
        return 0 if self is RecordState.DELAYED else int(self)

    @classmethod
    def from_persisted(cls, delivery_state: int) -> RecordState:
        """0/2/4 from a state batch; ValueError for anything else (1 is never persisted)."""
        if delivery_state in (0, 2, 4):
            return cls(delivery_state)
        raise ValueError(f"invalid persisted delivery state {delivery_state}")


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class DeadLetterReason(enum.IntEnum):
    """Why a record was dead-lettered (the `__dlq.errors.reason` header names it)."""

    REJECTED = 1
    DELIVERY_COUNT_LIMIT = 2


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted run of offsets sharing one state (`StateBatches[]` in the records/RPCs).

    `first_offset`..`last_offset` inclusive; `delivery_state` 0/2/4; `delivery_count` int16.
    """

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetterIntent:
    """A committed decision to copy one record to the dead-letter topic (Josef, KIP-1191 names).

    `sequence` numbers a share-partition's intents 0, 1, 2, ... without gaps, in the order
    their writes were persisted; the DLQ writer produces intent `sequence` with that producer
    sequence so a replay after failover is deduplicated by the DLQ partition (see
    `coordinator.share.dead_letter`). `delivery_count` is the count when the record was
    archived; `reason` a `DeadLetterReason` value.
    """

    sequence: int
    offset: int
    delivery_count: int
    reason: int


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """One `AcquiredRecords` entry of a ShareFetch response (offsets inclusive)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """One `AcknowledgementBatches` entry of ShareFetch/ShareAcknowledge.

    `acknowledge_types` has one type for the whole range, or one per offset.
    """

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """The header facts of one fetched RecordBatch that acquisition needs.

    Offsets inclusive. `is_control` batches (transaction markers) are never delivered; under
    read_committed, data batches of aborted transactions are not either.
    """

    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction overlapping a fetch (the Fetch response's `AbortedTransactions`)."""

    producer_id: int
    first_offset: int
