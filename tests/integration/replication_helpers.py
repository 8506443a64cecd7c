"""Helpers for the replication integration tests: reading a broker's partition log from disk
(raw batches and `josef dump-log`), creating topics with a fixed assignment, and stock-client
producers that report exactly which records were acknowledged."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

from protocol.records import iter_batches
from tests.integration.harness import REPO_ROOT

_POSITION = re.compile(r"\s*position: \d+")


def partition_dir(cluster, broker_id: int, topic: str, partition: int) -> Path:
    return cluster.broker(broker_id).log_dir / f"{topic}-{partition}"


def segment_files(cluster, broker_id: int, topic: str, partition: int) -> list[Path]:
    return sorted(partition_dir(cluster, broker_id, topic, partition).glob("*.log"))


def disk_batches(cluster, broker_id: int, topic: str, partition: int
                 ) -> list[tuple[int, int, int, bytes]]:
    """(base offset, last offset, leader epoch, batch bytes) of every batch in the
    partition's segment files, in order (the broker should be stopped or idle)."""
    out = []
    for f in segment_files(cluster, broker_id, topic, partition):
        data = f.read_bytes()
        out += [(b.base_offset, b.last_offset, b.partition_leader_epoch, bytes(b.buffer))
                for b in iter_batches(data)]
    return out


def assert_replicas_identical(cluster, topic: str, partitions, brokers) -> list:
    """Every broker's log holds the same batches for each of `partitions` (an int or a list):
    the same bytes, and the same `josef dump-log` lines (one dump-log run per broker).
    Returns the batches of the last partition."""
    parts = [partitions] if isinstance(partitions, int) else list(partitions)
    brokers = list(brokers)
    dumps = {b: _dump_all(cluster, b, topic, parts) for b in brokers}
    first = None
    for p in parts:
        first = disk_batches(cluster, brokers[0], topic, p)
        for b in brokers[1:]:
            other = disk_batches(cluster, b, topic, p)
            assert [x[:3] for x in other] == [x[:3] for x in first], \
                f"broker {b} and {brokers[0]} differ for {topic}-{p}"
            assert other == first
    for b in brokers[1:]:
        assert dumps[b] == dumps[brokers[0]], f"dump-log of broker {b} differs"
    return first


def _dump_all(cluster, broker_id: int, topic: str, partitions) -> list[list[str]]:
    """dump-log batch lines per partition (positions dropped), from one dump-log run."""
    files = {p: [str(f) for f in segment_files(cluster, broker_id, topic, p)]
             for p in partitions}
    every = [f for fs in files.values() for f in fs]
    if not every:
        return [[] for _ in partitions]
    res = subprocess.run([sys.executable, "-m", "broker.cli", "dump-log", "--files",
                          ",".join(every)],
                         capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    per_file: dict[str, list[str]] = {}
    current = None
    for line in res.stdout.splitlines():
        if line.startswith("Dumping "):
            current = line[len("Dumping "):].strip()
            per_file[current] = []
        elif line.startswith("baseOffset:") and current is not None:
            per_file[current].append(_POSITION.sub("", line))
    return [[line for f in files[p] for line in per_file.get(f, [])] for p in partitions]


def record_values(batches) -> list[bytes]:
    out = []
    for _, _, _, raw in batches:
        for b in iter_batches(raw):
            out += [r.value for r in b.iter_records()]
    return out


def create_topic(cluster, name: str, assignment: dict[int, list[int]],
                 configs: dict[str, str] | None = None, timeout: float = 60) -> None:
    """CreateTopics with an explicit replica assignment (Java AdminClient semantics through
    kafka-python), then wait until every partition has its first replica as leader and
    brokers agree on the metadata."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic(name, -1, -1, replica_assignments=assignment,
                                      topic_configs=configs or {})])
    finally:
        admin.close()
    cluster.wait_for_leaders(name, len(assignment), timeout=timeout)
    cluster.wait_metadata_converged([name], timeout=timeout)


def wait_isr(cluster, topic: str, partition: int, isr, timeout: float = 60) -> dict:
    want = sorted(isr)
    return cluster.wait_until(f"ISR of {topic}-{partition} == {want}",
                              lambda: (st := cluster.partition_state(topic, partition))
                              and sorted(st["isr"]) == want and st, timeout)


def start_after_kill(cluster, broker_id: int, timeout: float = 60) -> None:
    """Start a SIGKILLed broker once ZooKeeper dropped its old registration (as Kafka, a
    broker cannot register while its previous session's ephemeral node lives)."""
    cluster.wait_until(f"broker {broker_id} deregistered",
                       lambda: broker_id not in cluster.registered_brokers(), timeout)
    cluster.start_broker(broker_id)


def collect_client_garbage() -> None:
    """kafka-python 3 leaves the socket of a connect() refused by a killed broker open until
    garbage collection; collect it here, silently, instead of at an unrelated later test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def kafka_python_producer(bootstrap: str, **kw):
    from kafka import KafkaProducer

    kw.setdefault("acks", "all")
    return KafkaProducer(bootstrap_servers=bootstrap, **kw)


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 120
                ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record, read with confluent-kafka from the
    beginning of every partition (assigned, no consumer group) until `expected` records
    arrived (or the timeout)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    out = []
    try:
        deadline = time.monotonic() + timeout
        parts = None
        while parts is None and time.monotonic() < deadline:
            md = c.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            if t is not None and t.error is None and t.partitions:
                parts = sorted(t.partitions)
        assert parts is not None, f"no metadata for {topic}"
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        while len(out) < expected and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error():
                    continue
                out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out
