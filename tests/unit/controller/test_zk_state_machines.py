"""The ZooKeeper controller's partition and replica state machines (Kafka's transitions,
elections and conditional writes), against an in-memory partition-state store."""

from __future__ import annotations

import pytest

from controller.context import (
    VALID_PREVIOUS_PARTITION_STATES,
    VALID_PREVIOUS_REPLICA_STATES,
    PartitionState,
    ReplicaState,
    reassign_to,
)
from controller.kafka_zk_client import ControllerMovedError
from controller.partition_state_machine import (
    CONTROLLED_SHUTDOWN,
    PREFERRED,
    OfflineStrategy,
    PartitionStateMachine,
    StateChangeFailedError,
)
from controller.replica_state_machine import ReplicaStateMachine
from controller.zk_data import LeaderIsrAndControllerEpoch as S
from controller.zk_data import ReplicaAssignment
from tests.unit.controller.zk_fakes import FakeKafkaZkClient, make_batch, make_context

LAI, STOP, UM = 4, 5, 6
TP = ("t", 0)


def _machines(ctx, zk=None):
    zk = zk or FakeKafkaZkClient()
    batch, sent = make_batch(ctx)

    async def unclean(topic):
        return zk.configs.get(topic, {}).get("unclean.leader.election.enable") == "true"
    return zk, PartitionStateMachine(1, ctx, zk, batch, unclean), \
        ReplicaStateMachine(1, ctx, zk, batch), sent


def test_valid_previous_states_are_kafkas():
    P, R = PartitionState, ReplicaState
    assert VALID_PREVIOUS_PARTITION_STATES == {
        P.NEW: {P.NON_EXISTENT}, P.ONLINE: {P.NEW, P.ONLINE, P.OFFLINE},
        P.OFFLINE: {P.NEW, P.ONLINE, P.OFFLINE}, P.NON_EXISTENT: {P.OFFLINE}}
    assert VALID_PREVIOUS_REPLICA_STATES[R.NEW] == {R.NON_EXISTENT}
    assert VALID_PREVIOUS_REPLICA_STATES[R.DELETION_STARTED] == {R.OFFLINE}
    assert VALID_PREVIOUS_REPLICA_STATES[R.NON_EXISTENT] == {R.DELETION_SUCCESSFUL}
    assert VALID_PREVIOUS_REPLICA_STATES[R.DELETION_INELIGIBLE] == {R.OFFLINE,
                                                                   R.DELETION_STARTED}


async def test_new_partition_goes_online_with_first_live_replica():
    ctx = make_context((1, 3), {TP: (2, 3, 1)})
    zk, psm, _rsm, sent = _machines(ctx)
    await psm.handle_state_changes([TP], PartitionState.NEW)
    await psm.handle_state_changes([TP], PartitionState.ONLINE, OfflineStrategy())
    assert ctx.partition_state(TP) == PartitionState.ONLINE
    assert zk.states[TP] == S(3, 0, (3, 1), 5, 0)  # 2 is down: first live replica leads
    lai = sent.of(LAI)
    assert sorted(b for b, _ in lai) == [1, 3]  # to the ISR
    ps = lai[0][1].topic_states[0].partition_states[0]
    assert ps.is_new and ps.leader == 3 and ps.replicas == [2, 3, 1]
    assert sorted(b for b, _ in sent.of(UM)) == [1, 3]


async def test_invalid_transition_is_refused():
    ctx = make_context((1,), {TP: (1,)})
    zk, psm, _rsm, sent = _machines(ctx)
    for target in (PartitionState.NON_EXISTENT, PartitionState.OFFLINE):  # not from NonExistent
        await psm.handle_state_changes([TP], target, OfflineStrategy())
        assert ctx.partition_state(TP) == PartitionState.NON_EXISTENT
    await psm.handle_state_changes([TP], PartitionState.ONLINE, OfflineStrategy())
    assert ctx.partition_state(TP) == PartitionState.NON_EXISTENT
    assert zk.writes == 0 and not sent


async def _online(ctx, zk, psm, leader, isr, leader_epoch=3, version=7):
    zk.states[TP] = S(leader, leader_epoch, isr, 4, version)
    ctx.leadership[TP] = zk.states[TP]
    ctx.partition_states[TP] = PartitionState.ONLINE


async def test_offline_election_picks_next_live_isr_replica():
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3)})
    zk, psm, _rsm, sent = _machines(ctx)
    await _online(ctx, zk, psm, 1, (1, 3, 2))
    ctx.remove_live_brokers([1])
    await psm.handle_state_changes([TP], PartitionState.OFFLINE)
    results = await psm.trigger_online_partition_state_change()
    # assignment order (1, 2, 3): 2 is the first live replica in the ISR
    assert results[TP] == S(2, 4, (3, 2), 5, 8)
    assert zk.states[TP] == results[TP] and ctx.leadership[TP] == results[TP]
    assert sorted(b for b, _ in sent.of(LAI)) == [2, 3]


async def test_unclean_election_only_when_enabled():
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3)})
    zk, psm, _rsm, _sent = _machines(ctx)
    await _online(ctx, zk, psm, 1, (1,))
    ctx.remove_live_brokers([1])
    await psm.handle_state_changes([TP], PartitionState.OFFLINE)
    results = await psm.trigger_online_partition_state_change()
    assert isinstance(results[TP], StateChangeFailedError)
    assert ctx.partition_state(TP) == PartitionState.OFFLINE and zk.states[TP].leader == 1
    zk.configs["t"] = {"unclean.leader.election.enable": "true"}
    results = await psm.trigger_online_partition_state_change()
    assert results[TP].leader == 2 and results[TP].isr == (2,)
    assert results[TP].leader_recovery_state == 1  # RECOVERING (KIP-704)


async def test_preferred_and_controlled_shutdown_elections():
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3)})
    zk, psm, _rsm, _sent = _machines(ctx)
    await _online(ctx, zk, psm, 2, (2, 1, 3))
    res = await psm.handle_state_changes([TP], PartitionState.ONLINE, PREFERRED)
    assert res[TP].leader == 1 and res[TP].isr == (2, 1, 3)
    ctx.shutting_down_broker_ids.add(1)
    res = await psm.handle_state_changes([TP], PartitionState.ONLINE, CONTROLLED_SHUTDOWN)
    assert res[TP].leader == 2 and res[TP].isr == (2, 3)
    assert res[TP].leader_epoch == 5


async def test_state_written_by_a_newer_controller_aborts():
    ctx = make_context((1, 2), {TP: (1, 2)})
    zk, psm, _rsm, _sent = _machines(ctx)
    await _online(ctx, zk, psm, 1, (1, 2))
    zk.states[TP] = S(2, 9, (2,), 6, 9)  # controller epoch 6 > ours (5)
    res = await psm.handle_state_changes([TP], PartitionState.ONLINE, PREFERRED)
    assert isinstance(res[TP], StateChangeFailedError)
    assert zk.states[TP] == S(2, 9, (2,), 6, 9)


async def test_bad_version_rereads_and_retries():
    ctx = make_context((1, 2), {TP: (1, 2)})
    zk, psm, _rsm, _sent = _machines(ctx)
    await _online(ctx, zk, psm, 2, (2, 1))
    zk.bump_before_write.add(TP)
    res = await psm.handle_state_changes([TP], PartitionState.ONLINE, PREFERRED)
    assert res[TP].leader == 1 and res[TP].partition_epoch == 9  # 7 -> bumped 8 -> written 9


async def test_controller_moved_propagates_and_sends_nothing():
    ctx = make_context((1, 2), {TP: (1, 2)})
    zk, psm, _rsm, sent = _machines(ctx)
    await _online(ctx, zk, psm, 2, (2, 1))
    zk.epoch_zk_version = 99  # a newer controller bumped /controller_epoch
    with pytest.raises(ControllerMovedError):
        await psm.handle_state_changes([TP], PartitionState.ONLINE, PREFERRED)
    assert not sent
    zk.epoch_zk_version = 0
    res = await psm.handle_state_changes([TP], PartitionState.ONLINE, PREFERRED)  # batch reusable
    assert res[TP].leader == 1 and sent


async def test_offline_replica_leaves_isr_and_is_stopped():
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3)})
    zk, _psm, rsm, sent = _machines(ctx)
    zk.states[TP] = S(1, 3, (1, 2), 4, 0)
    ctx.leadership[TP] = zk.states[TP]
    for r in (1, 2, 3):
        ctx.replica_states[(TP, r)] = ReplicaState.ONLINE
    await rsm.handle_state_changes([(TP, 1)], ReplicaState.OFFLINE)
    assert zk.states[TP] == S(-1, 4, (2,), 5, 1)  # the leader left: NO_LEADER
    assert ctx.replica_state((TP, 1)) == ReplicaState.OFFLINE
    assert [b for b, _ in sent.of(STOP)] == [1]
    assert not sent.of(STOP)[0][1].topic_states[0].partition_states[0].delete_partition
    assert sorted(b for b, _ in sent.of(LAI)) == [2, 3]
    sent.clear()
    await rsm.handle_state_changes([(TP, 2)], ReplicaState.OFFLINE)
    assert zk.states[TP].isr == (2,)  # an ISR of one is kept


async def test_replica_deletion_path_and_non_existent():
    ctx = make_context((1, 2), {TP: (1, 2)})
    zk, _psm, rsm, sent = _machines(ctx)
    ctx.replica_states[(TP, 2)] = ReplicaState.OFFLINE
    await rsm.handle_state_changes([(TP, 2)], ReplicaState.DELETION_STARTED)
    assert sent.of(STOP)[0][1].topic_states[0].partition_states[0].delete_partition
    await rsm.handle_state_changes([(TP, 2)], ReplicaState.NON_EXISTENT)  # invalid: refused
    assert ctx.replica_state((TP, 2)) == ReplicaState.DELETION_STARTED
    await rsm.handle_state_changes([(TP, 2)], ReplicaState.DELETION_SUCCESSFUL)
    await rsm.handle_state_changes([(TP, 2)], ReplicaState.NON_EXISTENT)
    assert ctx.partition_replica_assignment(TP) == (1,)


def test_reassign_to_builds_kafkas_replica_sets():
    a = ReplicaAssignment((1, 2))
    r = reassign_to(a, [2, 3])
    assert (r.replicas, r.adding_replicas, r.removing_replicas) == ((2, 3, 1), (3,), (1,))
    # a new target replaces a running reassignment; origin replicas are kept in order
    again = reassign_to(r, [3, 4])
    assert (again.replicas, again.adding_replicas, again.removing_replicas) == \
        ((3, 4, 2, 1), (3, 4), (2, 1))
    # cancelling = reassigning back to the origin
    back = reassign_to(r, [1, 2])
    assert (back.replicas, back.adding_replicas, back.removing_replicas) == ((1, 2), (), ())


def test_update_metadata_copies_share_one_encoding_with_their_own_broker_epoch():
    """Every broker's UpdateMetadata of one batch is encoded once; each copy's bytes are
    what encoding it alone gives (its own broker epoch)."""
    from controller.request_batch import UPDATE_METADATA_VERSION as V
    from protocol.messages import UpdateMetadataRequest
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3), ("t", 1): (2, 3, 1)})
    ctx.leadership[TP] = S(1, 3, (1, 2), 4, 0)
    ctx.leadership[("t", 1)] = S(2, 7, (2, 3, 1), 4, 9)
    batch, sent = make_batch(ctx)
    batch.add_update_metadata([1, 2, 3], [TP, ("t", 1)])
    batch.send_requests_to_brokers(6)
    um = sent.of(UM)
    assert [b for b, _ in um] == [1, 2, 3]
    fast = {b: req.encode(V) for b, req in um}  # before topic_states is read
    assert len(um[0][1].shared) == 1 and um[0][1].shared is um[2][1].shared
    for b, req in um:
        assert req.broker_epoch == 100 + b
        plain = UpdateMetadataRequest(**{f: getattr(req, f) for f in (
            "controller_id", "is_k_raft_controller", "type", "controller_epoch", "broker_epoch",
            "topic_states", "live_brokers")})
        assert fast[b] == plain.encode(V) == req.encode(V)
        assert UpdateMetadataRequest.decode(fast[b], V).broker_epoch == 100 + b


async def test_coalesced_steps_send_each_broker_its_last_decisions_once():
    """While held, steps accumulate: the last LeaderAndIsr state per partition and broker,
    a StopReplica's delete flag sticks; one send at release."""
    ctx = make_context((1, 2, 3), {TP: (1, 2, 3)})
    zk, _psm, rsm, sent = _machines(ctx)
    zk.states[TP] = ctx.leadership[TP] = S(1, 3, (1, 2, 3), 4, 0)
    for r in (1, 2, 3):
        ctx.replica_states[(TP, r)] = ReplicaState.ONLINE
    rsm.batch.hold()
    await rsm.handle_state_changes([(TP, 1), (TP, 2), (TP, 3)], ReplicaState.ONLINE)
    await rsm.handle_state_changes([(TP, 3)], ReplicaState.OFFLINE)
    assert not sent
    assert rsm.batch.release()
    rsm.batch.send_requests_to_brokers(ctx.epoch)
    lai = dict(sent.of(LAI))
    assert sorted(lai) == [1, 2, 3]
    for b in (1, 2):  # the state after the ISR shrink, not the one before
        assert list(lai[b].topic_states[0].partition_states[0].isr) == [1, 2]
    assert list(lai[3].topic_states[0].partition_states[0].isr) == [1, 2, 3]
    assert [b for b, _ in sent.of(STOP)] == [3]
    assert len(sent.of(UM)) == 3


@pytest.mark.parametrize("failed_dir", [False, True])
async def test_replica_state_machine_startup(failed_dir):
    """Failover with broker 3 gone: live replicas Online with a LeaderAndIsr of their
    partition's (final) state, broker 3's replicas Offline and out of the ISRs, nothing
    sent to broker 3; a replica in a failed log dir is Offline too (and stopped)."""
    t0, t1, u0 = ("t", 0), ("t", 1), ("u", 0)
    ctx = make_context((1, 2), {t0: (1, 2, 3), t1: (3, 1, 2), u0: (2, 3)})
    zk, _psm, rsm, sent = _machines(ctx)
    zk.states[t0] = ctx.leadership[t0] = S(1, 3, (1, 2, 3), 4, 0)
    zk.states[t1] = ctx.leadership[t1] = S(3, 6, (3, 1), 4, 2)
    if failed_dir:
        ctx.replicas_on_offline_dirs = {2: {t0}}
    rsm.batch.hold()
    await rsm.startup()
    assert rsm.batch.release()
    rsm.batch.send_requests_to_brokers(ctx.epoch)
    R = ReplicaState
    offline = {(t0, 3), (t1, 3), (u0, 3)} | ({(t0, 2)} if failed_dir else set())
    assert ctx.replica_states == {(tp, r): R.OFFLINE if (tp, r) in offline else R.ONLINE
                                  for tp in (t0, t1, u0)
                                  for r in ctx.partition_replica_assignment(tp)}
    assert zk.states[t0] == (S(1, 5, (1,), 5, 2) if failed_dir else S(1, 4, (1, 2), 5, 1))
    assert zk.states[t1] == S(-1, 7, (1,), 5, 3)
    lai = {b: {(ts.topic_name, ps.partition_index): (ps.leader, ps.leader_epoch, ps.isr,
                                                      ps.partition_epoch, ps.is_new)
               for ts in req.topic_states for ps in ts.partition_states}
           for b, req in sent.of(LAI)}
    assert lai[1] == {t0: (1, zk.states[t0].leader_epoch, list(zk.states[t0].isr),
                           zk.states[t0].partition_epoch, False),
                      t1: (-1, 7, [1], 3, False)}
    assert lai[2] == lai[1]  # broker 2 is sent t0 whether it is Online or not
    assert sorted(lai) == [1, 2]
    assert [b for b, _ in sent.of(STOP)] == ([2] if failed_dir else [])
    assert sorted(b for b, _ in sent.of(UM)) == [1, 2]


async def test_replica_offline_in_chunks():
    """A broker's replicas go Offline in chunks (one ZooKeeper multi each) worked on
    together: every ISR shrink written (a stale version re-read and retried), every other
    replica told, a controller move in one chunk leaves nothing in the batch."""
    tps = [("t", p) for p in range(7)]
    ctx = make_context((1, 2, 3), {tp: (1, 2, 3) for tp in tps})
    zk, _psm, rsm, sent = _machines(ctx)
    rsm.ISR_CHUNK = 3
    for tp in tps:
        zk.states[tp] = ctx.leadership[tp] = S(3 if tp[1] % 2 else 1, 3, (1, 2, 3), 4, 0)
        for r in (1, 2, 3):
            ctx.replica_states[(tp, r)] = ReplicaState.ONLINE
    zk.bump_before_write.add(tps[4])
    await rsm.handle_state_changes([(tp, 3) for tp in tps], ReplicaState.OFFLINE)
    for tp in tps:
        assert zk.states[tp].isr == (1, 2)
        assert zk.states[tp].leader == (-1 if tp[1] % 2 else 1)
        assert ctx.replica_state((tp, 3)) == ReplicaState.OFFLINE
    lai = {b: [(ts.topic_name, ps.partition_index, tuple(ps.isr))
               for ts in req.topic_states for ps in ts.partition_states]
           for b, req in sent.of(LAI)}
    assert sorted(lai) == [1, 2] and all(sorted(v) == [(*tp, (1, 2)) for tp in tps]
                                         for v in lai.values())
    sent.clear()
    zk.epoch_zk_version = 9  # another controller
    with pytest.raises(ControllerMovedError):
        await rsm.handle_state_changes([(tp, 2) for tp in tps], ReplicaState.OFFLINE)
    assert not sent
    rsm.batch.new_batch()  # nothing left behind


def _seven_led_by_broker_1(chunk: int):
    """Partitions t-0..t-6 on brokers 1-3, led by 1 with a full ISR, Online; elections in
    chunks of ``chunk``."""
    tps = [("t", p) for p in range(7)]
    ctx = make_context((1, 2, 3), {tp: (1, 2, 3) for tp in tps})
    zk, psm, _rsm, sent = _machines(ctx)
    psm.ELECTION_CHUNK = chunk
    for tp in tps:
        zk.states[tp] = ctx.leadership[tp] = S(1, 3, (1, 2, 3), 4, 0)
        ctx.partition_states[tp] = PartitionState.ONLINE
    return tps, ctx, zk, psm, sent


async def test_elections_in_chunks():
    """Elections in chunks (one ZooKeeper multi each) worked on together: every partition
    elected once (a stale version re-read and retried), results in the order asked, the
    live replicas told; a controller move raises after every chunk ended, nothing sent."""
    tps, ctx, zk, psm, sent = _seven_led_by_broker_1(3)
    zk.bump_before_write.add(tps[5])
    ctx.remove_live_brokers([1])
    await psm.handle_state_changes(tps, PartitionState.OFFLINE)
    results = await psm.trigger_online_partition_state_change()
    assert list(results) == tps
    assert all(r == S(2, 4, (2, 3), 5, zk.states[tp].partition_epoch) == zk.states[tp]
               for tp, r in results.items())
    assert zk.states[tps[5]].partition_epoch == 2 and zk.states[tps[0]].partition_epoch == 1
    lai = {b: sorted((ts.topic_name, ps.partition_index) for ts in req.topic_states
                     for ps in ts.partition_states) for b, req in sent.of(LAI)}
    assert lai == {2: tps, 3: tps}
    sent.clear()
    ctx.remove_live_brokers([2])
    await psm.handle_state_changes(tps, PartitionState.OFFLINE)
    zk.epoch_zk_version = 9  # another controller
    with pytest.raises(ControllerMovedError):
        await psm.trigger_online_partition_state_change()
    assert not sent
    psm.batch.new_batch()  # nothing left behind


async def test_held_elections_reach_the_brokers_in_parts():
    """A held batch with ``flush_every`` sends the elections as ZooKeeper commits them, in
    parts of at least that many partitions, each part's LeaderAndIsr before its
    UpdateMetadata; what is left goes at release; every partition is sent once."""
    tps, ctx, _zk, psm, sent = _seven_led_by_broker_1(2)
    ctx.remove_live_brokers([1])
    await psm.handle_state_changes(tps, PartitionState.OFFLINE)
    psm.batch.hold(flush_every=3)
    await psm.trigger_online_partition_state_change()

    def parts(key):
        return [(b, sorted((ts.topic_name, ps.partition_index) for ts in req.topic_states
                           for ps in ts.partition_states)) for b, req in sent.of(key)]
    early = parts(LAI)
    assert early and all(len(p) >= 3 for _b, p in early)  # sent before the release
    assert psm.batch.release()
    psm.batch.send_requests_to_brokers(ctx.epoch)
    for b in (2, 3):
        got = [p for broker, p in parts(LAI) if broker == b]
        assert sorted(tp for p in got for tp in p) == tps  # once each
        assert [p for broker, p in parts(UM) if broker == b] == got  # a UM after each part
        keys = [key for broker, key, _r in sent if broker == b]
        assert keys == [LAI, UM] * len(got)
    psm.batch.new_batch()  # nothing left behind


async def test_election_chunks_start_one_loop_turn_apart():
    """The elections' chunks do not all run in one turn of the event loop: another task
    runs between the starts of any two of them (the brokers' requests are read meanwhile;
    at 100,000 partitions the chunks of one failover are half a second of CPU)."""
    import asyncio
    tps, ctx, zk, psm, _sent = _seven_led_by_broker_1(1)
    ctx.remove_live_brokers([1])
    await psm.handle_state_changes(tps, PartitionState.OFFLINE)
    events: list = []
    elect_one = psm._elect_one

    async def noted(tp, state, strategy):
        events.append(tp)
        return await elect_one(tp, state, strategy)
    psm._elect_one = noted
    done = asyncio.Event()

    async def other():
        while not done.is_set():
            events.append("other")
            await asyncio.sleep(0)
    ticker = asyncio.ensure_future(other())
    await psm.trigger_online_partition_state_change()
    done.set()
    await ticker
    starts = [i for i, e in enumerate(events) if e != "other"]
    assert len(starts) == len(tps)
    assert all("other" in events[a + 1:b] for a, b in zip(starts, starts[1:]))
