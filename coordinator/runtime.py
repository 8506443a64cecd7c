"""The runtime a coordinator sees: what the broker gives it, and nothing more (issue 23).

A coordinator (group, transaction, share) owns the partitions of one internal topic that
this broker leads (`__consumer_offsets`, `__transaction_state`, `__share_group_state`). It
never imports `broker`: the broker hands it an object implementing `CoordinatorRuntime`
(`broker.coordinator_runtime.BrokerCoordinatorRuntime`, over the ReplicaManager, the
purgatory's timing wheel, the metadata cache and the inter-broker listener) and calls the
coordinator's `CoordinatorPartitions` methods when leadership moves.

    broker (LeaderAndIsr, StopReplica)     --on_election / on_resignation-->  coordinator
    coordinator --append / read / timer / purgatory / leaders / inter-broker--> runtime

Shapes and units:
- `append(topic, partition, records, timeout_ms)`: one RecordBatch (v2, CreateTime = now,
  uncompressed) of `(key, value)` pairs (value None = tombstone), appended as leader with
  acks=all. `append_batch(topic, partition, batch, timeout_ms, verification=None)`: the same
  for a v2 batch the coordinator built itself (`protocol.records.RecordBatchBuilder`:
  compressed, or transactional with its producer id/epoch), with the KIP-890 guard of
  `start_transaction_verification` when it has one. Both return `AppendResult(error,
  base_offset, error_message)`: the raw partition error code (NONE, NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT after `timeout_ms` ms, KAFKA_STORAGE_ERROR,
  UNKNOWN_TOPIC_OR_PARTITION, MESSAGE_TOO_LARGE, INVALID_PRODUCER_EPOCH, ...; the
  coordinator maps it); the records got offsets `base_offset, base_offset + 1, ...`.
- `read_batches(topic, partition, is_current)`: the partition from its log start offset to
  its log end offset at call time, as lists of `LoggedBatch` (data batches with their
  records at or above the log start offset; transaction markers as `marker` True = COMMIT /
  False = ABORT), read in chunks off the event loop. Stops early once `is_current()` is
  False; nothing when this broker does not host the partition; KafkaError CORRUPT_MESSAGE
  when no complete batch can be read at a position. `read(...)`: the same as lists of
  `LoggedRecord` of the data batches only.
- `log_end_offset(topic, partition)`: the next offset an append gets (-1 if not hosted).
- `delete_records_before(topic, partition, offset)`: advance the log start offset (pruning a
  coordinator log whose records below `offset` are no longer needed); returns the new log
  start offset, or raises `protocol.errors.KafkaError`.
- `timer`: `CoordinatorTimer` (monotonic ms clock, one-shot callbacks on the timing wheel,
  and `purgatory(name)`: operations parked under keys until they can complete or expire).
- `wall_clock_ms()`: epoch milliseconds (record timestamps).
- `topic_partitions(topic_id)`: the partition count of a topic id, None when unknown.
- `watch_leadership(topic, coordinator)`: call `coordinator.on_election(p, leader_epoch)` /
  `on_resignation(p)` whenever this broker starts / stops leading `topic-p`.
- Transactions (KIP-98/KIP-890): `partition_leader(topic, p)` (None: no such partition, -1:
  no live leader), `inter_broker(client_id)` (requests to other brokers on the inter-broker
  listener), `write_txn_markers(markers)` (this broker, as partition leader, writes
  WriteTxnMarkers-shaped markers: what the WriteTxnMarkers handler does), and
  `start_transaction_verification(topic, p, producer_id, producer_epoch, add_partition)`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["AppendResult", "CoordinatorPartitions", "CoordinatorPurgatory",
           "CoordinatorRuntime", "CoordinatorTimer", "Deadline", "DelayedWork", "InterBrokerClient",
           "LoggedBatch", "LoggedRecord", "ScheduledTimeout", "TopicMetadata",
           "TransactionVerifier"]


class ScheduledTimeout(Protocol):
    """A pending one-shot callback."""

    expiration_ms: int

    def cancel(self) -> bool:
        """Unschedule; True if it had not run yet."""


class DelayedWork(Protocol):
    """What a coordinator parks in a purgatory (Kafka's DelayedOperation, seen from the
    operation's side): the purgatory completes it exactly once, when `can_complete()` holds
    (checked when parked and at each `check_and_complete` of one of its keys) or when
    `delay_ms` ms have passed (`on_expiration()` first, then `on_complete()`)."""

    delay_ms: int

    def can_complete(self) -> bool:
        """Whether the operation can complete now (its completion cases A, B, ...)."""

    def on_complete(self) -> None:
        """Runs exactly once, on the event loop; may park new work."""

    def on_expiration(self) -> None:
        """Runs once at the deadline, just before `on_complete`."""


class CoordinatorPurgatory(Protocol):
    """Delayed work watched under hashable keys (Kafka's DelayedOperationPurgatory)."""

    def try_complete_else_watch(self, work: DelayedWork, keys: Iterable[Hashable]) -> bool:
        """Complete `work` now if it can, else watch it under `keys` until it can or its
        deadline passes. True if it completed here."""

    def check_and_complete(self, key: Hashable) -> int:
        """Try the work watched under `key` again; the number completed."""

    def shutdown(self) -> None:
        """Forget every parked operation (none completes)."""


class CoordinatorTimer(Protocol):
    """A monotonic clock and one-shot callbacks (the purgatory's hierarchical timing wheel in
    the broker, a manual clock in tests). Callbacks run on the event loop and must not block."""

    def now_ms(self) -> int:
        """Monotonic time in ms (not wall-clock)."""

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> ScheduledTimeout:
        """Run `callback()` once after `delay_ms` ms (<= 0: as soon as the timer can)."""

    def purgatory(self, name: str) -> CoordinatorPurgatory:
        """A purgatory on this timer; `name` labels its metrics ("Rebalance", ...)."""


class Deadline:
    """One cancellable callback on a `CoordinatorTimer`. Made before it is scheduled, so its
    owner can file it first (a callback already due may run inside `schedule`) and tell it
    from a later one when it fires."""

    __slots__ = ("timeout",)

    def __init__(self) -> None:
        self.timeout: ScheduledTimeout | None = None

    def schedule(self, timer: CoordinatorTimer, delay_ms: int,
                 callback: Callable[[], None]) -> Deadline:
        self.timeout = timer.schedule(delay_ms, callback)
        return self

    def cancel(self) -> bool:
        return self.timeout is not None and self.timeout.cancel()


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: int
    base_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class LoggedBatch:
    """One batch of a coordinator log. `marker`: None for a data batch, True/False for a
    COMMIT/ABORT transaction marker (no records)."""

    producer_id: int
    is_transactional: bool
    marker: bool | None
    records: tuple[LoggedRecord, ...]


class CoordinatorPartitions(Protocol):
    """What a coordinator implements so the broker can tell it about leadership."""

    def on_election(self, partition: int, leader_epoch: int) -> object:
        """This broker now leads `partition` of the coordinator's topic: load it."""

    def on_resignation(self, partition: int) -> None:
        """This broker no longer leads `partition`: drop its state."""

    def owned_partitions(self) -> set[int]:
        """Partitions loaded or loading (a FULL LeaderAndIsr resigns the ones it omits)."""


class TopicMetadata(Protocol):
    """The cluster's topics as the broker's metadata cache knows them."""

    def num_partitions(self, topic: str) -> int | None: ...

    def topic_id(self, topic: str) -> uuid.UUID | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def all_topics(self) -> Iterable[str]: ...


class InterBrokerClient(Protocol):
    """Requests to other brokers over the inter-broker listener (TLS/SASL as configured)."""

    async def request(self, broker_id: int, api_key: int, body: Any,
                      min_version: int | None = None) -> Any:
        """The response body; ConnectionError/OSError/TimeoutError when unreachable."""

    async def close(self) -> None: ...


class TransactionVerifier(Protocol):
    """KIP-890 on a partition leader: asks the transactional id's coordinator."""

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]], generic_errors: bool,
                     add: bool = False) -> dict[tuple[str, int], int]:
        """{tp: error} of the partitions that are not (or could not be) in the transaction;
        `add`: add them (transaction version 2) instead."""


class CoordinatorRuntime(Protocol):
    """What the broker offers a coordinator (see the module docstring for shapes)."""

    timer: CoordinatorTimer

    def wall_clock_ms(self) -> int: ...

    async def append(self, topic: str, partition: int,
                     records: Sequence[tuple[bytes, bytes | None]],
                     timeout_ms: int) -> AppendResult: ...

    async def append_batch(self, topic: str, partition: int, batch: bytes | bytearray,
                           timeout_ms: int, verification: object | None = None
                           ) -> AppendResult: ...

    def read(self, topic: str, partition: int, is_current: Callable[[], bool]): ...

    def read_batches(self, topic: str, partition: int, is_current: Callable[[], bool]): ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...

    async def delete_records_before(self, topic: str, partition: int, offset: int) -> int: ...

    def topic_partitions(self, topic_id: uuid.UUID) -> int | None: ...

    def watch_leadership(self, topic: str, coordinator: CoordinatorPartitions) -> None: ...

    def partition_leader(self, topic: str, partition: int) -> int | None: ...

    def inter_broker(self, client_id: str) -> InterBrokerClient: ...

    async def write_txn_markers(self, markers: Sequence[Any]
                                ) -> dict[int, dict[tuple[str, int], int]]: ...

    def start_transaction_verification(self, topic: str, partition: int, producer_id: int,
                                       producer_epoch: int, add_partition: bool
                                       ) -> object | None:
        """The KIP-890 guard to append a transactional batch of this producer with, once
        its coordinator confirmed the partition (`TransactionVerifier.verify`); None when
        no check is needed (the producer has an open transaction on the partition, or
        `transaction.partition.verification.enable` is off and `add_partition` false).
        Raises KafkaError (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...)."""
