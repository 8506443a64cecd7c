"""Metadata, ApiVersions, CreateTopics/DeleteTopics, DescribeCluster and telemetry against a
live broker: stock clients (kafka-python, confluent-kafka, aiokafka, kcat) and raw requests
encoded with the project's codec where a client cannot show the wire-level answer."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from protocol import api
from protocol.errors import ErrorCode
from protocol.headers import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
    response_header_version,
)
from tests.integration.harness import BrokerProcess, recv_exact, run_kcat

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    # kafka-python 3 loads its JSON schemas with a deprecated importlib.resources call.
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

ZERO = uuid.UUID(int=0)
METADATA, CREATE_TOPICS, DELETE_TOPICS, API_VERSIONS = 3, 19, 20, 18
DESCRIBE_CLUSTER, GET_TELEMETRY, PUSH_TELEMETRY = 60, 71, 72
ALL_TOPIC_OPS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))


# ----- raw requests ---------------------------------------------------------------------------

def raw_call(broker: BrokerProcess, api_key: int, version: int, msg, *,
             header_version: int | None = None) -> tuple[object, bytes]:
    """Send one request; return (decoded response, raw response body after the size)."""
    header = RequestHeader(api_key, version, 4242, "josef-test")
    payload = encode_request_header(header) + api.encode_request(msg, version)
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", recv_exact(s, 4))
        body = recv_exact(s, size)
    hv = response_header_version(api_key, version) if header_version is None else header_version
    cid, offset = decode_response_header(memoryview(body), hv)
    assert cid == 4242
    return api.decode_response(api_key, version, memoryview(body), offset), body


def call(broker, api_key, version, **fields):
    msg = api.API_KEYS[api_key].request_cls(**fields)
    return raw_call(broker, api_key, version, msg)[0]


def metadata(broker, version, topics, **kw):
    req = api.API_KEYS[METADATA].request_cls
    if topics is not None:
        topics = [t if isinstance(t, req.MetadataRequestTopic)
                  else req.MetadataRequestTopic(name=t) for t in topics]
    return call(broker, METADATA, version, topics=topics, **kw)


def wait_leader(broker, topic: str, partitions: int, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = metadata(broker, 12, [topic], allow_auto_topic_creation=False)
        t = r.topics[0]
        if t.error_code == 0 and len(t.partitions) == partitions and \
                all(p.leader_id >= 0 for p in t.partitions):
            return t
        time.sleep(0.05)
    raise AssertionError(f"{topic} has no leaders: {r}")


# ----- ApiVersions ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(shared_broker, version):
    fields = {}
    if version >= 3:
        fields = dict(client_software_name="josef-test", client_software_version="1.0")
    resp, body = raw_call(shared_broker, API_VERSIONS, version,
                          api.API_KEYS[API_VERSIONS].request_cls(**fields))
    assert resp.error_code == 0
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert ranges[API_VERSIONS] == (0, 4) and ranges[METADATA] == (0, 13)
    assert ranges[CREATE_TOPICS] == (0, 7) and ranges[DELETE_TOPICS] == (0, 6)
    assert ranges[DESCRIBE_CLUSTER] == (0, 2)
    if version >= 3:
        # KIP-584 tagged fields, as a Kafka 3.9 broker sends them (kcat's librdkafka 2.0
        # reads them: see test_dynamic_configs)
        assert {f.name for f in resp.supported_features} >= {"group.version"}


def test_api_versions_unsupported_version_gets_v0_body(shared_broker):
    req = api.API_KEYS[API_VERSIONS].request_cls(client_software_name="x",
                                                 client_software_version="1")
    header = RequestHeader(API_VERSIONS, 0, 7, "josef-test")
    # a v9 request: header v1 layout, the body is whatever; the broker must answer in v0
    frame = bytearray(encode_request_header(header) + api.encode_request(req, 0))
    struct.pack_into(">h", frame, 2, 9)
    with socket.create_connection((shared_broker.host, shared_broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", recv_exact(s, 4))
        body = recv_exact(s, size)
    resp = api.decode_response(API_VERSIONS, 0, memoryview(body), 4)
    assert struct.unpack_from(">i", body)[0] == 7
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == API_VERSIONS and k.max_version == 4 for k in resp.api_keys)


def test_api_versions_v3_rejects_bad_client_software_name(shared_broker):
    resp = call(shared_broker, API_VERSIONS, 3, client_software_name="bad name!",
                client_software_version="1.0")
    assert resp.error_code == ErrorCode.INVALID_REQUEST and resp.api_keys == []


# ----- Metadata -------------------------------------------------------------------------------

def test_metadata_brokers_cluster_and_controller(shared_broker):
    r = metadata(shared_broker, 12, None)
    assert [(b.node_id, b.host, b.port) for b in r.brokers] == [
        (0, shared_broker.host, shared_broker.port)]
    assert r.controller_id == 0 and len(r.cluster_id) == 22
    assert r.cluster_authorized_operations == -2147483648


def test_metadata_auto_creation_answers_leader_not_available_first(shared_broker):
    r = metadata(shared_broker, 9, ["auto-md-1"])
    assert [(t.name, t.error_code, t.partitions) for t in r.topics] == [
        ("auto-md-1", ErrorCode.LEADER_NOT_AVAILABLE, [])]
    t = wait_leader(shared_broker, "auto-md-1", 1)
    p = t.partitions[0]
    assert (p.leader_id, p.replica_nodes, p.isr_nodes, p.leader_epoch) == (0, [0], [0], 0)
    assert t.topic_id != ZERO and not t.is_internal


def test_metadata_without_auto_creation(shared_broker):
    r = metadata(shared_broker, 9, ["no-auto-1", "bad/name"], allow_auto_topic_creation=False)
    assert [(t.name, t.error_code) for t in r.topics] == [
        ("no-auto-1", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION)]
    # a bad name is never created, even when auto-creation is allowed
    r = metadata(shared_broker, 9, ["bad name"])
    assert r.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "no-auto-1" not in {t.name for t in metadata(shared_broker, 1, None).topics}


def test_metadata_all_topics_null_and_empty(shared_broker):
    metadata(shared_broker, 9, ["all-md-1"])
    wait_leader(shared_broker, "all-md-1", 1)
    assert "all-md-1" in {t.name for t in metadata(shared_broker, 0, []).topics}  # v0: all
    assert "all-md-1" in {t.name for t in metadata(shared_broker, 1, None).topics}
    assert metadata(shared_broker, 1, []).topics == []  # v1+: empty = none


def test_metadata_topic_ids(shared_broker):
    metadata(shared_broker, 9, ["ids-md-1"])
    tid = wait_leader(shared_broker, "ids-md-1", 1).topic_id
    req = api.API_KEYS[METADATA].request_cls
    unknown = uuid.uuid4()
    r = metadata(shared_broker, 12, [req.MetadataRequestTopic(topic_id=tid),
                                     req.MetadataRequestTopic(topic_id=unknown)])
    by_id = {t.topic_id: t for t in r.topics}
    assert by_id[tid].name == "ids-md-1" and by_id[tid].error_code == 0
    assert by_id[unknown].error_code == ErrorCode.UNKNOWN_TOPIC_ID and by_id[unknown].name is None
    # v10/v11 do not accept ids in requests
    r = metadata(shared_broker, 10, [req.MetadataRequestTopic(name="ids-md-1", topic_id=tid)])
    assert r.topics[0].error_code == ErrorCode.INVALID_REQUEST


def test_metadata_authorized_operations(shared_broker):
    metadata(shared_broker, 9, ["ops-md-1"])
    wait_leader(shared_broker, "ops-md-1", 1)
    r = metadata(shared_broker, 10, ["ops-md-1"], include_topic_authorized_operations=True,
                 include_cluster_authorized_operations=True)
    assert r.topics[0].topic_authorized_operations == ALL_TOPIC_OPS
    assert r.cluster_authorized_operations > 0
    r = metadata(shared_broker, 10, ["ops-md-1"])
    assert r.topics[0].topic_authorized_operations == -2147483648


def test_kafka_python_producer_auto_creates(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=10000)
    try:
        producer.send("kp-auto-1", b"hello").get(timeout=20)
        assert producer.partitions_for("kp-auto-1") == {0}
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None)
    try:
        assert "kp-auto-1" in consumer.topics()
    finally:
        consumer.close()


def test_kcat_lists_metadata(shared_broker, kcat):
    metadata(shared_broker, 9, ["kcat-md-1"])
    wait_leader(shared_broker, "kcat-md-1", 1)
    out = run_kcat(["-b", shared_broker.bootstrap, "-L"], timeout=30)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert f"broker 0 at {shared_broker.bootstrap} (controller)" in text
    assert 'topic "kcat-md-1" with 1 partitions' in text
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in text


# ----- CreateTopics / DeleteTopics ------------------------------------------------------------

def test_kafka_python_admin_create_delete_describe(shared_broker):
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kpa-1", 3, 1), NewTopic(
            "kpa-2", -1, -1, topic_configs={"retention.ms": "3600000"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("kpa-1", 1, 1)])
        assert {"kpa-1", "kpa-2"} <= set(admin.list_topics())
        assert len(wait_leader(shared_broker, "kpa-1", 3).partitions) == 3
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0 and cluster["brokers"][0]["port"] == shared_broker.port
        admin.delete_topics(["kpa-1"])
        assert "kpa-1" not in set(admin.list_topics())
    finally:
        admin.close()


def test_confluent_admin_create_delete_describe(shared_broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    futures = admin.create_topics([NewTopic("cka-1", 2, 1)])  # operation_timeout 0
    futures["cka-1"].result(timeout=20)
    futures = admin.create_topics([NewTopic("cka-1", 2, 1)], operation_timeout=10)
    with pytest.raises(KafkaException) as e:
        futures["cka-1"].result(timeout=20)
    assert e.value.args[0].code() == 36  # TOPIC_ALREADY_EXISTS
    futures = admin.create_topics([NewTopic("cka-2", 1, 1)], validate_only=True)
    futures["cka-2"].result(timeout=20)
    md = admin.list_topics(timeout=10)
    assert "cka-1" in md.topics and "cka-2" not in md.topics
    assert len(md.topics["cka-1"].partitions) == 2 and md.controller_id == 0
    cluster = admin.describe_cluster(request_timeout=10).result(timeout=20)
    assert cluster.controller.id == 0 and [n.port for n in cluster.nodes] == [shared_broker.port]
    futures = admin.delete_topics(["cka-1", "cka-missing"], operation_timeout=10)
    futures["cka-1"].result(timeout=20)
    with pytest.raises(KafkaException):
        futures["cka-missing"].result(timeout=20)
    assert "cka-1" not in admin.list_topics(timeout=10).topics


async def test_aiokafka_admin_create_delete(shared_broker):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("aio-1", 2, 1)])
        assert "aio-1" in await admin.list_topics()
        cluster = await admin.describe_cluster()
        assert cluster["controller_id"] == 0
        await admin.delete_topics(["aio-1"])
        assert "aio-1" not in await admin.list_topics()
    finally:
        await admin.close()


def test_create_topics_wire_details(shared_broker):
    req = api.API_KEYS[CREATE_TOPICS].request_cls
    t = req.CreatableTopic(name="ct-wire-1", num_partitions=-1, replication_factor=-1,
                           configs=[req.CreatableTopicConfig(name="retention.ms", value="1000")])
    r = call(shared_broker, CREATE_TOPICS, 7, topics=[t], timeout_ms=10000)
    res = r.topics[0]
    assert res.error_code == 0 and res.topic_id != ZERO
    assert (res.num_partitions, res.replication_factor) == (1, 1)
    configs = {c.name: (c.value, c.config_source) for c in res.configs}
    assert configs["retention.ms"] == ("1000", 1)  # TOPIC_CONFIG
    assert configs["segment.bytes"][1] == 5  # DEFAULT_CONFIG
    # validate_only: checked, not created; timeout 0: created, REQUEST_TIMED_OUT as Kafka
    r = call(shared_broker, CREATE_TOPICS, 7, validate_only=True, timeout_ms=10000,
             topics=[req.CreatableTopic(name="ct-wire-2", num_partitions=2, replication_factor=1)])
    assert r.topics[0].error_code == 0 and r.topics[0].num_partitions == 2
    r = call(shared_broker, CREATE_TOPICS, 4, timeout_ms=0,
             topics=[req.CreatableTopic(name="ct-wire-3", num_partitions=1, replication_factor=1)])
    assert r.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    names = {t.name for t in metadata(shared_broker, 1, None).topics}
    assert "ct-wire-3" in names and "ct-wire-2" not in names
    r = call(shared_broker, CREATE_TOPICS, 7, timeout_ms=10000, topics=[
        req.CreatableTopic(name="ct-wire-4", num_partitions=0, replication_factor=1),
        req.CreatableTopic(name="ct-wire-5", num_partitions=1, replication_factor=3),
        req.CreatableTopic(name="ct-wire-6", num_partitions=1, replication_factor=1,
                           configs=[req.CreatableTopicConfig(name="nope.key", value="1")])])
    assert [x.error_code for x in r.topics] == [
        ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.INVALID_CONFIG]
    assert r.topics[0].configs is None and r.topics[0].num_partitions == -1


def test_delete_topics_by_id_and_name(shared_broker):
    metadata(shared_broker, 9, ["del-id-1", "del-name-1"])
    tid = wait_leader(shared_broker, "del-id-1", 1).topic_id
    wait_leader(shared_broker, "del-name-1", 1)
    req = api.API_KEYS[DELETE_TOPICS].request_cls
    unknown = uuid.uuid4()
    r = call(shared_broker, DELETE_TOPICS, 6, timeout_ms=10000, topics=[
        req.DeleteTopicState(topic_id=tid), req.DeleteTopicState(topic_id=unknown),
        req.DeleteTopicState(name="del-name-1"), req.DeleteTopicState(name="del-missing")])
    assert [(x.name, x.error_code) for x in r.responses] == [
        ("del-id-1", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID), ("del-name-1", 0),
        ("del-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    names = {t.name for t in metadata(shared_broker, 1, None).topics}
    assert not names & {"del-id-1", "del-name-1"}
    r = call(shared_broker, DELETE_TOPICS, 6, timeout_ms=10000, topics=[
        req.DeleteTopicState(name="x", topic_id=unknown)])
    assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST


def test_delete_topic_disabled(broker_factory):
    b = broker_factory({"delete.topic.enable": "false"})
    metadata(b, 9, ["keep-1"])
    wait_leader(b, "keep-1", 1)
    r = call(b, DELETE_TOPICS, 4, topic_names=["keep-1"], timeout_ms=10000)
    assert r.responses[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED
    r = call(b, DELETE_TOPICS, 2, topic_names=["keep-1"], timeout_ms=10000)
    assert r.responses[0].error_code == ErrorCode.INVALID_REQUEST
    assert "keep-1" in {t.name for t in metadata(b, 1, None).topics}


def test_auto_create_disabled(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false", "num.partitions": "3"})
    r = metadata(b, 9, ["never-1"])
    assert r.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    req = api.API_KEYS[CREATE_TOPICS].request_cls
    r = call(b, CREATE_TOPICS, 5, timeout_ms=10000, topics=[
        req.CreatableTopic(name="explicit-1", num_partitions=-1, replication_factor=-1)])
    assert r.topics[0].num_partitions == 3  # num.partitions
    assert len(wait_leader(b, "explicit-1", 3).partitions) == 3


# ----- DescribeCluster, telemetry -------------------------------------------------------------

def test_describe_cluster(shared_broker):
    r = call(shared_broker, DESCRIBE_CLUSTER, 1, include_cluster_authorized_operations=False)
    assert r.error_code == 0 and r.controller_id == 0 and len(r.cluster_id) == 22
    assert [(b.broker_id, b.port) for b in r.brokers] == [(0, shared_broker.port)]
    r = call(shared_broker, DESCRIBE_CLUSTER, 1, endpoint_type=2)
    assert r.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


def test_telemetry_without_subscriptions(shared_broker):
    r = call(shared_broker, GET_TELEMETRY, 0, client_instance_id=ZERO)
    assert r.error_code == 0 and r.client_instance_id != ZERO
    assert r.requested_metrics == [] and r.push_interval_ms > 0
    ok = call(shared_broker, PUSH_TELEMETRY, 0, client_instance_id=r.client_instance_id,
              subscription_id=r.subscription_id, metrics=b"")
    assert ok.error_code == 0
    bad = call(shared_broker, PUSH_TELEMETRY, 0, client_instance_id=r.client_instance_id,
               subscription_id=r.subscription_id + 1, metrics=b"")
    assert bad.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID


def test_confluent_producer_sees_no_error(shared_broker):
    from confluent_kafka import Producer

    errors = []
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "enable.metrics.push": True,
                  "error_cb": errors.append})
    p.produce("ck-telemetry-1", b"x")
    assert p.flush(20) == 0
    p.poll(0.5)
    assert errors == []
