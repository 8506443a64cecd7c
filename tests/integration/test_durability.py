"""Durability across restarts: what a broker acknowledged with acks=all is there after a clean
restart (SIGTERM) and after SIGKILL mid-stream; offsets continue where they stopped; topics
keep their partition counts and topic ids.

The producer is confluent-kafka (librdkafka) with ``acks=all`` and idempotence on, fed from
this process while the broker is killed and restarted underneath it: every record whose
delivery report says "delivered" must later be read back at that exact partition and offset
with its value, and no record may appear twice. (SIGKILL leaves the page cache intact, so an
acknowledged append survives it without fsync; Kafka makes the same trade, relying on
replication rather than ``fsync`` for acknowledged data.)
"""

from __future__ import annotations

import time

import pytest

from tests.integration.harness import BrokerProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(150),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

TOPIC = "durable"
PARTITIONS = 3


def topic_ids(broker: BrokerProcess) -> dict[str, tuple[object, int]]:
    """``{topic: (topic_id, partition count)}`` from a raw Metadata v12 request (internal
    topics such as ``__consumer_offsets``, created when a client first looks up a group
    coordinator, are left out)."""
    from tests.integration.test_metadata_topics import metadata

    return {t.name: (t.topic_id, len(t.partitions)) for t in metadata(broker, 12, None).topics
            if not t.name.startswith("__")}


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=15)[topic].result(20)


def value_of(i: int) -> bytes:
    return b"value-%06d-" % i + bytes((i + j) % 256 for j in range(i % 300))


class AckedProducer:
    """A confluent-kafka producer that records ``(partition, offset)`` of every delivery of
    record ``i`` to :data:`TOPIC` in ``acked`` (other topics: ``acked_other[topic]``)."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Producer

        self.acked: dict[int, tuple[int, int]] = {}
        self.acked_other: dict[str, dict[int, tuple[int, int]]] = {}
        self.failed: dict[tuple[str, int], str] = {}
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500, "compression.type": "lz4",
        })

    def send(self, topic: str, i: int, partitions: int = PARTITIONS) -> None:
        acked = self.acked if topic == TOPIC else self.acked_other.setdefault(topic, {})

        def report(err, msg, i=i):
            if err is None:
                acked[i] = (msg.partition(), msg.offset())
            else:
                self.failed[(topic, i)] = str(err)

        self.producer.produce(topic, value_of(i), key=b"%d" % i, partition=i % partitions,
                              on_delivery=report)
        self.producer.poll(0)

    def flush(self, timeout: float = 60.0) -> None:
        assert self.producer.flush(timeout) == 0, "records still unacknowledged"


def read_partitions(broker: BrokerProcess, topic: str, partitions: int, timeout: float = 30.0):
    """``({(partition, offset): (key, value)}, {partition: high watermark})``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                 for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + timeout
        while len(records) < sum(highs.values()):
            assert time.monotonic() < deadline, (len(records), highs)
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            records[(m.partition(), m.offset())] = (m.key(), m.value())
        return records, highs
    finally:
        c.close()


def check_acked(records, acked: dict[int, tuple[int, int]]) -> None:
    for i, where in acked.items():
        assert where in records, f"acknowledged record {i} at {where} is missing"
        assert records[where] == (b"%d" % i, value_of(i)), (i, where)
    keys = [k for k, _ in records.values()]
    assert len(keys) == len(set(keys)), "a record was stored twice"


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_acknowledged_data_and_topics_survive_restart(broker_factory, hard):
    b = broker_factory({"num.partitions": "2"})
    create_topic(b, TOPIC, PARTITIONS)
    p = AckedProducer(b.bootstrap)
    for i in range(1500):
        p.send(TOPIC, i)
        p.send("durable-auto", i, 2)  # auto-created with num.partitions=2
    p.flush()
    assert not p.failed and len(p.acked) == len(p.acked_other["durable-auto"]) == 1500
    before_ids = topic_ids(b)
    assert before_ids[TOPIC][1] == PARTITIONS and before_ids["durable-auto"][1] == 2
    records, highs = read_partitions(b, TOPIC, PARTITIONS)
    auto_records, _ = read_partitions(b, "durable-auto", 2)

    b.restart(hard=hard)

    assert topic_ids(b) == before_ids
    after, after_highs = read_partitions(b, TOPIC, PARTITIONS)
    assert after == records and after_highs == highs
    check_acked(after, p.acked)
    auto_after, _ = read_partitions(b, "durable-auto", 2)
    assert auto_after == auto_records
    check_acked(auto_after, p.acked_other["durable-auto"])
    # Offsets continue: new records go right after the old ones in every partition.
    p2 = AckedProducer(b.bootstrap)
    for i in range(1500, 1530):
        p2.send(TOPIC, i)
    p2.flush()
    for i, (part, off) in p2.acked.items():
        assert off == highs[part] + (i - 1500) // PARTITIONS
    final, _ = read_partitions(b, TOPIC, PARTITIONS)
    check_acked(final, {**p.acked, **p2.acked})


def test_sigkill_mid_stream_keeps_every_acknowledged_record(broker_factory):
    b = broker_factory()
    create_topic(b, TOPIC, PARTITIONS)
    before_ids = topic_ids(b)
    p = AckedProducer(b.bootstrap)
    total = 3000
    deadline = time.monotonic() + 60
    i = 0
    while len(p.acked) < 1000:  # stream until a good part is acknowledged...
        assert time.monotonic() < deadline, len(p.acked)
        if i < total // 2:
            p.send(TOPIC, i)
            i += 1
        else:
            p.producer.poll(0.05)
    acked_before_kill = dict(p.acked)
    b.kill()  # ...then SIGKILL with records in flight
    for j in range(i, i + 200):  # keep producing while the broker is down
        p.send(TOPIC, j)
    i += 200
    b.start()
    while i < total:
        p.send(TOPIC, i)
        i += 1
    p.flush()
    assert not p.failed, list(p.failed.items())[:5]
    assert len(p.acked) == total
    assert topic_ids(b) == before_ids
    records, highs = read_partitions(b, TOPIC, PARTITIONS)
    check_acked(records, p.acked)
    assert all(p.acked[k] == v for k, v in acked_before_kill.items())
    # idempotent producer, nothing lost, nothing doubled: offsets are dense
    assert sum(highs.values()) == total
    assert sorted(records) == sorted(p.acked.values())
