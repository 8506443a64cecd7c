"""DescribeProducers (61, KIP-664).

Against a live broker: idempotent producers (confluent-kafka and kafka-python) write, then
kafka-python's ``KafkaAdminClient.describe_producers`` (confluent-kafka 2.16 has no
describe_producers) reads each producer's epoch, last sequence and last timestamp; the state
survives a restart (rebuilt from the log); error codes on raw requests (our codec).
In process, on a real ReplicaManager and Log: a follower replica answers, a partition known
to the cluster but not hosted gets NOT_LEADER_OR_FOLLOWER, and transactional state
(coordinator epoch, open transaction start offset) is reported.
"""

from __future__ import annotations

import time
import uuid
import warnings
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.handlers.producers import handle_describe_producers
from protocol import api
from protocol.errors import ErrorCode as E
from protocol.record_builder import RecordBatchBuilder, build_control_batch
from tests.integration.harness import api_versions_probe
from tests.integration.raw_client import RawClient
from tests.unit.broker.dataplane_helpers import leader_and_isr, make_replica_manager

with warnings.catch_warnings():  # kafka-python 3 reads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

DESCRIBE_PRODUCERS = 61
Request = api.API_KEYS[DESCRIBE_PRODUCERS].request_cls

pytestmark = [
    pytest.mark.timeout(120),
    # kafka-python 3 reads its resources with a deprecated importlib API
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TS0 = 1_700_000_000_000


def _topic(prefix="dp") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(b, name, partitions=2):
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)


def _produce_confluent(b, topic, n, partition=0, ts0=TS0):
    p = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True,
                  "linger.ms": 0})
    errors = []
    for i in range(n):
        p.produce(topic, b"c%d" % i, partition=partition, timestamp=ts0 + i,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
        p.flush(10)
    assert p.flush(10) == 0 and errors == []


def _produce_kafka_python(b, topic, n, partition=0, ts0=TS0):
    p = KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, acks="all")
    try:
        for i in range(n):
            p.send(topic, b"k%d" % i, partition=partition, timestamp_ms=ts0 + i).get(timeout=15)
    finally:
        p.close(timeout=10)


def _describe(b, tps, **kw):
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=15000)
    try:
        return admin.describe_producers(tps, **kw)
    finally:
        admin.close()


def _describe_raw(raw: RawClient, topics: dict[str, list[int]]):
    """DescribeProducers v0 for ``topics`` (name -> partitions) on a raw connection."""
    return raw.call(DESCRIBE_PRODUCERS, 0, Request(topics=[
        Request.TopicRequest(name=t, partition_indexes=ps) for t, ps in topics.items()]))


# ----- live broker ---------------------------------------------------------------------------

def test_api_versions_advertises_describe_producers(shared_broker):
    versions = {k: (lo, hi) for k, lo, hi in
                api_versions_probe(shared_broker.host, shared_broker.port)}
    assert versions[DESCRIBE_PRODUCERS] == (0, 0)


def test_idempotent_producers_described(shared_broker):
    b = shared_broker
    topic = _topic()
    _create(b, topic)
    _produce_confluent(b, topic, 5, ts0=TS0)
    _produce_kafka_python(b, topic, 3, ts0=TS0 + 1000)
    res = _describe(b, [KTP(topic, 0), KTP(topic, 1)])
    assert res[KTP(topic, 1)].active_producers == []
    prods = res[KTP(topic, 0)].active_producers
    assert len(prods) == 2
    assert prods[0].producer_id < prods[1].producer_id  # ordered by producer id
    by_last_seq = {p.last_sequence: p for p in prods}
    assert set(by_last_seq) == {4, 2}
    conf, kp = by_last_seq[4], by_last_seq[2]
    assert conf.last_timestamp == TS0 + 4
    assert kp.last_timestamp == TS0 + 1002
    for p in prods:
        assert p.producer_id >= 0 and p.producer_epoch == 0
        assert p.coordinator_epoch == -1
        assert p.current_transaction_start_offset == -1

    # more records from a new idempotent producer session: a third producer id appears
    _produce_confluent(b, topic, 2, ts0=TS0 + 2000)
    prods = _describe(b, [KTP(topic, 0)])[KTP(topic, 0)].active_producers
    assert len(prods) == 3 and sorted(p.last_sequence for p in prods) == [1, 2, 4]


def test_unknown_partition_through_admin_client(shared_broker):
    topic = _topic()
    _create(shared_broker, topic, partitions=1)
    md = AdminClient({"bootstrap.servers": shared_broker.bootstrap}).list_topics(timeout=10)
    broker_id = next(iter(md.brokers))
    with pytest.raises(UnknownTopicOrPartitionError):
        _describe(shared_broker, [KTP(topic, 7)], broker_id=broker_id)
    # broker_id given: the request goes to that replica, which answers for what it hosts
    res = _describe(shared_broker, [KTP(topic, 0)], broker_id=broker_id)
    assert res[KTP(topic, 0)].active_producers == []


def test_error_codes_on_raw_requests(shared_broker):
    topic = _topic()
    _create(shared_broker, topic, partitions=1)
    raw = RawClient(shared_broker, timeout=15.0, client_id="raw-dp")
    try:
        r = _describe_raw(raw, {topic: [0, 5, 0], _topic("missing"): [0, 1],
                                "bad/name": [0]})
    finally:
        raw.close()
    assert r.throttle_time_ms == 0
    got = {t.name: [(p.partition_index, p.error_code) for p in t.partitions] for t in r.topics}
    assert [t.name for t in r.topics][0] == topic
    # partitions answered in request order, a repeated index twice
    assert got[topic] == [(0, 0), (5, E.UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]
    missing = next(t for t in r.topics if t.name.startswith("missing"))
    assert [(p.partition_index, p.error_code) for p in missing.partitions] == \
        [(0, E.UNKNOWN_TOPIC_OR_PARTITION), (1, E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert got["bad/name"] == [(0, E.INVALID_TOPIC_EXCEPTION)]
    bad = next(t for t in r.topics if t.name == "bad/name").partitions[0]
    assert bad.error_message and "illegal" in bad.error_message
    ok = next(t for t in r.topics if t.name == topic).partitions[0]
    assert ok.error_message is None and ok.active_producers == []


def test_state_rebuilt_after_restart(broker):
    topic = _topic()
    _create(broker, topic, partitions=1)
    _produce_confluent(broker, topic, 4, ts0=TS0)
    before = _describe(broker, [KTP(topic, 0)])[KTP(topic, 0)].active_producers
    assert [p.last_sequence for p in before] == [3]
    broker.stop()
    broker.start()
    deadline = time.monotonic() + 20
    while True:
        try:
            after = _describe(broker, [KTP(topic, 0)])[KTP(topic, 0)].active_producers
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert after == before


# ----- in process: follower, not hosted, transactional state ----------------------------------

def _ctx(rm):
    return SimpleNamespace(api_version=0, broker=SimpleNamespace(replica_manager=rm))


def _txn_batch(pid, epoch, seq, n, base_offset, ts):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           is_transactional=True, base_offset=base_offset,
                           partition_leader_epoch=0)
    for i in range(n):
        b.append(ts + i, None, b"v")
    return b.build()


async def test_follower_answers_with_transaction_state(tmp_path):
    known = {("t", 0), ("t", 1)}
    rm, _timer, lm = make_replica_manager(tmp_path, known=known)
    try:
        # this broker (1) follows broker 2 for t-0; t-1 lives on another broker only
        await rm.become_leader_or_follower(
            leader_and_isr(partitions=(0,), leader=2, isr=(2, 1), replicas=(2, 1)))
        p = rm.get_partition("t", 0)
        assert p is not None and not p.is_leader
        p.log.append_as_follower(_txn_batch(7, 3, 0, 2, 0, TS0))          # offsets 0-1, open
        p.log.append_as_follower(_txn_batch(9, 1, 0, 1, 2, TS0 + 10))     # offset 2
        p.log.append_as_follower(build_control_batch(
            "commit", 9, 1, coordinator_epoch=5, timestamp=TS0 + 20, base_offset=3,
            partition_leader_epoch=0))                                     # offset 3

        resp = handle_describe_producers(
            _ctx(rm), Request(topics=[Request.TopicRequest(name="t", partition_indexes=[0, 1, 2])]))
        parts = resp.topics[0].partitions
        assert [(x.partition_index, x.error_code) for x in parts] == [
            (0, 0), (1, E.NOT_LEADER_OR_FOLLOWER), (2, E.UNKNOWN_TOPIC_OR_PARTITION)]
        rows = [(a.producer_id, a.producer_epoch, a.last_sequence, a.last_timestamp,
                 a.coordinator_epoch, a.current_txn_start_offset)
                for a in parts[0].active_producers]
        assert rows == [
            (7, 3, 1, TS0 + 1, -1, 0),      # open transaction from offset 0
            (9, 1, 0, TS0 + 20, 5, -1),     # committed: marker's epoch and timestamp
        ]
        # the response encodes (flexible v0) and decodes back
        body = api.encode_response(resp, 0)
        back = api.decode_response(DESCRIBE_PRODUCERS, 0, body, 0)
        assert back.topics[0].partitions[0].active_producers[0].current_txn_start_offset == 0
    finally:
        await rm.shutdown()
        lm.close_all()
