"""A transaction coordinator over a real ReplicaManager (logs in tmp_path) with a manual
clock, for the coordinator unit tests. Data partitions and `__transaction_state` partitions
are all led by this broker; the marker channel uses its local shortcut."""

from __future__ import annotations

import asyncio
import types

from broker.coordinator_runtime import BrokerCoordinatorRuntime
from broker.txn_verification import TransactionVerifier
from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from coordinator.transaction.marker_channel import TransactionMarkerChannelManager
from coordinator.transaction.state_manager import TransactionStateManager, TxnConfig
from protocol.records import iter_batches
from tests.unit.broker.dataplane_helpers import (
    BROKER_ID,
    leader_and_isr,
    make_replica_manager,
)

START_MS = 1_700_000_000_000
TXN_PARTITIONS = 3


class Clock:
    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class Cache:
    """The metadata cache questions the coordinator side asks."""

    def __init__(self) -> None:
        self.leaders: dict[tuple[str, int], int] = {}

    def contains_partition(self, topic, partition) -> bool:
        return (topic, partition) in self.leaders

    def partition_state(self, topic, partition):
        leader = self.leaders.get((topic, partition))
        return None if leader is None else types.SimpleNamespace(leader=leader)

    def is_alive(self, broker_id) -> bool:
        return broker_id == BROKER_ID

    def alive_broker_node(self, broker_id, listener):
        return None


class PidManager:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


class Config:
    VALUES = {"request.timeout.ms": 30000}

    def get(self, key):
        return self.VALUES[key]


class TxnHarness:
    def __init__(self, tmp_path, **config) -> None:
        self.tmp_path = tmp_path
        self.clock = Clock()
        self.config = TxnConfig(num_partitions=TXN_PARTITIONS, **config)
        self.cache = Cache()
        self.pids = PidManager()
        self.rm = self.lm = None

    async def start(self, data_partitions=(("t", 0), ("t", 1), ("u", 0))):
        if self.rm is None:
            self.rm, self.timer, self.lm = make_replica_manager(self.tmp_path)
            for topic in {t for t, _ in data_partitions}:
                parts = [p for t, p in data_partitions if t == topic]
                await self.rm.become_leader_or_follower(leader_and_isr(topic, parts))
            await self.rm.become_leader_or_follower(
                leader_and_isr(TRANSACTION_STATE_TOPIC, range(TXN_PARTITIONS)))
        for tp in data_partitions:
            self.cache.leaders[tp] = BROKER_ID
        for p in range(TXN_PARTITIONS):
            self.cache.leaders[(TRANSACTION_STATE_TOPIC, p)] = BROKER_ID
        self.services = types.SimpleNamespace(
            replica_manager=self.rm, metadata_cache=self.cache, config=Config(),
            group_coordinator=None, producer_id_manager=self.pids, timer=self.timer,
            broker_id=BROKER_ID)
        self.runtime = BrokerCoordinatorRuntime(self.services, inter_broker_listener="PLAINTEXT")
        self.services.transaction_verifier = TransactionVerifier(
            self.services, self.runtime.inter_broker("txn-verify"), BROKER_ID)
        return await self._coordinator(0)

    async def _coordinator(self, epoch: int):
        """A coordinator over the logs, elected for every partition at `epoch`."""
        self.state = TransactionStateManager(BROKER_ID, self.runtime, self.config, self.clock)
        self.channel = TransactionMarkerChannelManager(BROKER_ID, self.state, self.runtime)
        self.coordinator = TransactionCoordinator(BROKER_ID, self.state, self.channel,
                                                  self.pids)
        self.services.transaction_coordinator = self.coordinator
        self.coordinator.startup(background=False)
        tasks = [self.coordinator.on_election(p, epoch) for p in range(TXN_PARTITIONS)]
        await asyncio.gather(*[t for t in tasks if t is not None])
        return self.coordinator

    async def restart_coordinator(self, epoch: int = 1):
        """A new coordinator over the same logs (a failover to this broker)."""
        await self.coordinator.shutdown()
        return await self._coordinator(epoch)

    async def stop(self) -> None:
        await self.coordinator.shutdown()
        await self.rm.shutdown()
        self.lm.close_all()

    def metadata(self, txn_id):
        _, found = self.state.get_transaction_state(txn_id)
        return None if found is None else found.metadata

    async def until(self, predicate, timeout: float = 5.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError("condition not reached")
            await asyncio.sleep(0.01)

    def markers(self, topic, partition):
        """[(producer id, epoch, commit?, coordinator epoch)] of the partition's markers."""
        log = self.rm.get_partition(topic, partition).log
        data = log.read(0, 1 << 20).records.read_bytes()
        out = []
        for b in iter_batches(data):
            if b.is_control:
                m = b.control_record()
                out.append((b.producer_id, b.producer_epoch, m.is_commit, m.coordinator_epoch))
        return out
