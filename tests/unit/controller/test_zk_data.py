"""The znode codecs write Kafka's ZooKeeper-mode JSON: exact keys, versions and types."""

import json
import uuid

import pytest

from controller import zk_data as z
from controller.kafka_uuid import from_base64, random_uuid, to_base64


def doc(data: bytes):
    return json.loads(data.decode())


def test_uuid_base64_round_trip_and_format():
    for _ in range(200):
        u = random_uuid()
        text = to_base64(u)
        assert len(text) == 22 and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert from_base64(text) == u
    # Kafka's example: bytes 0..15
    u = uuid.UUID(bytes=bytes(range(16)))
    assert to_base64(u) == "AAECAwQFBgcICQoLDA0ODw"
    for bad in ("", "short", "AAECAwQFBgcICQoLDA0OD!", "AAECAwQFBgcICQoLDA0ODx"):
        with pytest.raises(ValueError):
            from_base64(bad)


def test_cluster_id_and_controller_znodes():
    assert z.ClusterIdZNode.path == "/cluster/id"
    data = z.ClusterIdZNode.encode("AAECAwQFBgcICQoLDA0ODw")
    assert doc(data) == {"version": "1", "id": "AAECAwQFBgcICQoLDA0ODw"}
    assert z.ClusterIdZNode.decode(data) == "AAECAwQFBgcICQoLDA0ODw"
    data = z.ControllerZNode.encode(3, 1700000000000)
    assert doc(data) == {"version": 2, "brokerid": 3, "timestamp": "1700000000000",
                         "kraftControllerEpoch": -1}
    assert z.ControllerZNode.decode(data) == 3
    assert z.ControllerEpochZNode.encode(17) == b"17"
    assert z.ControllerEpochZNode.decode(b"17") == 17
    with pytest.raises(z.ZkDataError):
        z.ControllerEpochZNode.decode(b"x")


def test_broker_registration_v5():
    info = z.BrokerInfo(
        id=1,
        endpoints=(z.Endpoint("PLAINTEXT", "h1", 9092), z.Endpoint("SSL", "::1", 9093, "SSL")),
        rack=None, timestamp_ms=42,
    )
    data = z.BrokerIdZNode.encode(info)
    d = doc(data)
    assert set(d) == {"version", "host", "port", "jmx_port", "timestamp", "endpoints",
                      "listener_security_protocol_map", "features"}
    assert d["version"] == 5 and d["host"] == "h1" and d["port"] == 9092
    assert d["jmx_port"] == -1 and d["timestamp"] == "42" and d["features"] == {}
    assert d["endpoints"] == ["PLAINTEXT://h1:9092", "SSL://[::1]:9093"]
    assert d["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert z.BrokerIdZNode.path(1) == "/brokers/ids/1"
    assert z.BrokerIdZNode.decode(1, data) == info
    racked = z.BrokerInfo(id=2, endpoints=(z.Endpoint("CLIENT", "h", 1, "SASL_SSL"),), rack="r1")
    d = doc(z.BrokerIdZNode.encode(racked))
    assert d["rack"] == "r1" and d["host"] is None and d["port"] == -1
    assert z.BrokerIdZNode.decode(2, z.BrokerIdZNode.encode(racked)) == racked


def test_topic_znode_v3():
    tid = uuid.UUID(bytes=bytes(range(16)))
    a = z.TopicAssignment(tid, {
        1: z.ReplicaAssignment((2, 1)),
        0: z.ReplicaAssignment((1, 2), adding_replicas=(2,)),
    })
    data = z.TopicZNode.encode(a)
    assert data == (b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},'
                    b'"adding_replicas":{"0":[2]},"removing_replicas":{},'
                    b'"topic_id":"AAECAwQFBgcICQoLDA0ODw"}')
    back = z.TopicZNode.decode("t", data)
    assert back.topic_id == tid and list(back.partitions) == [0, 1]
    assert back.partitions[0] == z.ReplicaAssignment((1, 2), (2,), ())
    assert z.TopicZNode.path("t") == "/brokers/topics/t"
    # a Kafka 2.x document without topic_id / adding / removing still decodes
    old = z.TopicZNode.decode("t", b'{"version":1,"partitions":{"0":[5]}}')
    assert old.topic_id is None and old.partitions == {0: z.ReplicaAssignment((5,))}


def test_partition_state_znode():
    s = z.LeaderIsrAndControllerEpoch(1, 4, (1, 2), 7, partition_epoch=9)
    data = z.TopicPartitionStateZNode.encode(s)
    assert data == b'{"version":1,"leader":1,"leader_epoch":4,"controller_epoch":7,"isr":[1,2]}'
    assert z.TopicPartitionStateZNode.decode(data, 9) == s
    recovering = z.LeaderIsrAndControllerEpoch(-1, 0, (), 3, 2, leader_recovery_state=1)
    data = z.TopicPartitionStateZNode.encode(recovering)
    assert data == json.dumps({"version": 1, "leader": -1, "leader_epoch": 0,
                               "controller_epoch": 3, "isr": [], "leader_recovery_state": 1},
                              separators=(",", ":")).encode()
    assert z.TopicPartitionStateZNode.decode(data, 2) == recovering
    assert z.TopicPartitionStateZNode.path("t", 3) == "/brokers/topics/t/partitions/3/state"
    with pytest.raises(z.ZkDataError):
        z.TopicPartitionStateZNode.decode(b'{"version":1,"leader":"1"}', 0)
    with pytest.raises(z.ZkDataError):
        z.TopicPartitionStateZNode.decode(b"\xff", 0)


def test_config_and_admin_znodes():
    assert z.ConfigEntityZNode.path("topics", "t") == "/config/topics/t"
    data = z.ConfigEntityZNode.encode({"retention.ms": "100", "cleanup.policy": "compact"})
    assert doc(data) == {"version": 1, "config": {"retention.ms": "100",
                                                   "cleanup.policy": "compact"}}
    assert z.ConfigEntityZNode.decode(data) == {"retention.ms": "100", "cleanup.policy": "compact"}
    n = z.ConfigEntityChangeNotificationSequenceZNode
    assert n.create_path == "/config/changes/config_change_"
    assert doc(n.encode("topics/t")) == {"version": 2, "entity_path": "topics/t"}
    assert z.DeleteTopicsTopicZNode.path("t") == "/admin/delete_topics/t"
    pre = z.PreferredReplicaElectionZNode.encode([("t", 0)])
    assert doc(pre) == {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
    assert z.PreferredReplicaElectionZNode.decode(pre) == [("t", 0)]
    isr = z.IsrChangeNotificationSequenceZNode
    assert isr.create_path == "/isr_change_notification/isr_change_"
    assert isr.decode(isr.encode([("a", 1)])) == [("a", 1)]
    re = z.ReassignPartitionsZNode.encode({("t", 0): [1, 2]})
    assert doc(re) == {"version": 1, "partitions": [{"topic": "t", "partition": 0,
                                                      "replicas": [1, 2]}]}
    assert z.ReassignPartitionsZNode.decode(re) == {("t", 0): [1, 2]}
    block = z.ProducerIdBlock(broker=1, block_start=1000, block_end=1999)
    pdata = z.ProducerIdBlockZNode.encode(block)
    assert doc(pdata) == {"version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
    assert z.ProducerIdBlockZNode.decode(pdata) == block and block.size == 1000
