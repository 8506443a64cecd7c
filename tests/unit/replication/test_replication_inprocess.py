"""Replication between real in-process brokers over TCP (see mini_cluster): follower fetch,
byte-identical logs, HW propagation, acks=-1, ISR expansion/shrink through AlterPartition,
min.insync.replicas, truncation by leader epochs (Fetch diverging epoch and
OffsetsForLeaderEpoch), out-of-range recovery, replicated producer state."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from protocol.errors import ErrorCode
from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches
from tests.unit.replication.mini_cluster import MiniCluster, wait_for

TP = ("t", 0)


def batch(n=1, value=b"v" * 100, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence)
    for i in range(n):
        b.append(1000 + i, b"k%d" % i, value)
    return memoryview(bytearray(b.build()))


def log_batches(part) -> list[tuple[int, int, int, bytes]]:
    """(base offset, last offset, leader epoch, bytes) of every batch in the log."""
    log = part.log
    data = log.read(log.log_start_offset, 1 << 30).records.read_bytes() \
        if log.log_end_offset > log.log_start_offset else b""
    return [(b.base_offset, b.last_offset, b.partition_leader_epoch, bytes(b.buffer))
            for b in iter_batches(data)]


async def produce(cluster, broker, records, acks=-1, timeout_ms=10000):
    res = cluster.rm(broker).append_records(timeout_ms, acks, {TP: records})
    if isinstance(res, asyncio.Future):
        res = await res
    return res[TP]


@pytest.fixture
async def cluster(tmp_path):
    c = await MiniCluster.start(tmp_path, 3, replica_lag_time_max_ms=1000)
    yield c
    await c.shutdown()


async def rejoin(cluster, broker):
    """Start a stopped broker again and make it a follower of `TP`; its Partition."""
    await cluster.start_broker(broker)
    await cluster.update_metadata()
    await cluster.leader_and_isr("t", [0], brokers=[broker])
    return cluster.partition(broker, *TP)


def in_sync(cluster, broker=1, isr=(1, 2, 3)):
    p = cluster.partition(broker, *TP)
    return p is not None and sorted(p.isr) == sorted(isr) and p.pending_isr is None


async def test_followers_copy_batches_unchanged_and_acks_all(cluster):
    await cluster.create("t", [1, 2, 3])
    for i in range(5):
        r = await produce(cluster, 1, batch(3 + i))
        assert r.error == ErrorCode.NONE
    leader = cluster.partition(1, *TP)
    assert leader.high_watermark == leader.log_end_offset == 3 + 4 + 5 + 6 + 7
    for b in (2, 3):
        f = cluster.partition(b, *TP)
        await wait_for(lambda f=f: f.high_watermark == leader.high_watermark, what="follower HW")
        assert log_batches(f) == log_batches(leader)
        assert f.log.leader_epoch_cache.entries == leader.log.leader_epoch_cache.entries
    # acks=-1 completed only once both ISR followers had the records
    assert all(cluster.partition(1, *TP).followers[b].log_end_offset >= 25 - 7 for b in (2, 3))


async def test_isr_expands_through_alter_partition_and_shrinks_on_lag(cluster):
    from broker.metrics import REGISTRY

    shrinks = REGISTRY.meter("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec")
    expands = REGISTRY.meter("kafka.server:type=ReplicaManager,name=IsrExpandsPerSec")
    replicated = REGISTRY.meter("kafka.server:type=BrokerTopicMetrics,"
                                "name=ReplicationBytesInPerSec")
    before = (shrinks.count, expands.count, replicated.count)
    ctrl = cluster.controller
    cluster.controller.state.clear()
    await cluster.create("t", [1, 2, 3])
    ctrl.state[TP].isr = [1]  # start with ISR {1}: followers must be added
    await cluster.elect("t", 0, 1, isr=[1])
    await produce(cluster, 1, batch(5), acks=1)
    await wait_for(lambda: in_sync(cluster), what="ISR {1,2,3}")
    assert sorted(ctrl.state[TP].isr) == [1, 2, 3]
    assert cluster.partition(1, *TP).partition_epoch == ctrl.state[TP].partition_epoch
    assert ctrl.alter_partition_requests and ctrl.alter_partition_requests[0][0] == 3
    # broker 3 goes away: after replica.lag.time.max.ms (1 s) it leaves the ISR
    await cluster.stop_broker(3)
    await produce(cluster, 1, batch(1), acks=1)
    await wait_for(lambda: in_sync(cluster, isr=(1, 2)), timeout=10, what="ISR {1,2}")
    r = await produce(cluster, 1, batch(1))
    assert r.error == ErrorCode.NONE
    # the metrics (issue 17): expansions, one shrink, bytes the followers appended
    assert expands.count - before[1] >= 1 and shrinks.count - before[0] >= 1
    assert replicated.count > before[2]


async def test_min_insync_replicas(cluster):
    await cluster.create("t", [1, 2, 3], configs={"min.insync.replicas": "2"})
    await wait_for(lambda: in_sync(cluster), what="ISR")
    await cluster.stop_broker(2)
    await cluster.stop_broker(3)
    pending = asyncio.ensure_future(produce(cluster, 1, batch(1), timeout_ms=20000))
    await wait_for(lambda: in_sync(cluster, isr=(1,)), what="ISR {1}")
    r = await pending  # appended, then the ISR shrank below min.insync.replicas
    assert r.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    r = await produce(cluster, 1, batch(1))
    assert r.error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await produce(cluster, 1, batch(1), acks=1)).error == ErrorCode.NONE
    await cluster.start_broker(2)
    await cluster.update_metadata()
    await cluster.leader_and_isr("t", [0], brokers=[2])
    await wait_for(lambda: in_sync(cluster, isr=(1, 2)), what="ISR {1,2}")
    assert (await produce(cluster, 1, batch(1))).error == ErrorCode.NONE


@pytest.mark.parametrize("ibp", ["3.9", "2.6"])
async def test_divergent_tail_is_truncated_by_leader_epoch(tmp_path, ibp):
    """KIP-279: broker 1 (leader, epoch 0) has a tail its followers never fetched; broker 2
    becomes leader (epoch 1) and writes other records at those offsets; broker 1 rejoins as
    follower and must end byte-identical to broker 2 (diverging epoch in Fetch v12+, or
    OffsetsForLeaderEpoch with IBP 2.6)."""
    cluster = await MiniCluster.start(tmp_path, 3, inter_broker_protocol_version=ibp)
    try:
        await cluster.create("t", [1, 2, 3])
        for _ in range(3):
            assert (await produce(cluster, 1, batch(2))).error == ErrorCode.NONE
        # followers stop fetching; broker 1 appends a tail nobody else has (acks=1)
        for b in (2, 3):
            cluster.rm(b).fetcher_manager.remove_fetcher_for_partitions([TP])
        await produce(cluster, 1, batch(4, value=b"lost"), acks=1)
        assert cluster.partition(1, *TP).log_end_offset == 10
        # broker 2 is elected (epoch 1) with ISR {2, 3}; broker 1 hears nothing yet
        st = cluster.controller.state[TP]
        st.leader, st.leader_epoch, st.isr = 2, 1, [2, 3]
        await cluster.update_metadata()
        await cluster.leader_and_isr("t", [0], brokers=[2, 3])
        for _ in range(2):
            assert (await produce(cluster, 2, batch(1, value=b"new"))).error == ErrorCode.NONE
        # broker 1 learns it is a follower now
        await cluster.leader_and_isr("t", [0], brokers=[1])
        leader = cluster.partition(2, *TP)
        old = cluster.partition(1, *TP)
        await wait_for(lambda: log_batches(old) == log_batches(leader), what="identical logs")
        assert old.log_end_offset == 8
        assert old.log.leader_epoch_cache.entries == [(0, 0), (1, 6)]
        await wait_for(lambda: sorted(leader.isr) == [1, 2, 3], what="broker 1 back in ISR")
    finally:
        await cluster.shutdown()


async def test_follower_behind_leader_log_start_restarts_there(cluster):
    await cluster.create("t", [1, 2, 3])
    await wait_for(lambda: in_sync(cluster), what="ISR")
    await cluster.stop_broker(3)
    for _ in range(4):
        await produce(cluster, 1, batch(5), acks=1)
    leader = cluster.partition(1, *TP)
    await wait_for(lambda: leader.high_watermark == 20, what="HW 20")
    leader.log.roll()
    leader.log.delete_records_before(20)
    assert leader.log_start_offset == 20
    await produce(cluster, 1, batch(2), acks=1)
    f = await rejoin(cluster, 3)
    await wait_for(lambda: f.log_end_offset == 22 and f.log_start_offset == 20,
                   what="follower restarted at the leader's log start")
    assert log_batches(f) == log_batches(leader)


async def test_new_replica_catches_up_when_log_start_is_inside_a_batch(cluster):
    """Issue 26: DeleteRecords inside a batch, then a wiped replica fetches from the leader's
    log start: it takes the whole batch, restarts its log at the batch's base offset and
    takes the leader's log start offset back (Kafka's UnexpectedAppendOffsetException
    handling), instead of failing its append forever."""
    await cluster.create("t", [1, 2, 3])
    await wait_for(lambda: in_sync(cluster), what="ISR")
    assert (await produce(cluster, 1, batch(10))).error == ErrorCode.NONE
    leader = cluster.partition(1, *TP)
    leader.log.delete_records_before(5)
    await cluster.stop_broker(3)
    shutil.rmtree(cluster.config(3).log_dirs[0])
    f = await rejoin(cluster, 3)
    await wait_for(lambda: f.log_end_offset == 10 and f.log_start_offset == 5,
                   what="wiped follower caught up")
    assert log_batches(f) == log_batches(leader)
    seg = "00000000000000000000.log"
    with open(f"{f.log.dir}/{seg}", "rb") as a, open(f"{leader.log.dir}/{seg}", "rb") as b:
        assert a.read() == b.read()


async def test_new_leader_rejects_duplicates_of_replicated_idempotent_batches(cluster):
    await cluster.create("t", [1, 2, 3])
    pid, epoch = 4000, 0
    for seq in range(0, 15, 5):
        r = await produce(cluster, 1, batch(5, producer_id=pid, producer_epoch=epoch,
                                            base_sequence=seq))
        assert r.error == ErrorCode.NONE
    await cluster.elect("t", 0, 2)
    await wait_for(lambda: cluster.partition(2, *TP).is_leader, what="broker 2 leads")
    r = await produce(cluster, 2, batch(5, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=10))
    assert r.error == ErrorCode.NONE and r.base_offset == 10  # the original offsets
    assert cluster.partition(2, *TP).log_end_offset == 15
    r = await produce(cluster, 2, batch(5, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=20))
    assert r.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    r = await produce(cluster, 2, batch(5, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=15))
    assert r.error == ErrorCode.NONE and r.base_offset == 15


async def test_epoch_led_without_appends_does_not_make_the_follower_diverge_forever(cluster):
    """Broker 3 leads epoch 1 without appending anything (its epoch cache still records
    epoch 1 at its LEO), then broker 2 leads epoch 2 and writes. Broker 3 fetches with
    last fetched epoch 1, which broker 2 does not know: it must drop that empty epoch's entry
    (Kafka's truncateTo at the LEO) and catch up, not diverge at the same offset forever."""
    await cluster.create("t", [1, 2, 3])
    assert (await produce(cluster, 1, batch(3))).error == ErrorCode.NONE
    await cluster.elect("t", 0, 3)
    p3 = cluster.partition(3, *TP)
    await wait_for(lambda: p3.is_leader, what="broker 3 leads")
    assert p3.log.leader_epoch_cache.entries == [(0, 0), (1, 3)]
    await cluster.elect("t", 0, 2)
    assert (await produce(cluster, 2, batch(2))).error == ErrorCode.NONE
    leader = cluster.partition(2, *TP)
    await wait_for(lambda: log_batches(p3) == log_batches(leader), what="broker 3 caught up")
    assert p3.log.leader_epoch_cache.entries == [(0, 0), (2, 3)]
    await wait_for(lambda: sorted(leader.isr) == [1, 2, 3], what="ISR")


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret";')


async def test_followers_fetch_over_a_sasl_inter_broker_listener(tmp_path):
    """The inter-broker listener is SASL_PLAINTEXT (PLAIN): fetchers authenticate through
    broker.security.inter_broker before fetching."""
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "inter.broker.listener.name": "SASL_PLAINTEXT",
             "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
             "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
    cluster = await MiniCluster.start(tmp_path, 2, props=props)
    try:
        for b in cluster.ids:
            assert cluster.brokers[b].config.inter_broker_security_protocol == "SASL_PLAINTEXT"
        await cluster.create("t", [1, 2])
        assert (await produce(cluster, 1, batch(3))).error == ErrorCode.NONE
        f = cluster.partition(2, *TP)
        await wait_for(lambda: log_batches(f) == log_batches(cluster.partition(1, *TP)),
                       what="follower copy over SASL")
    finally:
        await cluster.shutdown()
