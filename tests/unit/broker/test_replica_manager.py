"""ReplicaManager + Partition: controller decisions, appends, reads, HW, delayed operations."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory.delayed_fetch import FetchParams, PartitionFetchInfo
from broker.request_channel import PARKED
from protocol.errors import ErrorCode, KafkaError
from protocol.records import iter_batches
from tests.unit.broker.dataplane_helpers import (
    BROKER_ID,
    TOPIC_ID,
    batch,
    leader_and_isr,
    make_replica_manager,
    stop_replica,
)

TP = ("t", 0)


@pytest.fixture
async def rm(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path, known=[("other", 0)])
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0, 1)))
    yield rm
    await rm.shutdown()
    lm.close_all()


def consumer_fetch(rm, offsets, *, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                   partition_max=1 << 20, isolation=0, replica_id=-1, epoch=-1):
    infos = [(tp, PartitionFetchInfo(off, partition_max, epoch)) for tp, off in offsets]
    return rm.fetch_messages(FetchParams(replica_id=replica_id, max_wait_ms=max_wait_ms,
                                         min_bytes=min_bytes, max_bytes=max_bytes,
                                         isolation_level=isolation), infos)


async def test_leader_and_isr_creates_partition_with_state(rm):
    p = rm.get_partition("t", 0)
    assert p.is_leader and p.leader_epoch == 0 and p.isr == (BROKER_ID,)
    assert p.topic_id == TOPIC_ID
    assert rm.get_partition("t", 2) is None


async def test_stale_controller_epoch_rejected(rm):
    await rm.become_leader_or_follower(leader_and_isr(controller_epoch=5))
    with pytest.raises(KafkaError) as e:
        await rm.become_leader_or_follower(leader_and_isr(controller_epoch=4))
    assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH


async def test_append_acks1_assigns_offsets_and_moves_hw(rm):
    res = rm.append_records(1000, 1, {TP: batch(3)})
    assert res[TP].error == ErrorCode.NONE and res[TP].base_offset == 0
    res = rm.append_records(1000, 1, {TP: batch(2)})
    assert res[TP].base_offset == 3 and res[TP].last_offset == 4
    p = rm.get_partition(*TP)
    assert p.high_watermark == p.log_end_offset == 5


async def test_append_does_not_copy_the_frame(rm):
    mv = batch(1)
    rm.append_records(1000, 1, {TP: batch(4)})
    rm.append_records(1000, 1, {TP: mv})
    # the log patched the base offset into the caller's buffer (zero copy)
    assert next(iter_batches(mv)).base_offset == 4


async def test_append_errors_are_per_partition(rm):
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF  # CRC mismatch
    res = rm.append_records(1000, 1, {TP: batch(1), ("t", 1): memoryview(bad),
                                      ("nope", 0): batch(1), ("other", 0): batch(1)})
    assert res[TP].error == ErrorCode.NONE
    assert res[("t", 1)].error == ErrorCode.CORRUPT_MESSAGE
    assert res[("nope", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert res[("other", 0)].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rm.get_partition("t", 1).log_end_offset == 0


async def test_invalid_required_acks_appends_nothing(rm):
    res = rm.append_records(1000, 2, {TP: batch(1)})
    assert res[TP].error == ErrorCode.INVALID_REQUIRED_ACKS
    assert rm.get_partition(*TP).log_end_offset == 0


async def test_idempotent_duplicate_returns_original_offset_and_gaps_fail(rm):
    rm.append_records(1000, 1, {TP: batch(2)})
    first = rm.append_records(1000, -1, {TP: batch(2, producer_id=7, producer_epoch=0,
                                                     base_sequence=0)})
    assert first[TP].base_offset == 2
    dup = rm.append_records(1000, -1, {TP: batch(2, producer_id=7, producer_epoch=0,
                                                   base_sequence=0)})
    assert dup[TP].error == ErrorCode.NONE and dup[TP].base_offset == 2
    assert rm.get_partition(*TP).log_end_offset == 4
    gap = rm.append_records(1000, 1, {TP: batch(1, producer_id=7, producer_epoch=0,
                                                  base_sequence=5)})
    assert gap[TP].error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


async def test_acks_all_single_node_answers_at_once(rm):
    res = rm.append_records(1000, -1, {TP: batch(1)})
    assert isinstance(res, dict) and res[TP].error == ErrorCode.NONE


async def test_acks_all_waits_for_follower_then_completes(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path)
    await rm.become_leader_or_follower(leader_and_isr(isr=(BROKER_ID, 2)))
    fut = rm.append_records(5000, -1, {TP: batch(3)})
    assert isinstance(fut, asyncio.Future) and not fut.done()
    p = rm.get_partition(*TP)
    assert p.high_watermark == 0 and p.log_end_offset == 3
    # consumers cannot see past the HW
    got = consumer_fetch(rm, [(TP, 0)])
    assert len(got[TP].records) == 0 and got[TP].high_watermark == 0
    # the follower fetches from its LEO 3: the HW moves, the produce completes
    follower = rm.read_from_local_log(FetchParams(replica_id=2), [(TP, PartitionFetchInfo(3, 1 << 20))])
    assert follower[TP].error == ErrorCode.NONE
    assert p.high_watermark == 3
    await asyncio.sleep(0)  # wakeups run at the end of the loop turn (issue 21)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE
    assert fut.result()[TP].base_offset == 0
    await rm.shutdown()
    lm.close_all()


async def test_acks_all_times_out(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path)
    await rm.become_leader_or_follower(leader_and_isr(isr=(BROKER_ID, 2)))
    fut = rm.append_records(100, -1, {TP: batch(1)})
    timer.advance(99)
    assert not fut.done()
    timer.advance(1)
    assert fut.result()[TP].error == ErrorCode.REQUEST_TIMED_OUT
    await rm.shutdown()
    lm.close_all()


async def test_follower_fetch_from_unknown_replica(rm):
    got = rm.read_from_local_log(FetchParams(replica_id=9), [(TP, PartitionFetchInfo(0, 100))])
    assert got[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_fetch_reads_file_slices_and_offsets(rm):
    rm.append_records(1000, 1, {TP: batch(5)})
    got = consumer_fetch(rm, [(TP, 0)])
    d = got[TP]
    assert d.error == ErrorCode.NONE and d.high_watermark == 5 and d.log_start_offset == 0
    assert d.last_stable_offset == 5
    assert d.records.slices  # file slices, not bytes
    assert [b.record_count for b in iter_batches(d.records.read_bytes())] == [5]


async def test_fetch_offset_out_of_range_and_unknown(rm):
    got = consumer_fetch(rm, [(TP, 10), (("zz", 0), 0)])
    assert got[TP].error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert got[TP].high_watermark == -1
    assert got[("zz", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_fetch_fenced_and_unknown_leader_epoch(rm):
    await rm.become_leader_or_follower(leader_and_isr(leader_epoch=3))
    assert consumer_fetch(rm, [(TP, 0)], epoch=2)[TP].error == ErrorCode.FENCED_LEADER_EPOCH
    assert consumer_fetch(rm, [(TP, 0)], epoch=4)[TP].error == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert consumer_fetch(rm, [(TP, 0)], epoch=3)[TP].error == ErrorCode.NONE


async def test_fetch_max_bytes_first_partition_may_exceed(rm):
    big = batch(1, value=b"x" * 5000)
    size = len(big)
    rm.append_records(1000, 1, {TP: big})
    rm.append_records(1000, 1, {("t", 1): batch(1, value=b"y" * 5000)})
    got = consumer_fetch(rm, [(TP, 0), (("t", 1), 0)], max_bytes=100, partition_max=100)
    assert len(got[TP].records) == size  # KIP-74: one whole batch despite the limits
    assert len(got[("t", 1)].records) == 0  # response budget used up


async def test_fetch_partition_max_bytes_limits_later_batches(rm):
    for _ in range(3):
        rm.append_records(1000, 1, {TP: batch(1, value=b"x" * 1000)})
    one = len(batch(1, value=b"x" * 1000))
    got = consumer_fetch(rm, [(TP, 0)], partition_max=one + 10)
    assert len(got[TP].records) == one + 10  # a partial batch at the end is allowed


async def test_delayed_fetch_completed_by_append(rm):
    fut = consumer_fetch(rm, [(TP, 0)], max_wait_ms=500, min_bytes=1)
    assert isinstance(fut, PARKED) and not fut.done()
    rm.append_records(1000, 1, {TP: batch(2)})
    await asyncio.sleep(0)  # wakeups run at the end of the loop turn (issue 21)
    assert fut.done()
    assert len(fut.result()[TP].records) > 0 and fut.result()[TP].high_watermark == 2


async def test_delayed_fetch_min_bytes_accumulates(rm):
    one = len(batch(1))
    fut = consumer_fetch(rm, [(TP, 0), (("t", 1), 0)], max_wait_ms=500, min_bytes=2 * one)
    rm.append_records(1000, 1, {TP: batch(1)})
    await asyncio.sleep(0)
    assert not fut.done()
    rm.append_records(1000, 1, {("t", 1): batch(1)})
    await asyncio.sleep(0)
    assert fut.done()


async def test_delayed_fetch_expires_at_max_wait(rm):
    timer = rm.timer
    fut = consumer_fetch(rm, [(TP, 0)], max_wait_ms=500, min_bytes=1)
    timer.advance(499)
    assert not fut.done()
    timer.advance(1)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NONE
    assert len(fut.result()[TP].records) == 0


async def test_delayed_fetch_completed_by_leader_change_and_deletion(rm):
    fut = consumer_fetch(rm, [(TP, 0)], max_wait_ms=500)
    await rm.become_leader_or_follower(leader_and_isr(leader=2, leader_epoch=1,
                                                      isr=(2, BROKER_ID)))
    await asyncio.sleep(0)
    assert fut.result()[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fut = consumer_fetch(rm, [(("t", 1), 0)], max_wait_ms=500)
    await rm.stop_replicas(stop_replica(partitions=(1,)))
    await asyncio.sleep(0)
    assert fut.result()[("t", 1)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rm.log_manager.get_log(("t", 1)) is None


async def test_partitions_deleted_completes_parked_fetch(rm):
    fut = consumer_fetch(rm, [(TP, 0)], max_wait_ms=500)
    rm.partitions_deleted([TP])
    await asyncio.sleep(0)
    assert fut.done() and fut.result()[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_full_leader_and_isr_drops_unlisted_partitions(rm):
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0,), type_=2))
    assert rm.get_partition("t", 1) is None and rm.get_partition("t", 0) is not None


async def test_topic_config_change_applies_live(rm):
    rm.on_topic_config_change("t", {"max.message.bytes": "100", "min.insync.replicas": "2"})
    res = rm.append_records(1000, 1, {TP: batch(1, value=b"x" * 200)})
    assert res[TP].error == ErrorCode.MESSAGE_TOO_LARGE
    res = rm.append_records(1000, -1, {TP: batch(1, value=b"x")})
    assert res[TP].error == ErrorCode.NOT_ENOUGH_REPLICAS


async def test_list_offsets_and_epochs(rm):
    rm.append_records(1000, 1, {TP: batch(3, ts=100)})
    await rm.become_leader_or_follower(leader_and_isr(leader_epoch=2))
    rm.append_records(1000, 1, {TP: batch(2, ts=500)})
    p = rm.get_partition(*TP)
    assert p.fetch_offset_for_timestamp(-1, 0) == (-1, 5, 2)
    assert p.fetch_offset_for_timestamp(-2, 0) == (-1, 0, 0)
    assert p.fetch_offset_for_timestamp(-3, 0) == (501, 4, 2)
    assert p.fetch_offset_for_timestamp(101, 0) == (101, 1, 0)
    assert p.fetch_offset_for_timestamp(103, 0) == (500, 3, 2)
    assert p.fetch_offset_for_timestamp(10_000, 0) == (-1, -1, -1)
    assert p.last_offset_for_leader_epoch(-1, 0, True) == (0, 3)
    assert p.last_offset_for_leader_epoch(-1, 2, True) == (2, 5)
    assert p.legacy_offsets_before(-1, 5, False) == [5, 0]


async def test_timestamp_bounds_answer_invalid_timestamp(rm):
    now = rm.time_ms()
    rm.on_topic_config_change("t", {"message.timestamp.before.max.ms": "60000",
                                    "message.timestamp.after.max.ms": "1000"})
    assert rm.append_records(1000, 1, {TP: batch(1, ts=now - 61_000)})[TP].error == \
        ErrorCode.INVALID_TIMESTAMP
    assert rm.append_records(1000, 1, {TP: batch(1, ts=now + 2_000)})[TP].error == \
        ErrorCode.INVALID_TIMESTAMP
    assert rm.append_records(1000, 1, {TP: batch(1, ts=now - 59_000)})[TP].error == \
        ErrorCode.NONE
    rm.on_topic_config_change("t", {"message.timestamp.difference.max.ms": "10",
                                    "message.timestamp.type": "LogAppendTime"})
    assert rm.append_records(1000, 1, {TP: batch(1, ts=5)})[TP].error == ErrorCode.NONE
    rm.on_topic_config_change("t", {"message.timestamp.difference.max.ms": "10"})
    assert rm.append_records(1000, 1, {TP: batch(1, ts=now - 11)})[TP].error == \
        ErrorCode.INVALID_TIMESTAMP
    rm.on_topic_config_change("t", {})
    assert rm.append_records(1000, 1, {TP: batch(1, ts=5)})[TP].error == ErrorCode.NONE


async def test_replica_change_stamp_moves_with_what_the_log_start_sweeps_look_for(rm):
    """The fetch sessions' log-start sweeps are skipped while the stamp stays put, so it
    must move when a log start offset moves and when a Partition or log comes or goes."""
    stamp = rm.replica_change_stamp()
    rm.append_records(1000, 1, {TP: batch(3)})
    assert rm.replica_change_stamp() == stamp  # appends alone move no log start
    rm.get_partition(*TP).log.delete_records_before(2)  # DeleteRecords / retention
    assert rm.replica_change_stamp() != stamp
    stamp = rm.replica_change_stamp()
    await rm.stop_replicas(stop_replica(partitions=(1,), delete=False))
    assert rm.replica_change_stamp() != stamp
    stamp = rm.replica_change_stamp()
    await rm.become_leader_or_follower(leader_and_isr(partitions=(0, 1), leader_epoch=1))
    assert rm.replica_change_stamp() != stamp


async def test_led_partitions_follow_leadership_changes(rm):
    """The ISR expiration looks at `led_partitions`, listed again after any change."""
    assert sorted((p.topic, p.partition) for p in rm.led_partitions()) == [("t", 0), ("t", 1)]
    await rm.become_leader_or_follower(leader_and_isr(
        partitions=(0, 1), leader=BROKER_ID + 1, leader_epoch=1,
        isr=(BROKER_ID + 1, BROKER_ID)))
    assert rm.led_partitions() == []
    await rm.become_leader_or_follower(leader_and_isr(
        partitions=(0, 1), leader=BROKER_ID, leader_epoch=2, isr=(BROKER_ID,)))
    assert len(rm.led_partitions()) == 2
    await rm.stop_replicas(stop_replica(partitions=(1,), delete=True))
    assert [(p.topic, p.partition) for p in rm.led_partitions()] == [("t", 0)]
