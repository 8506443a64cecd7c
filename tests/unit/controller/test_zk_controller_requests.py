"""The ZooKeeper controller's request handling (AlterPartition validation as Kafka's,
ControlledShutdown, elections) and its single event queue, against in-memory znodes."""

from __future__ import annotations

import asyncio
import uuid

from controller import controller_events as ev
from controller.context import PartitionState, ReplicaState
from controller.controller_core import ControllerConfig
from controller.event_manager import ControllerEvent, ControllerEventManager
from controller.kafka_controller import KafkaController
from controller.kafka_zk_client import UpdateLeaderAndIsrResult
from controller.zk_data import BrokerInfo, Endpoint, ReplicaAssignment
from controller.zk_data import LeaderIsrAndControllerEpoch as S
from protocol.errors import ErrorCode
from protocol.messages import AlterPartitionRequest
from tests.unit.controller.zk_fakes import FakeKafkaZkClient, make_context

TP = ("t", 0)
TOPIC_ID = uuid.UUID(int=7)
DEFAULT_STATE = S(1, 4, (1, 2), 5, 10)


class _ZkStub:
    def register_state_handler(self, h): ...

    def unregister_state_handler(self, name): ...

    async def register_znode_change_handler_and_check_existence(self, h):
        return False

    def unregister_znode_child_change_handler(self, path): ...

    def unregister_znode_change_handler(self, path): ...


def _controller(brokers=(1, 2, 3), state=DEFAULT_STATE):
    zk = FakeKafkaZkClient()
    zk.zk = _ZkStub()
    c = KafkaController(ControllerConfig(broker_id=1), zk,
                        BrokerInfo(1, (Endpoint("PLAINTEXT", "h", 1),)), 101)
    ctx = make_context(brokers, {TP: (1, 2, 3)})
    c.context = ctx
    c.batch.context = ctx
    c.partition_sm.context = ctx
    c.replica_sm.context = ctx
    c.deletion.context = ctx
    ctx.add_topic_id("t", TOPIC_ID)
    c.active_controller_id = 1
    if state is not None:
        zk.states[TP] = state
        ctx.leadership[TP] = state
        ctx.partition_states[TP] = PartitionState.ONLINE
        for r in (1, 2, 3):
            ctx.replica_states[(TP, r)] = ReplicaState.ONLINE
    return c, zk


def _alter(broker=1, broker_epoch=101, leader_epoch=4, isr=(1, 2, 3), partition_epoch=10,
           recovery=0, version=2):
    req = AlterPartitionRequest(broker_id=broker, broker_epoch=broker_epoch, topics=[
        AlterPartitionRequest.TopicData(topic_name="t", topic_id=TOPIC_ID, partitions=[
            AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=leader_epoch, new_isr=list(isr),
                leader_recovery_state=recovery, partition_epoch=partition_epoch)])])
    return ev.AlterPartitionReceived(req, version)


async def _run(c, event):
    await c.process(event)
    return await event.future


def _code(resp):
    return resp.topics[0].partitions[0].error_code if resp.topics else resp.error_code


async def test_alter_partition_expands_the_isr():
    c, zk = _controller()
    resp = await _run(c, _alter(isr=(1, 2, 3)))
    p = resp.topics[0].partitions[0]
    assert resp.error_code == 0 and resp.topics[0].topic_id == TOPIC_ID
    assert (p.error_code, p.leader_id, p.leader_epoch, p.isr, p.partition_epoch) == \
        (0, 1, 4, [1, 2, 3], 11)
    assert zk.states[TP] == S(1, 4, (1, 2, 3), 5, 11)
    assert c.context.leadership[TP].isr == (1, 2, 3)
    # the same request again is answered with the current state (idempotent)
    again = await _run(c, _alter(isr=(1, 2, 3), partition_epoch=11))
    assert _code(again) == 0 and again.topics[0].partitions[0].partition_epoch == 11


async def test_alter_partition_validations():
    cases = [
        (dict(broker_epoch=99), ErrorCode.STALE_BROKER_EPOCH),  # top-level
        (dict(broker=9, broker_epoch=109), ErrorCode.STALE_BROKER_EPOCH),
        (dict(leader_epoch=3), ErrorCode.FENCED_LEADER_EPOCH),
        (dict(leader_epoch=5), ErrorCode.NOT_CONTROLLER),
        (dict(partition_epoch=11), ErrorCode.NOT_CONTROLLER),
        (dict(partition_epoch=9), ErrorCode.INVALID_UPDATE_VERSION),
        (dict(isr=(1, 2, 4)), ErrorCode.INELIGIBLE_REPLICA),
        (dict(isr=(1, 2, 4), version=1), ErrorCode.OPERATION_NOT_ATTEMPTED),
        (dict(recovery=1), ErrorCode.INVALID_REQUEST),
    ]
    for kwargs, want in cases:
        c, zk = _controller(brokers=(1, 2, 3))
        resp = await _run(c, _alter(**kwargs))
        assert _code(resp) == want, kwargs
        assert zk.writes == 0, kwargs


async def test_alter_partition_lost_conditional_write_is_invalid_update_version():
    c, zk = _controller()
    zk.bump_before_write.add(TP)
    resp = await _run(c, _alter())
    assert _code(resp) == ErrorCode.INVALID_UPDATE_VERSION


async def test_alter_partition_on_a_non_controller():
    c, _zk = _controller()
    c.active_controller_id = 2
    resp = await _run(c, _alter())
    assert resp.error_code == ErrorCode.NOT_CONTROLLER and not resp.topics


async def test_alter_partition_on_a_deposed_controller_is_not_controller():
    """Issue 26: the epoch check of the ISR write fails (another broker became controller
    while this one processed the request): NOT_CONTROLLER, never UNKNOWN_SERVER_ERROR, and
    the controller resigns."""
    c, zk = _controller()
    zk.epoch_zk_version = 99

    async def get_controller():
        return 2, 0x22
    zk.get_controller = get_controller
    resp = await _run(c, _alter())
    assert resp.error_code == ErrorCode.NOT_CONTROLLER
    assert not c.is_active


async def test_storage_error_answers_mark_replicas_offline_and_move_leadership():
    """KIP-112 (issue 26): a broker answering LeaderAndIsr with KAFKA_STORAGE_ERROR has that
    replica in a failed log dir: it is offline, its leadership moves to another ISR member
    and it leaves the ISR; an answer NONE later makes it online again."""
    from protocol.messages import LeaderAndIsrResponse as R

    c, zk = _controller(state=S(2, 4, (2, 1, 3), 5, 10))

    def answer(code):
        return R(error_code=0, topics=[R.LeaderAndIsrTopicError(
            topic_id=TOPIC_ID, partition_errors=[R.LeaderAndIsrPartitionError(
                partition_index=0, error_code=int(code))])])
    await c.process(ev.LeaderAndIsrResponseReceived(answer(ErrorCode.KAFKA_STORAGE_ERROR), 2))
    assert c.context.replicas_on_offline_dirs == {2: {TP}}
    assert not c.context.is_replica_online(2, TP) and c.context.is_replica_online(1, TP)
    assert zk.states[TP].leader in (1, 3) and 2 not in zk.states[TP].isr
    await c.process(ev.LeaderAndIsrResponseReceived(answer(ErrorCode.NONE), 2))
    assert c.context.replicas_on_offline_dirs == {}


async def test_controlled_shutdown_moves_leadership_and_leaves_isrs():
    c, zk = _controller(state=S(2, 4, (2, 1, 3), 5, 10))
    tp1 = ("t", 1)
    c.context.update_partition_full_replica_assignment(tp1, c.context.partition_full_replica_assignment(TP))
    zk.states[tp1] = c.context.leadership[tp1] = S(1, 0, (1, 2), 5, 0)
    c.context.partition_states[tp1] = PartitionState.ONLINE
    for r in (1, 2, 3):
        c.context.replica_states[(tp1, r)] = ReplicaState.ONLINE
    e = ev.ControlledShutdown(2, 102)
    code, remaining = await _run(c, e)
    assert (code, remaining) == (ErrorCode.NONE, [])
    assert zk.states[TP].leader == 1 and 2 not in zk.states[TP].isr
    assert zk.states[tp1].leader == 1 and zk.states[tp1].isr == (1,)
    assert c.context.shutting_down_broker_ids == {2}
    assert await _run(c, ev.ControlledShutdown(2, 90)) == (ErrorCode.STALE_BROKER_EPOCH, [])
    assert await _run(c, ev.ControlledShutdown(8, -1)) == (ErrorCode.BROKER_NOT_AVAILABLE, [])


async def test_controlled_shutdown_is_not_held_back_by_what_cannot_move():
    # issue 26: no other live ISR member -> the leadership cannot move: not "remaining"
    c, zk = _controller(brokers=(1, 2, 3), state=S(2, 4, (2,), 5, 10))
    code, remaining = await _run(c, ev.ControlledShutdown(2, 102))
    assert code == ErrorCode.NONE and remaining == []
    assert zk.states[TP].leader == 2
    # RF 1: never remaining
    rf1 = ("r", 0)
    c.context.update_partition_full_replica_assignment(rf1, ReplicaAssignment((3,)))
    zk.states[rf1] = c.context.leadership[rf1] = S(3, 0, (3,), 5, 0)
    assert await _run(c, ev.ControlledShutdown(3, 103)) == (ErrorCode.NONE, [])


async def test_controlled_shutdown_reports_what_could_move_but_did_not():
    c, zk = _controller(brokers=(1, 2, 3), state=S(2, 4, (2, 3), 5, 10))
    async def failing_write(states, ezv):  # the election's write fails: the leader stays
        res = UpdateLeaderAndIsrResult()
        res.finished.update((tp, RuntimeError("write failed")) for tp in states)
        return res
    zk.update_leader_and_isr = failing_write
    code, remaining = await _run(c, ev.ControlledShutdown(2, 102))
    assert code == ErrorCode.NONE and remaining == [TP]


async def test_admin_elections_report_kafkas_codes():
    c, zk = _controller(state=S(2, 4, (2, 1, 3), 5, 10))
    results = await _run(c, ev.ReplicaLeaderElection({TP, ("t", 9)}, 0, ev.ADMIN_CLIENT_TRIGGERED))
    assert results[TP] == (ErrorCode.NONE, None) and zk.states[TP].leader == 1
    assert results[("t", 9)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    again = await _run(c, ev.ReplicaLeaderElection({TP}, 0, ev.ADMIN_CLIENT_TRIGGERED))
    assert again[TP][0] == ErrorCode.ELECTION_NOT_NEEDED
    zk.states[TP] = c.context.leadership[TP] = S(2, 6, (2,), 5, 12)
    c.context.remove_live_brokers([2])
    pref = await _run(c, ev.ReplicaLeaderElection({TP}, 0, ev.ADMIN_CLIENT_TRIGGERED))
    assert pref[TP][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    unclean = await _run(c, ev.ReplicaLeaderElection({TP}, 1, ev.ADMIN_CLIENT_TRIGGERED))
    assert unclean[TP] == (ErrorCode.NONE, None)
    assert zk.states[TP].leader == 1 and zk.states[TP].leader_recovery_state == 1


async def test_event_manager_runs_one_event_at_a_time_and_preempts_on_clear():
    order: list[str] = []
    gate = asyncio.Event()

    class E(ControllerEvent):
        def __init__(self, name):
            self.name = name
            self.preempted = False

        def preempt(self):
            self.preempted = True

    async def process(e):
        order.append(f"start {e.name}")
        if e.name == "a":
            await gate.wait()
        order.append(f"end {e.name}")

    m = ControllerEventManager(1, process)
    m.start()
    a, b, c = E("a"), E("b"), E("c")
    qa = m.put(a)
    m.put(b)
    await qa.processing_started.wait()
    m.clear_and_put(c)  # b is dropped (preempted), c queued
    gate.set()
    for _ in range(50):
        if "end c" in order:
            break
        await asyncio.sleep(0.01)
    assert order == ["start a", "end a", "start c", "end c"]
    assert b.preempted and not a.preempted
    await m.close()
    late = E("late")
    m.put(late)
    assert late.preempted


async def _fail_broker_3(tp_state):
    """A controller with TP in ``tp_state`` and t-1 led by 1 with ISR (1, 2, 3), after
    broker 3 failed: (controller, zk, t-1, what the batch sent)."""
    from tests.unit.controller.zk_fakes import Sent
    c, zk = _controller(state=tp_state)
    tp1 = ("t", 1)
    c.context.update_partition_full_replica_assignment(tp1, ReplicaAssignment((1, 2, 3)))
    zk.states[tp1] = c.context.leadership[tp1] = S(1, 2, (1, 2, 3), 5, 3)
    c.context.partition_states[tp1] = PartitionState.ONLINE
    for r in (1, 2, 3):
        c.context.replica_states[(tp1, r)] = ReplicaState.ONLINE
    c.batch.send = sent = Sent()
    c.context.remove_live_brokers([3])
    await c.brokers._on_broker_failure([3])
    return c, zk, tp1, sent


async def test_broker_failure_sends_the_elections_first_and_each_partition_once():
    """A broker failure reaches each live broker in two waves: one LeaderAndIsr and one
    UpdateMetadata with the elections (the partitions the dead broker led), then one of
    each with the ISR shrinks; a partition the first wave carried is not in the second."""
    c, zk, tp1, sent = await _fail_broker_3(S(3, 4, (3, 1, 2), 5, 10))
    lai = sent.of(4)
    assert sorted(b for b, _ in lai) == [1, 1, 2, 2]
    waves: dict[int, list] = {}
    for b, req in lai:
        waves.setdefault(b, []).append({(t.topic_name, p.partition_index): p
                                        for t in req.topic_states for p in t.partition_states})
    for first, second in waves.values():
        assert set(first) == {TP} and set(second) == {tp1}
        assert first[TP].leader == 1 and list(first[TP].isr) == [1, 2]
        assert first[TP].partition_epoch == zk.states[TP].partition_epoch
        assert second[tp1].leader == 1 and list(second[tp1].isr) == [1, 2]
    assert sorted(b for b, _ in sent.of(6)) == [1, 1, 2, 2]
    assert zk.states[TP].leader == 1 and 3 not in zk.states[TP].isr


async def test_failover_sends_the_elections_first_and_each_partition_once():
    """A new controller whose predecessor's broker (3) is gone: the first LeaderAndIsr /
    UpdateMetadata per live broker carries the elections (TP, led by 3), the second every
    other partition (tp1, with 3 out of its ISR), and TP is not sent twice."""
    from tests.unit.controller.zk_fakes import Sent
    c, zk = _controller(state=S(3, 4, (3, 1, 2), 5, 10))
    tp1 = ("t", 1)
    c.context.update_partition_full_replica_assignment(tp1, ReplicaAssignment((1, 2, 3)))
    zk.states[tp1] = c.context.leadership[tp1] = S(1, 2, (1, 2, 3), 5, 3)
    c.context.remove_live_brokers([3])
    c.context.replica_states.clear()
    c.context.partition_states.clear()
    c.batch.send = sent = Sent()
    await c._start_state_machines()
    waves: dict[int, list] = {}
    for b, req in sent.of(4):
        waves.setdefault(b, []).append({(t.topic_name, p.partition_index): p
                                        for t in req.topic_states for p in t.partition_states})
    assert sorted(waves) == [1, 2]
    for first, second in waves.values():
        assert set(first) == {TP} and first[TP].leader == 1 and list(first[TP].isr) == [1, 2]
        assert set(second) == {tp1} and list(second[tp1].isr) == [1, 2]
    um = [{(t.topic_name, p.partition_index) for t in req.topic_states
           for p in t.partition_states} for _b, req in sent.of(6)]
    assert um == [{TP}, {TP}, {tp1}, {tp1}]


async def test_broker_failure_sends_no_unchanged_state_to_the_other_replicas():
    """A broker that left every ISR before it went (a controlled shutdown) changes no
    partition state when it goes: the other replicas get no LeaderAndIsr for those
    partitions (Kafka's would ignore one of their current epochs), every broker gets the
    UpdateMetadata that lists the replica offline; a partition whose ISR still held it is
    shrunk and sent as before."""
    c, zk, tp1, sent = await _fail_broker_3(S(1, 4, (1, 2), 5, 10))  # 3 not in TP's ISR
    lai = [{(t.topic_name, p.partition_index): p for t in req.topic_states
            for p in t.partition_states} for _b, req in sent.of(4)]
    assert sorted(b for b, _ in sent.of(4)) == [1, 2]
    assert all(set(states) == {tp1} and list(states[tp1].isr) == [1, 2] for states in lai)
    um = {b: {(t.topic_name, p.partition_index): p for t in req.topic_states
              for p in t.partition_states} for b, req in sent.of(6)}
    assert sorted(um) == [1, 2]
    for states in um.values():
        assert set(states) == {TP, tp1}
        assert list(states[TP].offline_replicas) == [3] and list(states[TP].isr) == [1, 2]
    assert zk.states[TP] == S(1, 4, (1, 2), 5, 10)  # not written
    assert c.context.replica_states[(TP, 3)] == ReplicaState.OFFLINE


async def test_failover_reads_and_elects_the_hinted_leaderless_partitions_first():
    """With a leader hint (the broker's MetadataCache), the states of the partitions whose
    hinted leader is gone are read and their elections sent before the other states are
    read. A partition the hint calls led by a live broker whose state in ZooKeeper names
    the dead one (a stale hint) is still elected, once the rest is read. Each partition
    reaches each live broker in one LeaderAndIsr."""
    from tests.unit.controller.zk_fakes import Sent
    c, zk = _controller(state=S(3, 4, (3, 1, 2), 5, 10))  # TP: led by 3, the hint agrees
    tp1, tp2 = ("t", 1), ("t", 2)
    for tp in (tp1, tp2):
        c.context.update_partition_full_replica_assignment(tp, ReplicaAssignment((1, 2, 3)))
    zk.states[tp1] = S(1, 2, (1, 2, 3), 5, 3)  # led by 1, the hint agrees
    zk.states[tp2] = S(3, 2, (3, 1, 2), 5, 3)  # led by 3, the hint says 2 (stale)
    c.leader_hint = lambda topic: {0: 3, 1: 1, 2: 2} if topic == "t" else None
    c.context.remove_live_brokers([3])
    c.context.leadership.clear()
    c.context.replica_states.clear()
    c.context.partition_states.clear()
    events: list = []
    read = zk.get_partition_states

    async def logged_read(tps):
        events.append(("read", sorted(tps)))
        return await read(tps)
    zk.get_partition_states = logged_read
    sent = Sent()

    def send(broker, api_key, version, request, callback):
        events.append(("send", api_key))
        sent(broker, api_key, version, request, callback)
    c.batch.send = send

    c._read_first, later = c._read_order()
    assert c._read_first == [TP] and later == [tp1, tp2]
    c.context.leadership.update(await zk.get_partition_states(c._read_first))
    await c._start_state_machines(later)

    assert events.index(("read", [tp1, tp2])) > events.index(("send", 4)) > 0
    for tp in (TP, tp1, tp2):  # every partition led by 1 with 3 out of the ISR
        assert zk.states[tp].leader == 1 and list(zk.states[tp].isr) == [1, 2]
    per_broker: dict[int, list] = {}
    for b, req in sent.of(4):
        per_broker.setdefault(b, []).extend(
            (t.topic_name, p.partition_index) for t in req.topic_states for p in t.partition_states)
    assert sorted(per_broker) == [1, 2]
    for tps in per_broker.values():
        assert sorted(tps) == [TP, tp1, tp2]


def test_without_a_hint_or_with_mostly_leaderless_partitions_every_state_is_read_first():
    c, _zk = _controller(state=S(3, 4, (3, 1, 2), 5, 10))
    tp1 = ("t", 1)
    c.context.update_partition_full_replica_assignment(tp1, ReplicaAssignment((1, 2, 3)))
    assert c._read_order() == ([TP, tp1], [])  # no hint
    c.leader_hint = lambda topic: {0: 3, 1: 3}  # broker 3 led both
    c.context.remove_live_brokers([3])
    assert c._read_order() == ([TP, tp1], [])
    c.leader_hint = lambda topic: 1 / 0  # a failing hint reads everything first
    assert c._read_order() == ([TP, tp1], [])
