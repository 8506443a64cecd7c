"""MetadataCache: applying UpdateMetadata decisions and answering metadata queries."""

import uuid

import pytest

from broker.metadata_cache import MetadataCache
from controller.api import BrokerMetadataListener, CreatableTopic
from controller.channel import LocalControllerChannel
from controller.embedded import EmbeddedController
from controller.metadata_store import EmbeddedMetadataStore
from controller.zk_data import BrokerInfo, Endpoint
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import UpdateMetadataRequest as UMR

T1 = uuid.UUID(int=11)
T2 = uuid.UUID(int=22)


def broker(i, host="h", port=9092, listener="PLAINTEXT", rack=None):
    return UMR.UpdateMetadataBroker(id=i, rack=rack, endpoints=[
        UMR.UpdateMetadataEndpoint(host=host, port=port, listener=listener, security_protocol=0)])


def pstate(p, leader, isr, replicas, epoch=0, offline=()):
    return UMR.UpdateMetadataPartitionState(
        partition_index=p, controller_epoch=1, leader=leader, leader_epoch=epoch, isr=list(isr),
        zk_version=0, replicas=list(replicas), offline_replicas=list(offline))


def request(topics, brokers, epoch=1, controller=1, type_=1):
    return UMR(controller_id=controller, controller_epoch=epoch, broker_epoch=-1, type=type_,
               topic_states=[UMR.UpdateMetadataTopicState(topic_name=n, topic_id=tid,
                                                          partition_states=ps)
                             for n, tid, ps in topics],
               live_brokers=brokers)


def test_topics_partitions_and_brokers():
    c = MetadataCache(1, "clusterid")
    assert c.controller_id is None and c.get_topic_metadata(None, "PLAINTEXT") == []
    c.update_metadata(request(
        [("a", T1, [pstate(1, 1, [1], [1]), pstate(0, 1, [1], [1], epoch=3)]),
         ("__consumer_offsets", T2, [pstate(0, 2, [2], [2])])],
        [broker(1, rack="r"), broker(2, host="h2", listener="OTHER")]))
    assert c.cluster_id == "clusterid" and c.controller_id == 1
    assert c.topic_id("a") == T1 and c.topic_name(T1) == "a" and c.topic_name(uuid.UUID(int=5)) is None
    assert c.num_partitions("a") == 2 and c.num_partitions("zz") is None
    assert c.contains_topic("a") and not c.contains_topic("b") and c.contains_partition("a", 1)
    assert [b.id for b in c.alive_brokers()] == [1, 2]
    assert [(n.id, n.host, n.port, n.rack) for n in c.alive_broker_nodes("PLAINTEXT")] == [
        (1, "h", 9092, "r")]
    md = c.get_topic_metadata(["zz", "a", "__consumer_offsets", "a"], "PLAINTEXT")
    assert [t.name for t in md] == ["a", "__consumer_offsets"]
    a, offsets = md
    assert a.topic_id == T1 and not a.is_internal and offsets.is_internal
    assert [(p.partition, p.error_code, p.leader_id, p.leader_epoch) for p in a.partitions] == [
        (0, 0, 1, 3), (1, 0, 1, 0)]
    # broker 2 has no PLAINTEXT endpoint: the leader is unavailable on this listener
    [p] = offsets.partitions
    assert (p.error_code, p.leader_id) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    [p] = c.get_topic_metadata(["__consumer_offsets"], "PLAINTEXT",
                               error_unavailable_listeners=True)[0].partitions
    assert p.error_code == ErrorCode.LISTENER_NOT_FOUND
    assert c.partition_leader_node("a", 0, "PLAINTEXT").id == 1
    assert c.partition_leader_node("__consumer_offsets", 0, "PLAINTEXT") is None


def test_leader_not_alive_and_v0_endpoint_filtering():
    c = MetadataCache(1)
    c.update_metadata(request([("t", T1, [pstate(0, 3, [3, 1], [3, 1], offline=[3]),
                                          pstate(1, 1, [1, 3], [1, 3])])], [broker(1)]))
    p0, p1 = c.get_topic_metadata(["t"], "PLAINTEXT")[0].partitions
    assert (p0.error_code, p0.leader_id, p0.replica_nodes, p0.offline_replicas) == (
        ErrorCode.LEADER_NOT_AVAILABLE, -1, [3, 1], [3])
    assert (p1.error_code, p1.leader_id) == (0, 1)
    p0, p1 = c.get_topic_metadata(["t"], "PLAINTEXT", error_unavailable_endpoints=True)[0].partitions
    assert (p1.error_code, p1.replica_nodes, p1.isr_nodes) == (
        ErrorCode.REPLICA_NOT_AVAILABLE, [1], [1])


def test_incremental_merge_delete_full_and_stale_epoch():
    c = MetadataCache(1)
    c.update_metadata(request([("a", T1, [pstate(0, 1, [1], [1])]),
                               ("b", T2, [pstate(0, 1, [1], [1]), pstate(1, 1, [1], [1])])],
                              [broker(1)]))
    # incremental: a new partition for b, a untouched
    c.update_metadata(request([("b", T2, [pstate(2, 1, [1], [1])])], [broker(1)]))
    assert c.num_partitions("a") == 1 and c.num_partitions("b") == 3
    # deletion: leader -2
    deleted = c.update_metadata(request(
        [("b", T2, [pstate(p, -2, [1], [1]) for p in range(3)])], [broker(1)]))
    assert sorted(deleted) == [("b", 0), ("b", 1), ("b", 2)]
    assert not c.contains_topic("b") and c.topic_id("b") is None and c.topic_name(T2) is None
    # FULL replaces the whole partition set
    deleted = c.update_metadata(request([("c", uuid.UUID(int=33), [pstate(0, 1, [1], [1])])],
                                        [broker(1)], epoch=2, type_=2))
    assert deleted == [("a", 0)] and c.all_topics() == ["c"] and c.controller_epoch == 2
    with pytest.raises(KafkaError) as e:
        c.update_metadata(request([("d", T1, [pstate(0, 1, [1], [1])])], [broker(1)], epoch=1))
    assert e.value.code == ErrorCode.STALE_CONTROLLER_EPOCH and not c.contains_topic("d")
    # live brokers are replaced by each request
    c.update_metadata(request([], [broker(2)], epoch=2))
    assert [b.id for b in c.alive_brokers()] == [2] and c.all_topics() == ["c"]


class CacheBroker(BrokerMetadataListener):
    """The part of a broker that feeds controller decisions into its MetadataCache."""

    def __init__(self, cache):
        self.cache = cache

    async def on_leader_and_isr(self, decision):
        pass

    async def on_update_metadata(self, decision):
        self.cache.update_metadata(decision)

    async def on_stop_replica(self, decision):
        pass

    async def on_topic_config_change(self, topic, configs):
        pass


async def test_cache_follows_the_embedded_controller(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path))
    await store.open()
    cache = MetadataCache(7)
    info = BrokerInfo(7, (Endpoint("PLAINTEXT", "127.0.0.1", 19092),))
    ctl = EmbeddedController(store, info, LocalControllerChannel(7, CacheBroker(cache)))
    await ctl.startup()
    cache.set_cluster_id(ctl.cluster_id)
    [r] = await ctl.create_topics([CreatableTopic("events", 3, 1)])
    assert cache.topic_id("events") == r.topic_id and cache.num_partitions("events") == 3
    [tm] = cache.get_topic_metadata(None, "PLAINTEXT")
    assert [(p.leader_id, p.error_code, p.isr_nodes) for p in tm.partitions] == [(7, 0, [7])] * 3
    assert cache.controller_id == 7 and cache.cluster_id == ctl.cluster_id
    await ctl.create_partitions([("events", 5, None)])
    assert cache.num_partitions("events") == 5
    await ctl.delete_topics(["events"])
    assert not cache.contains_topic("events") and cache.topic_name(r.topic_id) is None
    # a restarted controller (epoch 2) brings a fresh cache up to date with a FULL decision
    await ctl.create_topics([CreatableTopic("kept", 1, 1)])
    cache2 = MetadataCache(7)
    ctl2 = EmbeddedController(store, info, LocalControllerChannel(7, CacheBroker(cache2)))
    await ctl2.startup()
    assert cache2.all_topics() == ["kept"] and cache2.controller_epoch == 2
