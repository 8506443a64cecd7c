"""EmbeddedController: startup epochs, decisions sent to the broker, admin flows."""

import json

import pytest

from controller.api import (
    ELECTION_PREFERRED,
    ELECTION_UNCLEAN,
    TYPE_FULL,
    TYPE_INCREMENTAL,
    BrokerMetadataListener,
    CreatableTopic,
    CreatePartitionsTopic,
)
from controller.channel import LocalControllerChannel
from controller.embedded import EmbeddedController
from controller.kafka_uuid import from_base64, random_uuid
from controller.metadata_store import EmbeddedMetadataStore
from controller.zk_data import BrokerInfo, Endpoint, TopicPartitionStateZNode
from protocol.errors import ErrorCode
from protocol.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

BROKER = BrokerInfo(id=1, endpoints=(Endpoint("PLAINTEXT", "127.0.0.1", 9092),), rack="r1")


class RecordingBroker(BrokerMetadataListener):
    def __init__(self):
        self.events = []

    async def on_leader_and_isr(self, decision):
        self.events.append(("lai", decision))

    async def on_update_metadata(self, decision):
        self.events.append(("um", decision))

    async def on_stop_replica(self, decision):
        self.events.append(("stop", decision))

    async def on_topic_config_change(self, topic, configs):
        self.events.append(("config", (topic, configs)))

    def kinds(self):
        return [k for k, _ in self.events]

    def last(self, kind):
        return [d for k, d in self.events if k == kind][-1]

    def clear(self):
        self.events.clear()


async def start(tmp_path, **kw):
    store = EmbeddedMetadataStore(str(tmp_path))
    await store.open()
    broker = RecordingBroker()
    ctl = EmbeddedController(store, BROKER, LocalControllerChannel(1, broker), clock_ms=lambda: 5, **kw)
    await ctl.startup()
    return ctl, broker, store


def partition_states(decision):
    return {(t.topic_name, p.partition_index): p for t in decision.topic_states
            for p in t.partition_states}


async def test_fresh_start_registers_and_sends_full_decisions(tmp_path):
    ctl, broker, store = await start(tmp_path)
    assert ctl.controller_epoch == 1
    assert len(ctl.cluster_id) == 22 and from_base64(ctl.cluster_id)
    assert broker.kinds() == ["lai", "um"]
    lai, um = broker.last("lai"), broker.last("um")
    assert isinstance(lai, LeaderAndIsrRequest) and isinstance(um, UpdateMetadataRequest)
    assert lai.type == TYPE_FULL and um.type == TYPE_FULL and lai.topic_states == []
    assert lai.controller_id == 1 and lai.controller_epoch == 1
    assert lai.broker_epoch == ctl.broker_epoch == store.exists("/brokers/ids/1").czxid
    [b] = um.live_brokers
    assert b.id == 1 and b.rack == "r1"
    assert [(e.host, e.port, e.listener, e.security_protocol) for e in b.endpoints] == [
        ("127.0.0.1", 9092, "PLAINTEXT", 0)]
    reg = json.loads(store.get_data("/brokers/ids/1"))
    assert reg["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"] and reg["timestamp"] == "5"
    assert json.loads(store.get_data("/controller"))["brokerid"] == 1
    assert lai.encode(7) and um.encode(8)  # decisions encode at their ZK-era versions


async def test_controller_epoch_increments_on_each_start_and_cluster_id_is_stable(tmp_path):
    ctl1, _, _ = await start(tmp_path)
    ctl2, _, _ = await start(tmp_path)
    ctl3, broker3, store3 = await start(tmp_path)
    assert [ctl1.controller_epoch, ctl2.controller_epoch, ctl3.controller_epoch] == [1, 2, 3]
    assert ctl1.cluster_id == ctl2.cluster_id == ctl3.cluster_id
    assert store3.get_data("/controller_epoch") == b"3"
    assert broker3.last("lai").controller_epoch == 3
    assert ctl3.broker_epoch > ctl1.broker_epoch


async def test_create_topic_flow_and_decisions(tmp_path):
    ctl, broker, store = await start(tmp_path, default_num_partitions=4)
    broker.clear()
    [res] = await ctl.create_topics([CreatableTopic("orders", 3, 1, None,
                                                    {"retention.ms": "1000"})])
    assert res.error_code == 0 and res.num_partitions == 3 and res.replication_factor == 1
    assert res.configs == {"retention.ms": "1000"} and res.topic_id is not None
    assert broker.kinds() == ["config", "lai", "um"]
    assert broker.events[0][1] == ("orders", {"retention.ms": "1000"})
    lai = broker.last("lai")
    assert lai.type == TYPE_INCREMENTAL
    [ts] = lai.topic_states
    assert ts.topic_name == "orders" and ts.topic_id == res.topic_id
    for p in ts.partition_states:
        assert (p.leader, p.leader_epoch, p.isr, p.replicas, p.is_new, p.partition_epoch,
                p.controller_epoch) == (1, 0, [1], [1], True, 0, 1)
    assert [p.partition_index for p in ts.partition_states] == [0, 1, 2]
    assert [ll.broker_id for ll in lai.live_leaders] == [1]
    um = broker.last("um")
    assert sorted(partition_states(um)) == [("orders", 0), ("orders", 1), ("orders", 2)]
    # znodes are Kafka's documents
    topic_doc = json.loads(store.get_data("/brokers/topics/orders"))
    assert topic_doc["partitions"] == {"0": [1], "1": [1], "2": [1]}
    assert from_base64(topic_doc["topic_id"]) == res.topic_id
    assert json.loads(store.get_data("/config/topics/orders")) == {
        "version": 1, "config": {"retention.ms": "1000"}}
    state = json.loads(store.get_data(TopicPartitionStateZNode.path("orders", 2)))
    assert state == {"version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1,
                     "isr": [1]}
    assert ctl.topic_configs("orders") == {"retention.ms": "1000"}
    # defaults (-1) use the controller's defaults; tuples are accepted
    [d] = await ctl.create_topics([("dflt", -1, -1, None, {})])
    assert d.error_code == 0 and d.num_partitions == 4
    [again] = await ctl.create_topics([CreatableTopic("orders", 1, 1)])
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS


async def test_create_topics_error_codes(tmp_path):
    ctl, broker, store = await start(tmp_path, max_partitions_per_topic=100)
    broker.clear()
    cases = [
        (CreatableTopic("bad name!", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic(".", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("..", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("x" * 250, 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreatableTopic("zero", 0, 1), ErrorCode.INVALID_PARTITIONS),
        (CreatableTopic("neg", -5, 1), ErrorCode.INVALID_PARTITIONS),
        (CreatableTopic("huge", 101, 1), ErrorCode.INVALID_PARTITIONS),
        (CreatableTopic("rf3", 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreatableTopic("rf0", 1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (CreatableTopic("cfg", 1, 1, None, {"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
        (CreatableTopic("cfg2", 1, 1, None, {"retention.ms": "abc"}), ErrorCode.INVALID_CONFIG),
        (CreatableTopic("cfg3", 1, 1, None, {"cleanup.policy": None}), ErrorCode.INVALID_CONFIG),
        (CreatableTopic("asg", 1, 1, {0: [1]}), ErrorCode.INVALID_REQUEST),
        (CreatableTopic("asg2", -1, -1, {0: [2]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("asg3", -1, -1, {1: [1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("asg4", -1, -1, {0: [1, 1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (CreatableTopic("dup", 1, 1), ErrorCode.INVALID_REQUEST),
        (CreatableTopic("dup", 1, 1), ErrorCode.INVALID_REQUEST),
        (CreatableTopic("ok.topic_1-A", 1, 1), ErrorCode.NONE),
        (CreatableTopic("ok_topic_1-A", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides
        (CreatableTopic("x" * 249, 1, 1), ErrorCode.NONE),
        (CreatableTopic("assigned", -1, -1, {0: [1], 1: [1]}), ErrorCode.NONE),
    ]
    results = await ctl.create_topics([c for c, _ in cases])
    assert [(r.name, r.error_code) for r in results] == [(c.name, int(e)) for c, e in cases]
    assert all(r.error_message for r in results if r.error_code)
    assert results[-1].num_partitions == 2
    assert sorted(store.get_children("/brokers/topics")) == sorted(
        ["ok.topic_1-A", "x" * 249, "assigned"])


async def test_validate_only_writes_nothing(tmp_path):
    ctl, broker, store = await start(tmp_path)
    broker.clear()
    zxid = store.zxid
    [r] = await ctl.create_topics([CreatableTopic("t", 2, 1)], validate_only=True)
    assert r.error_code == 0 and r.num_partitions == 2
    assert store.zxid == zxid and broker.events == [] and ctl.topic_configs("t") is None


async def test_topics_survive_restart_without_new_leader_epochs(tmp_path):
    ctl, _, _ = await start(tmp_path)
    [r] = await ctl.create_topics([CreatableTopic("t", 2, 1, None, {"segment.bytes": "1048576"})])
    ctl2, broker2, _ = await start(tmp_path)
    assert ctl2.controller_epoch == 2
    assert broker2.kinds() == ["config", "lai", "um"]
    assert broker2.events[0][1] == ("t", {"segment.bytes": "1048576"})
    lai = broker2.last("lai")
    assert lai.type == TYPE_FULL and lai.controller_epoch == 2
    [ts] = lai.topic_states
    assert ts.topic_id == r.topic_id
    for p in ts.partition_states:
        # the recorded leader (this broker) is live: no election, epochs unchanged,
        # the state keeps the controller epoch that wrote it
        assert (p.leader, p.leader_epoch, p.partition_epoch, p.controller_epoch, p.is_new) == (
            1, 0, 0, 1, False)


async def test_offline_leader_is_reelected_with_bumped_epoch(tmp_path):
    ctl, _, store = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("t", 1, 1)])
    # simulate a state written when another broker (2) led, with 1 still in the ISR
    path = TopicPartitionStateZNode.path("t", 0)
    await store.set_data(path, b'{"version":1,"leader":2,"leader_epoch":5,'
                               b'"controller_epoch":1,"isr":[2,1]}')
    ctl2, broker2, _ = await start(tmp_path)
    [p] = broker2.last("lai").topic_states[0].partition_states
    assert (p.leader, p.leader_epoch, p.isr, p.controller_epoch, p.partition_epoch) == (
        1, 6, [1], 2, 2)
    store2 = EmbeddedMetadataStore(str(tmp_path))
    await store2.open()
    assert json.loads(store2.get_data(path))["leader_epoch"] == 6


async def test_no_eligible_leader_goes_offline_once(tmp_path):
    ctl, _, store = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("t", 1, 1)])
    path = TopicPartitionStateZNode.path("t", 0)
    await store.set_data(path, b'{"version":1,"leader":2,"leader_epoch":3,'
                               b'"controller_epoch":1,"isr":[2]}')
    ctl2, broker2, _ = await start(tmp_path)
    [p] = partition_states(broker2.last("um")).values()
    assert (p.leader, p.leader_epoch) == (-1, 4)
    ctl3, broker3, _ = await start(tmp_path)  # already leaderless: no further bump
    [p] = partition_states(broker3.last("um")).values()
    assert (p.leader, p.leader_epoch) == (-1, 4)
    # unclean election brings it back with ISR = [self]
    [res] = await ctl3.elect_leaders(ELECTION_UNCLEAN, [("t", 0)])
    assert res.error_code == 0
    [p] = partition_states(broker3.last("um")).values()
    assert (p.leader, p.leader_epoch, p.isr) == (1, 5, [1])
    [res] = await ctl3.elect_leaders(ELECTION_UNCLEAN, [("t", 0)])
    assert res.error_code == ErrorCode.ELECTION_NOT_NEEDED


async def test_delete_topics_by_name_and_id(tmp_path):
    ctl, broker, store = await start(tmp_path)
    [a, b] = await ctl.create_topics([CreatableTopic("a", 2, 1), CreatableTopic("b", 1, 1)])
    broker.clear()
    unknown_id = random_uuid()
    res = await ctl.delete_topics(["a", "nope"], [b.topic_id, unknown_id])
    assert [(r.name, r.topic_id, r.error_code) for r in res] == [
        ("a", a.topic_id, 0), ("nope", None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("b", b.topic_id, 0), (None, unknown_id, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert broker.kinds() == ["um", "stop", "um", "stop"]
    um = broker.events[0][1]
    assert {p.leader for p in partition_states(um).values()} == {-2}
    stop = broker.events[1][1]
    assert isinstance(stop, StopReplicaRequest) and stop.encode(4)
    [ts] = stop.topic_states
    assert ts.topic_name == "a"
    assert [(p.partition_index, p.leader_epoch, p.delete_partition)
            for p in ts.partition_states] == [(0, -2, True), (1, -2, True)]
    assert store.get_children("/brokers/topics") == []
    assert store.get_children("/config/topics") == []
    assert store.get_children("/admin/delete_topics") == []
    assert ctl.topic_configs("a") is None
    # the name can be reused, with a new topic id
    [again] = await ctl.create_topics([CreatableTopic("a", 1, 1)])
    assert again.error_code == 0 and again.topic_id != a.topic_id


async def test_pending_deletion_is_finished_on_startup(tmp_path):
    ctl, _, store = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("gone", 1, 1)])
    await store.create("/admin/delete_topics/gone")  # crash after marking it
    ctl2, broker2, store2 = await start(tmp_path)
    assert "stop" in broker2.kinds()
    assert store2.get_children("/brokers/topics") == []
    assert broker2.last("lai").topic_states == []


async def test_create_partitions(tmp_path):
    ctl, broker, store = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("t", 2, 1)])
    broker.clear()
    res = await ctl.create_partitions([
        CreatePartitionsTopic("t", 4),
        CreatePartitionsTopic("nope", 3),
    ])
    assert [(r.name, r.error_code) for r in res] == [
        ("t", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    lai = broker.last("lai")
    assert [(p.partition_index, p.is_new, p.leader_epoch)
            for p in lai.topic_states[0].partition_states] == [(2, True, 0), (3, True, 0)]
    assert json.loads(store.get_data("/brokers/topics/t"))["partitions"] == {
        "0": [1], "1": [1], "2": [1], "3": [1]}
    res = await ctl.create_partitions([("t", 4, None)])
    assert res[0].error_code == ErrorCode.INVALID_PARTITIONS
    res = await ctl.create_partitions([("t", 3, None)])
    assert res[0].error_code == ErrorCode.INVALID_PARTITIONS
    res = await ctl.create_partitions([("t", 6, [[1]])])
    assert res[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    res = await ctl.create_partitions([("t", 5, [[7]])])
    assert res[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    res = await ctl.create_partitions([("t", 5, [[1]]), ("t", 6, None)])
    assert [r.error_code for r in res] == [ErrorCode.INVALID_REQUEST] * 2
    zxid = store.zxid
    res = await ctl.create_partitions([("t", 5, [[1]])], validate_only=True)
    assert res[0].error_code == 0 and store.zxid == zxid
    res = await ctl.create_partitions([("t", 5, [[1]])])
    assert res[0].error_code == 0
    ctl2, broker2, _ = await start(tmp_path)
    assert len(broker2.last("lai").topic_states[0].partition_states) == 5


async def test_alter_configs(tmp_path):
    ctl, broker, store = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("t", 1, 1, None, {"retention.ms": "10"})])
    broker.clear()
    r = await ctl.alter_topic_configs("t", {"cleanup.policy": "compact"})
    assert r.error_code == 0
    assert broker.events == [("config", ("t", {"cleanup.policy": "compact"}))]
    assert json.loads(store.get_data("/config/topics/t"))["config"] == {"cleanup.policy": "compact"}
    r = await ctl.incremental_alter_topic_configs("t", [("cleanup.policy", 2, "delete"),
                                                        ("retention.ms", 0, "99")])
    assert r.error_code == 0
    assert ctl.topic_configs("t") == {"cleanup.policy": "compact,delete", "retention.ms": "99"}
    r = await ctl.incremental_alter_topic_configs("t", [("cleanup.policy", 3, "compact"),
                                                        ("retention.ms", 1, None)])
    assert ctl.topic_configs("t") == {"cleanup.policy": "delete"}
    r = await ctl.incremental_alter_topic_configs("t", [("retention.ms", 2, "5")])
    assert r.error_code == ErrorCode.INVALID_REQUEST
    r = await ctl.alter_topic_configs("t", {"segment.bytes": "1"})
    assert r.error_code == ErrorCode.INVALID_CONFIG
    r = await ctl.alter_topic_configs("nope", {})
    assert r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    broker.clear()
    r = await ctl.alter_topic_configs("t", {"retention.ms": "1"}, validate_only=True)
    assert r.error_code == 0 and broker.events == [] and ctl.topic_configs("t") == {
        "cleanup.policy": "delete"}
    ctl2, _, _ = await start(tmp_path)
    assert ctl2.topic_configs("t") == {"cleanup.policy": "delete"}


async def test_elect_leaders_single_node(tmp_path):
    ctl, broker, _ = await start(tmp_path)
    await ctl.create_topics([CreatableTopic("t", 2, 1)])
    res = await ctl.elect_leaders(ELECTION_PREFERRED, [("t", 0), ("t", 9), ("x", 0)])
    assert [r.error_code for r in res] == [ErrorCode.ELECTION_NOT_NEEDED,
                                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert await ctl.elect_leaders(ELECTION_PREFERRED, None) == []
    res = await ctl.elect_leaders(5, [("t", 0)])
    assert res[0].error_code == ErrorCode.INVALID_REQUEST


async def test_producer_id_blocks_are_persisted(tmp_path):
    ctl, _, _ = await start(tmp_path)
    b1 = await ctl.allocate_producer_ids(1)
    b2 = await ctl.allocate_producer_ids(1)
    assert (b1.block_start, b1.block_end, b2.block_start) == (0, 999, 1000)
    ctl2, _, _ = await start(tmp_path)
    b3 = await ctl2.allocate_producer_ids(1)
    assert b3.block_start == 2000


async def test_listener_failure_is_counted_not_raised(tmp_path):
    class Failing(RecordingBroker):
        async def on_leader_and_isr(self, decision):
            raise RuntimeError("boom")

    store = EmbeddedMetadataStore(str(tmp_path))
    await store.open()
    listener = Failing()
    channel = LocalControllerChannel(1, listener)
    ctl = EmbeddedController(store, BROKER, channel)
    await ctl.startup()
    assert channel.failures == 1 and listener.kinds() == ["um"]
    with pytest.raises(ValueError):
        await channel.send_update_metadata(2, None)


async def test_open_factory_and_serialised_concurrent_creates(tmp_path):
    import asyncio

    listener = RecordingBroker()
    ctl = await EmbeddedController.open(str(tmp_path / "logs"), BROKER, listener)
    await ctl.startup()
    assert (tmp_path / "logs" / "josef-metadata.db").exists()
    results = await asyncio.gather(*[ctl.create_topics([CreatableTopic("same", 1, 1)])
                                     for _ in range(5)])
    codes = sorted(r[0].error_code for r in results)
    assert codes == [0] + [ErrorCode.TOPIC_ALREADY_EXISTS] * 4
