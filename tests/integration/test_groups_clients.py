"""Consumer groups with stock clients against a live broker.

- 3 kafka-python + 3 confluent-kafka + 3 aiokafka consumers share a 6-partition topic while
  members join and leave: every record is consumed exactly once across the group (each
  consumer commits what it processed before the next poll and on revocation).
- A member killed with SIGKILL (no LeaveGroup) is evicted after its session timeout; its
  partitions go to the survivor.
- cooperative-sticky (confluent-kafka) rebalances incrementally: the first member only ever
  gives up the partitions that move.
- A static member (group.instance.id) restarts within its session timeout without a
  rebalance: the other member sees no revocation and it gets its partitions back.
- kafka-python and confluent-kafka in one group split the partitions.

Each consumer runs in its own process (this file is also the worker script: ``python
test_groups_clients.py KIND BOOTSTRAP GROUP TOPIC CLIENT_ID [k=v ...]``) printing one line per
event: ``READY``, ``ASSIGN p,p``, ``REVOKE p,p``, ``R partition offset``. SIGTERM closes the
consumer cleanly (LeaveGroup for dynamic members).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import pytest

TOPIC_PARTITIONS = 6
BROKER_PROPS = {"group.min.session.timeout.ms": "1000", "group.initial.rebalance.delay.ms": "0"}


# ----- worker side (runs in a subprocess) ------------------------------------------------------

def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _parts(tps) -> str:
    return ",".join(str(p) for p in sorted(tp.partition for tp in tps))


def _stopper():
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def worker_kafka_python(bootstrap, group, topic, client_id, opts):
    import kafka
    from kafka import ConsumerRebalanceListener, OffsetAndMetadata

    stop = _stopper()
    processed: dict = {}

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=int(opts.get("session", 6000)), heartbeat_interval_ms=500,
        max_poll_records=50)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            # everything processed was committed before this poll (kafka-python 3 cannot
            # commit synchronously from inside the callback)
            for tp in revoked:
                processed.pop(tp, None)
            _emit(f"REVOKE {_parts(revoked)}")

        def on_partitions_assigned(self, assigned):
            _emit(f"ASSIGN {_parts(assigned)}")

    consumer.subscribe([topic], listener=Listener())
    _emit("READY")
    while not stop.is_set():
        batch = consumer.poll(200)
        for tp, msgs in batch.items():
            for m in msgs:
                _emit(f"R {m.partition} {m.offset}")
                processed[tp] = m.offset + 1
        if batch:
            consumer.commit({tp: OffsetAndMetadata(processed[tp], "", -1) for tp in batch
                             if tp in processed})
    consumer.close()


def worker_confluent(bootstrap, group, topic, client_id, opts):
    import confluent_kafka

    stop = _stopper()
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": int(opts.get("session", 6000)),
            "heartbeat.interval.ms": 500, "topic.metadata.refresh.interval.ms": 1000}
    if "strategy" in opts:
        conf["partition.assignment.strategy"] = opts["strategy"]
    if "instance" in opts:
        conf["group.instance.id"] = opts["instance"]
    consumer = confluent_kafka.Consumer(conf)
    cooperative = opts.get("strategy") == "cooperative-sticky"

    def on_assign(c, parts):
        _emit(f"ASSIGN {_parts(parts)}")
        if cooperative:
            c.incremental_assign(parts)

    def on_revoke(c, parts):
        try:
            c.commit(asynchronous=False)
        except confluent_kafka.KafkaException:
            pass  # nothing consumed yet
        _emit(f"REVOKE {_parts(parts)}")
        if cooperative:
            c.incremental_unassign(parts)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    _emit("READY")
    while not stop.is_set():
        msgs = consumer.consume(50, 0.2)
        got = False
        for m in msgs:
            if m.error():
                continue
            _emit(f"R {m.partition()} {m.offset()}")
            got = True
        if got:
            consumer.commit(asynchronous=False)
    consumer.close()


def worker_aiokafka(bootstrap, group, topic, client_id, opts):
    import asyncio

    import aiokafka
    from aiokafka.structs import OffsetAndMetadata

    stop = _stopper()

    async def main():
        processed: dict = {}
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=int(opts.get("session", 6000)), heartbeat_interval_ms=500)

        class Listener(aiokafka.ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                mine = {tp: OffsetAndMetadata(o, "") for tp, o in processed.items()
                        if tp in revoked}
                if mine:
                    await consumer.commit(mine)
                for tp in revoked:
                    processed.pop(tp, None)
                _emit(f"REVOKE {_parts(revoked)}")

            async def on_partitions_assigned(self, assigned):
                _emit(f"ASSIGN {_parts(assigned)}")

        await consumer.start()
        consumer.subscribe([topic], listener=Listener())
        _emit("READY")
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200, max_records=50)
                for tp, msgs in batch.items():
                    for m in msgs:
                        _emit(f"R {m.partition} {m.offset}")
                        processed[tp] = m.offset + 1
                if batch:
                    await consumer.commit({tp: OffsetAndMetadata(processed[tp], "")
                                           for tp in batch if tp in processed})
        finally:
            await consumer.stop()

    asyncio.run(main())


WORKERS = {"kafka-python": worker_kafka_python, "confluent": worker_confluent,
           "aiokafka": worker_aiokafka}

if __name__ == "__main__":
    kind, bootstrap, group, topic, client_id, *rest = sys.argv[1:]
    WORKERS[kind](bootstrap, group, topic, client_id, dict(a.split("=", 1) for a in rest))
    sys.exit(0)


# ----- test side -------------------------------------------------------------------------------

class Member:
    """One consumer subprocess; its stdout is collected by a reader thread."""

    def __init__(self, kind, bootstrap, group, topic, client_id, **opts) -> None:
        self.kind, self.client_id = kind, client_id
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, kind, bootstrap, group, topic, client_id,
             *(f"{k}={v}" for k, v in opts.items())],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def stderr_tail(self, n: int = 30) -> str:
        self.stderr.seek(0)
        lines = [ln for ln in self.stderr.read().splitlines() if not ln.startswith("%")]
        return "\n".join(lines[-n:])

    def records(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for kind, p, o in
                (ln.split() for ln in list(self.lines) if ln.startswith("R ")) if kind == "R"]

    def events(self, kind: str) -> list[list[int]]:
        return [[int(x) for x in ln.split(" ", 1)[1].split(",") if x] if " " in ln else []
                for ln in list(self.lines) if ln.split(" ")[0] == kind]

    def current(self) -> set[int]:
        """Partitions held now, replaying ASSIGN/REVOKE (eager: REVOKE drops all it names)."""
        held: set[int] = set()
        for ln in list(self.lines):
            head, _, rest = ln.partition(" ")
            if head not in ("ASSIGN", "REVOKE"):
                continue
            parts = {int(x) for x in rest.split(",") if x}
            if head == "ASSIGN":
                held |= parts
            elif head == "REVOKE":
                held -= parts
        return held

    def terminate(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)

    def close(self) -> None:
        self.kill()
        self.proc.stdout.close()
        self.stderr.close()


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def group_broker(broker_factory):
    return broker_factory(BROKER_PROPS)


@pytest.fixture
def members():
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


def make_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, count: int, start: int = 0, pace_s: float = 0.0):
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, str(i).encode(), partition=i % TOPIC_PARTITIONS)
        if pace_s:
            p.poll(0)
            time.sleep(pace_s)
    p.flush(30)


def describe(bootstrap: str, group: str):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30)


def test_nine_consumers_three_clients_exactly_once(group_broker, members):
    bootstrap, topic, group = group_broker.bootstrap, "shared6", "nine"
    make_topic(bootstrap, topic)
    total = 2400
    producer = threading.Thread(target=produce, args=(bootstrap, topic, total, 0, 0.004))
    producer.start()
    kinds = ["kafka-python", "confluent", "aiokafka"] * 3
    for i, kind in enumerate(kinds):
        members.append(Member(kind, bootstrap, group, topic, f"{kind}-{i}"))
        time.sleep(0.6)
    # two of each kind leave while records still flow
    for m in (members[0], members[1], members[2]):
        m.terminate()
    producer.join(60)

    def all_seen():
        got = Counter(r for m in members for r in m.records())
        return len(got) == total and got

    got = wait_for(all_seen, 90, "every record consumed")
    dupes = {r: n for r, n in got.items() if n > 1}
    assert not dupes, f"records consumed more than once: {sorted(dupes)[:20]}"
    per_partition = Counter(p for p, _ in got)
    assert per_partition == {p: total // TOPIC_PARTITIONS for p in range(TOPIC_PARTITIONS)}
    # every client kind consumed something
    by_kind = Counter(m.kind for m in members if m.records())
    assert set(by_kind) == {"kafka-python", "confluent", "aiokafka"}
    dead = [m for m in members[3:] if m.proc.poll() is not None]
    assert not dead, "\n".join(f"{m.client_id}: {m.stderr_tail()}" for m in dead)

    def stable_with_six():
        d = describe(bootstrap, group)
        return str(d.state).endswith("STABLE") and len(d.members) == 6 and d

    desc = wait_for(stable_with_six, 30, "a Stable group of 6", interval=0.5)
    assigned = [tp.partition for mem in desc.members for tp in mem.assignment.topic_partitions]
    assert sorted(assigned) == list(range(TOPIC_PARTITIONS))


def test_killed_member_is_evicted_after_session_timeout(group_broker, members):
    bootstrap, topic, group = group_broker.bootstrap, "evict6", "evict"
    make_topic(bootstrap, topic)
    session_ms = 3000
    a = Member("confluent", bootstrap, group, topic, "survivor", session=session_ms)
    members.append(a)
    wait_for(lambda: a.current() == set(range(6)), 30, "first member assigned")
    b = Member("confluent", bootstrap, group, topic, "victim", session=session_ms)
    members.append(b)
    wait_for(lambda: len(b.current()) == 3 and len(a.current()) == 3, 30, "split 3/3")
    victim_parts = b.current()
    killed_at = time.monotonic()
    b.kill()
    time.sleep(session_ms / 1000 * 0.6)
    assert a.current() == set(range(6)) - victim_parts, "reassigned before the session timeout"
    wait_for(lambda: a.current() == set(range(6)), 20, "victim's partitions reassigned")
    elapsed = time.monotonic() - killed_at
    assert elapsed >= session_ms / 1000 * 0.6
    produce(bootstrap, topic, 60)
    wait_for(lambda: {p for p, _ in a.records()} >= victim_parts, 20,
             "survivor consumes the victim's partitions")


def test_cooperative_sticky_rebalances_incrementally(group_broker, members):
    bootstrap, topic, group = group_broker.bootstrap, "coop6", "coop"
    make_topic(bootstrap, topic)
    opts = {"strategy": "cooperative-sticky"}
    a = Member("confluent", bootstrap, group, topic, "coop-a", **opts)
    members.append(a)
    wait_for(lambda: a.current() == set(range(6)), 30, "first member assigned")
    b = Member("confluent", bootstrap, group, topic, "coop-b", **opts)
    members.append(b)
    wait_for(lambda: len(a.current()) == 3 and len(b.current()) == 3, 30, "split 3/3")
    revokes = a.events("REVOKE")
    # incremental: a gave up exactly the 3 partitions b took, never all 6
    assert [set(r) for r in revokes if r] == [b.current()]
    assert a.current() | b.current() == set(range(6))
    c = Member("confluent", bootstrap, group, topic, "coop-c", **opts)
    members.append(c)
    wait_for(lambda: all(len(m.current()) == 2 for m in (a, b, c)), 30, "split 2/2/2")
    for m in (a, b):
        assert all(len(r) < 6 for r in m.events("REVOKE"))
    produce(bootstrap, topic, 120)
    wait_for(lambda: sum(len(m.records()) for m in (a, b, c)) == 120, 30, "records consumed")


def test_static_member_restart_without_rebalance(group_broker, members):
    bootstrap, topic, group = group_broker.bootstrap, "static6", "static"
    make_topic(bootstrap, topic)
    dyn = Member("confluent", bootstrap, group, topic, "dynamic", session=10000)
    members.append(dyn)
    wait_for(lambda: dyn.current() == set(range(6)), 30, "dynamic member assigned")
    st = Member("confluent", bootstrap, group, topic, "static", session=10000, instance="inst-1")
    members.append(st)
    wait_for(lambda: len(st.current()) == 3 and len(dyn.current()) == 3, 30, "split 3/3")
    static_parts = st.current()
    time.sleep(1.0)
    events_before = list(dyn.lines)
    st.terminate()  # librdkafka sends no LeaveGroup for a static member
    st2 = Member("confluent", bootstrap, group, topic, "static", session=10000,
                 instance="inst-1")
    members.append(st2)
    wait_for(lambda: st2.current(), 30, "restarted static member assigned")
    assert st2.current() == static_parts
    time.sleep(2.0)
    new_events = [ln for ln in dyn.lines[len(events_before):] if not ln.startswith("R ")]
    assert new_events == [], f"dynamic member saw a rebalance: {new_events}"
    produce(bootstrap, topic, 60)
    wait_for(lambda: {p for p, _ in st2.records()} == static_parts, 20,
             "restarted static member consumes its partitions")


def test_mixed_kafka_python_and_confluent_in_one_group(group_broker, members):
    bootstrap, topic, group = group_broker.bootstrap, "mixed6", "mixed"
    make_topic(bootstrap, topic)
    kp = Member("kafka-python", bootstrap, group, topic, "kp")
    members.append(kp)
    wait_for(lambda: kp.current() == set(range(6)), 30, "kafka-python assigned")
    cf = Member("confluent", bootstrap, group, topic, "cf")
    members.append(cf)
    wait_for(lambda: len(kp.current()) == 3 and len(cf.current()) == 3, 30, "split 3/3")
    assert kp.current() | cf.current() == set(range(6))
    produce(bootstrap, topic, 300)
    wait_for(lambda: len(kp.records()) + len(cf.records()) == 300, 30, "records consumed")
    assert {p for p, _ in kp.records()} == kp.current()
    assert {p for p, _ in cf.records()} == cf.current()
    desc = describe(bootstrap, group)
    assert str(desc.state).endswith("STABLE")
    assert sorted(m.client_id for m in desc.members) == ["cf", "kp"]
