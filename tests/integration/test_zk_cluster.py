"""ZooKeeper mode, cluster basics: three brokers registered in a real ZooKeeper, the znodes in
Kafka's JSON, topics created through confluent-kafka's and the Java AdminClient, metadata
agreeing on every broker, admin requests routed to the controller, configs and producer ids.

One ZooKeeper and one 3-broker cluster for the module (``zk_cluster``); topics are unique.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from client.connection import KafkaClient
from storage.checkpoints import read_meta_properties
from tests.integration.harness import REPO_ROOT, run_java_client

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3 reads its schemas with a deprecated importlib.resources API
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

BROKER_KEYS = {"version", "host", "port", "jmx_port", "timestamp", "endpoints",
               "listener_security_protocol_map", "features"}
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 19, 20, 22
OFFSET_FETCH, FIND_COORDINATOR, ELECT_LEADERS, ALTER_REASSIGNMENTS = 9, 10, 43, 45
NOT_CONTROLLER, NOT_COORDINATOR = 41, 16


def _admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10000})


def _wait_futures(futures: dict, timeout: float = 30.0) -> None:
    for f in futures.values():
        f.result(timeout=timeout)


def _other_than(cluster, broker_id: int) -> int:
    return next(i for i in cluster.running_ids() if i != broker_id)


def test_brokers_register_in_kafka_json(zk_cluster):
    c = zk_cluster
    assert c.registered_brokers() == [1, 2, 3]
    for i in c.ids:
        raw, stat = c.zk_get(f"/brokers/ids/{i}")
        doc = json.loads(raw)
        assert set(doc) == BROKER_KEYS, doc  # no rack configured: no "rack" key
        b = c.broker(i)
        assert doc["version"] == 5 and doc["jmx_port"] == -1
        assert (doc["host"], doc["port"]) == (b.host, b.port)
        assert doc["endpoints"] == [f"PLAINTEXT://{b.host}:{b.port}"]
        assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert re.fullmatch(r"\d{13}", doc["timestamp"])
        assert stat.ephemeralOwner != 0  # ephemeral: its czxid is the broker epoch
        assert isinstance(doc["features"], dict)
    controller = c.zk_json("/controller")
    assert set(controller) == {"version", "brokerid", "timestamp", "kraftControllerEpoch"}
    assert controller["version"] == 2 and controller["kraftControllerEpoch"] == -1
    assert controller["brokerid"] in c.ids
    assert c.zk_get("/controller")[1].ephemeralOwner != 0
    assert re.fullmatch(rb"\d+", c.zk_get("/controller_epoch")[0])
    cluster_id = c.zk_json("/cluster/id")
    assert cluster_id["version"] == "1" and re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id["id"])
    for path in ("/brokers/topics", "/brokers/seqid", "/config/changes", "/config/topics",
                 "/config/brokers", "/config/users", "/config/clients", "/config/ips",
                 "/admin/delete_topics", "/isr_change_notification",
                 "/latest_producer_id_block", "/log_dir_event_notification", "/consumers"):
        assert c.zk_get(path) is not None, path
    for i in c.ids:
        props = read_meta_properties(str(c.broker(i).log_dir))
        assert props["cluster.id"] == cluster_id["id"] and props["broker.id"] == str(i)


def test_create_topic_with_confluent_admin_metadata_agrees_everywhere(zk_cluster):
    from confluent_kafka.admin import NewTopic

    c = zk_cluster
    topic = "zk-basic-confluent"
    admin = _admin(c)
    _wait_futures(admin.create_topics([NewTopic(topic, 6, 3)], request_timeout=30))
    leaders = c.wait_metadata_converged([topic])[topic]
    assert sorted(leaders) == list(range(6))
    assignment = c.zk_json(f"/brokers/topics/{topic}")
    assert set(assignment) == {"version", "partitions", "adding_replicas", "removing_replicas",
                               "topic_id"}
    assert assignment["version"] == 3 and assignment["adding_replicas"] == {} \
        and assignment["removing_replicas"] == {}
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", assignment["topic_id"])
    replicas = assignment["partitions"]
    assert sorted(replicas) == [str(p) for p in range(6)]
    for p, rs in replicas.items():
        assert sorted(rs) == [1, 2, 3]
        state = c.partition_state(topic, int(p))
        assert state == {"version": 1, "leader": rs[0], "leader_epoch": 0,
                         "controller_epoch": c.controller_epoch(), "isr": rs}
    # Kafka's rack-unaware assignment: preferred leaders spread evenly, 2 per broker
    firsts = [rs[0] for rs in replicas.values()]
    assert sorted(firsts.count(b) for b in (1, 2, 3)) == [2, 2, 2]
    assert c.zk_json(f"/config/topics/{topic}") == {"version": 1, "config": {}}
    # CreatePartitions grows the topic cluster-wide; a replication factor above the live
    # brokers is refused
    from confluent_kafka.admin import NewPartitions

    _wait_futures(admin.create_partitions([NewPartitions(topic, 8)], request_timeout=30))
    assert sorted(c.wait_metadata_converged([topic])[topic]) == list(range(8))
    grown = c.zk_json(f"/brokers/topics/{topic}")["partitions"]
    assert sorted(grown) == [str(p) for p in range(8)] and all(
        sorted(rs) == [1, 2, 3] for rs in grown.values())
    futures = admin.create_topics([NewTopic("zk-basic-rf4", 1, 4)], request_timeout=30)
    with pytest.raises(Exception) as e:
        futures["zk-basic-rf4"].result(timeout=30)
    assert e.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_create_and_describe_topic_with_java_admin(zk_cluster, java_client):
    c = zk_cluster
    topic = "zk-basic-java"
    r = run_java_client(java_client, "admin", "--bootstrap", c.bootstrap, "--op",
                        "create,describe,cluster", "--topic", topic, "--partitions", "6",
                        "--replication-factor", "3")
    assert r.returncode == 0, r.stderr
    assert [line for line in r.lines if line.startswith("ok ")] == [
        "ok create", "ok describe", "ok cluster"]
    leaders = c.wait_metadata_converged([topic])[topic]
    described = {}
    for line in r.lines:
        m = re.fullmatch(r"partition (\d+) leader (-?\d+) replicas ([\d,]+) isr ([\d,]+)", line)
        if m:
            described[int(m.group(1))] = int(m.group(2))
            assert sorted(map(int, m.group(3).split(","))) == [1, 2, 3]
    assert described == leaders  # CreateTopics answered once every partition had a leader
    assert f"controller {c.controller_id()}" in r.lines
    assert sorted(line.split()[1] for line in r.lines if line.startswith("broker ")) == \
        ["1", "2", "3"]


def test_admin_requests_on_a_non_controller_answer_not_controller(zk_cluster):
    c = zk_cluster
    other = _other_than(c, c.controller_id())
    with KafkaClient(c.broker(other).bootstrap) as k:
        resp = k.request(CREATE_TOPICS, {"topics": [{"name": "zk-nc", "num_partitions": 1,
                                                     "replication_factor": 1, "assignments": [],
                                                     "configs": []}],
                                         "timeout_ms": 5000}, version=5)
        assert [t.error_code for t in resp.topics] == [NOT_CONTROLLER]
        resp = k.request(DELETE_TOPICS, {"topic_names": ["zk-nc"], "timeout_ms": 5000},
                         version=5)
        assert [t.error_code for t in resp.responses] == [NOT_CONTROLLER]
        # Metadata auto-creation works on any broker (AutoTopicCreationManager writes znodes)
        k.metadata(["zk-auto-created"], auto_create=True)
    c.wait_for_leaders("zk-auto-created", 1)
    assert c.zk_get("/brokers/topics/zk-nc") is None


def test_produce_and_consume_across_the_cluster_with_kafka_python(zk_cluster):
    from confluent_kafka.admin import NewTopic
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    c = zk_cluster
    topic = "zk-basic-data"
    admin = _admin(c)
    _wait_futures(admin.create_topics([NewTopic(topic, 6, 1)], request_timeout=30))
    leaders = c.wait_metadata_converged([topic])[topic]
    assert set(leaders.values()) == {1, 2, 3}  # every broker leads some partition
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all", retries=5)
    for i in range(60):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 6)
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=c.bootstrap, consumer_timeout_ms=10000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(6)])
    got = []
    for r in consumer:
        got.append(r.value)
        if len(got) == 60:
            break
    consumer.close()
    got.sort()
    assert got == sorted(b"v%d" % i for i in range(60))


def test_topic_config_change_reaches_every_broker(zk_cluster):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    c = zk_cluster
    topic = "zk-basic-config"
    admin = _admin(c)
    _wait_futures(admin.create_topics([NewTopic(topic, 2, 3)], request_timeout=30))
    c.wait_metadata_converged([topic])
    res = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
    _wait_futures(admin.incremental_alter_configs([res]))
    assert c.zk_json(f"/config/topics/{topic}") == {"version": 1,
                                                    "config": {"retention.ms": "123456"}}
    changes = c.zk_children("/config/changes")
    assert changes and all(re.fullmatch(r"config_change_\d{10}", n) for n in changes)
    docs = [c.zk_json(f"/config/changes/{n}") for n in changes]
    assert {"version": 2, "entity_path": f"topics/{topic}"} in docs
    from confluent_kafka.admin import AdminClient

    for i in c.ids:  # DescribeConfigs answered by each broker itself
        one = AdminClient({"bootstrap.servers": c.broker(i).bootstrap})
        deadline = time.monotonic() + 15
        while True:
            fut = one.describe_configs([ConfigResource("topic", topic)])
            entries = list(fut.values())[0].result(timeout=15)
            if entries["retention.ms"].value == "123456" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert entries["retention.ms"].value == "123456", i


def test_delete_topic_removes_znodes_and_metadata(zk_cluster):
    from confluent_kafka.admin import NewTopic

    c = zk_cluster
    topic = "zk-basic-delete"
    admin = _admin(c)
    _wait_futures(admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=30))
    c.wait_metadata_converged([topic])
    _wait_futures(admin.delete_topics([topic], request_timeout=30))
    for i in c.ids:  # DeleteTopics answers once the topic left the metadata
        assert all(t.name != topic for t in c.metadata(i, None).topics)
    c.wait_until("the topic znodes removed",
                 lambda: c.zk_get(f"/brokers/topics/{topic}") is None
                 and topic not in c.zk_children("/admin/delete_topics"))
    assert c.zk_get(f"/config/topics/{topic}") is None
    assert topic not in c.zk_children("/admin/delete_topics")
    for i in c.ids:  # the logs are gone too (renamed -delete, then removed)
        assert not list(c.broker(i).log_dir.glob(f"{topic}-[0-9]"))


def test_producer_id_blocks_are_unique_across_brokers(zk_cluster):
    c = zk_cluster
    ids = []
    for i in c.ids:
        with KafkaClient(c.broker(i).bootstrap) as k:
            resp = k.request(INIT_PRODUCER_ID, {"transactional_id": None,
                                                "transaction_timeout_ms": 60000})
            assert resp.error_code == 0
            ids.append(resp.producer_id)
    assert len(set(ids)) == 3
    assert len({pid // 1000 for pid in ids}) == 3  # one block per broker
    block = c.zk_json("/latest_producer_id_block")
    assert set(block) == {"version", "broker", "block_start", "block_end"}
    assert block["version"] == 1 and isinstance(block["block_start"], str)
    assert int(block["block_end"]) - int(block["block_start"]) == 999


def test_group_coordination_moves_with_offsets_topic_leadership(zk_cluster):
    from kafka import KafkaConsumer, KafkaProducer

    from coordinator.group.group_store import partition_for

    c = zk_cluster
    topic, group = "zk-group-data", "zk-group"
    admin = _admin(c)
    from confluent_kafka.admin import NewTopic

    _wait_futures(admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=30))
    c.wait_metadata_converged([topic])
    producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all")
    for i in range(30):
        producer.send(topic, value=b"g%d" % i, partition=i % 3)
    producer.flush(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=group, bootstrap_servers=c.bootstrap,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=15000)
    got = []
    for r in consumer:
        got.append(r.value)
        if len(got) == 30:
            break
    consumer.commit()
    consumer.close()
    assert sorted(got) == sorted(b"g%d" % i for i in range(30))
    p = partition_for(group, 6)
    offsets_state = c.partition_state("__consumer_offsets", p)
    old = offsets_state["leader"]
    replicas = c.zk_json("/brokers/topics/__consumer_offsets")["partitions"][str(p)]
    new = next(b for b in replicas if b != old and b in offsets_state["isr"])
    fetch = {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}]}

    def committed(node: int):
        with KafkaClient(c.broker(node).bootstrap) as k:
            resp = k.request(OFFSET_FETCH, fetch, version=7)
            return resp.error_code, {pr.partition_index: pr.committed_offset
                                     for t in resp.topics for pr in t.partitions}
    assert committed(old) == (0, {0: 10, 1: 10, 2: 10})
    # make `new` the preferred replica, then elect it: leadership moves, `old` still runs
    with KafkaClient(c.broker(c.controller_id()).bootstrap) as k:
        resp = k.request(ALTER_REASSIGNMENTS, {"timeout_ms": 10000, "topics": [{
            "name": "__consumer_offsets", "partitions": [{
                "partition_index": p, "replicas": [new] + [b for b in replicas if b != new]}]}]})
        assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == 0
        c.wait_until("the new replica order", lambda: c.zk_json(
            "/brokers/topics/__consumer_offsets")["partitions"][str(p)][0] == new)
        resp = k.request(ELECT_LEADERS, {"election_type": 0, "timeout_ms": 10000,
                                         "topic_partitions": [{"topic": "__consumer_offsets",
                                                               "partitions": [p]}]})
        assert resp.replica_election_results[0].partition_result[0].error_code == 0
    c.wait_until("the old coordinator unloaded the group",
                 lambda: committed(old)[0] == NOT_COORDINATOR)
    with KafkaClient(c.bootstrap) as k:
        c.wait_until("FindCoordinator names the new leader", lambda: k.request(
            FIND_COORDINATOR, {"key": group, "key_type": 0}, version=3).node_id == new)
    c.wait_until("the new coordinator serves the offsets",
                 lambda: committed(new) == (0, {0: 10, 1: 10, 2: 10}))


def test_set_acl_protects_znodes_with_the_jaas_identity(zookeeper, cluster_factory, tmp_path,
                                                         monkeypatch):
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError

    jaas = tmp_path / "zk_client_jaas.conf"
    jaas.write_text('Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                    '  username="josef" password="zk-secret";\n};\n')
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    c = cluster_factory(1, props={"zookeeper.set.acl": "true",
                                  "offsets.topic.replication.factor": "1"},
                        zookeeper=zookeeper)
    monkeypatch.delenv("KAFKA_OPTS")
    c.wait_metadata_converged([])
    with KafkaClient(c.bootstrap) as k:  # the broker writes znodes as before
        resp = k.request(CREATE_TOPICS, {"topics": [{
            "name": "zk-acl", "num_partitions": 1, "replication_factor": 1, "assignments": [],
            "configs": []}], "timeout_ms": 10000}, version=5)
        assert resp.topics[0].error_code == 0
    zk = c.zk()  # unauthenticated (ZooKeeper masks the digest's hash for it: "josef:x")
    acls, _ = zk.get_acls("/brokers/topics/zk-acl")
    assert sorted((a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls) == sorted(
        [("digest", "josef", 31), ("world", "anyone", 1)])
    with pytest.raises(NoAuthError):
        zk.get("/config/brokers")  # sensitive: no world read
    assert zk.get("/brokers/topics/zk-acl")[0]  # readable by anyone
    with pytest.raises(NoAuthError):
        zk.set("/brokers/topics/zk-acl", b"{}")
    with pytest.raises(NoAuthError):
        zk.create("/brokers/topics/zk-acl/partitions/9")
    other = KazooClient(hosts=zookeeper.connect + c.chroot, auth_data=[
        ("digest", "josef:zk-secret")])
    other.start(timeout=15)
    try:
        acls, _ = other.get_acls("/config/brokers")
        assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [
            ("digest", "josef", 31)]
        other.set("/config/brokers", b"")  # the broker's identity may write
    finally:
        other.stop()
        other.close()


def _josef(*args: str, timeout: float = 60.0):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "broker.cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _create(c, topic: str, assignment: dict[int, list[int]]) -> None:
    with KafkaClient(c.broker(c.controller_id()).bootstrap) as k:
        resp = k.request(CREATE_TOPICS, {"topics": [{
            "name": topic, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": b}
                            for p, b in assignment.items()],
            "configs": []}], "timeout_ms": 60000}, version=5)
    assert resp.topics[0].error_code == 0, resp
    c.wait_metadata_converged([topic])


def test_preferred_election_with_the_leader_election_tool(zk_cluster, tmp_path):
    c = zk_cluster
    topic = "zk-elect"
    _create(c, topic, assignment={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2], 3: [1, 3, 2],
                                  4: [2, 1, 3], 5: [3, 2, 1]})
    # reorder partition 0's replicas: broker 2 becomes its preferred leader, broker 1 leads on
    plan = tmp_path / "reorder.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 1, 3]}]}))
    out = _josef("reassign-partitions", "--bootstrap-server", c.bootstrap, "--execute",
                 "--reassignment-json-file", str(plan))
    assert out.returncode == 0, out.stderr
    c.wait_until("the new replica order", lambda: c.zk_json(
        f"/brokers/topics/{topic}")["partitions"]["0"] == [2, 1, 3])
    assert c.partition_state(topic, 0)["leader"] == 1  # no auto rebalance for 300 s
    (tmp_path / "elect.json").write_text(json.dumps(
        {"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]}))
    out = _josef("leader-election", "--bootstrap-server", c.bootstrap, "--election-type",
                 "PREFERRED", "--path-to-json-file", str(tmp_path / "elect.json"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Successfully completed leader election (PREFERRED) for partitions {topic}-0",
        f"Valid replica already elected for partitions {topic}-1"]
    assert c.partition_state(topic, 0)["leader"] == 2
    out = _josef("leader-election", "--bootstrap-server", c.bootstrap, "--election-type",
                 "preferred", "--all-topic-partitions")
    # the shared cluster's other topics may have non-preferred leaders left by other tests;
    # this topic's partitions all have their preferred leader already: none is reported
    assert out.returncode == 0, out.stderr
    assert f" {topic}-" not in out.stdout and f", {topic}-" not in out.stdout, out.stdout
    c.wait_metadata_converged([topic])


def test_dynamic_broker_configs_reach_every_broker(zk_cluster):
    from confluent_kafka.admin import AdminClient, ConfigResource

    c = zk_cluster
    other = next(i for i in c.ids if i != c.controller_id())
    out = _josef("configs", "--bootstrap-server", c.broker(other).bootstrap, "--alter",
                 "--entity-type", "brokers", "--entity-default", "--add-config",
                 "log.retention.ms=7777777")
    assert out.returncode == 0, out.stderr
    assert c.zk_json("/config/brokers/<default>") == {
        "version": 1, "config": {"log.retention.ms": "7777777"}}
    assert {"version": 2, "entity_path": "brokers/<default>"} in [
        c.zk_json(f"/config/changes/{n}") for n in c.zk_children("/config/changes")]
    for i in c.ids:
        one = AdminClient({"bootstrap.servers": c.broker(i).bootstrap})

        def applied(i=i, one=one):
            res = ConfigResource("broker", str(i))
            entries = list(one.describe_configs([res]).values())[0].result(timeout=15)
            return entries["log.retention.ms"].value == "7777777"
        c.wait_until(f"broker {i} applied the default", applied)


def test_features_finalized_through_the_feature_znode(zk_cluster):
    """KIP-584 in ZooKeeper mode: a new cluster's /feature holds group.version 1 (Kafka's
    FeatureZNode v2); `josef features disable` / `upgrade` on one broker rewrite it; every
    broker's ApiVersions (through `features describe`) follows."""
    c = zk_cluster
    ids = sorted(c.ids)

    def describe(broker_id: int) -> str:
        out = _josef("features", "describe", "--bootstrap-server", c.broker(broker_id).bootstrap)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def level_everywhere(level: str) -> bool:
        return all(f"Feature: group.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
                   f"FinalizedVersionLevel: {level}" in describe(b) for b in ids)

    # a new cluster starts with group.version 1 (issue 27 point 7) and share.version 1
    # (issue 28, Kafka 4.2's default)
    share = {"share.version": {"max_version_level": 1}}
    assert c.zk_json("/feature") == {"version": 2, "status": 1, "features": {
        "group.version": {"max_version_level": 1}, **share}}
    c.wait_until("group.version finalized on every broker", lambda: level_everywhere("1"),
                 timeout=30)
    out = _josef("features", "disable", "--bootstrap-server", c.broker(ids[-1]).bootstrap,
                 "--feature", "group.version")
    assert out.returncode == 0, out.stdout + out.stderr
    assert c.zk_json("/feature")["features"] == share
    c.wait_until("group.version disabled on every broker", lambda: level_everywhere("-"),
                 timeout=30)
    out = _josef("features", "upgrade", "--bootstrap-server", c.broker(ids[0]).bootstrap,
                 "--feature", "group.version=1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert c.zk_json("/feature") == {"version": 2, "status": 1, "features": {
        "group.version": {"max_version_level": 1}, **share}}


def test_group_configs_reach_every_broker(zk_cluster):
    """A GROUP config resource set through confluent-kafka's Admin API (Kafka 4.2's group
    configs): stored in /config/groups/<group>, announced on /config/changes, described and
    listed (ListConfigResources v1) by every broker."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    c = zk_cluster
    admin = _admin(c)
    res = ConfigResource(ResourceType.GROUP, "zk-group-cfg", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000",
                    incremental_operation=AlterConfigOpType.SET)])
    _wait_futures(admin.incremental_alter_configs([res]))
    assert c.zk_json("/config/groups/zk-group-cfg") == {
        "version": 1, "config": {"consumer.session.timeout.ms": "50000"}}
    docs = [c.zk_json(f"/config/changes/{n}") for n in c.zk_children("/config/changes")]
    assert {"version": 2, "entity_path": "groups/zk-group-cfg"} in docs
    bad = ConfigResource(ResourceType.GROUP, "zk-group-cfg", incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "1000",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="greater than or equal"):
        _wait_futures(admin.incremental_alter_configs([bad]))
    for i in c.ids:
        one = AdminClient({"bootstrap.servers": c.broker(i).bootstrap})
        deadline = time.monotonic() + 15
        while True:
            fut = one.describe_configs([ConfigResource(ResourceType.GROUP, "zk-group-cfg")])
            entries = list(fut.values())[0].result(timeout=15)
            if entries["consumer.session.timeout.ms"].value == "50000" or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert entries["consumer.session.timeout.ms"].value == "50000", i
        with KafkaClient(c.broker(i).bootstrap) as client:
            listed = client.request(74, {"resource_types": [32]}, version=1)
            assert ("zk-group-cfg", 32) in {(r.resource_name, r.resource_type)
                                            for r in listed.config_resources}, i


def test_share_group_survives_leader_failovers(zk_cluster, tmp_path):
    """Share groups (KIP-932) in the cluster: two ShareConsumers acknowledge (rejecting every
    tenth record to a dead-letter topic) while the topic partition's leader, then the leader
    of its ``__share_group_state`` partition, are SIGKILLed. The new leaders reload the share
    state: no record is handed out again after its ACCEPT or REJECT was answered, none is
    lost, each is accepted once, and each rejected one is in the dead-letter topic once."""
    from confluent_kafka.admin import NewTopic

    from coordinator.keys import java_abs, java_string_hashcode
    from tests.integration.test_share_groups import (
        ACCEPT,
        REJECT,
        Worker,
        assert_no_delivery_after_final_ack,
        ledger,
        produce,
        read_all,
        set_group_configs,
        wait_until,
    )

    c = zk_cluster
    topic = group = "share-failover"
    n = 600
    dlq = "share-failover-dlq"
    admin = _admin(c)
    _wait_futures(admin.create_topics([NewTopic(topic, 1, 3), NewTopic(dlq, 1, 3)],
                                      request_timeout=30))
    c.wait_metadata_converged([topic, dlq])
    # Two of three brokers die below: the one left must be in every ISR that matters (a
    # broker restarted by an earlier test on this shared cluster may still be catching up on
    # the share-state partitions; killing the other two would leave those offline, which is
    # not what this test is about). A share-state topic not created yet starts with full ISRs.
    def full_isr(t: str, p: int, must_exist: bool) -> bool:
        st = c.partition_state(t, p)
        return (st is None and not must_exist) or (st is not None and len(st["isr"]) == 3)

    c.wait_until("full ISRs of the topic and the share-state partitions", lambda: all(
        [full_isr(topic, 0, True), full_isr(dlq, 0, True)]
        + [full_isr("__share_group_state", p, False) for p in range(6)]), 60)
    set_group_configs(c.bootstrap, group, share_auto_offset_reset="earliest",
                      **{"errors.deadletterqueue.topic.name": dlq})
    produce(c.bootstrap, topic, range(n), chunk=10)
    # the consumers outlive every wait below (up to 270 s; they are killed at the end): with
    # 120 s they could stop by themselves on a slow machine while the second failover was
    # still settling, which looked like a stall at 540 of 600 records
    workers = [Worker(tmp_path, f"f{i}", c.bootstrap, group, topic, "--sleep-ms", "5",
                      "--max-records", "30", "--reject-mod", "10:3", "--seconds", "290")
               for i in range(2)]
    rejected = {v for v in range(n) if v % 10 == 3}

    def settled() -> int:
        _, acked = ledger(workers)
        return sum(1 for kinds in acked.values() if ACCEPT in kinds or REJECT in kinds)

    killed = []
    try:
        wait_until("progress", lambda: settled() >= 60, 60)
        leader = c.partition_state(topic, 0)["leader"]
        c.kill(leader)  # the share-partition leader
        killed.append(leader)
        c.wait_for_leaders(topic, 1, exclude=killed, timeout=30)
        done = settled()
        wait_until("progress on the new leader", lambda: settled() >= done + 60, 60)
        topic_id = c.zk_json(f"/brokers/topics/{topic}")["topic_id"]
        state_partition = java_abs(java_string_hashcode(f"{group}:{topic_id}:0")) % 6
        state_leader = c.partition_state("__share_group_state", state_partition)["leader"]
        if state_leader not in killed:  # the share coordinator of this share-partition
            c.kill(state_leader)
            killed.append(state_leader)
            c.wait_for_leaders("__share_group_state", 6, exclude=killed, timeout=30)
        wait_until("every record accepted or rejected", lambda: settled() >= n, 90)
    finally:
        for w in workers:
            w.kill()
        for b in killed:
            c.start_broker(b)
    c.wait_for_brokers_registered([1, 2, 3])
    history, acked = ledger(workers)
    assert_no_delivery_after_final_ack(history)
    assert set(acked) == set(range(n))
    for v, kinds in acked.items():
        assert kinds.count(REJECT if v in rejected else ACCEPT) == 1, (v, kinds)
    letters = read_all(c.bootstrap, dlq, len(rejected), timeout=30)
    assert sorted(int(m.value()) for m in letters) == sorted(rejected)  # each exactly once
    c.wait_metadata_converged([topic])
