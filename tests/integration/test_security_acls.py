"""ACL authorization (issue 15) with Kafka's ACL authorizer, managed with ``josef acls``.

One broker (module scope): ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``,
``super.users=User:admin``, SASL PLAIN users admin/alice/bob, SSL clients mapped to
``User:<CN>`` by ``ssl.principal.mapping.rules``. Checked with confluent-kafka,
kafka-python and raw requests (exact error codes):

- alice allowed WRITE but not READ on a topic produces and cannot consume
  (TOPIC_AUTHORIZATION_FAILED); READ on the topic without a group ACL ->
  GROUP_AUTHORIZATION_FAILED, with it the group consumes;
- a transactional id without ACLs -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED (InitProducerId,
  FindCoordinator);
- a prefixed ACL covers topics created later; Metadata and ListGroups only show what the
  principal may describe; authorized operations in Metadata and DescribeGroups;
- denials are written to logs/kafka-authorizer.log in Kafka's format;
- UpdateFeatures and AlterReplicaLogDirs need ALTER on the cluster, ListConfigResources
  DESCRIBE_CONFIGS (CLUSTER_AUTHORIZATION_FAILED without, success with the ACL);
- ACLs are stored as Kafka's /kafka-acl znodes and survive a restart; DescribeAcls /
  DeleteAcls filters; josef acls output as kafka-acls.sh.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from controller.metadata_store import read_znodes
from protocol.errors import ErrorCode
from tests.integration.secure_broker import PLAIN_JAAS, SecureBroker, confluent, java_props

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

JAAS = PLAIN_JAAS.replace('user_alice="alice-secret";',
                          'user_alice="alice-secret" user_bob="bob-secret" '
                          'user_ops="ops-secret";')


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    b = SecureBroker(tmp_path_factory.mktemp("acls"), {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
    }).start()
    yield b
    b.stop()


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def josef(b: SecureBroker, *args: str, user: str = "admin", check: bool = True,
          stdin: str = ""):
    """Run a ``josef`` tool in this process (``broker.cli.main``) as ``user``."""
    import contextlib
    import io

    from broker.cli import main

    cfg = b.process.dir / f"{user}.properties"
    if not cfg.exists():
        cfg.write_text("".join(f"{k}={v}\n" for k, v in java_props(
            b, "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret").items()))
    out, err = io.StringIO(), io.StringIO()
    old_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([*args, "--bootstrap-server", b.bootstrap("SASL_PLAINTEXT"),
                             "--command-config", str(cfg)])
            except SystemExit as e:  # argparse usage errors
                code = e.code
    finally:
        sys.stdin = old_stdin
    proc = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def client(b: SecureBroker, user: str):
    from client.connection import KafkaClient
    return KafkaClient(b.bootstrap("SASL_PLAINTEXT"), security=java_props(
        b, "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret"), timeout=20)


def ck(b: SecureBroker, user: str) -> dict:
    return confluent(b, "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret")


def test_write_but_not_read(secure):
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    t = _topic("wonly")
    josef(secure, "topics", "--create", "--topic", t)
    out = josef(secure, "acls", "--add", "--allow-principal", "User:alice", "--operation",
                "Write", "--topic", t).stdout
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={t}, " \
           "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=WRITE, " \
           "permissionType=ALLOW) \n" in out
    p = Producer(ck(secure, "alice"))
    errors = []
    for i in range(5):
        p.produce(t, f"v{i}".encode(), on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors
    c = Consumer({**ck(secure, "alice"), "group.id": "g-" + t, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(t, 0, 0)])
    codes, records = set(), 0
    deadline = time.monotonic() + 20
    while KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error():
            codes.add(m.error().code())
        elif m is not None:
            records += 1
    c.close()
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes and records == 0
    with client(secure, "alice") as kc:  # the exact code on the wire
        resp = kc.request(1, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0,
                              "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
                              "session_epoch": -1, "topics": [
                                  {"topic": t, "topic_id": kc.metadata([t]).topics[0].topic_id,
                                   "partitions": [{"partition": 0, "fetch_offset": 0,
                                                   "partition_max_bytes": 1000}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        assert resp.responses[0].partitions[0].error_code == \
            ErrorCode.TOPIC_AUTHORIZATION_FAILED
    log = (secure.process.dir / "logs" / "kafka-authorizer.log").read_text()
    assert (f"Principal = User:alice is Denied Operation = Read from host = 127.0.0.1 on "
            f"resource = Topic:LITERAL:{t} for request = Fetch with resourceRefCount = 1"
            in log)
    with pytest.raises(KafkaException):
        bad = Producer({**ck(secure, "bob"), "message.timeout.ms": 2000})
        bad.produce(t, b"x")
        bad.flush(10)
        raise KafkaException("no error")  # pragma: no cover - flush reports errors itself


def test_group_acls(secure):
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    t, g = _topic("grp"), _topic("group")
    josef(secure, "topics", "--create", "--topic", t)
    josef(secure, "acls", "--add", "--allow-principal", "User:bob", "--operation", "Read",
          "--topic", t)
    kw = dict(bootstrap_servers=secure.bootstrap("SASL_PLAINTEXT"),
              security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
              sasl_plain_username="bob", sasl_plain_password="bob-secret",
              api_version=(2, 8))
    c = KafkaConsumer(t, group_id=g, **kw)
    with pytest.raises(GroupAuthorizationFailedError):
        c.poll(timeout_ms=3000)
    c.close()
    with client(secure, "bob") as kc:  # FindCoordinator needs DESCRIBE on the group
        node = kc.request(10, {"key": g, "key_type": 0}, version=2)
        assert node.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    josef(secure, "acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", t,
          "--group", g)
    josef(secure, "console-producer", "--topic", t, stdin="hello\n")
    c = KafkaConsumer(t, group_id=g, auto_offset_reset="earliest", **kw)
    got, deadline = [], time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    c.close()
    assert got == [b"hello"]
    with client(secure, "bob") as kc:
        groups = kc.request(16, {}).groups
        assert [x.group_id for x in groups] == [g]  # only what bob may describe
        d = kc.request(15, {"groups": [g], "include_authorized_operations": True}).groups[0]
        assert d.error_code == 0
        assert d.authorized_operations == (1 << 3) | (1 << 8)  # READ, DESCRIBE
        assert kc.request(42, {"groups_names": [g]}).results[0].error_code == \
            ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_transactional_id_acls(secure):
    josef(secure, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
          "--topic", "some-topic")
    with client(secure, "alice") as kc:
        resp = kc.request(22, {"transactional_id": "tx-1", "transaction_timeout_ms": 60000})
        assert resp.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        resp = kc.request(10, {"key_type": 1, "coordinator_keys": ["tx-1"]})
        assert resp.coordinators[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # idempotence: IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)
        resp = kc.request(22, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert resp.error_code == 0  # alice may WRITE to some topic
    josef(secure, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
          "--operation", "Describe", "--transactional-id", "tx-1")
    with client(secure, "alice") as kc:
        resp = kc.request(22, {"transactional_id": "tx-1", "transaction_timeout_ms": 60000})
        assert resp.error_code != ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with client(secure, "bob") as kc:
        resp = kc.request(22, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_prefixed_acl_covers_new_topics_and_metadata_is_filtered(secure):
    from confluent_kafka import Producer

    prefix = f"logs-{uuid.uuid4().hex[:4]}-"
    josef(secure, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Write",
          "--operation", "Create", "--topic", prefix, "--resource-pattern-type", "prefixed")
    new_topic = prefix + "later"
    p = Producer(ck(secure, "alice"))
    p.produce(new_topic, b"x")
    assert p.flush(30) == 0
    with client(secure, "alice") as kc:
        names = {t.name for t in kc.metadata(None).topics}
        assert new_topic in names
        secret = _topic("secret")
        josef(secure, "topics", "--create", "--topic", secret)
        md = kc.request(3, {"topics": [{"name": secret}, {"name": new_topic}],
                            "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": True}, version=10)
        by_name = {t.name: t for t in md.topics}
        assert by_name[secret].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert by_name[new_topic].error_code == 0
        ops = by_name[new_topic].topic_authorized_operations
        assert ops == (1 << 4) | (1 << 5) | (1 << 8)  # WRITE, CREATE, DESCRIBE (implied)
        assert secret not in {t.name for t in kc.metadata(None).topics}
    out = josef(secure, "acls", "--list", "--topic", new_topic, "--resource-pattern-type",
                "match").stdout
    assert f"ResourcePattern(resourceType=TOPIC, name={prefix}, patternType=PREFIXED)" in out


def test_metadata_v12_unauthorized_topic_by_name_and_by_id(secure):
    """Issue 27 point 2: a v12 request by name answers an unauthorized topic with its name,
    a zero topic id and TOPIC_AUTHORIZATION_FAILED; only a request by id gets the id and a
    null name (Kafka's ``unauthorizedForDescribeTopicMetadata``)."""
    import uuid as _uuid

    secret = _topic("v12secret")
    josef(secure, "topics", "--create", "--topic", secret)
    with client(secure, "admin") as kc:
        topic_id = kc.metadata([secret]).topics[0].topic_id
    assert topic_id != _uuid.UUID(int=0)
    with client(secure, "bob") as kc:
        by_name = kc.request(3, {"topics": [{"name": secret, "topic_id": _uuid.UUID(int=0)}],
                                 "allow_auto_topic_creation": False}, version=12)
        (t,) = by_name.topics
        assert (t.error_code, t.name, t.topic_id, t.partitions) == \
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, secret, _uuid.UUID(int=0), [])
        by_id = kc.request(3, {"topics": [{"name": None, "topic_id": topic_id}],
                               "allow_auto_topic_creation": False}, version=12)
        (t,) = by_id.topics
        assert (t.error_code, t.name, t.topic_id) == \
            (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, topic_id)


@pytest.mark.java
def test_java_producer_gets_topic_authorization_exception(secure, java_client):
    """The Java producer's Metadata v12 by name: TopicAuthorizationException in the send
    callback (a null name made its I/O thread die with IllegalStateException)."""
    from tests.integration.harness import run_java_client

    secret = _topic("javasecret")
    josef(secure, "topics", "--create", "--topic", secret)
    args = []
    for k, v in java_props(secure, "SASL_PLAINTEXT", "PLAIN", "bob", "bob-secret").items():
        args += ["--prop", f"{k}={v}"]
    r = run_java_client(java_client, "produce", "--bootstrap",
                        secure.bootstrap("SASL_PLAINTEXT"), "--topic", secret, "--count", "1",
                        "--timeout-ms", "20000", *args, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert any(line.startswith("fail 0 org.apache.kafka.common.errors."
                               "TopicAuthorizationException") for line in r.lines), \
        r.stdout + r.stderr[-2000:]
    assert "IllegalStateException" not in r.stderr


def test_ssl_principal_mapping_and_cluster_acls(secure):
    from confluent_kafka import Producer

    t = _topic("ssl")
    josef(secure, "topics", "--create", "--topic", t)
    josef(secure, "acls", "--add", "--allow-principal", "User:client", "--producer", "--topic",
          t)
    conf = confluent(secure, "SSL", client_cert=True)
    p = Producer(conf)
    p.produce(t, b"from-cert")
    assert p.flush(30) == 0
    with client(secure, "alice") as kc:
        assert kc.request(29, {"resource_type_filter": 1, "resource_name_filter": None,
                               "pattern_type_filter": 1, "principal_filter": None,
                               "host_filter": None, "operation": 1,
                               "permission_type": 1}).error_code == \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_cluster_alter_and_describe_configs_acls(secure):
    t = _topic("dirs")
    josef(secure, "topics", "--create", "--topic", t)
    denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    update = {"timeout_ms": 10000, "validate_only": True, "feature_updates": [
        {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1,
         "allow_downgrade": False}]}
    move = {"dirs": [{"path": str(secure.process.log_dir.resolve()),
                      "topics": [{"name": t, "partitions": [0]}]}]}

    def codes(resp):
        return [p.error_code for r in resp.results for p in r.partitions]

    with client(secure, "ops") as kc:
        resp = kc.request(57, update)  # UpdateFeatures
        assert (resp.error_code, resp.results) == (denied, [])
        assert codes(kc.request(34, move)) == [denied]  # AlterReplicaLogDirs
        resp = kc.request(74, {})  # ListConfigResources (v0 was ListClientMetricsResources)
        assert (resp.error_code, resp.config_resources) == (denied, [])
    josef(secure, "acls", "--add", "--allow-principal", "User:ops", "--operation", "Alter",
          "--operation", "DescribeConfigs", "--cluster")
    with client(secure, "ops") as kc:
        resp = kc.request(57, update)
        assert resp.error_code == 0 and all(r.error_code == 0 for r in resp.results)
        assert codes(kc.request(34, move)) == [0]  # already in that dir
        assert kc.request(74, {}).error_code == 0
    log = (secure.process.dir / "logs" / "kafka-authorizer.log").read_text()
    for op, api_name in (("Alter", "UpdateFeatures"), ("Alter", "AlterReplicaLogDirs"),
                         ("DescribeConfigs", "ListConfigResources")):
        assert (f"Principal = User:ops is Denied Operation = {op} from host = 127.0.0.1 on "
                f"resource = Cluster:LITERAL:kafka-cluster for request = {api_name} "
                "with resourceRefCount = 1") in log


def test_acls_are_kafka_znodes_and_survive_restart(secure):
    t = _topic("persist")
    josef(secure, "acls", "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
          "--operation", "Describe", "--topic", t)
    store = read_znodes(str(secure.process.log_dir))
    doc = json.loads(store[f"/kafka-acl/Topic/{t}"]["data"])
    assert doc == {"version": 1, "acls": [{"principal": "User:bob", "permissionType": "Deny",
                                           "operation": "Describe", "host": "10.0.0.1"}]}
    assert any(v["data"] == f"Topic:{t}" for k, v in store.items()
               if k.startswith("/kafka-acl-changes/acl_changes_"))
    secure.process.restart()
    out = josef(secure, "acls", "--list", "--topic", t).stdout
    assert "(principal=User:bob, host=10.0.0.1, operation=DESCRIBE, permissionType=DENY)" in out
    josef(secure, "acls", "--remove", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1",
          "--operation", "Describe", "--topic", t, "--force")
    assert "User:bob" not in josef(secure, "acls", "--list", "--topic", t).stdout
    r = josef(secure, "acls", "--add", "--allow-principal", "User:x", "--operation", "Read",
              "--cluster", check=False)
    assert r.returncode == 2 and "only supports operations" in r.stderr
