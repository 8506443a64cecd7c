"""An in-memory stand-in for KafkaZkClient's partition-state znodes (versions, conditional
writes, fencing) so the controller's state machines can be tested without ZooKeeper."""

from __future__ import annotations

from controller.context import ControllerContext
from controller.kafka_zk_client import ControllerMovedError, UpdateLeaderAndIsrResult
from controller.request_batch import ControllerBrokerRequestBatch
from controller.zk_client import BadVersionError, NodeExistsError
from controller.zk_data import BrokerInfo, Endpoint, ReplicaAssignment


class FakeKafkaZkClient:
    def __init__(self) -> None:
        self.states = {}  # tp -> state (partition_epoch = znode version)
        self.configs: dict[str, dict[str, str]] = {}
        self.epoch_zk_version = 0
        self.writes = 0
        self.bump_before_write: set = set()  # tps whose version moves under the controller

    def _fence(self, ezv: int) -> None:
        if ezv >= 0 and ezv != self.epoch_zk_version:
            raise ControllerMovedError("controller epoch zkVersion check fails")

    async def get_partition_states(self, tps):
        return {tp: self.states[tp] for tp in tps if tp in self.states}

    async def create_partition_states(self, states, ezv):
        self._fence(ezv)
        out = {}
        for tp, s in states.items():
            if tp in self.states:
                out[tp] = NodeExistsError()
            else:
                self.states[tp] = s._replace(partition_epoch=0)
                self.writes += 1
                out[tp] = None
        return out

    async def update_leader_and_isr(self, states, ezv):
        self._fence(ezv)
        res = UpdateLeaderAndIsrResult()
        for tp, s in states.items():
            if tp in self.bump_before_write:
                self.bump_before_write.discard(tp)
                cur = self.states[tp]
                self.states[tp] = cur._replace(partition_epoch=cur.partition_epoch + 1)
            cur = self.states.get(tp)
            if cur is None:
                res.finished[tp] = BadVersionError()
            elif cur.partition_epoch != s.partition_epoch:
                res.retry.append(tp)
            else:
                new = s._replace(partition_epoch=cur.partition_epoch + 1)
                self.states[tp] = new
                self.writes += 1
                res.finished[tp] = new
        return res

    async def get_entity_configs(self, entity_type, name):
        return dict(self.configs.get(name, {}))


def make_context(brokers=(1, 2, 3), assignments=None, epoch=5) -> ControllerContext:
    ctx = ControllerContext()
    ctx.epoch, ctx.epoch_zk_version = epoch, 0
    ctx.add_live_brokers({b: (BrokerInfo(b, (Endpoint("PLAINTEXT", "h", 9000 + b),)), 100 + b)
                          for b in brokers})
    for tp, replicas in (assignments or {}).items():
        ctx.update_partition_full_replica_assignment(tp, ReplicaAssignment(tuple(replicas)))
        ctx.all_topics.add(tp[0])
    return ctx


class Sent(list):
    """What a batch sent: (broker, api_key, request)."""

    def __call__(self, broker, api_key, version, request, callback):
        self.append((broker, api_key, request))

    def of(self, api_key):
        return [(b, r) for b, k, r in self if k == api_key]


def make_batch(ctx) -> tuple[ControllerBrokerRequestBatch, Sent]:
    sent = Sent()
    return ControllerBrokerRequestBatch(1, ctx, "PLAINTEXT", sent), sent


class FakeAdminZk(FakeKafkaZkClient):
    """Adds the topic-assignment, reassignment-znode and broker-registration calls."""

    def __init__(self) -> None:
        super().__init__()
        self.assignments: dict[str, dict] = {}
        self.reassign_znode: dict | None = None
        self.brokers: dict[int, tuple] = {}

    async def set_topic_assignment(self, topic, topic_id, partitions, ezv=-1,
                                   expected_version=-1):
        self._fence(ezv)
        self.assignments[topic] = dict(partitions)

    async def reassign_partitions_in_progress(self):
        return self.reassign_znode is not None

    async def get_partition_reassignment(self):
        return dict(self.reassign_znode or {})

    async def delete_partition_reassignment(self, ezv):
        self._fence(ezv)
        self.reassign_znode = None

    async def set_or_create_partition_reassignment(self, reassignment, ezv):
        self._fence(ezv)
        self.reassign_znode = dict(reassignment)

    async def get_all_brokers_and_epochs(self):
        return dict(self.brokers)
