"""KIP-848 consumer groups with stock clients: confluent-kafka members using
``group.protocol=consumer`` (librdkafka 2.12+), each in its own process so one can be killed
for real; regex subscriptions; a classic group moved to the consumer protocol one member at
a time; ConsumerGroupDescribe / ListGroups seen through the Admin API; groups kept across a
broker restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.harness import REPO_ROOT

pytestmark = pytest.mark.integration

FAST_GROUPS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "3",
}


class Worker:
    """One tests/integration/group_worker.py process; its output lines are collected."""

    def __init__(self, broker, group: str, protocol: str, topic: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_worker", broker.bootstrap, group,
             protocol, topic], cwd=REPO_ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def records(self) -> list[str]:
        """Values whose offset this member committed."""
        return [ln.split()[3] for ln in list(self.lines) if len(ln.split()) == 4
                and ln.split()[1].isdigit()]

    def uncommitted(self) -> list[str]:
        return [ln.split()[4] for ln in list(self.lines) if ln.startswith("uncommitted ")]

    def stop(self, sig=signal.SIGTERM, timeout=30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.proc.stdout.close()


@pytest.fixture
def workers():
    made: list[Worker] = []
    yield made
    for w in made:
        w.stop(signal.SIGKILL)


def produce(broker, topic: str, values) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=str(v).encode(), key=str(v).encode())
    assert p.flush(30) == 0


def wait_all(ws, expected: int, timeout: float = 90) -> tuple[list[str], list[str]]:
    """(committed, uncommitted) record values once ``expected`` distinct ones were read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = {r for w in ws for r in w.records() + w.uncommitted()}
        if len(seen) >= expected:
            time.sleep(1.0)  # let duplicates, if any, show up
            return ([r for w in ws for r in w.records()],
                    [r for w in ws for r in w.uncommitted()])
        time.sleep(0.2)
    seen = {r for w in ws for r in w.records() + w.uncommitted()}
    raise AssertionError(f"{len(seen)} of {expected} records consumed; "
                         f"{[w.lines[-5:] for w in ws]}")


def create(broker, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def assert_exactly_once(result: tuple[list[str], list[str]], n: int) -> None:
    """Every record was read (none lost) and no record whose offset was committed was read
    again (a record whose commit failed may be read again: at-least-once)."""
    committed, uncommitted = result
    dups = sorted({v for v in committed if committed.count(v) > 1}, key=int)
    assert not dups, f"re-read after commit: {dups[:20]}"
    assert sorted(set(map(int, committed + uncommitted))) == list(range(n))


def test_three_members_share_six_partitions_through_joins_leaves_and_a_kill(
        broker_factory, workers):
    broker = broker_factory(FAST_GROUPS)
    create(broker, "kip848", 6)
    w1 = Worker(broker, "g1", "consumer", "kip848")
    workers.append(w1)
    produce(broker, "kip848", range(0, 200))
    wait_all(workers, 200)
    w2 = Worker(broker, "g1", "consumer", "kip848")
    workers.append(w2)
    produce(broker, "kip848", range(200, 400))
    w3 = Worker(broker, "g1", "consumer", "kip848")
    workers.append(w3)
    produce(broker, "kip848", range(400, 600))
    wait_all(workers, 600)
    # everyone got a share once the group settled
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: futures need it alive
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        desc = admin.describe_consumer_groups(["g1"])["g1"].result(20)
        sizes = sorted(len(m.assignment.topic_partitions) for m in desc.members)
        if sizes == [2, 2, 2] and str(desc.state).endswith("STABLE"):
            break
        time.sleep(0.5)
    assert sizes == [2, 2, 2], desc
    assert str(desc.type).endswith("CONSUMER")
    w2.stop(signal.SIGKILL)  # crash: its partitions move after the session timeout
    produce(broker, "kip848", range(600, 800))
    wait_all(workers, 800)
    w1.stop(signal.SIGTERM)  # clean leave
    produce(broker, "kip848", range(800, 1000))
    got = wait_all(workers, 1000)
    assert_exactly_once(got, 1000)
    assert "Traceback" not in broker.log_text(), broker.log_tail(60)


def test_regex_subscription_picks_up_a_topic_created_later(broker_factory, workers):
    broker = broker_factory(FAST_GROUPS)
    create(broker, "rx-first", 2)
    w = Worker(broker, "g-rx", "consumer", "^rx-.*")
    workers.append(w)
    produce(broker, "rx-first", range(0, 20))
    wait_all(workers, 20)
    create(broker, "rx-later", 3)
    create(broker, "other", 1)
    produce(broker, "rx-later", range(20, 50))
    produce(broker, "other", range(1000, 1010))
    got = wait_all(workers, 50)
    assert_exactly_once(got, 50)


def test_classic_group_moves_to_the_consumer_protocol_one_member_at_a_time(
        broker_factory, workers):
    """Two classic members; then one consumer-protocol member joins (the group is upgraded
    online), the classic members are replaced one by one. Committed offsets carry over:
    nothing is lost, nothing re-read."""
    from confluent_kafka.admin import AdminClient

    broker = broker_factory({**FAST_GROUPS, "group.min.session.timeout.ms": "1000"})
    create(broker, "mig", 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    c1 = Worker(broker, "g-mig", "classic", "mig")
    c2 = Worker(broker, "g-mig", "classic", "mig")
    workers += [c1, c2]
    produce(broker, "mig", range(0, 200))
    wait_all(workers, 200)

    def group_type():
        listed = admin.list_consumer_groups().result(20)
        return {g.group_id: str(g.type) for g in listed.valid}.get("g-mig")

    assert group_type().endswith("CLASSIC")
    n1 = Worker(broker, "g-mig", "consumer", "mig")
    workers.append(n1)
    produce(broker, "mig", range(200, 400))
    wait_all(workers, 400)
    deadline = time.monotonic() + 30
    while not group_type().endswith("CONSUMER") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert group_type().endswith("CONSUMER"), (n1.lines[-10:], broker.log_tail(30))
    c1.stop()
    produce(broker, "mig", range(400, 600))
    wait_all(workers, 600)
    n2 = Worker(broker, "g-mig", "consumer", "mig")
    workers.append(n2)
    c2.stop()
    produce(broker, "mig", range(600, 800))
    got = wait_all(workers, 800)
    assert_exactly_once(got, 800)
    desc = admin.describe_consumer_groups(["g-mig"])["g-mig"].result(20)
    assert len(desc.members) == 2
    assert "Traceback" not in broker.log_text(), broker.log_tail(60)


def test_consumer_group_survives_a_broker_restart(broker_factory, workers):
    broker = broker_factory(FAST_GROUPS)
    create(broker, "persist", 3)
    w = Worker(broker, "g-p", "consumer", "persist")
    workers.append(w)
    produce(broker, "persist", range(0, 100))
    wait_all(workers, 100)
    w.stop()
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    before = admin.describe_consumer_groups(["g-p"])["g-p"].result(20)
    broker.restart()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert "g-p" in {g.group_id for g in listed.valid}
    after = admin.describe_consumer_groups(["g-p"])["g-p"].result(20)
    assert str(after.type).endswith("CONSUMER") and str(before.type).endswith("CONSUMER")
    w2 = Worker(broker, "g-p", "consumer", "persist")
    workers.append(w2)
    produce(broker, "persist", range(100, 150))
    got, _ = wait_all([w2], 50)
    assert sorted(map(int, got)) == list(range(100, 150))  # committed offsets were kept
    # josef consumer-groups sees the KIP-848 group and its members' partitions
    josef = [sys.executable, "-m", "broker.cli", "consumer-groups", "--bootstrap-server",
             broker.bootstrap]
    out = subprocess.run([*josef, "--list"], capture_output=True, text=True, timeout=60)
    assert "g-p" in out.stdout.split(), out.stderr
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run([*josef, "--describe", "--group", "g-p"], capture_output=True,
                             text=True, timeout=60)
        rows = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("g-p ")]
        if len(rows) == 3 and all(r[6] != "-" for r in rows) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [(r[1], r[2]) for r in rows] == [("persist", str(p)) for p in range(3)], out.stdout
    assert all(r[3] == r[4] and r[5] == "0" and r[6] != "-" for r in rows), out.stdout


@pytest.mark.java
def test_java_client_with_the_consumer_protocol(broker_factory, java_client):
    """The Apache Java client 3.9.1 with ``group.protocol=consumer`` (its AsyncKafkaConsumer:
    ConsumerGroupHeartbeat v0, OffsetCommit/OffsetFetch v9 with member epochs). Two runs of
    the same group: the second starts from the first one's committed offsets."""
    from tests.integration.harness import run_java_client

    broker = broker_factory(FAST_GROUPS)
    create(broker, "java848", 3)
    produce(broker, "java848", range(0, 30))
    args = ["--bootstrap", broker.bootstrap, "--topic", "java848", "--group", "gj",
            "--from-beginning", "--timeout-ms", "60000", "--prop", "group.protocol=consumer"]
    r = run_java_client(java_client, "consume", *args, "--count", "30", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.lines[-1] == "consumed 30"
    produce(broker, "java848", range(30, 40))
    r = run_java_client(java_client, "consume", *args, "--count", "10", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.lines[-1] == "consumed 10"
    assert sorted(int(ln.split()[2]) for ln in r.lines[:-1]) == list(range(30, 40))
    assert "Traceback" not in broker.log_text(), broker.log_tail(60)
