"""The share coordinator over a coordinator runtime: load, group commit, append failures,
leadership changes and pruning (an in-memory runtime implementing `coordinator.runtime`)."""

from __future__ import annotations

import asyncio
import uuid

from broker.coordinator_runtime import WheelTimer
from broker.purgatory.timer import MockTime, MockTimer
from coordinator.runtime import AppendResult, LoggedRecord
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateSummaryRequest,
    WriteStateRequest,
)
from coordinator.share.share_coordinator import ShareCoordinator, ShareCoordinatorConfig
from coordinator.share.state import DeadLetterIntent, StateBatch
from protocol.errors import ErrorCode as E

TID = uuid.UUID("6e2a4c1f-0b7d-4a55-9d43-1c1f5f0e9a01")


class MemoryRuntime:
    """One in-memory log per partition; `fail` makes the next appends answer that code;
    `gate` (an Event) holds appends until set."""

    def __init__(self) -> None:
        self.time = MockTime(1_000)
        self.mock_timer = MockTimer(self.time)
        self.timer = WheelTimer(self.mock_timer)
        self.logs: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        self.start: dict[int, int] = {}
        self.fail: list[int] = []
        self.gate: asyncio.Event | None = None
        self.appends: list[int] = []
        self.watched = None

    def wall_clock_ms(self) -> int:
        return 1_700_000_000_000

    def log_end_offset(self, topic, partition) -> int:
        log = self.logs.setdefault(partition, [])
        return log[-1][0] + 1 if log else self.start.get(partition, 0)

    async def append(self, topic, partition, records, timeout_ms) -> AppendResult:
        if self.gate is not None:
            await self.gate.wait()
        base = self.log_end_offset(topic, partition)
        self.appends.append(len(records))
        if self.fail:
            code = self.fail.pop(0)
            if code == E.REQUEST_TIMED_OUT:  # in the local log, not acknowledged
                self.logs[partition].extend((base + i, k, v) for i, (k, v) in enumerate(records))
            return AppendResult(code)
        self.logs[partition].extend((base + i, k, v) for i, (k, v) in enumerate(records))
        return AppendResult(E.NONE, base)

    async def read(self, topic, partition, is_current):
        recs = [LoggedRecord(o, k, v) for o, k, v in self.logs.get(partition, [])
                if o >= self.start.get(partition, 0)]
        yield recs

    async def delete_records_before(self, topic, partition, offset) -> int:
        self.start[partition] = max(self.start.get(partition, 0), offset)
        return self.start[partition]

    def topic_partitions(self, topic_id):
        return 3 if topic_id == TID else None

    def watch_leadership(self, topic, coordinator) -> None:
        self.watched = (topic, coordinator)


def _coordinator(runtime: MemoryRuntime, **kw) -> ShareCoordinator:
    c = ShareCoordinator(runtime, ShareCoordinatorConfig(num_partitions=1, **kw))
    c.startup()
    return c


async def _elect(c: ShareCoordinator, epoch: int = 0) -> None:
    task = c.on_election(0, epoch)
    if task is not None:
        await task


def _write(start: int, *batches, leader_epoch: int = 1, added=(), done=()) -> WriteStateRequest:
    return WriteStateRequest("g", TID, 0, 0, leader_epoch, start, tuple(batches), tuple(added),
                             tuple(done))


async def test_not_coordinator_until_elected_then_serves():
    rt = MemoryRuntime()
    c = _coordinator(rt)
    assert rt.watched[0] == "__share_group_state"
    assert (await c.read_state(ReadStateRequest("g", TID, 0, 1))).error_code == E.NOT_COORDINATOR
    await _elect(c)
    r = await c.read_state(ReadStateRequest("g", TID, 0, 1))
    assert r.error_code == E.NONE and r.start_offset == -1
    assert await c.write_state(_write(10, StateBatch(10, 14, 2, 1))) == E.NONE
    r = await c.read_state(ReadStateRequest("g", TID, 0, 1))
    assert (r.start_offset, r.state_batches) == (10, (StateBatch(10, 14, 2, 1),))
    assert (await c.read_state(ReadStateRequest("g", uuid.uuid4(), 0, 1))).error_code \
        == E.UNKNOWN_TOPIC_OR_PARTITION
    c.on_resignation(0)
    assert await c.write_state(_write(10)) == E.NOT_COORDINATOR
    await c.shutdown()


async def test_failover_reloads_every_record_and_fences():
    rt = MemoryRuntime()
    c = _coordinator(rt, snapshot_update_records_per_snapshot=2)
    await _elect(c)
    await c.read_state(ReadStateRequest("g", TID, 0, 1))
    for i in range(5):
        assert await c.write_state(_write(i, StateBatch(i, i, 2, 1),
                                          added=[DeadLetterIntent(i, i, 1, 1)])) == E.NONE
    assert await c.write_state(_write(5, done=(0, 1))) == E.NONE
    await c.shutdown()
    c2 = _coordinator(rt, snapshot_update_records_per_snapshot=2)  # another broker leads it
    await _elect(c2, 1)
    r = await c2.read_state(ReadStateRequest("g", TID, 0, 2))
    assert r.start_offset == 5
    assert [i.sequence for i in r.dead_letters] == [2, 3, 4]
    assert await c2.write_state(_write(6, leader_epoch=1)) == E.FENCED_LEADER_EPOCH
    await c2.shutdown()


async def test_group_commit_batches_queued_operations_and_fails_them_together():
    rt = MemoryRuntime()
    c = _coordinator(rt)
    await _elect(c)
    await c.read_state(ReadStateRequest("g", TID, 0, 1))
    rt.gate = asyncio.Event()
    first = asyncio.ensure_future(c.write_state(_write(1)))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(c.write_state(_write(2 + i))) for i in range(10)]
    await asyncio.sleep(0)
    rt.gate.set()
    assert await first == E.NONE and await asyncio.gather(*rest) == [E.NONE] * 10
    assert rt.appends[-2:] == [1, 10]  # the ten queued writes went out as one batch
    rt.fail = [E.NOT_ENOUGH_REPLICAS]
    rt.gate = asyncio.Event()
    batch = [asyncio.ensure_future(c.write_state(_write(20 + i))) for i in range(3)]
    await asyncio.sleep(0)
    rt.gate.set()
    assert await asyncio.gather(*batch) == [E.COORDINATOR_NOT_AVAILABLE] * 3
    summary = await c.read_state_summary(ReadStateSummaryRequest("g", TID, 0))
    assert summary.start_offset == 11  # rolled back to the last acknowledged write
    rt.fail = [E.NOT_LEADER_OR_FOLLOWER]
    assert await c.write_state(_write(30)) == E.NOT_COORDINATOR
    assert await c.write_state(_write(31)) == E.NONE
    await c.shutdown()


async def test_timed_out_append_keeps_offsets_consistent():
    rt = MemoryRuntime()
    c = _coordinator(rt, snapshot_update_records_per_snapshot=1)
    await _elect(c)
    assert await c.write_state(_write(0, leader_epoch=0)) == E.NONE
    rt.fail = [E.REQUEST_TIMED_OUT]  # the record stays in the local log
    assert await c.write_state(_write(1, leader_epoch=0)) == E.COORDINATOR_NOT_AVAILABLE
    assert await c.write_state(_write(2, leader_epoch=0)) == E.NONE
    # the model's snapshot offsets point at real records: pruning keeps the live snapshot
    await c.prune()
    c2 = _coordinator(rt)
    await _elect(c2, 1)
    assert (await c2.read_state_summary(ReadStateSummaryRequest("g", TID, 0))).start_offset == 2
    await c.shutdown()
    await c2.shutdown()


async def test_initialize_delete_and_pruning_on_the_timer():
    rt = MemoryRuntime()
    c = _coordinator(rt, snapshot_update_records_per_snapshot=1, prune_interval_ms=1000)
    await _elect(c)
    assert await c.initialize_state(InitializeStateRequest("g", TID, 0, 1, 7)) == E.NONE
    assert await c.initialize_state(InitializeStateRequest("g", TID, 0, 1, 9)) \
        == E.FENCED_STATE_EPOCH
    for i in range(4):
        assert await c.write_state(WriteStateRequest("g", TID, 0, 1, 0, 8 + i)) == E.NONE
    rt.mock_timer.advance(1000)
    await asyncio.sleep(0.01)
    assert rt.start.get(0, 0) > 0  # older snapshots pruned
    assert await c.delete_state(DeleteStateRequest("g", TID, 0)) == E.NONE
    assert (await c.read_state_summary(ReadStateSummaryRequest("g", TID, 0))).start_offset == -1
    await c.shutdown()
