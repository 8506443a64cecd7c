"""Transaction version 2 (KIP-890 part 2) in a 3-broker ZooKeeper-mode cluster.

No stock client available here speaks transaction version 2 (librdkafka, kafka-python,
aiokafka and the Java 3.9 client stop at KIP-890 part 1), so `V2Producer` drives it over the
raw protocol with Josef's client exactly as Kafka 4.x's Java producer does once the feature
is finalized: InitProducerId, transactional Produce v12 with no AddPartitionsToTxn, EndTxn v5
taking the bumped producer epoch (and resetting its sequences) from each answer.

One cluster, in order: before the feature is finalized an EndTxn v5 keeps the epoch and a
Produce v12 does not add its partition (today's behaviour); `josef features upgrade`
finalizes `transaction.version` 2; a commit and an abort each bump the epoch; the aborted
transaction's zombie write is refused; the coordinator is SIGKILLed mid-transaction and the
retried EndTxn commits it under the new coordinator with the bumped epoch; a read_committed
confluent-kafka consumer sees exactly the committed records; confluent-kafka's (transaction
version 1) transactional producer and, when the JDK is present, the Java 3.9 client's still
commit and abort with the feature finalized.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from client.connection import KafkaClient
from protocol.errors import ErrorCode as E
from protocol.record_builder import RecordBatchBuilder
from tests.integration.harness import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PROPS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "min.insync.replicas": "2",
    "default.replication.factor": "3",
    "replica.lag.time.max.ms": "3000",
    "zookeeper.session.timeout.ms": "3000",
}
FIND_COORDINATOR, INIT_PRODUCER_ID, PRODUCE, END_TXN, ADD_PARTITIONS = 10, 22, 0, 26, 24
RETRIABLE = {E.NOT_ENOUGH_REPLICAS, E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR,
             E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
             E.NOT_LEADER_OR_FOLLOWER, E.LEADER_NOT_AVAILABLE, E.REQUEST_TIMED_OUT,
             E.NETWORK_EXCEPTION, E.UNKNOWN_TOPIC_OR_PARTITION}


class V2Producer:
    """A transaction version 2 producer over the raw protocol (see the module docstring)."""

    def __init__(self, bootstrap: str, txn_id: str, topic: str) -> None:
        self.bootstrap, self.txn_id, self.topic = bootstrap, txn_id, topic
        self.client = KafkaClient(bootstrap)
        self.pid = self.epoch = -1
        self.seq: dict[int, int] = {}

    def close(self) -> None:
        self.client.close()

    def _retry(self, what: str, call, timeout: float = 60.0):
        """call() -> (error, result); retried on retriable errors and lost connections."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                err, result = call()
            except Exception as e:  # noqa: BLE001 - a broker died: reconnect and retry
                err, result = E.NETWORK_EXCEPTION, repr(e)
                self.client.close()
                try:
                    self.client = KafkaClient(self.bootstrap)
                except Exception:  # noqa: BLE001 - every bootstrap down for now
                    pass
            if err not in RETRIABLE or time.monotonic() > deadline:
                return err, result
            time.sleep(0.3)

    def _coordinator(self) -> int:
        def call():
            r = self.client.request(FIND_COORDINATOR, {"key": self.txn_id, "key_type": 1},
                                    version=3)
            return E(r.error_code), r.node_id
        err, node = self._retry("FindCoordinator", call)
        assert err == E.NONE, err
        self.client.metadata()
        return node

    def _leader(self, partition: int) -> int:
        md = self.client.metadata([self.topic])
        for t in md.topics:
            for p in t.partitions:
                if p.partition_index == partition and p.leader_id >= 0:
                    return p.leader_id
        raise AssertionError(f"no leader for {self.topic}-{partition}")

    def init(self) -> None:
        def call():
            r = self.client.request(INIT_PRODUCER_ID, {
                "transactional_id": self.txn_id, "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1}, version=5, node=self._coordinator())
            return E(r.error_code), (r.producer_id, r.producer_epoch)
        err, (self.pid, self.epoch) = self._retry("InitProducerId", call)
        assert err == E.NONE, err
        self.seq.clear()

    def send(self, partition: int, values: list[bytes], *, epoch: int | None = None,
             seq: int | None = None, retry: bool = True) -> E:
        """One transactional batch (Produce v12, acks=all); the error code."""
        epoch = self.epoch if epoch is None else epoch
        base = self.seq.get(partition, 0) if seq is None else seq
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=epoch, base_sequence=base,
                               is_transactional=True)
        for v in values:
            b.append(int(time.time() * 1000), None, v)
        body = {"transactional_id": self.txn_id, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": self.topic, "partition_data": [
                    {"index": partition, "records": b.build()}]}]}

        def call():
            r = self.client.request(PRODUCE, body, version=12, node=self._leader(partition))
            return E(r.responses[0].partition_responses[0].error_code), None
        err = self._retry("Produce", call)[0] if retry else call()[0]
        if err == E.NONE and seq is None:
            self.seq[partition] = base + len(values)
        return err

    def state(self) -> str:
        """The coordinator's state of the transaction (DescribeTransactions)."""
        r = self.client.request(65, {"transactional_ids": [self.txn_id]}, version=0,
                                node=self._coordinator())
        return r.transaction_states[0].transaction_state

    def end(self, commit: bool) -> tuple[E, int, int]:
        def call():
            r = self.client.request(END_TXN, {
                "transactional_id": self.txn_id, "producer_id": self.pid,
                "producer_epoch": self.epoch, "committed": commit},
                version=5, node=self._coordinator())
            return E(r.error_code), (r.producer_id, r.producer_epoch)
        err, (pid, epoch) = self._retry("EndTxn", call, timeout=120)
        if err == E.NONE and (pid, epoch) != (self.pid, self.epoch):
            self.pid, self.epoch = pid, epoch  # a bumped epoch starts its sequences at 0
            self.seq.clear()
        return err, pid, epoch


def josef(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True,
                          timeout=60, cwd=REPO_ROOT)


def finalized_everywhere(c, level: int) -> bool:
    for b in c.brokers.values():
        if not b.is_running():
            continue
        with KafkaClient(b.bootstrap) as client:
            r = client.request(18, {"client_software_name": "t", "client_software_version": "1"},
                               version=3)
            got = {f.name: f.max_version_level for f in r.finalized_features or ()}
            if got.get("transaction.version", 0) != level:
                return False
    return True


def read_committed(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    out: list[bytes] = []
    deadline = time.monotonic() + 60
    idle_until = None
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            if len(out) >= expected:
                idle_until = idle_until or time.monotonic() + 3  # nothing more arrives
                if time.monotonic() > idle_until:
                    break
            continue
        if m.error() is None:
            out.append(m.value())
    if len(out) < expected:  # say where it stopped: (low, last stable offset) per partition
        print("read_committed watermarks:",
              [c.get_watermark_offsets(TopicPartition(topic, p), 10) for p in range(3)])
    c.close()
    return out


def confluent_transactions(bootstrap: str, topic: str) -> None:
    """A transaction version 1 client (librdkafka): one committed, one aborted."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-tx"})
    p.init_transactions(30)
    for keep in (True, False):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=b"ck-%s-%d" % (b"keep" if keep else b"drop", i), partition=i % 3)
        (p.commit_transaction if keep else p.abort_transaction)(30)


def kafka_python_transactions(bootstrap: str, topic: str) -> None:
    """kafka-python's transactional producer (transaction version 1): one commit, one abort."""
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx")
    p.init_transactions()
    for keep in (True, False):
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=b"kp-%s-%d" % (b"keep" if keep else b"drop", i), partition=i % 3)
        p.commit_transaction() if keep else p.abort_transaction()
    p.close()


def test_transaction_version_2_commits_aborts_fences_and_fails_over(cluster_factory, request):
    from confluent_kafka.admin import AdminClient, NewTopic
    c = cluster_factory(3, props=PROPS)
    bs = c.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("tv2", 3, 3)]).values():
        f.result(30)
    c.wait_for_leaders("tv2", 3)

    # --- before the feature is finalized: behave as today ------------------------------------
    p = V2Producer(bs, "tv2-tx", "tv2")
    request.addfinalizer(p.close)
    p.init()
    assert p.send(0, [b"early"], retry=False) in (E.TRANSACTION_ABORTABLE, E.INVALID_TXN_STATE)
    r = p.client.request(ADD_PARTITIONS, {
        "v3_and_below_transactional_id": "tv2-tx", "v3_and_below_producer_id": p.pid,
        "v3_and_below_producer_epoch": p.epoch,
        "v3_and_below_topics": [{"name": "tv2", "partitions": [0]}]},
        version=3, node=p._coordinator())
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert p.send(0, [b"v1-kept"]) == E.NONE
    epoch0 = p.epoch
    assert p.end(True) == (E.NONE, p.pid, epoch0)  # EndTxn v5, no bump

    # --- finalize transaction.version 2 ----------------------------------------------------------
    out = josef("features", "upgrade", "--bootstrap-server", bs,
                "--feature", "transaction.version=2")
    assert out.returncode == 0, out.stderr
    c.wait_until("transaction.version 2 finalized on every broker",
                 lambda: finalized_everywhere(c, 2), timeout=30)
    described = josef("features", "describe", "--bootstrap-server", bs)
    assert b"transaction.version" in described.stdout and b"FinalizedVersionLevel: 2" in \
        described.stdout, described.stdout

    # --- commit and abort, each bumping the epoch; implicit adds --------------------------------
    for part in range(3):
        assert p.send(part, [b"t1-%d-%d" % (part, i) for i in range(3)]) == E.NONE
    assert p.end(True) == (E.NONE, p.pid, epoch0 + 1)
    assert p.epoch == epoch0 + 1
    assert p.send(1, [b"t2-aborted"]) == E.NONE
    aborted_epoch = p.epoch
    assert p.end(False) == (E.NONE, p.pid, epoch0 + 2)
    # once the abort markers are written, the aborted transaction's zombie retries its
    # write at the old epoch: refused
    c.wait_until("the abort completes", lambda: p.state() == "CompleteAbort", timeout=30)
    zombie = p.send(1, [b"t2-zombie"], epoch=aborted_epoch, seq=1, retry=False)
    assert zombie in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED), zombie

    # --- the coordinator dies mid-transaction ---------------------------------------------------
    for part in range(3):
        assert p.send(part, [b"t3-%d" % part]) == E.NONE
    coordinator = p._coordinator()
    c.kill(coordinator)
    err, pid, epoch = p.end(True)
    assert (err, epoch) == (E.NONE, epoch0 + 3), err
    assert p._coordinator() != coordinator
    assert p.send(2, [b"t4-after-failover"]) == E.NONE
    assert p.end(True)[0] == E.NONE

    # --- what read_committed sees ---------------------------------------------------------------
    expected = {b"v1-kept"} | {b"t1-%d-%d" % (part, i) for part in range(3) for i in range(3)}
    expected |= {b"t3-%d" % part for part in range(3)} | {b"t4-after-failover"}
    got = read_committed(c.bootstrap, "tv2", len(expected))
    assert sorted(got) == sorted(expected)

    # --- transaction version 1 clients keep working with the feature finalized -----------------
    confluent_transactions(c.bootstrap, "tv2")
    kafka_python_transactions(c.bootstrap, "tv2")
    java = None
    try:
        java = request.getfixturevalue("java_client")
    except pytest.skip.Exception:
        pass
    extra = 5 + 4
    if java is not None:
        from tests.integration.harness import run_java_client
        r = run_java_client(java, "txn-produce", "--bootstrap", c.bootstrap, "--topic", "tv2",
                            "--count", "20", "--txn-id", "java-tv2", "--txn-size", "10",
                            "--abort-every", "2", "--partitions", "3")
        assert r.returncode == 0, r.stderr
        extra += 10
    got = read_committed(c.bootstrap, "tv2", len(expected) + extra)
    assert sorted(v for v in got if v.startswith(b"ck-")) == \
        sorted(b"ck-keep-%d" % i for i in range(5))
    assert sorted(v for v in got if v.startswith(b"kp-")) == \
        sorted(b"kp-keep-%d" % i for i in range(4))
    assert len(got) == len(expected) + extra
