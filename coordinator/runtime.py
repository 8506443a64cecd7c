"""The runtime a coordinator sees: what the broker gives it, and nothing more (issue 23).

A coordinator (share today; group and transaction when they move here) owns the partitions
of one internal topic that this broker leads. It never imports `broker`: the broker hands
it an object implementing `CoordinatorRuntime` (`broker.coordinator_runtime` builds it over
the ReplicaManager, the purgatory's timing wheel and the metadata cache) and calls the
coordinator's `CoordinatorPartitions` methods when leadership moves.

    broker (LeaderAndIsr, StopReplica)      --on_election / on_resignation-->  coordinator
    coordinator --append / read / delete_records_before / timer / topic_partitions--> broker

Shapes and units:
- `append(topic, partition, records, timeout_ms)`: one RecordBatch (v2, CreateTime = now)
  of `(key, value)` pairs (value None = tombstone), appended as leader with acks=all.
  Returns `AppendResult(error, base_offset)`: the raw partition error code (NONE,
  NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT after `timeout_ms` ms,
  KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE, ...); the records got
  offsets `base_offset, base_offset + 1, ...`.
- `read(topic, partition, is_current)`: every record from the log start offset to the log end
  offset at call time, as `LoggedRecord(offset, key, value)`, in chunks (`list`) read off the
  event loop; control records are skipped. Stops early once `is_current()` is False.
- `log_end_offset(topic, partition)`: the next offset an append gets (-1 if not hosted).
- `delete_records_before(topic, partition, offset)`: advance the log start offset (pruning a
  coordinator log whose records below `offset` are no longer needed); returns the new log
  start offset, or raises `protocol.errors.KafkaError`.
- `timer`: `CoordinatorTimer` (monotonic ms clock, one-shot callbacks on the timing wheel).
- `wall_clock_ms()`: epoch milliseconds (record timestamps).
- `topic_partitions(topic_id)`: the partition count of a topic id, None when unknown.
- `watch_leadership(topic, coordinator)`: call `coordinator.on_election(p, leader_epoch)` /
  `on_resignation(p)` whenever this broker starts / stops leading `topic-p`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["AppendResult", "CoordinatorPartitions", "CoordinatorRuntime", "CoordinatorTimer",
           "LoggedRecord", "ScheduledTimeout"]


class ScheduledTimeout(Protocol):
    """A pending one-shot callback."""

    expiration_ms: int

    def cancel(self) -> bool:
        """Unschedule; True if it had not run yet."""


class CoordinatorTimer(Protocol):
    """A monotonic clock and one-shot callbacks (the purgatory's hierarchical timing wheel in
    the broker, a manual clock in tests). Callbacks run on the event loop and must not block."""

    def now_ms(self) -> int:
        """Monotonic time in ms (not wall-clock)."""

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> ScheduledTimeout:
        """Run `callback()` once after `delay_ms` ms (<= 0: as soon as the timer can)."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: int
    base_offset: int = -1


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    offset: int
    key: bytes | None
    value: bytes | None


class CoordinatorPartitions(Protocol):
    """What a coordinator implements so the broker can tell it about leadership."""

    def on_election(self, partition: int, leader_epoch: int) -> object:
        """This broker now leads `partition` of the coordinator's topic: load it."""

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads `partition`: drop its state."""

    def owned_partitions(self) -> set[int]:
        """Partitions loaded or loading (a FULL LeaderAndIsr resigns the ones it omits)."""


class CoordinatorRuntime(Protocol):
    """What the broker offers a coordinator (see the module docstring for shapes)."""

    timer: CoordinatorTimer

    def wall_clock_ms(self) -> int: ...

    async def append(self, topic: str, partition: int,
                     records: Sequence[tuple[bytes, bytes | None]],
                     timeout_ms: int) -> AppendResult: ...

    def read(self, topic: str, partition: int, is_current: Callable[[], bool]): ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    async def delete_records_before(self, topic: str, partition: int, offset: int) -> int: ...

    def topic_partitions(self, topic_id: uuid.UUID) -> int | None: ...

    def watch_leadership(self, topic: str, coordinator: CoordinatorPartitions) -> None: ...
