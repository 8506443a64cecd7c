"""Replication with a real ZooKeeper and 3 broker processes: a follower paused with SIGSTOP
leaves the ISR (the leader's AlterPartition after replica.lag.time.max.ms) and rejoins after
SIGCONT; acks=all below min.insync.replicas answers NOT_ENOUGH_REPLICAS until the ISR is
restored; `josef topics --describe` filters; the two leader-epoch scenarios of KIP-101 /
KIP-279 reproduced step by step with SIGKILL/SIGSTOP, ending with identical logs and no
acknowledged record lost."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.integration.cluster import Cluster, ZooKeeperServer
from tests.integration.harness import REPO_ROOT
from tests.integration.replication_helpers import (
    assert_replicas_identical,
    collect_client_garbage,
    consume_all,
    create_topic,
    disk_batches,
    kafka_python_producer,
    record_values,
    start_after_kill,
    wait_isr,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LAG_MS = 2000


@pytest.fixture
def slow_zookeeper(tmp_path):
    """tickTime 2 s: sessions up to 40 s, so a broker paused for a few seconds keeps its
    registration and only the leader's ISR rules act on it."""
    from tests.integration.conftest import _require_zookeeper

    _require_zookeeper()
    zk = ZooKeeperServer(tmp_path / "zk", tick_time_ms=2000)
    zk.start()
    yield zk
    zk.stop()


def _cluster(tmp_path, zk, **props) -> Cluster:
    base = {"replica.lag.time.max.ms": str(LAG_MS), "zookeeper.session.timeout.ms": "30000",
            "replica.fetch.backoff.ms": "200", "unclean.leader.election.enable": "false"}
    base.update(props)
    c = Cluster(tmp_path / "cluster", zk, 3, props=base, session_timeout_ms=30000)
    c.start()
    return c


def josef(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO_ROOT)


def _send(producer, topic, value, partition=0):
    return producer.send(topic, value=value, partition=partition).get(timeout=30)


def test_paused_followers_leave_and_rejoin_isr_and_min_insync(tmp_path, slow_zookeeper):
    from kafka.errors import NotEnoughReplicasAfterAppendError, NotEnoughReplicasError

    cluster = _cluster(tmp_path, slow_zookeeper)
    try:
        ctrl = cluster.wait_for_controller()
        a, b = [i for i in cluster.ids if i != ctrl]
        create_topic(cluster, "isr", {0: [ctrl, a, b]}, {"min.insync.replicas": "2"})
        create_topic(cluster, "orphan", {0: [b]})
        producer = kafka_python_producer(cluster.bootstrap, retries=0, request_timeout_ms=20000)
        for i in range(20):
            _send(producer, "isr", b"before-%d" % i)
        epoch = cluster.partition_state("isr", 0)["leader_epoch"]

        weak = kafka_python_producer(cluster.broker(ctrl).bootstrap, acks=1, retries=0)
        weak.partitions_for("isr")
        cluster.pause(b)
        # a follower at the leader's LEO is in sync however long it is silent (Kafka's
        # rule): the leader must move on for the paused one to fall behind
        _send(weak, "isr", b"while-b-paused")
        st = wait_isr(cluster, "isr", 0, [ctrl, a], timeout=LAG_MS / 1000 + 30)
        # the leader shrank the ISR itself (AlterPartition keeps the leader epoch)
        assert st["leader"] == ctrl and st["leader_epoch"] == epoch
        _send(producer, "isr", b"isr-of-two")  # ISR 2 == min.insync.replicas

        cluster.pause(a)
        _send(weak, "isr", b"while-a-paused")
        wait_isr(cluster, "isr", 0, [ctrl], timeout=LAG_MS / 1000 + 30)
        # ZooKeeper shows the shrink before the leader has AlterPartition's answer: a send in
        # that window is appended and answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka does
        # the same); once the leader applied it, acks=all is refused before the append
        deadline, appended = time.monotonic() + 30, 0
        while True:
            try:
                _send(producer, "isr", b"refused")
            except NotEnoughReplicasError:
                break
            except NotEnoughReplicasAfterAppendError:  # in the log, though not acknowledged
                appended += 1
                assert time.monotonic() < deadline, "the leader never applied the shrink"
                time.sleep(0.2)
                continue
            raise AssertionError("acks=all accepted with the ISR below min.insync.replicas")
        out = josef("topics", "--bootstrap-server", cluster.broker(ctrl).bootstrap,
                    "--describe", "--under-min-isr-partitions")
        assert out.returncode == 0, out.stderr
        assert f"Topic: isr\tPartition: 0\tLeader: {ctrl}\t" in out.stdout
        out = josef("topics", "--bootstrap-server", cluster.broker(ctrl).bootstrap,
                    "--describe", "--under-replicated-partitions")
        assert "Topic: isr\tPartition: 0" in out.stdout and "Topic: orphan" not in out.stdout
        assert "TopicId" not in out.stdout  # partition lines only, as kafka-topics.sh

        cluster.resume(a)
        cluster.resume(b)
        wait_isr(cluster, "isr", 0, [ctrl, a, b], timeout=60)
        _send(producer, "isr", b"after")
        out = josef("topics", "--bootstrap-server", cluster.broker(ctrl).bootstrap,
                    "--describe", "--under-replicated-partitions",
                    "--under-min-isr-partitions")
        assert out.returncode == 0 and out.stdout.strip() == "", out.stdout

        cluster.stop_broker(b)  # the orphan topic's only replica
        cluster.wait_until("orphan offline", lambda: cluster.partition_state(
            "orphan", 0)["leader"] == -1, timeout=90)
        cluster.wait_metadata_converged(["orphan"], timeout=60)
        out = josef("topics", "--bootstrap-server", cluster.broker(ctrl).bootstrap,
                    "--describe", "--unavailable-partitions")
        assert "Topic: orphan\tPartition: 0\tLeader: none" in out.stdout, out.stdout
        producer.close()
        weak.close()
        values = [v for _, _, _, v in consume_all(cluster.bootstrap, "isr", 24 + appended)]
        assert values == [b"before-%d" % i for i in range(20)] + [
            b"while-b-paused", b"isr-of-two", b"while-a-paused"] + [b"refused"] * appended + [
            b"after"]
    finally:
        cluster.stop()
        collect_client_garbage()
    assert_replicas_identical(cluster, "isr", 0, [ctrl, a, b])


def _fast_cluster(cluster_factory, **props) -> Cluster:
    base = {"replica.fetch.backoff.ms": "200", "unclean.leader.election.enable": "false",
            "zookeeper.session.timeout.ms": "4000"}
    base.update(props)
    return cluster_factory(3, props=base)


def _two_replicas(cluster, topic: str):
    """A (leader) and B: the two brokers that are not the controller (so freezing or killing
    them never stalls the controller), a topic on [A, B] allowing unclean elections, and an
    acks=all producer. Returns (A, B, producer)."""
    ctrl = cluster.wait_for_controller()
    a, b = [i for i in cluster.ids if i != ctrl]
    create_topic(cluster, topic, {0: [a, b]}, {
        "min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    return a, b, kafka_python_producer(cluster.bootstrap, retries=0, request_timeout_ms=20000)


def test_kip101_follower_restarting_with_stale_hw_keeps_acknowledged_records(cluster_factory):
    """KIP-101 scenario 1. Follower B has every acknowledged record but a stale high
    watermark (its fetch long-polls for 30 s, its HW checkpoint is never written): killed and
    restarted while the leader A is frozen (SIGSTOP), it must not truncate to its HW; A is
    then killed, B is elected (unclean: A took the ISR with it) and still serves every
    acknowledged record; A comes back as a follower and ends with B's log."""
    cluster = _fast_cluster(cluster_factory, **{
        "replica.fetch.wait.max.ms": "30000",
        "replica.high.watermark.checkpoint.interval.ms": "3600000",
        "replica.lag.time.max.ms": "60000"})
    try:
        a, b, producer = _two_replicas(cluster, "kip101")
        acked = [b"m%d" % i for i in range(10)]
        for v in acked:  # each acknowledged by A and B (acks=all, ISR {A, B})
            _send(producer, "kip101", v)
        producer.close()
        assert cluster.partition_state("kip101", 0)["isr"] in ([a, b], [b, a])

        cluster.kill(b)       # B: every record, stale HW
        cluster.pause(a)      # A frozen: B cannot fetch from it after its restart
        start_after_kill(cluster, b)
        # B applies the controller's decision for the partition (as a follower of the frozen
        # A, or as its new leader once A's session expired): a truncation to its HW would
        # happen right there; its log must still hold all 10 records
        out = cluster.broker(b).out_path
        cluster.wait_until("B follows A or leads", lambda: (
            f"added fetcher to broker {a} for partitions kip101-0" in out.read_text(
                errors="replace") or cluster.partition_state("kip101", 0)["leader"] == b),
            timeout=90)
        cluster.pause(b)
        assert record_values(disk_batches(cluster, b, "kip101", 0)) == acked
        cluster.resume(b)

        cluster.kill(a)
        st = cluster.wait_until("B elected", lambda: (s := cluster.partition_state(
            "kip101", 0)) and s["leader"] == b and s, timeout=120)
        cluster.wait_metadata_converged(["kip101"], timeout=60)
        got = [v for _, _, _, v in consume_all(cluster.broker(b).bootstrap, "kip101", 10)]
        assert got == acked
        assert st["leader_epoch"] >= 1

        start_after_kill(cluster, a)
        st = wait_isr(cluster, "kip101", 0, [a, b], timeout=90)
        # B grew the ISR with AlterPartition saying RECOVERED (KIP-704), whether or not the
        # controller marked its election RECOVERING (unclean)
        assert st.get("leader_recovery_state", 0) == 0
    finally:
        cluster.stop()
        collect_client_garbage()
    batches = assert_replicas_identical(cluster, "kip101", 0, [a, b])
    assert record_values(batches) == acked


def test_kip279_replicas_crashing_together_with_different_tails_converge(cluster_factory):
    """KIP-101 scenario 2 / KIP-279. Leader A holds a tail (m1) its follower B never
    fetched (B frozen; m1 written with acks=1, never acknowledged to an acks=all producer);
    both crash; B comes back first and leads a new epoch, writing m2 at the same offset; A
    comes back as a follower: it must truncate to where the epochs agree and take B's log,
    never keep its own m1 (replica divergence) and never lose B's acknowledged m2."""
    cluster = _fast_cluster(cluster_factory, **{"replica.lag.time.max.ms": "60000"})
    try:
        a, b, producer = _two_replicas(cluster, "kip279")
        for i in range(5):
            _send(producer, "kip279", b"m0-%d" % i)  # acks=all: A and B
        producer.close()
        weak = kafka_python_producer(cluster.broker(a).bootstrap, acks=1, retries=0)
        weak.partitions_for("kip279")  # metadata before B freezes
        cluster.pause(b)
        for i in range(3):
            _send(weak, "kip279", b"m1-%d" % i)  # only A has these
        weak.close()
        assert len(disk_batches(cluster, a, "kip279", 0)) == 8

        cluster.kill(a)
        cluster.kill(b)  # crash together (kill resumes B first, then SIGKILL)
        start_after_kill(cluster, b)
        cluster.wait_until("B leads", lambda: (s := cluster.partition_state(
            "kip279", 0)) and s["leader"] == b, timeout=120)
        cluster.wait_metadata_converged(["kip279"], timeout=60)
        strong = kafka_python_producer(cluster.broker(b).bootstrap, retries=5,
                                       request_timeout_ms=20000)
        for i in range(2):
            _send(strong, "kip279", b"m2-%d" % i)  # acknowledged by B (ISR {B})
        strong.close()

        start_after_kill(cluster, a)
        wait_isr(cluster, "kip279", 0, [a, b], timeout=120)
    finally:
        cluster.stop()
        collect_client_garbage()
    batches = assert_replicas_identical(cluster, "kip279", 0, [a, b])
    assert record_values(batches) == [b"m0-%d" % i for i in range(5)] + \
        [b"m2-%d" % i for i in range(2)]
    epochs = [e for _, _, e, _ in batches]
    assert epochs[:5] == [0] * 5 and epochs[5] > 0
