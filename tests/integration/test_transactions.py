"""Transactions with stock clients against a live single broker (issue 14).

- confluent-kafka: a transaction over two topics and several partitions commits, the next
  aborts; read_committed consumers see exactly the committed records, read_uncommitted all;
  ListOffsets with read_committed stops at the last stable offset while a transaction is
  open.
- kafka-python: commit and abort, read_committed consumer.
- Zombie fencing: a second producer with the same transactional id fences the first, whose
  commit then fails with PRODUCER_FENCED (librdkafka's fatal _FENCED).
- A producer that begins a transaction and dies leaves the LSO stuck only until its
  transaction timeout; then the coordinator aborts it.
- Restart (clean and SIGKILL) with transactions in flight: coordinator state reloaded, the
  open transaction still commits afterwards, LSO and aborted index correct.

Consume-transform-produce with a killed transform process is in
test_transactions_eos.py; the Java client in test_java_transactions.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from protocol import api
from tests.integration.raw_client import RawClient

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

BROKER_PROPS = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}
LIST_OFFSETS = 2


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    from tests.integration.harness import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("txn_broker"), BROKER_PROPS)
    try:
        b.start()
        yield b
    finally:
        b.stop()


def create_topics(bootstrap: str, *specs: tuple[str, int]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in specs]).values():
        f.result(30)


def producer(bootstrap: str, txn_id: str, **extra):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(30)
    return p


def consume_all(bootstrap: str, topics: list[str], isolation: str, expected: int,
                settle: float = 1.0, timeout: float = 30.0) -> list:
    """Every record of `topics` from the beginning: (topic, partition, key, value)."""
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation,
                  "enable.auto.commit": False})
    c.subscribe(topics)
    got = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append((m.topic(), m.partition(), m.key(), m.value()))
                continue
            if len(got) >= expected:
                quiet_until = quiet_until or time.monotonic() + settle
                if time.monotonic() >= quiet_until:
                    break
    finally:
        c.close()
    return got


def list_offset(broker, topic: str, partition: int, isolation: int) -> int:
    req_cls = api.API_KEYS[LIST_OFFSETS].request_cls
    raw = RawClient(broker)
    try:
        resp = raw.call(LIST_OFFSETS, 7, req_cls(replica_id=-1, isolation_level=isolation,
                                                 topics=[req_cls.ListOffsetsTopic(
                                                     name=topic, partitions=[
                                                         req_cls.ListOffsetsPartition(
                                                             partition_index=partition,
                                                             timestamp=-1)])]))
    finally:
        raw.close()
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def test_confluent_commit_abort_across_topics_and_partitions(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, ("cf-a", 3), ("cf-b", 2))
    p = producer(bs, "cf-tx")
    p.begin_transaction()
    for i in range(30):
        p.produce("cf-a", key=b"%d" % i, value=b"commit-a-%d" % i, partition=i % 3)
    for i in range(10):
        p.produce("cf-b", key=b"%d" % i, value=b"commit-b-%d" % i, partition=i % 2)
    p.commit_transaction(30)

    p.begin_transaction()
    for i in range(12):
        p.produce("cf-a", value=b"abort-a-%d" % i, partition=i % 3)
        p.produce("cf-b", value=b"abort-b-%d" % i, partition=i % 2)
    p.flush(30)  # written, then aborted: read_uncommitted sees them
    # while open, read_committed ListOffsets stops at the transaction's first offset
    assert list_offset(txn_broker, "cf-a", 0, 1) == 10 + 1  # 10 records + commit marker
    assert list_offset(txn_broker, "cf-a", 0, 0) > 11
    p.abort_transaction(30)

    p.begin_transaction()
    p.produce("cf-a", value=b"commit-a-last", partition=0)
    p.commit_transaction(30)

    committed = consume_all(bs, ["cf-a", "cf-b"], "read_committed", 41)
    values = sorted(v for _, _, _, v in committed)
    assert len(committed) == 41
    assert values == sorted([b"commit-a-%d" % i for i in range(30)] +
                            [b"commit-b-%d" % i for i in range(10)] + [b"commit-a-last"])
    everything = consume_all(bs, ["cf-a", "cf-b"], "read_uncommitted", 65)
    assert len(everything) == 65
    assert sum(1 for *_, v in everything if v.startswith(b"abort")) == 24
    assert list_offset(txn_broker, "cf-a", 0, 1) == list_offset(txn_broker, "cf-a", 0, 0)


def test_kafka_python_commit_and_abort(txn_broker):
    from kafka import KafkaConsumer, KafkaProducer
    bs = txn_broker.bootstrap
    create_topics(bs, ("kp-t", 2))
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-tx")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send("kp-t", value=b"keep-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(7):
            p.send("kp-t", value=b"drop-%d" % i, partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send("kp-t", value=b"keep-last", partition=1)
        p.commit_transaction()
    finally:
        p.close()
    c = KafkaConsumer("kp-t", bootstrap_servers=bs, isolation_level="read_committed",
                      auto_offset_reset="earliest", consumer_timeout_ms=2000,
                      group_id="kp-reader")
    try:
        values = sorted(m.value for m in c)
    finally:
        c.close()
    assert values == sorted([b"keep-%d" % i for i in range(20)] + [b"keep-last"])
    assert len(consume_all(bs, ["kp-t"], "read_uncommitted", 28)) == 28


def test_zombie_producer_is_fenced(txn_broker):
    from confluent_kafka import KafkaException
    bs = txn_broker.bootstrap
    create_topics(bs, ("zombie-t", 1))
    old = producer(bs, "zombie-tx")
    old.begin_transaction()
    old.produce("zombie-t", value=b"from-the-zombie")
    old.flush(30)
    new = producer(bs, "zombie-tx")  # fences `old` and aborts its transaction
    new.begin_transaction()
    new.produce("zombie-t", value=b"from-the-new-one")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as e:
        old.produce("zombie-t", value=b"late")
        old.commit_transaction(10)
    err = e.value.args[0]
    assert err.fatal() and "fenced" in err.str().lower(), err
    values = [v for *_, v in consume_all(bs, ["zombie-t"], "read_committed", 1)]
    assert values == [b"from-the-new-one"]


HANGING_PRODUCER = """
import sys, os
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
              "transaction.timeout.ms": int(sys.argv[4])})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce(sys.argv[3], value=b"hanging-%d" % i)
p.flush(30)
print("produced", flush=True)
os._exit(0)  # dies with the transaction open
"""


def start_hanging_producer(bs: str, txn_id: str, topic: str, timeout_ms: int) -> None:
    out = subprocess.run([sys.executable, "-c", HANGING_PRODUCER, bs, txn_id, topic,
                          str(timeout_ms)], capture_output=True, text=True, timeout=60)
    assert "produced" in out.stdout, out.stderr


def test_dead_producer_blocks_the_lso_until_its_timeout(txn_broker):
    bs = txn_broker.bootstrap
    create_topics(bs, ("hang-t", 1))
    p = producer(bs, "hang-live")
    p.begin_transaction()
    p.produce("hang-t", value=b"before")
    p.commit_transaction(30)  # offsets 0 (data) and 1 (marker)
    start_hanging_producer(bs, "hang-dead", "hang-t", 4000)
    started = time.monotonic()
    assert list_offset(txn_broker, "hang-t", 0, 1) == 2  # stuck at the open transaction
    deadline = time.monotonic() + 30
    while list_offset(txn_broker, "hang-t", 0, 1) == 2:
        assert time.monotonic() < deadline, "the coordinator never aborted the transaction"
        time.sleep(0.2)
    assert time.monotonic() - started > 2.0  # not before (most of) the timeout
    assert list_offset(txn_broker, "hang-t", 0, 1) == list_offset(txn_broker, "hang-t", 0, 0)
    values = [v for *_, v in consume_all(bs, ["hang-t"], "read_committed", 1)]
    assert values == [b"before"]


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "sigkill"])
def test_restart_with_transactions_in_flight(broker_factory, hard):
    b = broker_factory(BROKER_PROPS)
    bs = b.bootstrap
    create_topics(bs, ("rs-t", 2))
    p = producer(bs, "rs-tx", **{"transaction.timeout.ms": 60000,
                                 "reconnect.backoff.max.ms": 300})  # back soon after restart
    p.begin_transaction()
    for i in range(6):
        p.produce("rs-t", value=b"aborted-%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(8):
        p.produce("rs-t", value=b"open-%d" % i, partition=i % 2)
    p.flush(30)
    lso_before = list_offset(b, "rs-t", 0, 1)
    if hard:
        b.kill()
    else:
        b.stop()
    b.start()
    assert list_offset(b, "rs-t", 0, 1) == lso_before  # the open transaction holds it
    p.commit_transaction(60)  # the reloaded coordinator finishes it
    values = sorted(v for *_, v in consume_all(bs, ["rs-t"], "read_committed", 8))
    assert values == sorted(b"open-%d" % i for i in range(8))
    assert list_offset(b, "rs-t", 0, 1) == list_offset(b, "rs-t", 0, 0)
    assert len(consume_all(bs, ["rs-t"], "read_uncommitted", 14)) == 14
    kinds = os.listdir(b.log_dir / "rs-t-0")
    assert any(k.endswith(".txnindex") for k in kinds) and any(
        k.endswith(".snapshot") for k in kinds)


def plant_transactional_batch(broker, topic: str, pid: int, start_ms: int) -> int:
    """Write a transactional batch for `pid` with a raw Produce (no transactional id, so no
    coordinator knows the transaction); returns the partition error code."""
    from protocol.record_builder import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    b.append(start_ms, b"k", b"planted")
    cls = api.API_KEYS[0].request_cls
    raw = RawClient(broker)
    try:
        resp = raw.call(0, 9, cls(acks=-1, timeout_ms=5000, topic_data=[cls.TopicProduceData(
            name=topic, partition_data=[cls.PartitionProduceData(index=0,
                                                                  records=b.build())])]))
    finally:
        raw.close()
    return resp.responses[0].partition_responses[0].error_code


def josef(*args: str) -> subprocess.CompletedProcess:
    """`josef ARGS...` in this process (the tools are plain blocking code)."""
    import contextlib
    import io

    from broker.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def table(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("\t")[:-1]] for line in out.splitlines()]


def test_kip890_refuses_an_unverified_transaction(txn_broker):
    create_topics(txn_broker.bootstrap, ("unverified-t", 1))
    assert plant_transactional_batch(txn_broker, "unverified-t", 777777,
                                     int(time.time() * 1000)) == 48  # INVALID_TXN_STATE
    assert list_offset(txn_broker, "unverified-t", 0, 0) == 0


def test_cli_finds_and_aborts_a_hanging_transaction(broker_factory):
    # without KIP-890 verification a transaction the coordinator never heard of can be
    # written: the hanging transaction of KAFKA-12671
    b = broker_factory({**BROKER_PROPS, "transaction.partition.verification.enable": "false"})
    bs = b.bootstrap
    create_topics(bs, ("hanging-t", 1))
    p = producer(bs, "cli-live")
    p.begin_transaction()
    p.produce("hanging-t", value=b"live")
    p.flush(30)
    old_ms = int(time.time() * 1000) - 30 * 60000  # half an hour ago
    assert plant_transactional_batch(b, "hanging-t", 888888, old_ms) == 0
    rows = table(josef("transactions", "--bootstrap-server", bs, "list").stdout)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [r[0] for r in rows[1:]] == ["cli-live"] and rows[1][3] == "Ongoing"
    rows = table(josef("transactions", "--bootstrap-server", bs, "describe",
                       "--transactional-id", "cli-live").stdout)
    assert rows[1][1:5] == ["cli-live", rows[1][2], "0", "Ongoing"]
    assert rows[1][8] == "hanging-t-0"
    rows = table(josef("transactions", "--bootstrap-server", bs, "describe-producers",
                       "--topic", "hanging-t", "--partition", "0").stdout)
    assert sorted(r[5] for r in rows[1:]) == ["0", "1"]  # both transactions are open
    hang = josef("transactions", "--bootstrap-server", bs, "find-hanging", "--topic",
                 "hanging-t")
    rows = table(hang.stdout)
    assert hang.returncode == 0, hang.stderr
    assert rows[0][:6] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                           "CoordinatorEpoch", "StartOffset"]
    assert [r[:6] for r in rows[1:]] == [["hanging-t", "0", "888888", "0", "-1", "1"]]
    assert int(rows[1][7]) >= 29  # Duration(min)
    assert list_offset(b, "hanging-t", 0, 1) == 0
    p.commit_transaction(30)
    assert list_offset(b, "hanging-t", 0, 1) == 1  # still held by the hanging one
    ab = josef("transactions", "--bootstrap-server", bs, "abort", "--topic", "hanging-t",
               "--partition", "0", "--start-offset", "1")
    assert ab.returncode == 0, ab.stderr
    assert list_offset(b, "hanging-t", 0, 1) == list_offset(b, "hanging-t", 0, 0)
    assert table(josef("transactions", "--bootstrap-server", bs, "find-hanging", "--topic",
                       "hanging-t").stdout)[1:] == []
    values = [v for *_, v in consume_all(bs, ["hanging-t"], "read_committed", 1)]
    assert values == [b"live"]
    bad = josef("transactions", "--bootstrap-server", bs, "describe", "--transactional-id",
                "nobody")
    assert bad.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in bad.stderr
