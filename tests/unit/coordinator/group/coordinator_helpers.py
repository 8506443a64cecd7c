"""Builders for the group coordinator unit tests: a MockTimer-driven coordinator over an
in-memory store (records kept as appended; what persistence does is tested separately with a
real ReplicaManager in test_group_store_load.py)."""

from __future__ import annotations

import asyncio
import struct
import types

from broker.coordinator_runtime import BrokerCoordinatorRuntime, WheelTimer
from broker.purgatory import MockTime, MockTimer
from coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group_store import partition_for
from coordinator.group.records import decode_record
from protocol.errors import ErrorCode

START_MS = 1_700_000_000_000


def runtime_over(replica_manager, timer, **kw) -> BrokerCoordinatorRuntime:
    """The broker's coordinator runtime over a ReplicaManager and a purgatory timer."""
    services = types.SimpleNamespace(replica_manager=replica_manager, timer=timer,
                                     metadata_cache=None, broker_id=1, config=None)
    return BrokerCoordinatorRuntime(services, **kw)


class MemoryStore:
    """GroupStore's interface; ``append`` keeps decoded records and answers ``error``."""

    def __init__(self, num_partitions: int = 50) -> None:
        self.num_partitions = num_partitions
        self.appended: list[tuple[int, list]] = []
        self.error = ErrorCode.NONE
        self.loaded: dict[int, dict] = {}
        self.gate: asyncio.Event | None = None  # when set, appends wait for it
        self.load_failures = 0  # the next n loads raise OSError
        self.load_gate: asyncio.Event | None = None  # when set, loads wait for it
        self.loads = 0

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    async def append(self, partition, records):
        if self.gate is not None:
            await self.gate.wait()
        self.appended.append((partition, [decode_record(k, v) for k, v in records]))
        return self.error

    async def load(self, partition, is_current=lambda: True):
        self.loads += 1
        if self.load_gate is not None:
            await self.load_gate.wait()
        if self.load_failures > 0:
            self.load_failures -= 1
            raise OSError(f"injected read error on partition {partition}")
        return self.loaded.get(partition, {})

    def records(self):
        return [r for _, rs in self.appended for r in rs]


class RawStore:
    """Wraps a harness store: keeps every raw record appended (for replay checks of the
    KIP-848 / KIP-932 records) and passes only the classic ones (key version < 3) on."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.raw: list = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def append(self, partition, records):
        self.raw += records
        return await self.inner.append(partition, [(k, v) for k, v in records
                                                   if struct.unpack_from(">h", k)[0] < 3])


class Harness:
    def __init__(self, **config) -> None:
        self.time = MockTime(START_MS)
        self.timer = MockTimer(self.time)
        self.store = MemoryStore()
        cfg = dict(min_session_timeout_ms=1000, max_session_timeout_ms=60000,
                   initial_rebalance_delay_ms=0)
        cfg.update(config)
        self.coordinator = GroupCoordinator(1, GroupConfig(**cfg), self.store,
                                            WheelTimer(self.timer),
                                            time_ms=self.time.milliseconds)

    async def start(self, partitions=None) -> GroupCoordinator:
        c = self.coordinator
        c.startup(run_expiry=False)
        for p in partitions if partitions is not None else range(self.store.num_partitions):
            c.on_election(p, 0)
        await c.wait_idle()
        return c

    def advance(self, ms: int) -> None:
        self.timer.advance(ms)

    def join(self, group="g", member_id="", instance_id=None, protocols=(("range", b"m"),),
             session_ms=10000, rebalance_ms=30000, require_known=True, client_id="client",
             protocol_type="consumer") -> list:
        """JoinGroup; returns a list that receives the JoinResult when answered."""
        out: list = []
        self.coordinator.handle_join_group(
            group, member_id, instance_id, require_known, client_id, "/127.0.0.1",
            rebalance_ms, session_ms, protocol_type, list(protocols), out.append)
        return out

    def join_known(self, group="g", **kw) -> list:
        """A v4+ join: MEMBER_ID_REQUIRED first, then the join with the given id."""
        first = self.join(group, **kw)
        assert first and first[0].error == ErrorCode.MEMBER_ID_REQUIRED
        return self.join(group, member_id=first[0].member_id, **kw)

    def sync(self, group, generation, member_id, assignments=None, instance_id=None,
             protocol_type=None, protocol_name=None) -> list:
        out: list = []
        self.coordinator.handle_sync_group(group, generation, member_id, protocol_type,
                                           protocol_name, instance_id, assignments or {},
                                           out.append)
        return out

    async def settle(self) -> None:
        await self.coordinator.wait_idle()
