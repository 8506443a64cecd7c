"""Dead-letter records for share groups (Josef; names from KIP-1191), exactly once across failover.

When a share group has `errors.deadletterqueue.topic.name` set, a record that is REJECTed,
or whose delivery count reaches `share.delivery.count.limit` (on RELEASE, lock expiry or
member departure), is copied to that topic before it counts as archived.

How "archived together with its dead letter, never dead-lettered twice" holds
-----------------------------------------------------------------------------
1. Outbox in the share state. The write that archives the record (ShareUpdate/ShareSnapshot
   in `__share_group_state`) also carries a `DeadLetterIntent(sequence, offset,
   delivery_count, reason)` in Josef's extension tagged field. One record, one append: the
   ARCHIVED state and the intent become durable together or not at all. If the write
   fails, the acknowledgement is rolled back (or, for a lock expiry, retried) and no
   sequence is consumed.
2. Sequences without gaps. The share-partition numbers its intents 0, 1, 2, ... in the order
   their writes commit (writes are serialized per share-partition), and the next number is
   part of the persisted state. The intent is "pending" until a later write lists its
   sequence in `dead_letters_done`.
3. Idempotent delivery. The DLQ writer (phase B) produces each pending intent as a one-record
   batch to one fixed DLQ partition (`dead_letter_partition`) with the share-partition's
   persisted idempotent producer id/epoch (`dead_letter_producer`, taken once by
   InitProducerId and written with the first intent) and base sequence = intent sequence
   (mod 2**31). It produces in sequence order, with at most 5 unconfirmed batches (Kafka's
   idempotence window), then writes `dead_letters_done`.
4. Failover. The new leader reads the state: pending intents come back with the same
   sequences and producer id; it re-produces them. A batch the old leader had already
   appended is answered DUPLICATE_SEQUENCE_NUMBER by the DLQ partition leader (its producer
   state is replicated with the log), so it is not appended twice; one that never landed is
   appended now. A zombie old leader is fenced from the share state (FENCED_LEADER_EPOCH on
   its next write), so it cannot create new intents; its late produce of an old intent is a
   duplicate sequence, deduplicated the same way.

The record body: key, value and headers of the source record, plus the `HEADER_*` headers
below (UTF-8 strings, numbers in decimal). If retention removed the source record before it
was copied, the dead letter has a null key and value and `HEADER_SOURCE_MISSING` = "true".
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.share.state import DeadLetterIntent, DeadLetterReason

__all__ = [
    "DeadLetterRecord",
    "build_dead_letter",
    "dead_letter_partition",
    "producer_sequence",
    "reason_name",
]

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group.id"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_REASON = "__dlq.errors.reason"
HEADER_SOURCE_MISSING = "__dlq.errors.source.missing"

_REASONS = {
    DeadLetterReason.REJECTED: "REJECTED",
    DeadLetterReason.DELIVERY_COUNT_LIMIT: "DELIVERY_COUNT_LIMIT_REACHED",
}

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """What the DLQ writer appends: the source record plus the context headers."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


def reason_name(reason: int) -> str:
    """Header text for a `DeadLetterReason` value ("REJECTED", ...); unknown -> "UNKNOWN"."""
    try:
        return _REASONS[DeadLetterReason(reason)]
    except ValueError:
        return "UNKNOWN"


def build_dead_letter(
    intent: DeadLetterIntent,
    *,
    group_id: str,
    topic: str,
    partition: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
    timestamp_ms: int = -1,
    source_missing: bool = False,
) -> DeadLetterRecord:
    """The dead letter for `intent`, copied from the source record (key, value, headers).

    `timestamp_ms` is the source record's timestamp (-1: let the log assign one). Existing
    headers come first, unchanged; the context headers follow.
    """
    context: list[Header] = [
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(intent.offset).encode()),
        (HEADER_GROUP, group_id.encode()),
        (HEADER_DELIVERY_COUNT, str(intent.delivery_count).encode()),
        (HEADER_REASON, reason_name(intent.reason).encode()),
    ]
    if source_missing:
        context.append((HEADER_SOURCE_MISSING, b"true"))
        key = value = None
    return DeadLetterRecord(key, value, tuple(headers) + tuple(context), timestamp_ms)


def dead_letter_partition(group_id: str, topic_id: str, partition: int, num_partitions: int) -> int:
    """The one DLQ partition a share-partition's dead letters go to (stable across brokers).

    Sequence-based deduplication needs every intent of a share-partition on one DLQ
    partition; crc32 of "group/topicId/partition" spreads share-partitions over the DLQ.
    """
    if num_partitions <= 0:
        raise ValueError("the dead-letter topic has no partitions")
    return zlib.crc32(f"{group_id}/{topic_id}/{partition}".encode()) % num_partitions


def producer_sequence(intent: DeadLetterIntent) -> int:
    """The idempotent producer base sequence for `intent` (int32, wraps like Kafka's)."""
    return intent.sequence % (1 << 31)
