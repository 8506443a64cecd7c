"""Security in ZooKeeper mode (issue 15): a 3-broker cluster whose inter-broker traffic
(controller channel, replica fetchers, AlterPartition, controlled shutdown) runs over a
SASL_SSL listener, with the ACL authorizer on.

- a SCRAM user made through broker 1 is stored in ZooKeeper (``/config/users/alice``) and
  authenticates on broker 3 (config change notification);
- ACLs made through broker 2 are ``/kafka-acl`` znodes and are enforced by broker 3
  (``/kafka-acl-changes``); a client quota set through broker 1 (``/config/clients/app``)
  reaches broker 3;
- a replicated topic (RF 3, min.insync.replicas 2) reaches a full ISR over SASL_SSL, keeps
  every acknowledged record when its leader is killed, and is consumed over SASL_SSL from
  the survivors.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.integration.cluster import Cluster
from tests.integration.harness import free_port
from tests.tls_certs import make_certs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secure_cluster(zookeeper, tmp_path_factory):
    root = tmp_path_factory.mktemp("secure_cluster")
    certs = make_certs(root / "certs")
    c = Cluster(root, zookeeper, 3, props={
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.server_p12),
        "ssl.keystore.password": certs.password, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca_pem),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        # the test harness probes and administers over PLAINTEXT as ANONYMOUS
        "super.users": "User:admin;User:ANONYMOUS",
        "replica.lag.time.max.ms": "10000",
    })
    c.ports = {}
    for i, b in c.brokers.items():
        b.port = free_port()
        c.ports[i] = free_port()
        b.props["listeners"] = (f"PLAINTEXT://127.0.0.1:{b.port},"
                                f"SASL_SSL://127.0.0.1:{c.ports[i]}")
    c.certs = certs
    try:
        c.start(timeout=120)
        yield c
    finally:
        c.stop(kill=True)


def _sasl_ssl(c: Cluster, ids, user="alice", password="alice-secret") -> dict:
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{c.ports[i]}" for i in ids),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(c.certs.ca_pem),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password}


def _josef(c: Cluster, broker_id: int, *args: str) -> str:
    import contextlib
    import io

    from broker.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--bootstrap-server", c.broker(broker_id).bootstrap])
    assert code == 0, err.getvalue()
    return out.getvalue()


def test_replication_and_failover_over_sasl_ssl(secure_cluster):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    c = secure_cluster
    topic = f"secure-{uuid.uuid4().hex[:6]}"
    _josef(c, 1, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
           "--add-config", "SCRAM-SHA-512=[password=alice-secret]")
    assert "SCRAM-SHA-512" in c.zk_json("/config/users/alice")["config"]
    for args in (["--operation", "Write", "--operation", "Read", "--topic", topic],
                 ["--operation", "Read", "--group", "g-" + topic]):
        _josef(c, 2, "acls", "--add", "--allow-principal", "User:alice", *args)
    assert c.zk_json(f"/kafka-acl/Topic/{topic}")["acls"]
    _josef(c, 1, "configs", "--alter", "--entity-type", "clients", "--entity-name", "app",
           "--add-config", "producer_byte_rate=5000")
    assert c.zk_json("/config/clients/app")["config"] == {"producer_byte_rate": "5000"}
    c.wait_until("broker 3 knows the quota", lambda: "producer_byte_rate=5000.0" in _josef(
        c, 3, "configs", "--describe", "--entity-type", "clients", "--entity-name", "app"))
    _josef(c, c.wait_for_controller(), "topics", "--create", "--topic", topic, "--partitions", "2",
           "--replication-factor", "3", "--config", "min.insync.replicas=2")
    c.wait_for_leaders(topic, 2, timeout=60)
    c.wait_until("full ISR over SASL_SSL", lambda: all(
        len((c.partition_state(topic, p) or {}).get("isr", [])) == 3 for p in range(2)),
        timeout=60)

    acked: list[bytes] = []

    def produce(ids, n: int, start: int) -> None:
        p = Producer({**_sasl_ssl(c, ids), "acks": "all", "enable.idempotence": True,
                      "message.timeout.ms": 60000})
        for i in range(start, start + n):
            p.produce(topic, f"m{i}".encode(), on_delivery=lambda e, m: e is None and
                      acked.append(m.value()))
        assert p.flush(90) == 0

    produce([3], 100, 0)  # alice authenticates on broker 3: credentials and ACLs from ZK
    assert len(acked) == 100
    leader = c.partition_state(topic, 0)["leader"]
    c.kill(leader)
    survivors = [i for i in c.ids if i != leader]
    c.wait_for_leaders(topic, 2, exclude=[leader], timeout=60)
    produce(survivors, 100, 100)
    cons = Consumer({**_sasl_ssl(c, survivors), "group.id": "g-" + topic,
                     "enable.auto.commit": False})
    # assigned, not subscribed: __consumer_offsets (RF 3) cannot be created with a broker down
    cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(2)])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < 200 and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got.add(m.value())
    cons.close()
    assert got == set(acked) and len(got) == 200
    c.start_broker(leader)  # it catches up over SASL_SSL again
    c.wait_until("ISR back to 3", lambda: all(
        len((c.partition_state(topic, p) or {}).get("isr", [])) == 3 for p in range(2)),
        timeout=60)


# ----- issue 27 point 1: ACL changes reach every broker ------------------------------------------

def _alice_client(c: Cluster, broker_id: int):
    from client.connection import KafkaClient

    return KafkaClient(f"127.0.0.1:{c.ports[broker_id]}", timeout=20, security={
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(c.certs.ca_pem), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="alice" password="alice-secret";'})


def _produce_codes(c: Cluster, topic: str) -> dict[int, int]:
    """Produce one record as alice to every partition, each sent to its leader (leaders from
    ZooKeeper: without DESCRIBE alice's Metadata does not name them); {leader: error code}."""
    from protocol.record_builder import RecordBatchBuilder

    out = {}
    for p in range(3):
        leader = (c.partition_state(topic, p) or {}).get("leader", -1)
        if leader not in c.running_ids():
            continue
        with _alice_client(c, leader) as kc:
            builder = RecordBatchBuilder()
            builder.append(int(time.time() * 1000), None, b"x", [])
            resp = kc.request(0, {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
                                  "topic_data": [{"name": topic, "partition_data": [
                                      {"index": p, "records": builder.build()}]}]},
                              version=9)
            out[leader] = resp.responses[0].partition_responses[0].error_code
    return out


def _described_acls(c: Cluster, broker_id: int, prefix: str) -> set[tuple]:
    """The ACLs of User:alice on topics named ``prefix...`` as broker ``broker_id`` holds
    them (DescribeAcls is answered from the broker's own cache)."""
    from client.connection import KafkaClient

    with KafkaClient(c.broker(broker_id).bootstrap, timeout=20) as kc:
        resp = kc.request(29, {"resource_type_filter": 1, "resource_name_filter": None,
                               "pattern_type_filter": 1, "principal_filter": "User:alice",
                               "host_filter": None, "operation": 1, "permission_type": 1})
        assert resp.error_code == 0, resp.error_message
        return {(r.resource_type, r.resource_name, a.operation)
                for r in resp.resources for a in r.acls if r.resource_name.startswith(prefix)}


def test_concurrent_acl_changes_reach_every_broker(secure_cluster):
    """30 ACL changes at once through all three brokers: every broker applies all 30
    (DescribeAcls from its cache, and alice's produce to the partition it leads); a revoke
    is enforced by every broker within 5 s; a broker restarted while ACLs change catches up."""
    from concurrent.futures import ThreadPoolExecutor

    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        NewTopic,
        ResourcePatternType,
        ResourceType,
    )

    c = secure_cluster
    for i in c.ids:
        if not c.broker(i).is_running():
            c.start_broker(i)
    c.wait_for_brokers_registered(c.ids, timeout=60)
    _josef(c, 1, "configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
           "--add-config", "SCRAM-SHA-512=[password=alice-secret]")
    topic = f"acl-storm-{uuid.uuid4().hex[:6]}"
    admins = {i: AdminClient({"bootstrap.servers": c.broker(i).bootstrap}) for i in c.ids}
    admins[1].create_topics([NewTopic(topic, num_partitions=3, replica_assignment=[[1, 2, 3], [2, 3, 1],
                                                                 [3, 1, 2]])])[topic].result(30)
    c.wait_until("one partition led by each broker", lambda: {
        (c.partition_state(topic, p) or {}).get("leader") for p in range(3)} == {1, 2, 3},
        timeout=60)

    def write(name: str, op=AclOperation.WRITE) -> AclBinding:
        return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:alice",
                          "*", op, AclPermissionType.ALLOW)

    bindings = [write(topic)] + [write(f"{topic}-other-{i}") for i in range(29)]
    with ThreadPoolExecutor(30) as pool:
        futures = [pool.submit(lambda i, b: admins[1 + i % 3].create_acls([b])[b].result(30),
                               i, b) for i, b in enumerate(bindings)]
        for f in futures:
            f.result()
    want = {(2, b.name, int(AclOperation.WRITE.value)) for b in bindings}
    for i in c.ids:
        c.wait_until(f"broker {i} holds all 30 ACLs", lambda i=i: _described_acls(c, i, topic) == want,
                     timeout=10)
    assert _produce_codes(c, topic) == {1: 0, 2: 0, 3: 0}

    # a revoke: enforced by every broker within 5 s
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice",
                           None, AclOperation.WRITE, AclPermissionType.ALLOW)
    admins[2].delete_acls([flt])[flt].result(30)
    started = time.monotonic()
    c.wait_until("the revoke enforced everywhere", lambda: _produce_codes(c, topic) == {
        1: 29, 2: 29, 3: 29}, timeout=5)
    assert time.monotonic() - started < 5

    # broker 3 is down while the grant comes back with more changes; it catches up
    c.stop_broker(3)
    grant = [write(topic)] + [write(f"{topic}-late-{i}") for i in range(5)]
    with ThreadPoolExecutor(6) as pool:
        for f in [pool.submit(lambda b: admins[1].create_acls([b])[b].result(30), b)
                  for b in grant]:
            f.result()
    c.start_broker(3)
    c.wait_for_brokers_registered(c.ids, timeout=60)
    want = (want | {(2, b.name, int(AclOperation.WRITE.value)) for b in grant})
    c.wait_until("broker 3 caught up", lambda: _described_acls(c, 3, topic) == want, timeout=10)
    c.wait_until("broker 3 back in the ISR", lambda: 3 in (c.partition_state(topic, 2) or {}).get(
        "isr", []), timeout=60)
    _josef(c, 1, "leader-election", "--election-type", "PREFERRED", "--topic", topic,
           "--partition", "2")
    c.wait_until("broker 3 leads its partition again", lambda: (c.partition_state(
        topic, 2) or {}).get("leader") == 3, timeout=60)
    c.wait_until("alice may write through every broker again",
                 lambda: _produce_codes(c, topic) == {1: 0, 2: 0, 3: 0}, timeout=10)
