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
