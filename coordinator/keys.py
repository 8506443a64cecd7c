"""How coordinators map keys to partitions of their internal topics (Kafka's exact mapping).

- `java_string_hashcode(s)`: Java's `String.hashCode` (31-based over UTF-16 code units, 32-bit
  signed overflow), so a key lands on the same partition number as in Kafka.
- `kafka_uuid(u)`: Kafka's `Uuid.toString` (URL-safe base64 without padding, 22 characters).
- `share_coordinator_key(group, topic_id, partition)`: `"group:topicId:partition"`, the
  FindCoordinator key type 2 ("share") key of a share-partition (Kafka's
  `SharePartitionKey.asCoordinatorKey`).
- `GroupKey(group_id)`, `MemberKey(group_id, member_id)`: what the group coordinator's
  delayed operations are watched under in their purgatories.
"""

from __future__ import annotations

import base64
import uuid
from typing import NamedTuple

__all__ = ["GroupKey", "MemberKey", "java_abs", "java_string_hashcode", "kafka_uuid",
           "share_coordinator_key"]


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: |n|, and 0 for Integer.MIN_VALUE."""
    return 0 if n == -(1 << 31) else abs(n)


def kafka_uuid(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    return f"{group_id}:{kafka_uuid(topic_id)}:{partition}"


class GroupKey(NamedTuple):
    """A group's rebalance / sync operations (Kafka's GroupJoinKey / GroupSyncKey)."""

    group_id: str

    def __str__(self) -> str:
        return self.group_id


class MemberKey(NamedTuple):
    """A member's heartbeat operation (Kafka's MemberKey)."""

    group_id: str
    member_id: str

    def __str__(self) -> str:
        return f"{self.group_id}-{self.member_id}"
