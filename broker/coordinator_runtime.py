"""The broker's side of `coordinator.runtime`: internal partitions, the timing wheel, leadership.

`BrokerCoordinatorRuntime(services, listener)` implements `coordinator.runtime.
CoordinatorRuntime` for the coordinators of the top-level `coordinator/` package (group,
transaction, share); each gets its own, with the load buffer size of its topic:

- `append` / `append_batch` append one v2 RecordBatch as leader with acks=-1 through the
  ReplicaManager (``origin="coordinator"``: the leader's producer state still fences older
  producer epochs), waiting up to `timeout_ms` for the ISR; the raw partition error comes
  back (the coordinator maps it).
- `read_batches` / `read` replay a partition from its log start to its log end offset in
  chunks of `load_buffer_size` bytes (file reads in the default executor: the event loop
  never blocks on disk).
- `delete_records_before` advances the log start offset of a partition this broker leads.
- `timer` is `WheelTimer` over the broker's `SystemTimer` (the purgatory's hierarchical
  timing wheel); `timer.purgatory(name)` a `DelayedOperationPurgatory` on it, the
  coordinator's `DelayedWork` wrapped in a `DelayedOperation`.
- `watch_leadership` hooks LeaderAndIsr / StopReplica / UpdateMetadata (topic deletion)
  through `hook_coordinator_partitions`.
- `partition_leader` reads the metadata cache; `inter_broker(client_id)` is a `BrokerLinks`
  on the inter-broker listener; `write_txn_markers` is `broker.txn_markers`;
  `start_transaction_verification` the partition's KIP-890 guard.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence

from broker.purgatory.delayed_operation import DelayedOperation, DelayedOperationPurgatory
from broker.purgatory.timer import Timer
from broker.purgatory.timer_task import TimerTask
from coordinator.runtime import (
    AppendResult,
    CoordinatorPartitions,
    DelayedWork,
    LoggedBatch,
    LoggedRecord,
    ScheduledTimeout,
)
from protocol.errors import ErrorCode, KafkaError
from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches_lenient

__all__ = ["BrokerCoordinatorRuntime", "WheelPurgatory", "WheelTimer",
           "apply_partition_decision", "hook_coordinator_partitions"]

DEFAULT_LOAD_BUFFER_SIZE = 5 * 1024 * 1024
TYPE_FULL = 2


class _CallbackTask(TimerTask):
    __slots__ = ("_callback",)

    def __init__(self, delay_ms: int, callback: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._callback = callback

    def run(self) -> None:
        self._callback()


class _ParkedWork(DelayedOperation):
    """A coordinator's `DelayedWork` as a purgatory `DelayedOperation`."""

    __slots__ = ("work",)

    def __init__(self, work: DelayedWork) -> None:
        super().__init__(int(work.delay_ms))
        self.work = work

    def try_complete(self) -> bool:
        return self.work.can_complete() and self.force_complete()

    def on_complete(self) -> None:
        self.work.on_complete()

    def on_expiration(self) -> None:
        self.work.on_expiration()


class WheelPurgatory:
    """`coordinator.runtime.CoordinatorPurgatory` over a `DelayedOperationPurgatory`."""

    __slots__ = ("operations",)

    def __init__(self, name: str, timer: Timer) -> None:
        self.operations = DelayedOperationPurgatory(name, timer)

    def try_complete_else_watch(self, work: DelayedWork, keys: Iterable[Hashable]) -> bool:
        return self.operations.try_complete_else_watch(_ParkedWork(work), keys)

    def check_and_complete(self, key: Hashable) -> int:
        return self.operations.check_and_complete(key)

    def shutdown(self) -> None:
        self.operations.shutdown()


class WheelTimer:
    """`coordinator.runtime.CoordinatorTimer` over a purgatory `Timer` (`SystemTimer`, or
    `MockTimer` on a manual clock): one `TimerTask` per scheduled callback."""

    __slots__ = ("_timer",)

    def __init__(self, timer: Timer) -> None:
        self._timer = timer

    def now_ms(self) -> int:
        return self._timer.now_ms()

    def schedule(self, delay_ms: int, callback: Callable[[], None]) -> ScheduledTimeout:
        task = _CallbackTask(int(delay_ms), callback)
        self._timer.add(task)
        return task

    def purgatory(self, name: str) -> WheelPurgatory:
        return WheelPurgatory(name, self._timer)


class BrokerCoordinatorRuntime:
    """See the module docstring. `services` is the broker's `BrokerServices`; `listener` the
    `BrokerMetadataListener` whose decisions move coordinator leadership;
    `inter_broker_listener` the listener name of `inter_broker` (default: the config's)."""

    def __init__(self, services, listener=None,
                 load_buffer_size: int = DEFAULT_LOAD_BUFFER_SIZE,
                 inter_broker_listener: str | None = None) -> None:
        self.services = services
        self.listener = listener
        self.replica_manager = services.replica_manager
        self.timer = WheelTimer(services.timer)
        self.load_buffer_size = max(int(load_buffer_size), 1024)
        self.inter_broker_listener = inter_broker_listener

    @staticmethod
    def wall_clock_ms() -> int:
        return int(time.time() * 1000)

    # --- the log -------------------------------------------------------------------------------
    async def append(self, topic: str, partition: int,
                     records: Sequence[tuple[bytes, bytes | None]], timeout_ms: int
                     ) -> AppendResult:
        if not records:
            return AppendResult(ErrorCode.NONE, -1)
        builder = RecordBatchBuilder()
        now = self.wall_clock_ms()
        for key, value in records:
            builder.append(now, key, value)
        return await self.append_batch(topic, partition, builder.build(), timeout_ms)

    async def append_batch(self, topic: str, partition: int, batch: bytes | bytearray,
                           timeout_ms: int, verification: object | None = None
                           ) -> AppendResult:
        tp = (topic, partition)
        if not isinstance(batch, bytearray):
            batch = bytearray(batch)
        try:
            result = self.replica_manager.append_records(
                timeout_ms, -1, {tp: memoryview(batch)}, origin="coordinator",
                verification_guards=None if verification is None else {tp: verification})
            if isinstance(result, asyncio.Future):
                result = await result
        except KafkaError as e:
            return AppendResult(int(e.code), -1, e.message)
        r = result.get(tp)
        if r is None:
            return AppendResult(int(ErrorCode.UNKNOWN_SERVER_ERROR))
        return AppendResult(int(r.error), r.base_offset, r.error_message)

    async def read_batches(self, topic: str, partition: int, is_current: Callable[[], bool]):
        part = self.replica_manager.get_partition(topic, partition)
        if part is None:
            return
        plog = part.log
        loop = asyncio.get_running_loop()
        position = plog.log_start_offset
        end = plog.log_end_offset
        while position < end and is_current():
            info = plog.read(position, self.load_buffer_size, max_offset=end,
                             min_one_message=True)
            data = await loop.run_in_executor(None, info.records.read_bytes)
            next_position = position
            chunk: list[LoggedBatch] = []
            for batch in iter_batches_lenient(data):
                next_position = max(next_position, batch.next_offset)
                logged = _logged(batch, position)
                if logged is not None:
                    chunk.append(logged)
            if chunk:
                yield chunk
            if next_position <= position:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{topic}-{partition}: no complete batch at offset {position}")
            position = next_position

    async def read(self, topic: str, partition: int, is_current: Callable[[], bool]):
        async for batches in self.read_batches(topic, partition, is_current):
            chunk = [r for b in batches if b.marker is None for r in b.records]
            if chunk:
                yield chunk

    def log_end_offset(self, topic: str, partition: int) -> int:
        part = self.replica_manager.get_partition(topic, partition)
        return -1 if part is None else part.log_end_offset

    async def delete_records_before(self, topic: str, partition: int, offset: int) -> int:
        part = self.replica_manager.get_partition_or_error(topic, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker is not the leader of {topic}-{partition}")
        return part.log.delete_records_before(min(offset, part.high_watermark))

    # --- metadata and leadership ---------------------------------------------------------------
    def topic_partitions(self, topic_id: uuid.UUID) -> int | None:
        cache = self.services.metadata_cache
        name = cache.topic_name(topic_id)
        return None if name is None else cache.num_partitions(name)

    def partition_leader(self, topic: str, partition: int) -> int | None:
        cache = self.services.metadata_cache
        state = cache.partition_state(topic, partition) if cache is not None else None
        if state is None:
            return None
        if state.leader < 0 or not cache.is_alive(state.leader):
            return -1
        return state.leader

    def watch_leadership(self, topic: str, coordinator: CoordinatorPartitions) -> None:
        hook_coordinator_partitions(self.listener, topic, self.services.broker_id,
                                    coordinator.on_election, coordinator.on_resignation,
                                    coordinator.owned_partitions)

    # --- transactions ----------------------------------------------------------------------------
    def inter_broker(self, client_id: str):
        from broker.broker_links import BrokerLinks
        listener = self.inter_broker_listener
        if listener is None:
            from broker.replication.wiring import inter_broker_listener
            listener = inter_broker_listener(self.services.config)
        return BrokerLinks(self.services, listener, client_id)

    async def write_txn_markers(self, markers) -> dict[int, dict[tuple[str, int], ErrorCode]]:
        from broker.txn_markers import write_txn_markers
        return await write_txn_markers(self.services, markers)

    def start_transaction_verification(self, topic: str, partition: int, producer_id: int,
                                       producer_epoch: int, add_partition: bool):
        rm = self.replica_manager
        if not (add_partition or rm.transaction_verification_enabled):
            return None
        return rm.get_partition_or_error(topic, partition).maybe_start_transaction_verification(
            producer_id, -1, producer_epoch)


def _logged(batch, position: int) -> LoggedBatch | None:
    """A read batch as a `LoggedBatch`; None for an unreadable marker or one below
    `position` (the log start offset inside a batch)."""
    if batch.is_control:
        if batch.base_offset < position:
            return None
        try:
            marker = batch.control_record()
        except KafkaError:
            return None
        if marker is None:
            return None
        return LoggedBatch(batch.producer_id, batch.is_transactional, marker.is_commit, ())
    records = tuple(LoggedRecord(rec.offset, None if rec.key is None else bytes(rec.key),
                                 None if rec.value is None else bytes(rec.value))
                    for rec in batch if rec.offset >= position)
    return LoggedBatch(batch.producer_id, batch.is_transactional, None, records)


# --- leadership hooks ----------------------------------------------------------------------------
def apply_partition_decision(topic: str, broker_id: int, on_election, on_resignation,
                             current: Callable[[], Iterable[int]], decision,
                             results: dict | None = None) -> None:
    """A LeaderAndIsr decision for a coordinator topic: partitions this broker leads are
    elected (with the leader epoch as coordinator epoch), others resigned; a FULL decision
    resigns the `current()` partitions it does not list. `results` (the ReplicaManager's
    ``{(topic, partition): error code}``): a partition it failed (e.g. KAFKA_STORAGE_ERROR,
    an offline log dir) is resigned, not elected."""
    listed: set[int] = set()
    for ts in decision.topic_states:
        if ts.topic_name != topic:
            continue
        for ps in ts.partition_states:
            listed.add(ps.partition_index)
            failed = bool(results and results.get((topic, ps.partition_index)))
            if ps.leader == broker_id and not failed:
                on_election(ps.partition_index, ps.leader_epoch)
            else:
                on_resignation(ps.partition_index)
    if getattr(decision, "type", 0) == TYPE_FULL:
        for p in list(current()):
            if p not in listed:
                on_resignation(p)


def _partitions_of(decision, topic: str, deleted_only: bool = False) -> list[int]:
    return [ps.partition_index for ts in decision.topic_states if ts.topic_name == topic
            for ps in ts.partition_states if not deleted_only or ps.leader == -2]


def hook_coordinator_partitions(listener, topic: str, broker_id: int, on_election,
                                on_resignation, current: Callable[[], Iterable[int]]) -> None:
    """Wrap the listener's methods (the listener stays the one the controller calls) so that
    LeaderAndIsr (after the ReplicaManager applied it) elects/resigns the coordinator's
    partitions of `topic`, StopReplica (before) and UpdateMetadata deleting partitions
    (leader -2, after) resign them. The wrapped methods' results are passed through."""
    on_leader_and_isr = listener.on_leader_and_isr
    on_stop_replica = listener.on_stop_replica
    on_update_metadata = listener.on_update_metadata

    @functools.wraps(on_leader_and_isr)
    async def leader_and_isr(decision):
        results = await on_leader_and_isr(decision)
        apply_partition_decision(topic, broker_id, on_election, on_resignation, current,
                                 decision, results)
        return results

    @functools.wraps(on_stop_replica)
    async def stop_replica(decision):
        for p in _partitions_of(decision, topic):
            on_resignation(p)
        return await on_stop_replica(decision)

    @functools.wraps(on_update_metadata)
    async def update_metadata(decision):
        result = await on_update_metadata(decision)
        for p in _partitions_of(decision, topic, deleted_only=True):
            on_resignation(p)
        return result

    listener.on_leader_and_isr = leader_and_isr
    listener.on_stop_replica = stop_replica
    listener.on_update_metadata = update_metadata
