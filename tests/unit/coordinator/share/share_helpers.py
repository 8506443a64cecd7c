"""Shared fixtures for the share-group unit tests: manual clock, in-process coordinator, helpers.

`ShareHarness` wires a `SharePartition` exactly as the broker will: the purgatory's
`MockTimer` (hierarchical timing wheel on a manual clock) behind `WheelTimer`, and a
`LocalPersister` whose shard replays every record after a round trip through the binary
codec. `failover()` rebuilds the coordinator shard from the record log and loads a new
leader at a higher leader epoch, as a broker failover does.
"""

from __future__ import annotations

import uuid

from broker.coordinator_runtime import WheelTimer
from broker.purgatory.timer import MockTime, MockTimer
from coordinator.share.config import SharePartitionConfig
from coordinator.share.coordinator_shard import ShareCoordinatorShard
from coordinator.share.load import LogOffsets, load_share_partition
from coordinator.share.local_persister import LocalPersister
from coordinator.share.records import BinaryRecordCodec
from coordinator.share.share_partition import SharePartition
from coordinator.share.state import AcknowledgementBatch, FetchedBatch
from protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID("6e2a4c1f-0b7d-4a55-9d43-1c1f5f0e9a01")
GROUP = "g1"


def batches(first: int, last: int, size: int = 5) -> list[FetchedBatch]:
    """Fetched RecordBatches covering [first, last], `size` records each."""
    return [FetchedBatch(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]


def ack(first: int, last: int, *types: int) -> AcknowledgementBatch:
    return AcknowledgementBatch(first, last, tuple(types))


class Listener:
    def __init__(self) -> None:
        self.available = 0
        self.dead_letters: list = []

    def on_records_available(self, partition) -> None:
        self.available += 1

    def on_dead_letters(self, partition, intents) -> None:
        self.dead_letters.extend(intents)


class FlakyPersister:
    """Wraps a persister; `fail_next` makes the next writes answer that error code."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.failures: list[int] = []
        self.writes: list = []

    def fail_next(self, code: int = ErrorCode.COORDINATOR_NOT_AVAILABLE, times: int = 1) -> None:
        self.failures.extend([code] * times)

    async def read_state(self, request):
        return await self.inner.read_state(request)

    async def write_state(self, request) -> int:
        if self.failures:
            return self.failures.pop(0)
        self.writes.append(request)
        return await self.inner.write_state(request)


class ShareHarness:
    def __init__(self, config: SharePartitionConfig | None = None, *, updates_per_snapshot: int = 500,
                 log: LogOffsets | None = None) -> None:
        self.config = config or SharePartitionConfig()
        self.time = MockTime(1_000)
        self.mock_timer = MockTimer(self.time)
        self.timer = WheelTimer(self.mock_timer)
        self.updates_per_snapshot = updates_per_snapshot
        self.coordinator = LocalPersister(self._shard(), BinaryRecordCodec())
        self.persister = FlakyPersister(self.coordinator)
        self.listener = Listener()
        self.log = log or LogOffsets(0, 0)
        self.leader_epoch = 0
        self.wall_clock_ms = 1_700_000_000_000

    def _shard(self) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(snapshot_update_records_per_snapshot=self.updates_per_snapshot,
                                     time_ms=lambda: self.time.milliseconds())

    async def load(self, config: SharePartitionConfig | None = None) -> SharePartition:
        sp = await load_share_partition(
            GROUP, TOPIC_ID, 0, config=config or self.config, timer=self.timer,
            persister=self.persister, leader_epoch=self.leader_epoch, log=self.log,
            wall_clock_ms=self.wall_clock_ms, listener=self.listener)
        assert isinstance(sp, SharePartition), sp
        return sp

    async def failover(self, old: SharePartition | None = None, *, coordinator_too: bool = True,
                       config: SharePartitionConfig | None = None) -> SharePartition:
        """The old leader dies (its timers stop); a new leader at epoch + 1 loads the state."""
        if old is not None:
            old.close()
        if coordinator_too:
            self.coordinator.reload(self._shard())
        self.leader_epoch += 1
        return await self.load(config)

    async def advance(self, ms: int, sp: SharePartition | None = None) -> None:
        self.mock_timer.advance(ms)
        if sp is not None:
            await sp.drain()
