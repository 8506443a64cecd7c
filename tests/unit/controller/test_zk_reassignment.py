"""KIP-455 reassignment in the ZooKeeper controller (phases U, A, B and cancellation) and a
bounced broker (session expiry + re-registration), against in-memory znodes."""

from __future__ import annotations

from controller import controller_events as ev
from controller.context import PartitionState, ReplicaState
from controller.controller_core import ControllerConfig
from controller.kafka_controller import KafkaController
from controller.zk_data import BrokerInfo, Endpoint
from controller.zk_data import LeaderIsrAndControllerEpoch as S
from controller.zk_data import ReplicaAssignment as RA
from protocol.errors import ErrorCode
from tests.unit.controller.zk_fakes import FakeAdminZk, make_context

TP = ("t", 0)
LAI, STOP = 4, 5


class _ZkStub:
    def register_state_handler(self, h): ...

    def unregister_state_handler(self, name): ...

    def register_znode_change_handler(self, h): ...

    def unregister_znode_change_handler(self, path): ...

    async def register_znode_change_handler_and_check_existence(self, h):
        return False


class _Channel:
    def __init__(self):
        self.sent, self.added, self.removed = [], [], []

    def send_request(self, broker, api_key, version, request, callback=None):
        self.sent.append((broker, api_key, request))

    def add_broker(self, info):
        self.added.append(info.id)

    async def remove_broker(self, broker_id):
        self.removed.append(broker_id)

    async def wait_answered(self, timeout_s):
        self.sent.append((None, "answered", timeout_s))
        return True


def _controller(brokers=(1, 2, 3)):
    zk = FakeAdminZk()
    zk.zk = _ZkStub()
    c = KafkaController(ControllerConfig(broker_id=1), zk,
                        BrokerInfo(1, (Endpoint("PLAINTEXT", "h", 1),)), 101)
    ctx = make_context(brokers, {TP: (1, 2)})
    for obj in (c, c.batch, c.partition_sm, c.replica_sm, c.deletion):
        obj.context = ctx
    c.channel = _Channel()
    c.active_controller_id = 1
    zk.states[TP] = ctx.leadership[TP] = S(1, 3, (1, 2), 5, 4)
    ctx.partition_states[TP] = PartitionState.ONLINE
    for r in (1, 2):
        ctx.replica_states[(TP, r)] = ReplicaState.ONLINE
    return c, zk, ctx


async def _run(c, event):
    await c.process(event)
    return await event.future


async def test_reassignment_phases_and_completion_on_isr_expansion():
    c, zk, ctx = _controller()
    top, res = await _run(c, ev.ApiPartitionReassignment({TP: [2, 3]}))
    assert (top, res) == (ErrorCode.NONE, {TP: (ErrorCode.NONE, None)})
    # phase U/A: RS = TRS + ORS, AR = [3], RR = [1]; leader epoch bumped, replica 3 is New
    assert ctx.partition_full_replica_assignment(TP) == RA((2, 3, 1), (3,), (1,))
    assert zk.assignments["t"][0] == RA((2, 3, 1), (3,), (1,))
    assert zk.states[TP].leader_epoch == 4 and ctx.partitions_being_reassigned == {TP}
    assert ctx.replica_state((TP, 3)) == ReplicaState.NEW
    lai_to = {b for b, k, _ in c.channel.sent if k == LAI}
    assert {1, 2, 3} <= lai_to
    top, listed = await _run(c, ev.ListPartitionReassignments(None))
    assert listed == {TP: RA((2, 3, 1), (3,), (1,))}
    # the leader adds 3 to the ISR (AlterPartition): phase B completes the move
    zk.states[TP] = ctx.leadership[TP] = S(1, 4, (1, 2, 3), 5, zk.states[TP].partition_epoch)
    c.channel.sent.clear()
    await c.reassignments.maybe_complete_reassignment(TP)
    assert ctx.partition_full_replica_assignment(TP) == RA((2, 3))
    assert zk.assignments["t"][0] == RA((2, 3))
    assert zk.states[TP].leader == 2 and 1 not in zk.states[TP].isr  # leader left: re-elected
    assert ctx.partitions_being_reassigned == set()
    stops = [(b, r) for b, k, r in c.channel.sent if k == STOP]
    assert any(b == 1 and r.topic_states[0].partition_states[0].delete_partition
               for b, r in stops)  # the removed replica is deleted


async def test_cancellation_restores_the_origin_replicas():
    c, zk, ctx = _controller()
    await _run(c, ev.ApiPartitionReassignment({TP: [2, 3]}))
    c.channel.sent.clear()
    top, res = await _run(c, ev.ApiPartitionReassignment({TP: None}))
    assert res == {TP: (ErrorCode.NONE, None)}
    # the origin replicas, in RS order: Kafka too cannot restore the original order
    assert ctx.partition_full_replica_assignment(TP) == RA((2, 1))
    assert zk.assignments["t"][0] == RA((2, 1))
    assert ctx.partitions_being_reassigned == set()
    stops = [(b, r) for b, k, r in c.channel.sent if k == STOP]
    assert any(b == 3 for b, _ in stops)  # the replica being added is stopped and deleted
    # nothing left to cancel
    _top, res = await _run(c, ev.ApiPartitionReassignment({TP: None}))
    assert res == {TP: (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)}


async def test_reassignment_validation():
    c, _zk, _ctx = _controller()
    _top, res = await _run(c, ev.ApiPartitionReassignment({
        TP: [], ("t", 9): [1], ("u", 0): [1, 1]}))
    assert res[TP][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert res[("t", 9)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert res[("u", 0)][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    _top, res = await _run(c, ev.ApiPartitionReassignment({TP: [2, 7]}))
    assert res[TP][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # 7 is not a live broker
    c.active_controller_id = 2
    assert await _run(c, ev.ApiPartitionReassignment({TP: [2]})) == (ErrorCode.NOT_CONTROLLER, {})


async def test_bounced_broker_is_handled_as_failure_then_startup():
    c, zk, ctx = _controller()
    zk.states[TP] = ctx.leadership[TP] = S(2, 3, (2, 1), 5, 4)
    infos = {b: ctx.live_brokers[b] for b in (1, 2, 3)}
    # broker 2 re-registered with a new session: a larger epoch (czxid)
    zk.brokers = {1: (infos[1], 101), 2: (infos[2], 500), 3: (infos[3], 103)}
    await c.process(ev.BrokerChange())
    assert c.channel.removed == [2] and c.channel.added == [2]
    assert ctx.live_broker_epochs[2] == 500
    # its leadership moved to the other ISR member while it was "dead", and it is back online
    assert zk.states[TP].leader == 1 and ctx.replica_state((TP, 2)) == ReplicaState.ONLINE
    lai = [(b, r) for b, k, r in c.channel.sent if k == LAI and b == 2]
    assert lai and lai[-1][1].broker_epoch == 500
