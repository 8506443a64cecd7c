"""Share groups (KIP-932) end to end with confluent-kafka's ShareConsumer: three consumers on
one partition (ACCEPT exactly once, RELEASE redelivered with delivery count + 1, REJECT never
redelivered and dead-lettered), a consumer SIGKILLed while holding records (redelivered after
the lock duration), the delivery-count limit with redelivery backoff (dead-lettered once,
never redelivered before its backoff), a broker SIGKILLed and restarted mid-stream (no
acknowledged record redelivered, none lost), ``josef share-groups`` and
``share.isolation.level`` (aborted transactions).

One broker for the module, with the share bounds lowered so locks and sessions can be short
(``group.share.min.record.lock.duration.ms=1000``). Workers are subprocesses
(``tests/integration/share_worker.py``) printing JSON lines; a record counts as acknowledged
once its worker printed the "acked" line, i.e. after the broker answered the commit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from tests.integration.harness import REPO_ROOT, BrokerProcess

pytestmark = [pytest.mark.integration]

ACCEPT, RELEASE, REJECT = 1, 2, 3
PROPS = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.min.heartbeat.interval.ms": "1000",
}


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("share_broker"), PROPS)
    try:
        b.start()
        yield b
    finally:
        b.stop()


# ----------------------------------------------------------------- helpers
def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1) -> None:
    from confluent_kafka.admin import NewTopic
    admin = _admin(bootstrap)  # kept alive until the futures are done
    for f in admin.create_topics([NewTopic(topic, partitions, rf)]).values():
        f.result(30)


def set_group_configs(bootstrap: str, group: str, **configs: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    entries = [ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin = _admin(bootstrap)
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def produce(bootstrap: str, topic: str, values, *, pause: float = 0.0, chunk: int = 0,
            partition: int | None = None) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "enable.idempotence": True})
    extra = {} if partition is None else {"partition": partition}
    for i, v in enumerate(values):
        p.produce(topic, str(v).encode(), key=f"k{v}".encode(), headers=[("origin", b"test")],
                  **extra)
        if chunk and (i + 1) % chunk == 0:  # one RecordBatch per chunk
            p.flush(30)
            time.sleep(pause)
    assert p.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(out) < expected:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m)
    # a short grace period shows duplicates, if any
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and not m.error():
            out.append(m)
    c.close()
    return out


class Worker:
    """A share_worker.py subprocess; its JSON lines are parsed on demand."""

    def __init__(self, tmp_path, name: str, bootstrap: str, group: str, topic: str, *args: str):
        self.out = tmp_path / f"{name}.jsonl"
        self.name = name
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
        with open(self.out, "w") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.share_worker", bootstrap, group,
                 topic, *args], stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                start_new_session=True)

    def events(self) -> list[dict]:
        out = []
        for line in self.out.read_text().splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
        return out

    def got(self) -> list[dict]:
        return [e for e in self.events() if e["e"] == "got"]

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def wait_until(what: str, cond, timeout: float = 60.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = cond()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def ledger(workers: list[Worker]) -> tuple[dict, dict]:
    """value -> ordered [(t, event, worker, detail)], and value -> acked types."""
    history: dict[int, list] = defaultdict(list)
    acked: dict[int, list[int]] = defaultdict(list)
    for w in workers:
        for e in w.events():
            if e["e"] == "got":
                history[e["v"]].append((e["t"], "got", w.name, e["dc"]))
            elif e["e"] == "acked":
                for v, kind in e["vs"]:
                    history[v].append((e["t"], "acked", w.name, kind))
                    acked[v].append(kind)
    for h in history.values():
        h.sort()
    return history, acked


def assert_no_delivery_after_final_ack(history: dict) -> None:
    """No record is handed out again once an ACCEPT or REJECT of it was answered."""
    for v, h in history.items():
        final = [t for t, ev, _, kind in h if ev == "acked" and kind in (ACCEPT, REJECT)]
        if final:
            again = [x for x in h if x[1] == "got" and x[0] > final[0]]
            assert not again, (v, h)


# ----------------------------------------------------------------- tests
def test_three_consumers_share_one_partition(share_broker, tmp_path):
    bs, topic, group, dlq = share_broker.bootstrap, "sg-three", "sg-three", "sg-three-dlq"
    n = 600
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest",
                      **{"errors.deadletterqueue.topic.name": dlq})
    workers = [Worker(tmp_path, f"w{i}", bs, group, topic, "--reject-mod", "10:3",
                      "--release-once", "10:7", "--sleep-ms", "2", "--seconds", "60")
               for i in range(3)]
    wait_until("workers subscribed", lambda: all(w.events() for w in workers), 30)
    produce(bs, topic, range(n), pause=0.05, chunk=20)
    rejected = {v for v in range(n) if v % 10 == 3}
    released = {v for v in range(n) if v % 10 == 7}

    def settled():
        _, acked = ledger(workers)
        return all(ACCEPT in acked.get(v, ()) for v in set(range(n)) - rejected) and \
            all(REJECT in acked.get(v, ()) for v in rejected)

    wait_until("every record accepted or rejected", settled, 60)
    for w in workers:
        w.kill()
    history, acked = ledger(workers)
    assert_no_delivery_after_final_ack(history)
    for v in range(n):
        kinds = acked[v]
        if v in rejected:
            assert kinds.count(REJECT) == 1 and ACCEPT not in kinds, (v, history[v])
        else:
            assert kinds.count(ACCEPT) == 1, (v, history[v])  # accepted exactly once
    for v in released:  # RELEASE -> delivered again with delivery count + 1
        counts = [dc for _, ev, _, dc in history[v] if ev == "got"]
        assert counts[:2] == [1, 2], (v, history[v])
    for v in rejected:  # REJECT -> never delivered again
        assert [ev for _, ev, _, _ in history[v]].count("got") == 1, (v, history[v])
    served = [w.name for w in workers if w.got()]
    assert len(served) >= 2, served
    letters = read_all(bs, dlq, len(rejected))
    assert sorted(int(m.value()) for m in letters) == sorted(rejected)  # exactly once
    h = dict(letters[0].headers())
    v = int(letters[0].value())
    assert letters[0].key() == f"k{v}".encode() and h["origin"] == b"test"
    assert h["__dlq.errors.topic"] == topic.encode() and h["__dlq.errors.reason"] == b"REJECTED"
    assert h["__dlq.errors.group.id"] == group.encode()
    assert h["__dlq.errors.offset"] == str(v).encode()  # value == offset in this topic


def test_killed_consumer_records_come_back_after_the_lock(share_broker, tmp_path):
    bs, topic, group = share_broker.bootstrap, "sg-kill", "sg-kill"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest",
                      share_record_lock_duration_ms="2500")
    produce(bs, topic, range(20))
    holder = Worker(tmp_path, "holder", bs, group, topic, "--hold")
    wait_until("holder got everything", lambda: len(holder.got()) >= 20, 30)
    acquired_at = min(e["t"] for e in holder.got())
    holder.kill()  # SIGKILL while holding 20 acquired records
    taker = Worker(tmp_path, "taker", bs, group, topic, "--seconds", "30")
    wait_until("redelivered", lambda: len({e["v"] for e in taker.got()}) >= 20, 30)
    taker.kill()
    got = taker.got()
    assert {e["v"] for e in got} == set(range(20))
    assert all(e["dc"] == 2 for e in got), got[:3]
    assert min(e["t"] for e in got) - acquired_at >= 2.5 - 0.3  # not before the lock expired


def test_delivery_limit_dead_letters_and_backoff(share_broker, tmp_path):
    bs, topic, group, dlq = share_broker.bootstrap, "sg-limit", "sg-limit", "sg-limit-dlq"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest",
                      share_redelivery_backoff_ms="200", share_redelivery_backoff_max_ms="400",
                      **{"errors.deadletterqueue.topic.name": dlq})
    produce(bs, topic, range(10))
    w = Worker(tmp_path, "poison", bs, group, topic, "--release-values", "4", "--seconds", "30")

    def done():
        history, _ = ledger([w])
        return sum(1 for x in history.get(4, ()) if x[1] == "acked") >= 5

    wait_until("five deliveries of the poison record", done, 30)
    time.sleep(1.5)  # it must not come back, even after the longest backoff
    w.kill()
    history, acked = ledger([w])
    deliveries = [(t, dc) for t, ev, _, dc in history[4] if ev == "got"]
    assert [dc for _, dc in deliveries] == [1, 2, 3, 4, 5]  # group.share.delivery.count.limit
    releases = [t for t, ev, _, _ in history[4] if ev == "acked"]
    for i in range(1, 5):  # each release -> Delayed for min(200 * 2^(n-1), 400) ms
        backoff = min(200 * 2 ** (i - 1), 400) / 1000
        assert deliveries[i][0] - releases[i - 1] >= backoff - 0.05, (i, deliveries, releases)
    for v in range(10):
        if v != 4:
            assert acked[v] == [ACCEPT]
    letters = read_all(bs, dlq, 1)
    assert [int(m.value()) for m in letters] == [4]
    h = dict(letters[0].headers())
    assert h["__dlq.errors.reason"] == b"DELIVERY_COUNT_LIMIT_REACHED"
    assert h["__dlq.errors.delivery.count"] == b"5"


def test_broker_killed_and_restarted_mid_stream(tmp_path):
    """A broker SIGKILLed while two consumers acknowledge: after the restart the share state
    is reloaded from __share_group_state; nothing acknowledged comes back, nothing is lost."""
    b = BrokerProcess(tmp_path / "broker", PROPS)
    b.start()
    try:
        bs, topic, group = b.bootstrap, "sg-restart", "sg-restart"
        n = 900
        create_topic(bs, topic)
        set_group_configs(bs, group, share_auto_offset_reset="earliest",
                          share_record_lock_duration_ms="3000")
        produce(bs, topic, range(n), chunk=10)
        workers = [Worker(tmp_path, f"r{i}", bs, group, topic, "--sleep-ms", "3",
                          "--max-records", "50", "--seconds", "90") for i in range(2)]

        def accepted():
            _, acked = ledger(workers)
            return {v for v, kinds in acked.items() if ACCEPT in kinds}

        wait_until("some progress", lambda: len(accepted()) >= 250, 40)
        b.kill()
        b.start()
        wait_until("all accepted after the restart", lambda: len(accepted()) >= n, 80)
        for w in workers:
            w.kill()
        history, acked = ledger(workers)
        assert_no_delivery_after_final_ack(history)
        assert set(acked) == set(range(n))
        dup = {v: k for v, k in acked.items() if k.count(ACCEPT) > 1}
        assert not dup, list(dup.items())[:5]
    finally:
        b.stop()


def test_share_groups_tool(share_broker, tmp_path):
    bs, topic, group = share_broker.bootstrap, "sg-tool", "sg-tool"
    create_topic(bs, topic)
    set_group_configs(bs, group, share_auto_offset_reset="earliest",
                      share_session_timeout_ms="6000", share_heartbeat_interval_ms="1000")
    produce(bs, topic, range(50))
    w = Worker(tmp_path, "tool", bs, group, topic, "--seconds", "60")
    wait_until("consumed", lambda: len(w.got()) >= 50, 30)

    def josef(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "broker.cli", "share-groups",
                               "--bootstrap-server", bs, *args], capture_output=True,
                              text=True, cwd=REPO_ROOT, timeout=60)

    r = josef("--list")
    assert group in r.stdout.split(), r
    r = josef("--describe", "--group", group, "--members")
    assert "CONSUMER-ID" in r.stdout and f"{topic}:0" in r.stdout, r
    r = josef("--describe", "--group", group, "--state")
    assert "Stable" in r.stdout, r
    r = josef("--describe", "--group", group)
    row = next(line.split() for line in r.stdout.splitlines() if line.startswith(group))
    assert row[:3] == [group, topic, "0"] and row[4] == "50" and row[5] == "0", r.stdout
    r = josef("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
              "--execute")
    assert r.returncode == 1 and "not empty" in r.stderr, r  # members are still there
    w.kill()
    r = josef("--delete", "--group", group)
    assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stdout, r
    # the killed member's session times out (6 s), then the group can be reset and deleted
    wait_until("group empty", lambda: "Empty" in josef("--describe", "--group", group,
                                                       "--state").stdout, 30, 1.0)
    r = josef("--reset-offsets", "--group", group, "--topic", topic, "--to-offset", "10",
              "--execute")
    assert r.returncode == 0 and "10" in r.stdout.split(), r
    r = josef("--describe", "--group", group)
    row = next(line.split() for line in r.stdout.splitlines() if line.startswith(group))
    assert row[4] == "10" and row[5] == "40", r.stdout
    w2 = Worker(tmp_path, "tool2", bs, group, topic, "--seconds", "30")
    wait_until("redelivered from 10", lambda: len(w2.got()) >= 40, 30)
    w2.kill()
    assert sorted(e["v"] for e in w2.got())[:1] == [10]
    r = josef("--delete-offsets", "--group", group, "--topic", topic)
    assert "Error: GROUP_SUBSCRIBED_TO_TOPIC" in r.stdout or "Successful" in r.stdout, r


def test_isolation_levels(share_broker):
    """share.isolation.level: read_committed stops at the LSO and never hands out aborted
    records; read_uncommitted delivers them too; transaction markers are never delivered."""
    from confluent_kafka import Producer, ShareConsumer

    bs, topic = share_broker.bootstrap, "sg-txn"
    create_topic(bs, topic)
    for group, level in (("sg-rc", "read_committed"), ("sg-ru", "read_uncommitted")):
        set_group_configs(bs, group, share_auto_offset_reset="earliest",
                          share_isolation_level=level)
    p = Producer({"bootstrap.servers": bs, "transactional.id": "sg-txn"})
    p.init_transactions()
    for prefix, n, commit in (("c", 5, True), ("a", 5, False), ("d", 3, True)):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, f"{prefix}{i}".encode())
        p.flush(30)  # in the log before the marker
        p.commit_transaction() if commit else p.abort_transaction()
    committed = [f"c{i}" for i in range(5)] + [f"d{i}" for i in range(3)]
    for group, expected in (("sg-rc", committed),
                            ("sg-ru", committed + [f"a{i}" for i in range(5)])):
        c = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
        c.subscribe([topic])
        got: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(got) < len(expected):
            got += [m.value().decode() for m in c.poll(0.5) or [] if not m.error()]
        for _ in range(2):  # nothing more comes
            got += [m.value().decode() for m in c.poll(0.5) or [] if not m.error()]
        c.close()
        assert sorted(got) == sorted(expected), group
