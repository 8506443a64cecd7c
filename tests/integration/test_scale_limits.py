"""Resource limits and metadata storms (issue 22), at CI sizes; the 10,000-100,000-partition
figures are `benchmarks/bench_scale.py`'s.

- Under RLIMIT_NOFILE 1,024 (soft and hard: nothing to raise) one broker hosts two topics
  of 400 partitions and acknowledges a record on each, keeps accepting connections, and
  restarts under the same limit (the log keeps at most one descriptor per segment, bounded
  by `storage.descriptor_cache`; before: 3 per partition, 0 of 800 records acknowledged and
  "Log directory startup failed: Too many open files").
- A Metadata request naming 20,000 unknown topics with auto-creation is answered within
  seconds (1,000 created, the rest UNKNOWN_TOPIC_OR_PARTITION: `broker.auto_topic_creation`)
  while another client's produce latency stays under a second (before: 0.7 s for 2,000
  names with the loop blocked throughout; 435 s for 100,000).
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import threading
import time

import pytest

from client.connection import KafkaClient
from protocol.errors import ErrorCode
from protocol.record_builder import RecordBatchBuilder
from tests.integration.harness import BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

METADATA, PRODUCE, CREATE_TOPICS = 3, 0, 19


def _create(client: KafkaClient, name: str, partitions: int) -> int:
    r = client.request(CREATE_TOPICS, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1}],
        "timeout_ms": 60000}, timeout=120)
    return r.topics[0].error_code


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _produce_one_each(bootstrap: str, topics: dict[str, int]) -> list:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    acked, errors = [], []

    def done(err, msg):
        (errors if err else acked).append(err or (msg.topic(), msg.partition()))

    for topic, n in topics.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=i, callback=done)
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:5]
    return acked


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_rlimit_1024_hosts_800_partitions_and_restarts(tmp_path):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    broker = BrokerProcess(tmp_path / "b", command=[prlimit, "--nofile=1024:1024",
                                                     sys.executable, "-m", "broker"])
    try:
        broker.start()
        with open(f"/proc/{broker.pid}/limits") as f:
            limits = f.read()
        assert any(line.startswith("Max open files") and line.split()[3] == "1024"
                   for line in limits.splitlines()), limits
        with KafkaClient(broker.bootstrap, timeout=120) as c:
            assert _create(c, "wide-a", 400) == ErrorCode.NONE
            assert _create(c, "wide-b", 400) == ErrorCode.NONE
        acked = _produce_one_each(broker.bootstrap, {"wide-a": 400, "wide-b": 400})
        assert len(set(acked)) == 800
        assert _open_fds(broker.pid) < 1024
        # still serving every client: new connections are accepted and answered
        clients = [KafkaClient(broker.bootstrap, timeout=30) for _ in range(20)]
        try:
            for c in clients:
                assert len(c.request(METADATA, {"topics": [{"name": "wide-a"}]}).topics[0]
                           .partitions) == 400
        finally:
            for c in clients:
                c.close()
        assert "Too many open files" not in broker.log_text()
        broker.stop()
        broker.start()  # a clean restart under the same limit loads all 800 logs
        acked = _produce_one_each(broker.bootstrap, {"wide-a": 400, "wide-b": 400})
        assert len(set(acked)) == 800
        assert "Too many open files" not in broker.log_text()
    finally:
        broker.stop()


def _batch() -> bytes:
    b = RecordBatchBuilder()
    b.append(int(time.time() * 1000), None, b"x")
    return b.build()


def test_metadata_storm_of_20000_unknown_topics(broker_factory):
    broker = broker_factory()
    with KafkaClient(broker.bootstrap, timeout=60) as admin:
        assert _create(admin, "busy", 1) == ErrorCode.NONE
    latencies: list[float] = []
    stop = threading.Event()

    def produce() -> None:
        data = _batch()
        with KafkaClient(broker.bootstrap, timeout=60) as p:
            while not stop.is_set():
                t0 = time.monotonic()
                r = p.request(PRODUCE, {"acks": 1, "timeout_ms": 10000, "topic_data": [
                    {"name": "busy", "partition_data": [{"index": 0, "records": data}]}]})
                latencies.append(time.monotonic() - t0)
                assert r.responses[0].partition_responses[0].error_code == 0
                time.sleep(0.005)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        while len(latencies) < 5:
            time.sleep(0.01)
        with KafkaClient(broker.bootstrap, timeout=120) as c:
            started = time.monotonic()
            r = c.request(METADATA, {"topics": [{"name": f"storm-{i}"} for i in range(20000)],
                                     "allow_auto_topic_creation": True}, version=9)
            answered = time.monotonic() - started
        time.sleep(0.3)  # the producer keeps going after the answer too
    finally:
        stop.set()
        t.join(30)
    codes = collections.Counter(topic.error_code for topic in r.topics)
    assert len(r.topics) == 20000
    assert codes[ErrorCode.LEADER_NOT_AVAILABLE] == 1000, codes  # created now
    assert codes[ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] == 19000, codes  # the client retries
    assert answered < 20, answered
    assert max(latencies) < 1.0, sorted(latencies)[-5:]
    # the created topics exist and take records
    with KafkaClient(broker.bootstrap, timeout=60) as c:
        deadline = time.monotonic() + 30
        while True:
            m = c.request(METADATA, {"topics": [{"name": "storm-0"}],
                                     "allow_auto_topic_creation": False}, version=9)
            if m.topics[0].error_code == 0 and m.topics[0].partitions[0].leader_id >= 0:
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.1)
        r = c.request(PRODUCE, {"acks": 1, "timeout_ms": 10000, "topic_data": [
            {"name": "storm-0", "partition_data": [{"index": 0, "records": _batch()}]}]})
        assert r.responses[0].partition_responses[0].error_code == 0
