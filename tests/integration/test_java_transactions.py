"""Transactions with the genuine Apache kafka-clients 3.9.1 jar (tests/java/JosefClient.java):
committed and aborted transactions across partitions with read_committed and
read_uncommitted Java consumers, zombie fencing (ProducerFencedException), and a
consume-transform-produce copy that commits its consumer offsets in the transaction
(sendOffsetsToTransaction with the group metadata: TxnOffsetCommit v3+) and, run again,
copies nothing twice.
"""

from __future__ import annotations

import pytest

from tests.integration.eos_pipeline import produce_input
from tests.integration.harness import run_java_client
from tests.integration.test_transactions import BROKER_PROPS, consume_all, create_topics

pytestmark = [pytest.mark.integration, pytest.mark.java, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def java_txn_broker(tmp_path_factory):
    from tests.integration.harness import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("java_txn"), BROKER_PROPS)
    try:
        b.start()
        yield b
    finally:
        b.stop()


def _keys(result) -> list[str]:
    return [line.split()[2] for line in result.lines if not line.startswith("consumed")]


def test_java_commit_abort_and_isolation(java_client, java_txn_broker):
    bs = java_txn_broker.bootstrap
    create_topics(bs, ("jt", 3))
    r = run_java_client(java_client, "txn-produce", "--bootstrap", bs, "--topic", "jt",
                        "--count", "60", "--txn-id", "java-tx", "--txn-size", "10",
                        "--abort-every", "3", "--partitions", "3")
    assert r.returncode == 0, r.stderr
    assert r.lines.count("aborted-txn 3 10") == 1 and "produced 60" in r.lines
    committed = run_java_client(java_client, "consume", "--bootstrap", bs, "--topic", "jt",
                                "--count", "40", "--from-beginning", "--timeout-ms", "20000",
                                "--prop", "isolation.level=read_committed")
    assert committed.returncode == 0, committed.stderr
    keys = _keys(committed)
    assert sorted(keys) == sorted(f"c{i}" for i in range(60) if (i // 10 + 1) % 3)
    everything = consume_all(bs, ["jt"], "read_uncommitted", 60)
    assert sum(k.startswith(b"a") for _, _, k, _ in everything) == 20


def test_java_zombie_is_fenced(java_client, java_txn_broker):
    bs = java_txn_broker.bootstrap
    create_topics(bs, ("jfence", 1))
    # a zombie's send is refused first (INVALID_PRODUCER_EPOCH, abortable, as in Kafka 2.7+);
    # its abort then meets PRODUCER_FENCED
    r = run_java_client(java_client, "txn-fence", "--bootstrap", bs, "--topic", "jfence",
                        "--count", "1", "--txn-id", "java-fence", "--late-send")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.lines[:2] == ["fenced InvalidProducerEpochException",
                           "abort-fenced ProducerFencedException"], r.stdout


def test_java_consume_transform_produce(java_client, java_txn_broker):
    bs = java_txn_broker.bootstrap
    create_topics(bs, ("jin", 2), ("jout", 2))
    produce_input(bs, "jin", 50)
    r = run_java_client(java_client, "txn-copy", "--bootstrap", bs, "--topic", "jin", "--out",
                        "jout", "--group", "jcopy", "--txn-id", "java-copy", "--count", "50")
    assert r.returncode == 0 and "copied 50" in r.lines, r.stdout + r.stderr
    out = consume_all(bs, ["jout"], "read_committed", 50)
    assert sorted(v for *_, v in out) == sorted(b"%d" % i for i in range(50))
    # the offsets went with the transactions: the group resumes after the copied records
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bs, "group.id": "jcopy"})
    try:
        committed = c.committed([TopicPartition("jin", p) for p in (0, 1)], 30)
    finally:
        c.close()
    assert sum(tp.offset for tp in committed) == 50
