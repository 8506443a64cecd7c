"""Partition leader rules with a manual clock: follower LEO tracking, high watermark over the
(maximal) ISR, ISR expansion and shrink through AlterPartition, min.insync.replicas, and
DelayedProduce completion on the HW (Kafka's PartitionTest / ReplicaManagerTest cases)."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory.delayed_fetch import FetchParams, PartitionFetchInfo
from broker.replication.replica_state import LeaderAndIsr
from protocol.errors import ErrorCode, KafkaError
from tests.unit.broker.dataplane_helpers import (
    BROKER_ID,
    batch,
    leader_and_isr,
    make_replica_manager,
)

TP = ("t", 0)
LAG = 30000


class ControllerStub:
    """Stands in for the controller's side of AlterPartition: records what the leader
    proposes; the test answers each proposal."""

    def __init__(self):
        self.proposals: list[tuple[object, LeaderAndIsr, asyncio.Future]] = []
        self.partition_epoch = 0

    def __call__(self, part, lai: LeaderAndIsr) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self.proposals.append((part, lai, fut))
        return fut

    def accept(self, i=-1) -> LeaderAndIsr:
        _, lai, fut = self.proposals[i]
        self.partition_epoch += 1
        committed = LeaderAndIsr(lai.leader, lai.leader_epoch, lai.isr, self.partition_epoch)
        fut.set_result(committed)
        return committed

    def reject(self, code, i=-1) -> None:
        self.proposals[i][2].set_exception(KafkaError(code, "rejected"))

    async def shutdown(self) -> None:
        pass


@pytest.fixture
async def env(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path)
    clock = rm.time_ms
    stub = ControllerStub()
    rm.alter_partition_manager = stub  # partitions propose ISR changes...
    rm._submit_alter_partition = stub  # ...to the stub
    yield rm, timer, clock, stub
    await rm.shutdown()
    lm.close_all()


async def lead(rm, isr=(BROKER_ID, 2, 3), replicas=(BROKER_ID, 2, 3), epoch=0, min_isr=None):
    if min_isr is not None:
        rm.on_topic_config_change("t", {"min.insync.replicas": str(min_isr)})
    await rm.become_leader_or_follower(leader_and_isr(isr=isr, replicas=replicas,
                                                      leader_epoch=epoch))
    p = rm.get_partition(*TP)
    p.alter_partition = rm._submit_alter_partition
    return p


def follower_fetch(rm, replica, offset, epoch=-1, last_fetched_epoch=-1):
    return rm.read_from_local_log(
        FetchParams(replica_id=replica),
        [(TP, PartitionFetchInfo(offset, 1 << 20, epoch, 0, last_fetched_epoch))])[TP]


async def test_hw_is_min_leo_over_isr_and_never_backwards(env):
    rm, _, _, _ = env
    p = await lead(rm)
    rm.append_records(1000, 1, {TP: batch(10)})
    assert p.high_watermark == 0
    follower_fetch(rm, 2, 10)
    assert p.high_watermark == 0  # broker 3 (in the ISR) has fetched nothing yet
    follower_fetch(rm, 3, 4)
    assert p.high_watermark == 4
    follower_fetch(rm, 3, 10)
    assert p.high_watermark == 10
    follower_fetch(rm, 3, 4)  # a follower going back (it truncated) never lowers the HW
    assert p.high_watermark == 10 and p.followers[3].log_end_offset == 4


async def test_consumers_read_below_hw_and_list_offsets_latest_is_hw(env):
    rm, _, _, _ = env
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2))
    rm.append_records(1000, 1, {TP: batch(5)})
    follower_fetch(rm, 2, 3)
    got = rm.read_from_local_log(FetchParams(), [(TP, PartitionFetchInfo(0, 1 << 20))])[TP]
    assert got.high_watermark == 3 and len(got.records) == 0  # the only batch ends past HW
    assert p.fetch_offset_for_timestamp(-1, 0)[1] == 3
    assert p.fetch_offset_for_timestamp(-1, None)[1] == 5  # a replica asks: the LEO
    follower_fetch(rm, 2, 5)
    got = rm.read_from_local_log(FetchParams(), [(TP, PartitionFetchInfo(0, 1 << 20))])[TP]
    assert got.high_watermark == 5 and len(got.records) > 0


async def test_follower_reads_to_leo_and_unknown_replica_is_refused(env):
    rm, _, _, _ = env
    await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2))
    rm.append_records(1000, 1, {TP: batch(5)})
    got = follower_fetch(rm, 2, 0)
    assert got.error == ErrorCode.NONE and len(got.records) > 0 and got.high_watermark == 0
    assert follower_fetch(rm, 7, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert follower_fetch(rm, 2, 6).error == ErrorCode.OFFSET_OUT_OF_RANGE


async def test_isr_expands_when_follower_reaches_hw_and_epoch_start(env):
    rm, _, clock, stub = env
    p = await lead(rm, isr=(BROKER_ID,), replicas=(BROKER_ID, 2), epoch=0)
    rm.append_records(1000, 1, {TP: batch(4)})
    assert p.high_watermark == 4  # ISR {1}, follower 2 not caught up: HW = LEO
    # a new leader epoch starts at offset 4
    p = await lead(rm, isr=(BROKER_ID,), replicas=(BROKER_ID, 2), epoch=1)
    assert p.leader_epoch_start_offset == 4
    rm.append_records(1000, 1, {TP: batch(2)})
    follower_fetch(rm, 2, 3)
    assert stub.proposals == []  # below the HW (6) and the epoch start
    follower_fetch(rm, 2, 6)
    assert len(stub.proposals) == 1
    proposed = stub.proposals[0][1]
    assert proposed.isr == (BROKER_ID, 2) and proposed.leader_epoch == 1
    assert proposed.partition_epoch == 0
    assert p.maximal_isr == (BROKER_ID, 2) and p.isr == (BROKER_ID,)
    # while pending, the HW already waits for the new member (KIP-497 maximal ISR)
    rm.append_records(1000, 1, {TP: batch(1)})
    assert p.high_watermark == 6
    follower_fetch(rm, 2, 6)
    assert len(stub.proposals) == 1  # one change in flight at a time
    stub.accept()
    await asyncio.sleep(0)
    assert p.isr == (BROKER_ID, 2) and p.pending_isr is None and p.partition_epoch == 1
    follower_fetch(rm, 2, 7)
    assert p.high_watermark == 7


async def test_quiet_pass_skips_until_an_append_then_a_stalled_follower_is_shrunk(
        env, monkeypatch):
    """A pass that found every led partition quiet (followers and HW at the log end) is not
    repeated while nothing changed (fetches at the log end change nothing); an append
    changes that, and a follower that stops fetching then leaves the ISR after the lag."""
    import broker.replica_manager as replica_manager
    looked = []
    quiet = replica_manager._quiet_leader
    monkeypatch.setattr(replica_manager, "_quiet_leader",
                        lambda part: looked.append(part) or quiet(part))
    rm, _, clock, stub = env
    p = await lead(rm)
    rm.append_records(1000, 1, {TP: batch(3)})
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == p.log_end_offset == 3
    assert await rm.maybe_shrink_isr_sliced() == 0 and looked == [p]
    for _ in range(4):
        clock.now += LAG // 2
        follower_fetch(rm, 2, 3)
        follower_fetch(rm, 3, 3)
        assert await rm.maybe_shrink_isr_sliced() == 0
    assert looked == [p]  # skipped: nothing changed
    rm.append_records(1000, 1, {TP: batch(2)})
    follower_fetch(rm, 2, 5)  # broker 3 stops fetching
    assert await rm.maybe_shrink_isr_sliced() == 0 and looked == [p, p]  # within the lag
    clock.now += LAG + 1
    follower_fetch(rm, 2, 5)
    assert await rm.maybe_shrink_isr_sliced() == 1
    assert stub.proposals[-1][1].isr == (BROKER_ID, 2)


async def test_isr_shrinks_after_lag_and_hw_then_advances(env):
    rm, _, clock, stub = env
    p = await lead(rm)
    rm.append_records(1000, 1, {TP: batch(3)})
    follower_fetch(rm, 2, 3)
    follower_fetch(rm, 3, 3)
    assert p.high_watermark == 3
    rm.append_records(1000, 1, {TP: batch(2)})
    clock.now += LAG // 2
    follower_fetch(rm, 2, 5)  # broker 2 keeps up, broker 3 stops fetching
    assert p.high_watermark == 3
    assert rm.maybe_shrink_isr() == 0  # broker 3 was caught up LAG/2 ago
    assert await rm.maybe_shrink_isr_sliced() == 0  # the periodic task's form: the same
    clock.now += LAG // 2 + 1
    follower_fetch(rm, 2, 5)
    assert await rm.maybe_shrink_isr_sliced() == 1
    proposed = stub.proposals[-1][1]
    assert proposed.isr == (BROKER_ID, 2)
    # a pending shrink is not assumed: the HW still waits for broker 3
    assert p.high_watermark == 3 and p.maximal_isr == (BROKER_ID, 2, 3)
    stub.accept()
    await asyncio.sleep(0)
    assert p.isr == (BROKER_ID, 2) and p.high_watermark == 5


async def test_follower_at_leo_is_never_out_of_sync(env):
    rm, _, clock, _ = env
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2))
    rm.append_records(1000, 1, {TP: batch(3)})
    follower_fetch(rm, 2, 3)
    clock.now += 10 * LAG  # no appends, no fetches: LEO equal, still in sync
    assert p.out_of_sync_replicas() == set()
    rm.append_records(1000, 1, {TP: batch(1)})
    assert p.out_of_sync_replicas() == {2}


async def test_slow_follower_leaves_isr(env):
    """A follower that fetches all the time but never reaches the LEO (Kafka's "slow
    follower") is out of sync once replica.lag.time.max.ms passed since it last caught up."""
    rm, _, clock, _ = env
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2))
    offset = 0
    for _ in range(8):
        rm.append_records(1000, 1, {TP: batch(2)})
        follower_fetch(rm, 2, offset)
        offset += 1
        clock.now += LAG // 4
    assert p.out_of_sync_replicas() == {2}


async def test_alter_partition_errors(env):
    rm, _, clock, stub = env
    p = await lead(rm)
    rm.append_records(1000, 1, {TP: batch(1)})
    clock.now += LAG + 1
    assert rm.maybe_shrink_isr() == 1
    stub.reject(ErrorCode.INVALID_UPDATE_VERSION)
    await asyncio.sleep(0)
    assert p.pending_isr is not None  # awaiting the controller's LeaderAndIsr
    assert rm.maybe_shrink_isr() == 0
    p = await lead(rm, epoch=1)  # the new state resets the pending change
    assert p.pending_isr is None
    clock.now += LAG + 1
    assert rm.maybe_shrink_isr() == 1
    stub.reject(ErrorCode.OPERATION_NOT_ATTEMPTED)
    await asyncio.sleep(0)
    assert p.pending_isr is None and p.isr == (BROKER_ID, 2, 3)
    assert rm.maybe_shrink_isr() == 1
    stub.reject(ErrorCode.UNKNOWN_SERVER_ERROR)  # retried at once
    await asyncio.sleep(0)
    assert len(stub.proposals) == 4 and stub.proposals[-1][1] == stub.proposals[-2][1]
    # an answer for an old leader epoch is ignored
    _, lai, fut = stub.proposals[-1]
    fut.set_result(LeaderAndIsr(BROKER_ID, 0, (BROKER_ID,), 9))
    await asyncio.sleep(0)
    assert p.isr == (BROKER_ID, 2, 3) and p.partition_epoch == 0


async def test_min_insync_replicas_before_and_after_append(env):
    rm, timer, clock, stub = env
    p = await lead(rm, isr=(BROKER_ID,), replicas=(BROKER_ID, 2, 3), min_isr=2)
    res = rm.append_records(1000, -1, {TP: batch(1)})
    assert res[TP].error == ErrorCode.NOT_ENOUGH_REPLICAS and p.log_end_offset == 0
    res = rm.append_records(1000, 1, {TP: batch(1)})  # acks=1 is not affected
    assert res[TP].error == ErrorCode.NONE
    # ISR {1, 2}: acks=-1 waits for broker 2, which stalls; the ISR shrinks while waiting
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2, 3), epoch=1, min_isr=2)
    fut = rm.append_records(60000, -1, {TP: batch(2)})
    assert isinstance(fut, asyncio.Future) and not fut.done()
    clock.now += LAG + 1
    assert rm.maybe_shrink_isr() == 1
    stub.accept()
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the wakeups run at the end of the loop turn (issue 21)
    assert fut.done()
    r = fut.result()[TP]
    assert r.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND and r.base_offset == 1
    # and new acks=-1 produces are refused before the append
    res = rm.append_records(1000, -1, {TP: batch(1)})
    assert res[TP].error == ErrorCode.NOT_ENOUGH_REPLICAS


async def test_acks_all_completes_on_hw_over_several_partitions(env):
    rm, timer, _, _ = env
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0, 1), isr=(BROKER_ID, 2),
                                                      replicas=(BROKER_ID, 2)))
    fut = rm.append_records(5000, -1, {("t", 0): batch(2), ("t", 1): batch(3)})
    assert not fut.done()
    rm.read_from_local_log(FetchParams(replica_id=2), [(("t", 0), PartitionFetchInfo(2, 1000))])
    await asyncio.sleep(0)
    assert not fut.done()  # partition 1 still below its last offset + 1
    rm.read_from_local_log(FetchParams(replica_id=2), [(("t", 1), PartitionFetchInfo(3, 1000))])
    await asyncio.sleep(0)  # wakeups run at the end of the loop turn
    assert fut.done()
    assert {tp: r.error for tp, r in fut.result().items()} == {("t", 0): 0, ("t", 1): 0}


async def test_leader_epoch_fencing(env):
    rm, _, _, _ = env
    await lead(rm, epoch=3)
    assert follower_fetch(rm, 2, 0, epoch=2).error == ErrorCode.FENCED_LEADER_EPOCH
    assert follower_fetch(rm, 2, 0, epoch=4).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    got = rm.read_from_local_log(FetchParams(), [(TP, PartitionFetchInfo(0, 100, 2))])[TP]
    assert got.error == ErrorCode.FENCED_LEADER_EPOCH
    # a leader that became follower refuses produce
    await rm.become_leader_or_follower(leader_and_isr(leader=2, leader_epoch=4,
                                                      isr=(2, BROKER_ID, 3),
                                                      replicas=(BROKER_ID, 2, 3)))
    res = rm.append_records(1000, 1, {TP: batch(1)})
    assert res[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_diverging_epoch_answer(env):
    """KIP-595: a follower whose last fetched epoch ends earlier on the leader gets the
    leader's (epoch, end offset) and no data, and its fetch state is not recorded."""
    rm, _, _, _ = env
    p = await lead(rm, epoch=0)
    rm.append_records(1000, 1, {TP: batch(3)})           # epoch 0: offsets 0-2
    p = await lead(rm, epoch=2)
    rm.append_records(1000, 1, {TP: batch(2)})           # epoch 2: offsets 3-4
    # follower has epoch 1 (unknown to the leader) up to offset 5
    got = follower_fetch(rm, 2, 5, epoch=2, last_fetched_epoch=1)
    assert got.error == ErrorCode.NONE and got.diverging_epoch == (0, 3)
    assert len(got.records) == 0 and p.followers[2].log_end_offset == -1
    # epoch 0 up to offset 4: the leader's epoch 0 ends at 3
    got = follower_fetch(rm, 2, 4, epoch=2, last_fetched_epoch=0)
    assert got.diverging_epoch == (0, 3)
    # consistent: epoch 0 up to 3, epoch 2 up to 4
    assert follower_fetch(rm, 2, 3, epoch=2, last_fetched_epoch=0).diverging_epoch is None
    got = follower_fetch(rm, 2, 4, epoch=2, last_fetched_epoch=2)
    assert got.diverging_epoch is None and p.followers[2].log_end_offset == 4


async def test_kip704_leader_recovers_and_proposes_recovered(env):
    """An unclean election hands the new leader a RECOVERING state (LeaderAndIsr v6+): the
    leader recovers at once (Josef has no recovery work to do, as Kafka 3.9) and its next
    AlterPartition says RECOVERED; a follower keeps what the controller said."""
    rm, _, clock, stub = env
    req = leader_and_isr(isr=(BROKER_ID,), replicas=(BROKER_ID, 2), leader_epoch=1)
    req.topic_states[0].partition_states[0].leader_recovery_state = 1
    await rm.become_leader_or_follower(req)
    p = rm.get_partition(*TP)
    p.alter_partition = stub
    assert p.leader_recovery_state == 0
    rm.append_records(1000, 1, {TP: batch(2)})
    follower_fetch(rm, 2, 2)
    assert stub.proposals[-1][1].isr == (BROKER_ID, 2)
    assert stub.proposals[-1][1].leader_recovery_state == 0
    req = leader_and_isr(leader=2, isr=(2,), replicas=(BROKER_ID, 2), leader_epoch=2)
    req.topic_states[0].partition_states[0].leader_recovery_state = 1
    await rm.become_leader_or_follower(req)
    assert p.leader_recovery_state == 1 and not p.is_leader


def idempotent_batch(n: int):
    return batch(n, producer_id=5, producer_epoch=0, base_sequence=0)


async def _hw_held_by_lapsed_follower(rm, stub, clock):
    """ISR {1, 2}; broker 3 (outside the ISR, its expansion rejected) counts as caught up,
    so it holds the HW of a parked acks=-1 produce; then replica.lag.time.max.ms passes: it
    no longer counts, but no offset moved, so no fetch or append recomputed the HW."""
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2, 3))
    follower_fetch(rm, 3, 0)
    assert stub.proposals[-1][1].isr == (BROKER_ID, 2, 3)
    stub.reject(ErrorCode.OPERATION_NOT_ATTEMPTED)
    await asyncio.sleep(0)
    assert p.pending_isr is None
    fut = rm.append_records(120000, -1, {TP: idempotent_batch(3)})
    assert isinstance(fut, asyncio.Future)
    follower_fetch(rm, 2, 3)
    assert p.high_watermark == 0 and not fut.done()  # broker 3 (caught up, alive) holds it
    clock.now += LAG + 1
    follower_fetch(rm, 2, 3)  # same offset: nothing recomputed
    assert p.high_watermark == 0 and not fut.done()
    return p, fut


async def test_retried_duplicate_recomputes_hw_and_completes(env):
    """Kafka recomputes the HW after every append, a duplicate included: the producer's
    retry of a timed-out batch completes at once instead of parking again."""
    rm, _, clock, stub = env
    p, fut = await _hw_held_by_lapsed_follower(rm, stub, clock)
    res = rm.append_records(120000, -1, {TP: idempotent_batch(3)})
    assert not isinstance(res, asyncio.Future)
    assert res[TP].error == ErrorCode.NONE and res[TP].base_offset == 0
    assert p.high_watermark == 3 and p.log_end_offset == 3
    await asyncio.sleep(0)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE


async def test_isr_check_recomputes_hw_once_a_follower_lapses(env):
    """The periodic ISR check recomputes the HW of led partitions it does not shrink."""
    rm, _, clock, stub = env
    p, fut = await _hw_held_by_lapsed_follower(rm, stub, clock)
    assert rm.maybe_shrink_isr() == 0
    assert p.high_watermark == 3
    await asyncio.sleep(0)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE


async def test_same_epoch_leader_and_isr_moving_hw_completes_parked_produce(env):
    """A LeaderAndIsr with the same leader epoch (a new controller's) drops a pending
    expansion; the HW it lets move completes parked produces (Kafka's makeLeader)."""
    rm, _, clock, stub = env
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2, 3))
    follower_fetch(rm, 3, 0)
    assert p.maximal_isr == (BROKER_ID, 2, 3)  # expansion pending, never answered
    fut = rm.append_records(120000, -1, {TP: batch(2)})
    follower_fetch(rm, 2, 2)
    clock.now += LAG + 1
    assert p.high_watermark == 0 and not fut.done()
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2, 3))
    assert p.pending_isr is None and p.high_watermark == 2
    await asyncio.sleep(0)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE


async def test_rejected_expansion_moving_hw_completes_parked_produce(env):
    rm, _, clock, stub = env
    p = await lead(rm, isr=(BROKER_ID, 2), replicas=(BROKER_ID, 2, 3))
    follower_fetch(rm, 3, 0)
    fut = rm.append_records(120000, -1, {TP: batch(2)})
    follower_fetch(rm, 2, 2)
    clock.now += LAG + 1
    assert p.high_watermark == 0 and not fut.done()
    stub.reject(ErrorCode.INELIGIBLE_REPLICA)
    await asyncio.sleep(0)
    assert p.pending_isr is None and p.high_watermark == 2
    await asyncio.sleep(0)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE


async def test_refused_expansion_is_proposed_again_only_after_a_backoff(env):
    """Issue 26: a follower the controller refuses to add (INELIGIBLE_REPLICA: a broker
    shutting down that still fetches) is not proposed on every fetch, but after a back-off
    doubling from 500 ms to 5 s; an accepted expansion clears it."""
    from broker.replication.isr import EXPAND_BACKOFF_MS

    rm, _, clock, stub = env
    p = await lead(rm, isr=(BROKER_ID,), replicas=(BROKER_ID, 2))
    rm.append_records(1000, 1, {TP: batch(2)})
    waits = []
    for _ in range(6):
        follower_fetch(rm, 2, 2)
        assert len(stub.proposals) == len(waits) + 1
        stub.reject(ErrorCode.INELIGIBLE_REPLICA)
        await asyncio.sleep(0)
        start = clock.now
        follower_fetch(rm, 2, 2)  # within the back-off: nothing proposed
        assert len(stub.proposals) == len(waits) + 1
        waits.append(p.refused_isr_adds[2][0] - start)
        clock.now = p.refused_isr_adds[2][0]
    assert waits == [500, 1000, 2000, 4000, 5000, 5000]
    assert EXPAND_BACKOFF_MS == (500, 5000)
    follower_fetch(rm, 2, 2)
    stub.accept()
    await asyncio.sleep(0)
    assert p.isr == (BROKER_ID, 2) and not p.refused_isr_adds



async def test_a_replaced_change_committed_after_all_is_adopted(env):
    """The controller's LeaderAndIsr built before our ISR shrink was committed (same leader
    and partition epochs) replaces the pending shrink; the shrink's answer, committed at a
    newer partition epoch, is then the controller's latest state and is adopted (else this
    leader stays an epoch behind and every later change is refused with
    INVALID_UPDATE_VERSION). A change proposed meanwhile from the older epoch is dropped;
    answers at an older partition epoch are ignored."""
    rm, _, clock, stub = env
    p = await lead(rm)
    rm.append_records(1000, 1, {TP: batch(2)})
    follower_fetch(rm, 2, 2)
    clock.now += LAG + 1
    follower_fetch(rm, 2, 2)
    assert rm.maybe_shrink_isr() == 1  # broker 3 never fetched
    await rm.become_leader_or_follower(leader_and_isr(isr=(BROKER_ID, 2, 3),
                                                      replicas=(BROKER_ID, 2, 3)))
    assert p.pending_isr is None and p.isr == (BROKER_ID, 2, 3)
    assert rm.maybe_shrink_isr() == 1  # proposed again from partition epoch 0
    stub.accept(0)  # the first shrink was committed: partition epoch 1
    await asyncio.sleep(0)
    assert p.isr == (BROKER_ID, 2) and p.partition_epoch == 1 and p.pending_isr is None
    stub.proposals[1][2].set_exception(KafkaError(ErrorCode.INVALID_UPDATE_VERSION, "stale"))
    await asyncio.sleep(0)
    assert p.pending_isr is None and p.isr == (BROKER_ID, 2)
    assert p.high_watermark == 2  # broker 3 no longer holds it back
    follower_fetch(rm, 3, 2)  # broker 3 catches up: proposed from partition epoch 1
    assert stub.proposals[-1][1].isr == (BROKER_ID, 2, 3)
    assert stub.proposals[-1][1].partition_epoch == 1
