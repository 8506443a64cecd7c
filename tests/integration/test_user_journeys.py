"""User journeys found by QA: what a Kafka user does with stock clients, each pinned by a test
after a difference from Apache Kafka showed up (see each test's docstring for the bug).

Every test starts its own broker (``broker_factory``) on a 127.0.0.1 ephemeral port, stays
bounded in time, and checks the broker log for tracebacks at the end.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.integration.harness import BrokerProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def admin(broker: BrokerProcess):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create_topic(broker: BrokerProcess, topic: str, partitions: int,
                 config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(broker)
    a.create_topics([NewTopic(topic, partitions, 1, config=config or {})],
                    request_timeout=15)[topic].result(20)


def assert_no_traceback(broker: BrokerProcess) -> None:
    text = broker.log_text()
    assert "Traceback" not in text, broker.log_tail(80)


def allocated_bytes(path: Path) -> int:
    """Bytes the file system really allocated (a preallocated sparse index counts ~0)."""
    return os.stat(path).st_blocks * 512


def test_sigkill_recovery_keeps_preallocated_indexes_sparse(broker_factory):
    """Bug: after SIGKILL, log recovery reset each active segment's indexes by writing zeros
    over the whole preallocated ``segment.index.bytes`` map (10 MiB each), so every partition
    took 20 MiB of real disk and page cache on restart (a 1000-partition broker wrote ~20 GB
    and its RSS grew past 8 GB before it answered). Kafka's reset only moves the position;
    the preallocated files stay sparse."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = broker_factory()
    create_topic(broker, "sparse", 8)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(400):
        p.produce("sparse", value=b"v%d" % i, partition=i % 8)
    assert p.flush(20) == 0
    del p
    broker.kill()
    broker.start()
    dense = {f"{f.parent.name}/{f.name}": allocated_bytes(f) for f in broker.log_dir.glob("sparse-*/*index")
             if allocated_bytes(f) > 1 << 20}
    assert not dense, f"index files made dense by recovery: {dense}"
    # the rebuilt indexes still answer: every record is readable from its offset
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("sparse", i, 25) for i in range(8)])
        got, deadline = 0, time.monotonic() + 20
        while got < 8 * 25 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                assert m.offset() >= 25 and m.value() == b"v%d" % (m.offset() * 8 + m.partition())
                got += 1
        assert got == 8 * 25
    finally:
        c.close()
    assert_no_traceback(broker)


def test_console_producer_auto_creates_a_new_topic(broker_factory):
    """Bug: ``josef console-producer --topic new`` on a broker with
    ``auto.create.topics.enable=true`` (the default) failed with UNKNOWN_TOPIC_OR_PARTITION:
    its Metadata request always said ``allow_auto_topic_creation=false``. Kafka's console
    producer (a KafkaProducer) lets the broker auto-create the topic, waiting through the
    first LEADER_NOT_AVAILABLE answers; with auto-creation off it still fails clearly."""
    import subprocess
    import sys

    broker = broker_factory()
    cmd = [sys.executable, "-m", "broker.cli", "console-producer"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    run = subprocess.run([*cmd, "--bootstrap-server", broker.bootstrap, "--topic", "fresh"],
                         input=b"a\nb\n", capture_output=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr.decode()
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(TopicPartition("fresh", 0), timeout=10) == (0, 2)
    finally:
        c.close()
    off = broker_factory({"auto.create.topics.enable": "false"}, name="noauto")
    run = subprocess.run([*cmd, "--bootstrap-server", off.bootstrap, "--topic", "fresh"],
                         input=b"a\n", capture_output=True, timeout=60, env=env)
    assert run.returncode == 1 and b"UNKNOWN_TOPIC_OR_PARTITION" in run.stderr
    assert_no_traceback(broker)


def test_compacted_topic_refuses_records_without_key(broker_factory):
    """Bug: a topic with ``cleanup.policy=compact`` accepted records with a null key. Kafka's
    LogValidator refuses them ("Compacted topic cannot accept message without key") with
    INVALID_RECORD (87), compressed or not; keyed records and tombstones (null value) are
    accepted, and ``compact,delete`` topics apply the same rule."""
    from confluent_kafka import Producer

    broker = broker_factory()
    create_topic(broker, "compacted", 1, {"cleanup.policy": "compact"})
    create_topic(broker, "both", 1, {"cleanup.policy": "compact,delete"})
    create_topic(broker, "plain", 1)
    results: list[tuple[str, object, object]] = []
    for codec in ("none", "lz4"):
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                      "compression.type": codec, "retries": 0})
        for topic in ("compacted", "both", "plain"):
            for key, value in ((None, b"no key"), (b"k", b"v"), (b"k", None), (b"", b"empty")):
                p.produce(topic, key=key, value=value, callback=lambda e, m, t=topic, k=key:
                          results.append((t, k, e.code() if e else None)))
                assert p.flush(10) == 0
    from confluent_kafka import KafkaError

    for topic, key, err in results:
        want = KafkaError.INVALID_RECORD if key is None and topic != "plain" else None
        assert err == want, (topic, key, err)
    assert_no_traceback(broker)


def test_broker_raises_its_open_files_soft_limit(tmp_path):
    """Bug: started under the common ``ulimit -n 1024`` soft limit (hard limit higher), the
    broker ran out of file descriptors once a few hundred partitions existed (each segment
    holds its .log, .index and .timeindex open, and each mapped index one more): appends
    failed with EMFILE tracebacks and the listener stopped accepting. The JVM running Kafka
    raises the soft limit to the hard limit at start (HotSpot's MaxFDLimit, on by default);
    the broker does the same (and logs it)."""
    import shutil
    import sys

    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"hard open-files limit {hard} leaves nothing to raise")
    broker = BrokerProcess(tmp_path / "b", command=[prlimit, "--nofile=256:", sys.executable,
                                                     "-m", "broker"])
    try:
        broker.start()
        limits = Path(f"/proc/{broker.pid}/limits").read_text()
        soft = next(line.split()[3] for line in limits.splitlines()
                    if line.startswith("Max open files"))
        assert soft != "256", limits
        create_topic(broker, "many", 200)
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        errors: list = []
        for i in range(400):
            p.produce("many", value=b"x", partition=i % 200,
                      callback=lambda e, m: errors.append(e) if e else None)
        assert p.flush(30) == 0 and not errors
        assert "Too many open files" not in broker.log_text()
        assert_no_traceback(broker)
    finally:
        broker.stop()


def test_io_error_in_append_answers_kafka_storage_error(tmp_path):
    """Bug: an OSError while appending answered UNKNOWN_SERVER_ERROR (-1), which the Java
    producer treats as fatal for the record. Kafka turns an IOException in the log into
    KafkaStorageException: KAFKA_STORAGE_ERROR (56), a retriable error. (The error used to be
    an EMFILE on a roll under a tight open-files limit; the log now keeps within any limit,
    so the file size limit makes the segment write fail: EFBIG, CPython ignores SIGXFSZ.)"""
    import shutil
    import sys

    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    broker = BrokerProcess(tmp_path / "b", command=[prlimit, "--fsize=1000000:1000000",
                                                     sys.executable, "-m", "broker"])
    try:
        broker.start()
        create_topic(broker, "big", 1)
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0,
                          max_in_flight_requests_per_connection=1, acks=1)
        failure = None
        try:
            for i in range(4000):
                try:
                    p.send("big", b"%04d" % i + b"x" * 400, partition=0).get(10)
                except Exception as e:  # noqa: BLE001 - the first failure is what we check
                    failure = e
                    break
        finally:
            p.close(5)
        assert isinstance(failure, KafkaStorageError), repr(failure)
    finally:
        broker.stop()


def test_clients_cannot_produce_to_internal_topics(broker_factory):
    """Bug: a client could append to ``__consumer_offsets`` (``kcat -P -K: -t
    __consumer_offsets`` succeeded): anyone could write records the group coordinator then
    loads, e.g. forged committed offsets. Kafka's ReplicaManager refuses client appends to
    internal topics with INVALID_TOPIC_EXCEPTION (17), "Cannot append to internal topic"."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    broker = broker_factory()
    create_topic(broker, "t", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g"})
    try:  # a commit makes the coordinator create __consumer_offsets
        c.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)
    finally:
        c.close()
    errors: list = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    p.produce("__consumer_offsets", key=b"k", value=b"forged", partition=0,
              callback=lambda e, m: errors.append(e))
    assert p.flush(10) == 0
    assert [e and e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    assert_no_traceback(broker)


def test_delete_topic_with_a_249_character_name(broker_factory):
    """Bug: deleting a topic whose name has the maximum legal length (249 characters) failed
    with "File name too long" (a traceback in StopReplica; the partition directory stayed):
    the directory was renamed to ``<topic>-<n>.<uuid>-delete``, 291 characters. Kafka's
    LocalLog.logDeleteDirName shortens the topic part so the name fits 255 bytes."""
    from confluent_kafka.admin import NewTopic

    broker = broker_factory()
    name = "y" * 249
    create_topic(broker, name, 2)
    a = admin(broker)
    a.delete_topics([name], request_timeout=15)[name].result(20)
    deadline = time.monotonic() + 10
    while any(p.name.startswith(name) and not p.name.endswith("-delete")
              for p in broker.log_dir.iterdir()):
        assert time.monotonic() < deadline, sorted(p.name for p in broker.log_dir.iterdir())
        time.sleep(0.1)
    a.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name].result(20)
    assert_no_traceback(broker)
