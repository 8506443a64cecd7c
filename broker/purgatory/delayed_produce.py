"""`DelayedProduce`: an acks=-1 produce waiting for the high watermark (Kafka's DelayedProduce).

The ReplicaManager appends every partition of the request first; partitions whose append
succeeded must then see `high watermark >= last appended offset + 1` before the client is
answered. With ISR {self} (single node) that holds right after the append, so the operation
completes inside `try_complete_else_watch` and is never parked; with followers it waits for
their fetches to move the HW, or for `timeout_ms`.

Watch keys: `TopicPartitionKey(topic, partition)` of every partition still waiting. The
ReplicaManager calls `check_and_complete` on a key when that partition's HW moves, when its
leadership changes and when it is deleted.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.purgatory.delayed_operation import DelayedOperation
from protocol.errors import ErrorCode

__all__ = ["DelayedProduce", "ProducePartitionResult", "ProducePartitionStatus"]


class ProducePartitionResult:
    """One partition's produce answer (Kafka's PartitionResponse). Offsets in records,
    times in ms; `log_append_time` is -1 unless the topic uses LogAppendTime;
    `record_errors` (KIP-467) names the records that failed validation."""

    __slots__ = ("error", "base_offset", "last_offset", "log_append_time", "log_start_offset",
                 "error_message", "record_errors")

    def __init__(self, error: int = ErrorCode.NONE, base_offset: int = -1, last_offset: int = -1,
                 log_append_time: int = -1, log_start_offset: int = -1,
                 error_message: str | None = None,
                 record_errors: tuple | list = ()) -> None:
        self.error = error
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.error_message = error_message
        self.record_errors = record_errors  # KIP-467: [(batch_index, message)]

    def __repr__(self) -> str:
        return (f"ProducePartitionResult(error={int(self.error)}, base_offset={self.base_offset}, "
                f"log_start_offset={self.log_start_offset}, message={self.error_message!r})")


class ProducePartitionStatus:
    """A partition of a DelayedProduce: `required_offset` = last appended offset + 1."""

    __slots__ = ("required_offset", "result", "acks_pending")

    def __init__(self, required_offset: int, result: ProducePartitionResult) -> None:
        self.required_offset = required_offset
        self.result = result
        self.acks_pending = result.error == ErrorCode.NONE
        if self.acks_pending:
            # Answer if the deadline passes first (Kafka presets the timeout error).
            result.error = ErrorCode.REQUEST_TIMED_OUT
            result.error_message = None


class DelayedProduce(DelayedOperation):
    """`statuses`: (topic, partition) -> status, in request order. `get_partition(topic, p)`
    returns the hosted Partition or None. `callback(results)` gets (topic, partition) ->
    ProducePartitionResult once, on completion."""

    __slots__ = ("statuses", "get_partition", "callback")

    def __init__(self, delay_ms: int, statuses: dict[tuple[str, int], ProducePartitionStatus],
                 get_partition: Callable, callback: Callable[[dict], None]) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.get_partition = get_partition
        self.callback = callback

    def try_complete(self) -> bool:
        """Complete when every partition is no longer pending; a partition stops pending in:

        Case A: the partition is no longer hosted here (deleted) -> UNKNOWN_TOPIC_OR_PARTITION.
        Case B: this broker is no longer its leader -> NOT_LEADER_OR_FOLLOWER.
        Case C: its high watermark reached the required offset -> NONE
                (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is below min.insync.replicas).
        (Case D, the deadline `timeout_ms`, is the timer: still-pending partitions answer
        REQUEST_TIMED_OUT.)
        """
        pending = False
        for (topic, p), status in self.statuses.items():
            if not status.acks_pending:
                continue
            partition = self.get_partition(topic, p)
            if partition is None:
                done, error = True, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                done, error = partition.check_enough_replicas_reached_offset(
                    status.required_offset)
            if done:
                status.acks_pending = False
                status.result.error = error
            else:
                pending = True
        if pending:
            return False
        return self.force_complete()

    def on_complete(self) -> None:
        self.callback({tp: s.result for tp, s in self.statuses.items()})
