"""Replication throttles (KIP-73) and fetching from the closest replica (KIP-392)."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory.delayed_fetch import FetchParams, PartitionFetchInfo
from broker.replication.fetcher import complete_batches_length
from broker.replication.fetcher_manager import fetcher_id_for
from broker.replication.quota import (
    ALL_PARTITIONS,
    ReplicationQuotaManager,
    parse_throttled_partitions,
)
from broker.replication.replica_selector import (
    RackAwareReplicaSelector,
    ReplicaView,
    selector_for,
)
from broker.request_channel import PARKED
from protocol.errors import ErrorCode
from tests.unit.replication.mini_cluster import MiniCluster, wait_for
from tests.unit.replication.test_replication_inprocess import TP, batch, log_batches, produce


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_throttled_partitions_parse_like_kafka():
    assert parse_throttled_partitions("*", 1) is ALL_PARTITIONS
    assert parse_throttled_partitions("0:1,1:2,2:1, 3:1", 1) == {0, 2, 3}
    assert parse_throttled_partitions("0:2", 1) == frozenset()
    assert parse_throttled_partitions("", 1) == frozenset()
    assert parse_throttled_partitions("bad,1:x,4:1", 1) == {4}


def test_quota_rate_over_sampled_windows():
    clock = Clock()
    q = ReplicationQuotaManager(1000, window_num=11, window_size_s=1.0, clock=clock)
    q.mark_throttled("t", frozenset({0}))
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1)
    assert not q.is_throttled("u", 0)
    q.record(500)
    assert q.rate() == 500 and not q.is_quota_exceeded()  # at least one window elapsed
    clock.now += 0.5
    q.record(1000)
    assert q.rate() == 1500 and q.is_quota_exceeded()
    clock.now += 2.5  # three seconds of samples: 1500 / 3
    assert q.rate() == pytest.approx(500) and not q.is_quota_exceeded()
    clock.now += 20  # everything aged out
    assert q.rate() == 0
    q.update_quota(0)  # 0 / unset = unlimited
    q.record(10 ** 9)
    assert not q.is_quota_exceeded()


def test_rack_aware_selector_rules():
    sel = RackAwareReplicaSelector()
    leader = ReplicaView(1, "a", 100, 0)
    b = ReplicaView(2, "b", 90, 10)
    b2 = ReplicaView(3, "b", 100, 50)
    b3 = ReplicaView(4, "b", 100, 5)
    assert sel.select("", leader, [leader, b]) is leader
    assert sel.select("c", leader, [leader, b]) is leader
    assert sel.select("a", leader, [leader, b]) is leader
    assert sel.select("b", leader, [leader, b]) is b
    assert sel.select("b", leader, [leader, b, b2, b3]) is b3  # highest LEO, then freshest
    assert selector_for(None) is None
    assert isinstance(selector_for("org.apache.kafka.common.replica.RackAwareReplicaSelector"),
                      RackAwareReplicaSelector)
    with pytest.raises(ValueError):
        selector_for("com.example.Nope")


def test_fetcher_ids_hash_like_kafka_and_partial_batches_are_cut():
    # Utils.abs(31 * "t".hashCode + p) % n, "t".hashCode == 116
    assert [fetcher_id_for("t", p, 4) for p in range(4)] == [(31 * 116 + p) % 4 for p in range(4)]
    whole = bytes(batch(2)) + bytes(batch(1))
    assert complete_batches_length(whole) == len(whole)
    assert complete_batches_length(whole + whole[:30]) == len(whole)
    assert complete_batches_length(whole[:5]) == 0


@pytest.fixture
async def cluster(tmp_path):
    c = await MiniCluster.start(tmp_path, 3, racks={1: "r1", 2: "r2", 3: "r3"},
                                replica_selector_class=(
                                    "org.apache.kafka.common.replica.RackAwareReplicaSelector"),
                                replica_lag_time_max_ms=1000)
    yield c
    await c.shutdown()


async def test_consumer_in_follower_rack_is_sent_there_and_reads_below_its_hw(cluster):
    await cluster.create("t", [1, 2, 3])
    for _ in range(3):
        assert (await produce(cluster, 1, batch(4))).error == ErrorCode.NONE
    f2 = cluster.partition(2, *TP)
    await wait_for(lambda: f2.high_watermark == 12, what="follower HW")
    await wait_for(lambda: cluster.partition(1, *TP).followers[2].log_start_offset == 0,
                   what="leader knows follower 2's log start")
    rm1 = cluster.rm(1)
    info = [(TP, PartitionFetchInfo(0, 1 << 20))]
    got = rm1.fetch_messages(FetchParams(rack_id="r2", fetch_only_from_leader=False), info)
    assert got[TP].preferred_read_replica == 2 and len(got[TP].records) == 0
    assert got[TP].high_watermark == 12
    for rack in ("r1", "elsewhere", ""):
        got = rm1.fetch_messages(FetchParams(rack_id=rack, fetch_only_from_leader=False), info)
        assert got[TP].preferred_read_replica == -1 and len(got[TP].records) > 0
    # the follower serves the consumer (v11+: not only from the leader), up to its HW
    got = cluster.rm(2).fetch_messages(FetchParams(rack_id="r2", fetch_only_from_leader=False),
                                       info)
    assert got[TP].error == ErrorCode.NONE and got[TP].preferred_read_replica == -1
    assert got[TP].records.read_bytes() == b"".join(b[3] for b in log_batches(f2))
    # a consumer parked on the follower is woken when the follower's HW moves
    fut = cluster.rm(2).fetch_messages(
        FetchParams(max_wait_ms=5000, fetch_only_from_leader=False),
        [(TP, PartitionFetchInfo(12, 1 << 20))])
    assert isinstance(fut, PARKED)
    await produce(cluster, 1, batch(1))
    res = await asyncio.wait_for(fut, 5)
    assert res[TP].high_watermark == 13 and len(res[TP].records) > 0
    # before v11 consumers only read from the leader
    got = cluster.rm(2).fetch_messages(FetchParams(), info)
    assert got[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_leader_throttles_out_of_sync_followers_only(cluster):
    await cluster.create("t", [1, 2, 3], configs={"leader.replication.throttled.replicas": "*"})
    await wait_for(lambda: sorted(cluster.partition(1, *TP).isr) == [1, 2, 3], what="ISR")
    rm = cluster.rm(1)
    for b in (2, 3):
        cluster.rm(b).fetcher_manager.remove_fetcher_for_partitions([TP])
    await produce(cluster, 1, batch(5), acks=1)
    part = cluster.partition(1, *TP)
    part.isr = (1, 2)  # broker 3 is out of sync
    rm.leader_quota.update_quota(1000)
    rm.leader_quota.record(10 ** 6)  # far above the bound
    out = rm.read_from_local_log(FetchParams(replica_id=3), [(TP, PartitionFetchInfo(0, 1 << 20))])
    assert out[TP].error == ErrorCode.NONE and len(out[TP].records) == 0
    assert part.followers[3].log_end_offset == 0  # the fetch still counted
    out = rm.read_from_local_log(FetchParams(replica_id=2), [(TP, PartitionFetchInfo(0, 1 << 20))])
    assert len(out[TP].records) > 0  # in-sync replicas are never throttled
    rm.leader_quota.update_quota(10 ** 12)
    out = rm.read_from_local_log(FetchParams(replica_id=3), [(TP, PartitionFetchInfo(0, 1 << 20))])
    assert len(out[TP].records) > 0


async def test_follower_leaves_throttled_lagging_partitions_out_of_its_fetches(cluster):
    await cluster.create("t", [1, 2, 3],
                         configs={"follower.replication.throttled.replicas": "0:3"})
    await produce(cluster, 1, batch(1))  # acks=-1: both followers fetched
    rm3 = cluster.rm(3)
    fetcher = rm3.fetcher_manager.fetcher_for(TP)
    st = fetcher.partitions[TP]
    st.lag = 5  # pretend it lags
    rm3.follower_quota.update_quota(1000)
    rm3.follower_quota.record(10 ** 6)
    _, _, data = fetcher.build_fetch()  # KIP-227: left out of the session (forgotten)
    assert TP not in data.to_send and TP not in data.session
    rm3.follower_quota.update_quota(10 ** 12)
    _, _, data = fetcher.build_fetch()
    assert TP in data.session
    assert cluster.rm(2).follower_quota.is_throttled(*TP) is False  # "0:3" names broker 3


async def test_dynamic_throttle_rates_and_fetcher_count_apply_live(cluster):
    """KIP-226: the throttle rates (dynamic-only keys in Kafka) and num.replica.fetchers
    change at run time; partitions are re-hashed onto the new fetchers and keep fetching."""
    await cluster.create("t", [1, 2, 3], partitions=4)
    server = cluster.brokers[2]
    server.services.dynamic_config.on_change("2", {
        "leader.replication.throttled.rate": "1000",
        "follower.replication.throttled.rate": "2000", "num.replica.fetchers": "3"})
    rm = cluster.rm(2)
    assert rm.leader_quota.bound == 1000 and rm.follower_quota.bound == 2000
    await wait_for(lambda: rm.fetcher_manager.num_fetchers == 3, what="resize")
    await wait_for(lambda: len(rm.fetcher_manager.fetchers) > 1, what="several fetchers")
    assert sum(len(f.partitions) for f in rm.fetcher_manager.fetchers.values()) == 4
    for p in range(4):
        assert (await produce_to(cluster, 1, p)).error == ErrorCode.NONE


async def produce_to(cluster, broker, partition):
    res = cluster.rm(broker).append_records(10000, -1, {("t", partition): batch(1)})
    if isinstance(res, asyncio.Future):
        res = await res
    return res[("t", partition)]
