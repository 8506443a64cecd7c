"""The data path against a live broker: kafka-python, confluent-kafka and aiokafka produce and
consume (acks 0/1/-1, every codec, keys/headers/null values, a 900 KB record, idempotence),
long-poll fetches, plus raw-protocol checks of what clients rarely exercise (duplicate
idempotent batches, acks=0 failure, legacy message sets, min_bytes / max_wait)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import warnings

import pytest

from protocol import api
from protocol.legacy_records import build_message_set, iter_legacy_messages
from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches_lenient
from tests.integration.raw_client import RawClient

pytestmark = pytest.mark.integration

with warnings.catch_warnings():  # kafka-python 3 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BIG = 900_000


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _expected(n: int):
    """(key, value, headers) of message i; every 4th value is null."""
    return [(b"k%d" % i, None if i % 4 == 3 else b"value-%d" % i, [("h", b"%d" % i)])
            for i in range(n)]


# --------------------------------------------------------------------------- raw client
def _metadata(raw: RawClient, topic: str) -> None:
    """Auto-create `topic` and wait until it has a leader."""
    cls = api.API_KEYS[3].request_cls
    for _ in range(50):
        resp = raw.call(3, 9, cls(topics=[cls.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=True))
        t = resp.topics[0]
        if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} never got a leader")


def _produce_req(topic: str, records, acks: int = 1):
    cls = api.API_KEYS[0].request_cls
    return cls(acks=acks, timeout_ms=5000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.PartitionProduceData(index=0, records=records)])])


def _fetch_req(topic: str, offset: int, *, max_wait=0, min_bytes=1, max_bytes=10_000_000):
    cls = api.API_KEYS[1].request_cls
    return cls(replica_id=-1, max_wait_ms=max_wait, min_bytes=min_bytes, max_bytes=max_bytes,
               isolation_level=0, session_id=0, session_epoch=-1, topics=[cls.FetchTopic(
                   topic=topic, partitions=[cls.FetchPartition(
                       partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def _batch(n=1, pid=-1, epoch=-1, seq=-1) -> bytes:
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for i in range(n):
        b.append(int(time.time() * 1000), b"k", b"v%d" % i)
    return b.build()


@pytest.fixture
def raw(shared_broker):
    c = RawClient(shared_broker)
    yield c
    c.close()


# --------------------------------------------------------------------------- kafka-python
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(shared_broker, codec):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic(f"kp-{codec}")
    msgs = _expected(20)
    for acks in (0, 1, "all"):
        p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks=acks,
                          compression_type=None if codec == "none" else codec,
                          enable_idempotence=acks == "all", max_request_size=2_000_000)
        for k, v, h in msgs:
            p.send(topic, key=k, value=v, headers=h)
        p.flush(timeout=20)
        p.close()
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, max_request_size=2_000_000,
                      compression_type=None if codec == "none" else codec)
    p.send(topic, value=b"B" * BIG).get(timeout=20)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000,
                      max_partition_fetch_bytes=2_000_000, fetch_max_bytes=4_000_000)
    got = list(c)
    c.close()
    assert len(got) == 3 * len(msgs) + 1
    assert [(m.key, m.value, m.headers) for m in got[:20]] == msgs
    assert [m.offset for m in got] == list(range(len(got)))
    assert got[-1].value == b"B" * BIG


def test_kafka_python_offsets_api(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic("kp-offsets")
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    base = int(time.time() * 1000) - 10_000
    for i in range(5):
        p.send(topic, value=b"x", timestamp_ms=base + i * 1000)
    p.flush()
    p.close()
    c = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap)
    tp = TopicPartition(topic, 0)
    assert c.beginning_offsets([tp])[tp] == 0
    assert c.end_offsets([tp])[tp] == 5
    found = c.offsets_for_times({tp: base + 2500})[tp]
    assert found.offset == 3 and found.timestamp == base + 3000
    assert c.offsets_for_times({tp: base + 60_000})[tp] is None
    c.close()


# --------------------------------------------------------------------------- confluent-kafka
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(shared_broker, codec):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic(f"ck-{codec}")
    msgs = _expected(20)
    errors = []
    for acks, idem in (("0", False), ("1", False), ("all", True)):
        p = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": acks,
                      "enable.idempotence": idem, "compression.type": codec,
                      "message.max.bytes": 2_000_000})
        for k, v, h in msgs:
            p.produce(topic, key=k, value=v, headers=h,
                      on_delivery=lambda e, m: e and errors.append(e))
        if acks == "all":
            p.produce(topic, value=b"C" * BIG, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(20) == 0
    assert errors == []
    c = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": topic,
                  "enable.auto.commit": False, "fetch.max.bytes": 4_000_000,
                  "max.partition.fetch.bytes": 2_000_000})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.time() + 20
    while len(got) < 61 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    c.close()
    assert len(got) == 61
    assert [(m.key(), m.value(), m.headers()) for m in got[:20]] == msgs
    assert got[-1].value() == b"C" * BIG


# --------------------------------------------------------------------------- aiokafka
@pytest.mark.parametrize("codec", CODECS)
async def test_aiokafka_round_trip(shared_broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic(f"ak-{codec}")
    msgs = _expected(20)
    for acks, idem in ((0, False), (1, False), ("all", True)):
        p = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, acks=acks,
                             enable_idempotence=idem, max_request_size=2_000_000,
                             compression_type=None if codec == "none" else codec)
        await p.start()
        try:
            for k, v, h in msgs:
                await p.send(topic, key=k, value=v, headers=h)
            if idem:
                await p.send_and_wait(topic, value=b"A" * BIG)
            await p.flush()
        finally:
            await p.stop()
    c = AIOKafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                         auto_offset_reset="earliest", max_partition_fetch_bytes=2_000_000,
                         fetch_max_bytes=4_000_000)
    await c.start()
    got = []
    try:
        async with asyncio.timeout(20):
            while len(got) < 61:
                for batch in (await c.getmany(timeout_ms=500)).values():
                    got.extend(batch)
    finally:
        await c.stop()
    assert [(m.key, m.value, [tuple(x) for x in m.headers]) for m in got[:20]] == \
        [(k, v, h) for k, v, h in msgs]
    assert got[-1].value == b"A" * BIG


async def test_aiokafka_long_poll_returns_within_50ms_of_a_produce(shared_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic("ak-poll")
    p = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    await p.start()
    await p.send_and_wait(topic, b"warm-up")
    c = AIOKafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                         auto_offset_reset="earliest", fetch_max_wait_ms=5000)
    await c.start()
    latencies = []
    try:
        async with asyncio.timeout(30):
            while not await c.getmany(timeout_ms=1000):
                pass
            for _ in range(5):
                async def produce_later():
                    await asyncio.sleep(0.2)
                    sent = time.perf_counter()
                    await p.send_and_wait(topic, b"x")
                    return sent

                task = asyncio.create_task(produce_later())
                while not await c.getmany(timeout_ms=5000):
                    pass
                received = time.perf_counter()
                latencies.append(received - await task)
    finally:
        await c.stop()
        await p.stop()
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.05, latencies


def test_kafka_python_long_poll_returns_quickly(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic("kp-poll")
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    p.send(topic, b"warm-up").get(timeout=10)
    c = KafkaConsumer(topic, bootstrap_servers=shared_broker.bootstrap,
                      auto_offset_reset="earliest", fetch_max_wait_ms=5000)
    deadline = time.time() + 10
    while not c.poll(timeout_ms=1000) and time.time() < deadline:
        pass  # the warm-up record
    sent = []

    def produce_later():
        time.sleep(0.3)
        sent.append(time.perf_counter())
        p.send(topic, b"x").get(timeout=10)

    t = threading.Thread(target=produce_later)
    t.start()
    got = {}
    deadline = time.time() + 10
    while not got and time.time() < deadline:
        got = c.poll(timeout_ms=5000)
    received = time.perf_counter()
    t.join()
    c.close()
    p.close()
    assert got and received - sent[0] < 0.25  # kafka-python polls in one thread: loose bound


# --------------------------------------------------------------------------- raw protocol
def test_empty_partition_fetch_waits_max_wait(raw):
    topic = _topic("raw-wait")
    _metadata(raw, topic)
    start = time.monotonic()
    resp = raw.call(1, 11, _fetch_req(topic, 0, max_wait=300))
    elapsed = time.monotonic() - start
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0 and len(part.records or b"") == 0
    assert 0.28 <= elapsed < 2.0


def test_fetch_min_bytes_is_honoured(raw):
    topic = _topic("raw-minbytes")
    _metadata(raw, topic)
    assert raw.call(0, 9, _produce_req(topic, _batch(1))).responses[0] \
        .partition_responses[0].error_code == 0
    start = time.monotonic()
    resp = raw.call(1, 11, _fetch_req(topic, 0, max_wait=400, min_bytes=1_000_000))
    assert time.monotonic() - start >= 0.38
    assert len(resp.responses[0].partitions[0].records) > 0  # what there is, at the deadline
    start = time.monotonic()
    raw.call(1, 11, _fetch_req(topic, 0, max_wait=5000, min_bytes=1))
    assert time.monotonic() - start < 1.0


def test_idempotent_duplicate_and_out_of_order(raw):
    topic = _topic("raw-idem")
    _metadata(raw, topic)
    init = api.API_KEYS[22].request_cls(transactional_id=None, transaction_timeout_ms=60000,
                                        producer_id=-1, producer_epoch=-1)
    resp = raw.call(22, 4, init)
    assert resp.error_code == 0 and resp.producer_epoch == 0
    pid = resp.producer_id
    raw.call(0, 9, _produce_req(topic, _batch(2)))
    first = raw.call(0, 9, _produce_req(topic, _batch(3, pid, 0, 0), acks=-1))
    again = raw.call(0, 9, _produce_req(topic, _batch(3, pid, 0, 0), acks=-1))
    p1 = first.responses[0].partition_responses[0]
    p2 = again.responses[0].partition_responses[0]
    assert (p1.error_code, p1.base_offset) == (0, 2)
    assert (p2.error_code, p2.base_offset) == (0, 2)  # the duplicate: original offset
    gap = raw.call(0, 9, _produce_req(topic, _batch(1, pid, 0, 7)))
    assert gap.responses[0].partition_responses[0].error_code == 45  # OUT_OF_ORDER_SEQUENCE
    end = raw.call(2, 7, api.API_KEYS[2].request_cls(replica_id=-1, topics=[
        api.API_KEYS[2].request_cls.ListOffsetsTopic(name=topic, partitions=[
            api.API_KEYS[2].request_cls.ListOffsetsPartition(partition_index=0,
                                                             timestamp=-1)])]))
    assert end.topics[0].partitions[0].offset == 5


def test_acks0_failure_closes_connection(shared_broker, raw):
    topic = _topic("raw-acks0")
    _metadata(raw, topic)
    bad = bytearray(_batch(1))
    bad[-1] ^= 0xFF  # CRC mismatch
    other = RawClient(shared_broker)
    try:
        other.send(0, 9, _produce_req(topic, bytes(bad), acks=0))
        with pytest.raises((ConnectionError, OSError)):
            other.call(18, 0, api.API_KEYS[18].request_cls())
    finally:
        other.close()
    # a good acks=0 produce keeps the connection and writes
    raw.send(0, 9, _produce_req(topic, _batch(1), acks=0))
    assert raw.call(18, 0, api.API_KEYS[18].request_cls()).error_code == 0
    resp = raw.call(1, 11, _fetch_req(topic, 0))
    assert resp.responses[0].partitions[0].high_watermark == 1


def test_produce_errors_per_partition(raw):
    topic = _topic("raw-errors")
    _metadata(raw, topic)
    cls = api.API_KEYS[0].request_cls
    bad = bytearray(_batch(1))
    bad[-1] ^= 0xFF
    req = cls(acks=1, timeout_ms=5000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=0, records=bytes(bad)),
            cls.PartitionProduceData(index=7, records=_batch(1))]),
        cls.TopicProduceData(name=_topic("never-created"), partition_data=[
            cls.PartitionProduceData(index=0, records=_batch(1))])])
    resp = raw.call(0, 9, req)
    codes = [[p.error_code for p in t.partition_responses] for t in resp.responses]
    assert codes == [[2, 3], [3]]  # CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION (no auto-create)
    assert raw.call(0, 9, _produce_req(topic, _batch(1), acks=5)).responses[0] \
        .partition_responses[0].error_code == 21  # INVALID_REQUIRED_ACKS


def test_legacy_message_sets_up_and_down_conversion(raw):
    topic = _topic("raw-legacy")
    _metadata(raw, topic)
    now = int(time.time() * 1000)
    for magic, version in ((0, 0), (1, 2)):
        mset = build_message_set(magic, [(0, now, b"k%d" % magic, b"v%d" % magic),
                                         (1, now, None, b"w%d" % magic)])
        resp = raw.call(0, version, _produce_req(topic, mset))
        assert resp.responses[0].partition_responses[0].error_code == 0
    for version, magic in ((0, 0), (3, 1)):
        resp = raw.call(1, version, _fetch_req(topic, 0))
        records = resp.responses[0].partitions[0].records
        msgs = list(iter_legacy_messages(bytes(records)))
        assert [(m.offset, m.key, m.value, m.magic) for m in msgs] == [
            (0, b"k0", b"v0", magic), (1, None, b"w0", magic),
            (2, b"k1", b"v1", magic), (3, None, b"w1", magic)]
    resp = raw.call(1, 11, _fetch_req(topic, 0))  # v4+: the v2 batches as stored
    assert [b.record_count for b in iter_batches_lenient(resp.responses[0].partitions[0]
                                                         .records)] == [2, 2]


def test_fetch_max_bytes_allows_partial_trailing_batch(raw):
    topic = _topic("raw-partial")
    _metadata(raw, topic)
    for _ in range(3):
        raw.call(0, 9, _produce_req(topic, _batch(50)))
    one = len(_batch(50))
    resp = raw.call(1, 11, _fetch_req(topic, 0, max_bytes=one + 100))
    records = resp.responses[0].partitions[0].records
    assert len(records) == one + 100
    assert [b.record_count for b in iter_batches_lenient(records)] == [50]


def test_fetch_sessions_with_topic_ids(raw):
    topic = _topic("raw-session")
    _metadata(raw, topic)
    meta_cls = api.API_KEYS[3].request_cls
    topic_id = raw.call(3, 12, meta_cls(topics=[meta_cls.MetadataRequestTopic(name=topic)])) \
        .topics[0].topic_id
    raw.call(0, 9, _produce_req(topic, _batch(2)))
    cls = api.API_KEYS[1].request_cls

    def fetch(session_id, epoch, offset=None, version=16):
        parts = [] if offset is None else [cls.FetchTopic(topic_id=topic_id, partitions=[
            cls.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])]
        return raw.call(1, version, cls(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                        session_id=session_id, session_epoch=epoch,
                                        topics=parts))

    full = fetch(0, 0, offset=0)
    assert full.error_code == 0 and full.session_id != 0
    assert full.responses[0].topic_id == topic_id
    assert full.responses[0].partitions[0].high_watermark == 2
    sid = full.session_id
    inc = fetch(sid, 1, offset=2)  # moved on: nothing new -> partition left out
    assert inc.error_code == 0 and inc.session_id == sid and inc.responses == []
    raw.call(0, 9, _produce_req(topic, _batch(1)))
    inc = fetch(sid, 2)  # no partitions listed: the session remembers offset 2
    assert inc.responses[0].partitions[0].high_watermark == 3
    assert len(inc.responses[0].partitions[0].records) > 0
    assert fetch(sid, 7).error_code == 71  # INVALID_FETCH_SESSION_EPOCH
    assert fetch(sid + 1, 1).error_code == 70  # FETCH_SESSION_ID_NOT_FOUND
    assert fetch(sid, 3, version=12).error_code == 106  # FETCH_SESSION_TOPIC_ID_ERROR
    unknown = raw.call(1, 13, cls(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                  session_id=0, session_epoch=-1, topics=[cls.FetchTopic(
                                      topic_id=uuid.uuid4(), partitions=[cls.FetchPartition(
                                          partition=0, fetch_offset=0,
                                          partition_max_bytes=100)])]))
    assert unknown.responses[0].partitions[0].error_code == 100  # UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "sigkill"])
def test_data_and_producer_state_survive_restart(broker, hard):
    topic = _topic("restart")
    raw = RawClient(broker)
    _metadata(raw, topic)
    pid = raw.call(22, 4, api.API_KEYS[22].request_cls(
        transactional_id=None, transaction_timeout_ms=60000)).producer_id
    first = raw.call(0, 9, _produce_req(topic, _batch(4, pid, 0, 0), acks=-1))
    assert first.responses[0].partition_responses[0].base_offset == 0
    raw.call(0, 9, _produce_req(topic, _batch(3), acks=-1))
    raw.close()
    broker.restart(hard=hard)
    raw = RawClient(broker)
    try:
        _metadata(raw, topic)
        # the retried batch is still recognised as a duplicate (state rebuilt from the log)
        again = raw.call(0, 9, _produce_req(topic, _batch(4, pid, 0, 0), acks=-1))
        p = again.responses[0].partition_responses[0]
        assert (p.error_code, p.base_offset) == (0, 0)
        nxt = raw.call(0, 9, _produce_req(topic, _batch(1, pid, 0, 4), acks=-1))
        assert nxt.responses[0].partition_responses[0].base_offset == 7
        resp = raw.call(1, 11, _fetch_req(topic, 0))
        part = resp.responses[0].partitions[0]
        assert part.high_watermark == 8
        assert [b.record_count for b in iter_batches_lenient(part.records)] == [4, 3, 1]
        # a new InitProducerId never hands out an id used before the restart
        new_pid = raw.call(22, 4, api.API_KEYS[22].request_cls(
            transactional_id=None, transaction_timeout_ms=60000)).producer_id
        assert new_pid > pid
    finally:
        raw.close()
