"""The broker's side of `coordinator.runtime`: internal partitions, the timing wheel, leadership.

`BrokerCoordinatorRuntime(services, listener)` implements `coordinator.runtime.
CoordinatorRuntime` for a coordinator living in the top-level `coordinator/` package (the
share coordinator of `__share_group_state` today):

- `append` builds one v2 RecordBatch (CreateTime = now, no compression) and appends it as
  leader with acks=-1 through the ReplicaManager (``origin="coordinator"``), waiting up to
  `timeout_ms` for the ISR; the raw partition error comes back (the coordinator maps it).
- `read` replays a partition from its log start to its log end offset in chunks of
  `load_buffer_size` bytes (file reads in the default executor: the event loop never blocks
  on disk), yielding lists of `LoggedRecord`.
- `delete_records_before` advances the log start offset of a partition this broker leads.
- `timer` is `WheelTimer` over the broker's `SystemTimer` (the purgatory's hierarchical
  timing wheel).
- `watch_leadership` hooks LeaderAndIsr / StopReplica / UpdateMetadata (topic deletion)
  through `broker.coordinator_wiring.hook_coordinator_partitions`, as the group and
  transaction coordinators are hooked.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

from broker.purgatory.timer import Timer
from broker.purgatory.timer_task import TimerTask
from coordinator.runtime import AppendResult, CoordinatorPartitions, LoggedRecord, ScheduledTimeout
from protocol.errors import ErrorCode, KafkaError
from protocol.records import RecordBatchBuilder, iter_batches_lenient

__all__ = ["BrokerCoordinatorRuntime", "WheelTimer"]

DEFAULT_LOAD_BUFFER_SIZE = 5 * 1024 * 1024


class _CallbackTask(TimerTask):
    __slots__ = ("_callback",)

    def __init__(self, delay_ms: int, callback: Callable[[], None]) -> None:
        super().__init__(delay_ms)
        self._callback = callback

    def run(self) -> None:
        self._callback()


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


class BrokerCoordinatorRuntime:
    """See the module docstring. `services` is the broker's `BrokerServices`; `listener` the
    `BrokerMetadataListener` whose decisions move coordinator leadership."""

    def __init__(self, services, listener, load_buffer_size: int = DEFAULT_LOAD_BUFFER_SIZE
                 ) -> None:
        self.services = services
        self.listener = listener
        self.replica_manager = services.replica_manager
        self.timer = WheelTimer(services.timer)
        self.load_buffer_size = max(int(load_buffer_size), 1024)

    @staticmethod
    def wall_clock_ms() -> int:
        return int(time.time() * 1000)

    async def append(self, topic: str, partition: int,
                     records: Sequence[tuple[bytes, bytes | None]], timeout_ms: int
                     ) -> AppendResult:
        if not records:
            return AppendResult(ErrorCode.NONE, -1)
        builder = RecordBatchBuilder()
        now = self.wall_clock_ms()
        for key, value in records:
            builder.append(now, key, value)
        tp = (topic, partition)
        try:
            result = self.replica_manager.append_records(
                timeout_ms, -1, {tp: memoryview(bytearray(builder.build()))},
                origin="coordinator")
            if isinstance(result, asyncio.Future):
                result = await result
        except KafkaError as e:
            return AppendResult(int(e.code))
        r = result.get(tp)
        if r is None:
            return AppendResult(int(ErrorCode.UNKNOWN_SERVER_ERROR))
        return AppendResult(int(r.error), r.base_offset)

    async def read(self, topic: str, partition: int, is_current: Callable[[], bool]):
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
            chunk: list[LoggedRecord] = []
            for batch in iter_batches_lenient(data):
                next_position = max(next_position, batch.next_offset)
                if batch.is_control:
                    continue
                for rec in batch:
                    if rec.offset >= position:
                        chunk.append(LoggedRecord(
                            rec.offset, None if rec.key is None else bytes(rec.key),
                            None if rec.value is None else bytes(rec.value)))
            if chunk:
                yield chunk
            if next_position <= position:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                 f"{topic}-{partition}: no complete batch at offset {position}")
            position = next_position

    def log_end_offset(self, topic: str, partition: int) -> int:
        part = self.replica_manager.get_partition(topic, partition)
        return -1 if part is None else part.log_end_offset

    async def delete_records_before(self, topic: str, partition: int, offset: int) -> int:
        part = self.replica_manager.get_partition_or_error(topic, partition)
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker is not the leader of {topic}-{partition}")
        return part.log.delete_records_before(min(offset, part.high_watermark))

    def topic_partitions(self, topic_id: uuid.UUID) -> int | None:
        cache = self.services.metadata_cache
        name = cache.topic_name(topic_id)
        return None if name is None else cache.num_partitions(name)

    def watch_leadership(self, topic: str, coordinator: CoordinatorPartitions) -> None:
        from broker.coordinator_wiring import hook_coordinator_partitions
        hook_coordinator_partitions(self.listener, topic, self.services.broker_id,
                                    coordinator.on_election, coordinator.on_resignation,
                                    coordinator.owned_partitions)
