"""Gaps in APIs Josef already served, found by stock clients' own test suites (issue 16), and
DescribeTopicPartitions (KIP-966): ListOffsets MAX_TIMESTAMP answers the record with the
largest timestamp (KAFKA-16310), a batch with invalid records names them in
``record_errors`` (KIP-467), DescribeTopicPartitions pages through 2,000 partitions."""

from __future__ import annotations

import pytest

from protocol import api
from protocol.record_builder import RecordBatchBuilder
from tests.integration.raw_client import RawClient

pytestmark = pytest.mark.integration

PRODUCE, LIST_OFFSETS, CREATE_TOPICS, DTP = 0, 2, 19, 75


def req(key):
    return api.API_KEYS[key].request_cls


def create(raw: RawClient, name: str, partitions: int = 1, configs=None,
           exist_ok: bool = False) -> None:
    C = req(CREATE_TOPICS)
    r = raw.call(CREATE_TOPICS, 5, topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])],
        timeout_ms=60000)
    assert r.topics[0].error_code in ((0, 36) if exist_ok else (0,)), r


def produce(raw: RawClient, topic: str, records, version: int = 9):
    b = RecordBatchBuilder()
    for ts, key, value in records:
        b.append(ts, key, value)
    P = req(PRODUCE)
    r = raw.call(PRODUCE, version, acks=-1, timeout_ms=10000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[
            P.PartitionProduceData(index=0, records=bytes(b.build()))])])
    return r.responses[0].partition_responses[0]


@pytest.fixture(scope="module")
def raw(shared_broker):
    c = RawClient(shared_broker, timeout=60)
    yield c
    c.close()


def test_max_timestamp_is_the_record_with_the_largest_timestamp(raw):
    create(raw, "maxts")
    assert produce(raw, "maxts", [(1000, b"a", b"1"), (1001, b"b", b"2")]).error_code == 0
    # offsets 2..5: the largest timestamp is in the middle of the batch
    assert produce(raw, "maxts", [(1500, b"c", b"3"), (9000, b"d", b"4"),
                                  (2000, b"e", b"5"), (9000, b"f", b"6")]).error_code == 0
    assert produce(raw, "maxts", [(3000, b"g", b"7")]).error_code == 0
    L = req(LIST_OFFSETS)
    r = raw.call(LIST_OFFSETS, 8, replica_id=-1, isolation_level=0, topics=[
        L.ListOffsetsTopic(name="maxts", partitions=[
            L.ListOffsetsPartition(partition_index=0, timestamp=-3)])])
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.offset, p.timestamp) == (0, 3, 9000)


def test_keyless_records_on_a_compacted_topic_are_named_in_record_errors(raw):
    create(raw, "compacted-kip467", configs={"cleanup.policy": "compact"})
    p = produce(raw, "compacted-kip467", [(1, b"k0", b"v"), (2, None, b"v"), (3, b"k2", b"v"),
                                          (4, None, b"v")])
    assert p.error_code == 87  # INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
        (1, "Compacted topic cannot accept message without key in topic partition "
            "compacted-kip467-0."),
        (3, "Compacted topic cannot accept message without key in topic partition "
            "compacted-kip467-0.")]
    assert p.error_message.startswith("One or more records have been rejected due to 2 record "
                                      "errors in total")
    # nothing of the failed batch was written
    ok = produce(raw, "compacted-kip467", [(5, b"k", b"v")])
    assert (ok.error_code, ok.base_offset) == (0, 0)


def test_confluent_producer_fails_only_the_keyless_records(shared_broker, raw):
    """librdkafka (v8+ produce) reads record_errors: the keyed records of a rejected batch are
    retried in a batch of their own, only the keyless one fails."""
    from confluent_kafka import KafkaError, Producer

    create(raw, "compacted-librdkafka", configs={"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 200})
    results = []
    for key in (b"a", None, b"b"):
        p.produce("compacted-librdkafka", key=key, value=b"v",
                  callback=lambda e, m, k=key: results.append((k, e.code() if e else None)))
    assert p.flush(30) == 0
    assert dict(results)[None] == KafkaError.INVALID_RECORD


def test_describe_topic_partitions_pages_through_2000_partitions(raw):
    create(raw, "dtp-big", 2000, exist_ok=True)
    create(raw, "dtp-small", 3, exist_ok=True)
    D = req(DTP)
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        r = raw.call(DTP, 0, topics=[D.TopicRequest(name=n) for n in
                                     ("dtp-small", "dtp-big", "dtp-missing")],
                     response_partition_limit=700, cursor=cursor)
        pages += 1
        for t in r.topics:
            if t.name == "dtp-missing":
                assert t.error_code == 3 and not t.partitions
                continue
            assert t.error_code == 0 and t.topic_id.int != 0
            seen += [(t.name, p.partition_index) for p in t.partitions]
            assert all(p.leader_id >= 0 and p.isr_nodes for p in t.partitions)
        if r.next_cursor is None:
            break
        cursor = D.Cursor(topic_name=r.next_cursor.topic_name,
                          partition_index=r.next_cursor.partition_index)
        assert pages < 10
    assert pages == 3
    assert seen == [("dtp-big", i) for i in range(2000)] + [("dtp-small", i) for i in range(3)]
    # a cursor naming a topic outside the list is a bad request
    r = raw.call(DTP, 0, topics=[D.TopicRequest(name="dtp-small")],
                 response_partition_limit=10,
                 cursor=D.Cursor(topic_name="dtp-big", partition_index=0))
    assert [t.error_code for t in r.topics] == [42]
    # all topics (empty list), the limit capped by the broker's
    r = raw.call(DTP, 0, topics=[], response_partition_limit=5000)
    assert sum(len(t.partitions) for t in r.topics) == 2000
    assert r.next_cursor is not None


@pytest.mark.java
def test_java_admin_describe_topics_pages_with_describe_topic_partitions(shared_broker, raw,
                                                                         java_client):
    """The Java client's Admin.describeTopics (3.9.1) uses DescribeTopicPartitions with a
    partition limit per response and follows the cursor - what Kafka 4.0's
    ``kafka-topics.sh --describe`` runs (no Kafka 4.0 distribution is installable here)."""
    from tests.integration.harness import run_java_client

    create(raw, "dtp-big", 2000, exist_ok=True)
    create(raw, "dtp-small", 3, exist_ok=True)
    r = run_java_client(java_client, "describe-topics", "--bootstrap", shared_broker.bootstrap,
                        "--topic", "dtp-big,dtp-small", "--count", "500", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.lines[-1] == "described 2003"
    parts = [ln.split() for ln in r.lines if ln.startswith("partition ")]
    assert [(p[1], int(p[2])) for p in parts] == \
        [("dtp-big", i) for i in range(2000)] + [("dtp-small", i) for i in range(3)]
    assert all(p[3] == "0" and p[4] == "1" for p in parts)
