"""``josef console-consumer --group`` as a real group member against a live broker.

Two console consumers of one group split a 4-partition topic (and together print each record
once); a kafka-python consumer and a console consumer share a group whichever of them leads;
offsets are committed on exit and a restarted console consumer resumes there. The range
assignment and the ConsumerProtocol bytes are also checked on their own (against Kafka's
RangeAssignor example and kafka-python's decoder).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from client.group_member import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from tests.integration.harness import REPO_ROOT

pytestmark = [
    pytest.mark.timeout(180),
    # kafka-python loads its schemas with importlib.resources' legacy API.
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

FAST = ["--consumer-property", "session.timeout.ms=6000",
        "--consumer-property", "heartbeat.interval.ms=300",
        "--consumer-property", "auto.commit.interval.ms=1000"]


def josef(*args: str, input: bytes | None = None, timeout: float = 60
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], input=input,
                          capture_output=True, timeout=timeout, cwd=REPO_ROOT)


class Console:
    """A ``josef console-consumer`` subprocess whose stdout lines are collected."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "console-consumer",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stderr = ""

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.decode().rstrip("\n"))

    def interrupt(self, timeout: float = 20) -> int:
        """Ctrl-C, then wait for the exit (commit and LeaveGroup happen on the way out)."""
        self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM: the tool shuts down as on Ctrl-C (Kafka's shutdown hook)."""
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 30) -> int:
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        self.proc.stdout.close()
        self.stderr = self.proc.stderr.read().decode()
        self.proc.stderr.close()
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._reader.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if not f.closed:
                f.close()


@pytest.fixture
def consoles():
    made: list[Console] = []

    def start(*args: str) -> Console:
        c = Console(*args)
        made.append(c)
        return c

    yield start
    for c in made:
        c.kill()


def _create_topic(bootstrap: str, partitions: int = 4) -> str:
    name = f"ccgroup-{uuid.uuid4().hex[:8]}"
    res = josef("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
                "--partitions", str(partitions))
    assert res.returncode == 0, res.stderr
    return name


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 4,
             prefix: str = "v") -> list[str]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        values = [f"{prefix}{i}" for i in range(count)]
        for i, v in enumerate(values):
            producer.send(topic, v.encode(), partition=i % partitions)
        producer.flush(30)
    finally:
        producer.close(5)
    return values


def _members(bootstrap: str, group: str) -> dict[str, list[tuple[str, int]]]:
    """member id -> assigned partitions of a Stable group ({} otherwise)."""
    from client.connection import KafkaClient

    with KafkaClient(bootstrap, timeout=10) as c:
        coord = c.request(10, {"key": group, "key_type": 0}, version=1)
        if coord.error_code:
            return {}
        c.metadata([])
        resp = c.request(15, {"groups": [group]}, node=coord.node_id)
    g = resp.groups[0]
    if g.error_code or g.group_state != "Stable":
        return {}
    return {m.member_id: decode_assignment(m.member_assignment) for m in g.members}


def _wait_split(bootstrap: str, group: str, members: int, poll=None,
                timeout: float = 30) -> dict[str, list[tuple[str, int]]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if poll is not None:
            poll()
        got = _members(bootstrap, group)
        if len(got) == members and all(got.values()):
            return got
        time.sleep(0.2)
    raise AssertionError(f"group {group} did not settle on {members} members: "
                         f"{_members(bootstrap, group)}")


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets(group)
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.get(group, {}).items()}


def _split_lines(lines: list[str]) -> tuple[set[int], list[str]]:
    """``Partition:p<TAB>value`` lines -> (partitions seen, values)."""
    parts, values = set(), []
    for line in lines:
        p, _, v = line.partition("\t")
        assert p.startswith("Partition:"), line
        parts.add(int(p.removeprefix("Partition:")))
        values.append(v)
    return parts, values


def _wait_lines(total: int, sources, poll=None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while sum(len(s()) for s in sources) < total and time.monotonic() < deadline:
        if poll is not None:
            poll()
        else:
            time.sleep(0.1)


# --- the assignment and the bytes, without a broker -------------------------------------
def test_range_assign_follows_kafkas_example():
    # Kafka's RangeAssignor javadoc: C0, C1 subscribed to t0 and t1 with 3 partitions each.
    plan = range_assign({"C1": ["t0", "t1"], "C0": ["t0", "t1"]}, {"t0": 3, "t1": 3})
    assert plan == {"C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
                    "C1": [("t0", 2), ("t1", 2)]}
    # Static members sort first (by instance id); topics without metadata are skipped.
    plan = range_assign({"a": ["t"], "b": ["t", "gone"]}, {"t": 4}, {"b": "i-0", "a": None})
    assert plan == {"b": [("t", 0), ("t", 1)], "a": [("t", 2), ("t", 3)]}
    assert range_assign({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 1}) == \
        {"a": [("t", 0)], "b": [], "c": []}


def test_consumer_protocol_bytes_are_read_by_kafka_python():
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
    )

    sub = ConsumerProtocolSubscription.decode(encode_subscription(["b", "a"], 7))
    assert (sub.version, sub.topics, sub.generation_id) == (3, ["a", "b"], 7)
    asg = ConsumerProtocolAssignment.decode(encode_assignment([("t", 2), ("t", 0), ("u", 1)]))
    assert asg.partitions() and sorted((tp.topic, tp.partition) for tp in asg.partitions()) \
        == [("t", 0), ("t", 2), ("u", 1)]
    # kafka-python's own v0 bytes decode on our side too.
    theirs = ConsumerProtocolSubscription(version=0, topics=["x"], user_data=b"").encode()
    assert decode_subscription(theirs) == ["x"]


# --- live groups ------------------------------------------------------------------------
def test_two_console_consumers_split_the_partitions(shared_broker, consoles):
    b = shared_broker.bootstrap
    topic = _create_topic(b)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    args = ["--bootstrap-server", b, "--topic", topic, "--group", group,
            "--property", "print.partition=true", *FAST]
    first = consoles(*args)
    _wait_split(b, group, 1)
    second = consoles(*args)
    members = _wait_split(b, group, 2)
    assert sorted(len(tps) for tps in members.values()) == [2, 2]
    values = _produce(b, topic, 200)
    _wait_lines(200, [lambda: first.lines, lambda: second.lines])
    assert first.interrupt() == 130 and second.terminate() == 130
    p1, v1 = _split_lines(first.lines)
    p2, v2 = _split_lines(second.lines)
    assert len(p1) == 2 and len(p2) == 2 and p1 | p2 == {0, 1, 2, 3}
    assert sorted(v1 + v2) == sorted(values)
    assert "Processed a total of 100 messages" in first.stderr, first.stderr
    assert "Processed a total of 100 messages" in second.stderr, second.stderr
    # Committed on exit, and both members left (the group is Empty, not waiting for them).
    assert _committed(b, group) == {0: 50, 1: 50, 2: 50, 3: 50}
    assert _members(b, group) == {}


@pytest.mark.parametrize("leader", ["console", "kafka-python"])
def test_kafka_python_and_console_consumer_share_a_group(shared_broker, consoles, leader):
    from kafka import KafkaConsumer

    b = shared_broker.bootstrap
    topic = _create_topic(b)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    kp = KafkaConsumer(bootstrap_servers=b, group_id=group, auto_offset_reset="earliest",
                       session_timeout_ms=6000, heartbeat_interval_ms=300,
                       auto_commit_interval_ms=1000)
    got: list[str] = []

    def poll() -> None:
        for records in kp.poll(timeout_ms=100).values():
            got.extend(r.value.decode() for r in records)

    try:
        args = ["--bootstrap-server", b, "--topic", topic, "--group", group,
                "--property", "print.partition=true", *FAST]
        if leader == "console":
            console = consoles(*args)
            _wait_split(b, group, 1)
            kp.subscribe([topic])
        else:
            kp.subscribe([topic])
            _wait_split(b, group, 1, poll)
            console = consoles(*args)
        members = _wait_split(b, group, 2, poll)
        assert sorted(len(tps) for tps in members.values()) == [2, 2]
        values = _produce(b, topic, 120)
        _wait_lines(120, [lambda: got, lambda: console.lines], poll)
        mine = {tp.partition for tp in kp.assignment()}
        assert console.interrupt() == 130
        parts, printed = _split_lines(console.lines)
        assert len(mine) == 2 and parts == {0, 1, 2, 3} - mine
        assert sorted(printed + got) == sorted(values)
        assert len(printed) == 60
    finally:
        kp.close()


def test_offsets_committed_on_exit_and_restart_resumes(shared_broker):
    b = shared_broker.bootstrap
    topic = _create_topic(b)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    values = _produce(b, topic, 20)
    base = ["--bootstrap-server", b, "--topic", topic, "--group", group, *FAST]
    first = josef("console-consumer", *base, "--from-beginning", "--max-messages", "6")
    assert first.returncode == 0, first.stderr
    printed = first.stdout.decode().split()
    assert len(printed) == 6
    assert sum(_committed(b, group).values()) == 6
    # The rerun resumes at the committed offsets (--from-beginning only matters for
    # partitions without one): nothing printed twice, nothing skipped.
    committed = _committed(b, group)
    rest = josef("console-consumer", *base, "--from-beginning", "--timeout-ms", "2500")
    assert rest.returncode == 0, rest.stderr
    printed += rest.stdout.decode().split()
    assert sorted(printed) == sorted(values)
    assert _committed(b, group) == {0: 5, 1: 5, 2: 5, 3: 5}
    assert all(off <= 5 for off in committed.values())
    # A third run finds nothing new and changes nothing.
    again = josef("console-consumer", *base, "--timeout-ms", "1500")
    assert again.returncode == 0 and again.stdout == b"", again.stderr
    assert _committed(b, group) == {0: 5, 1: 5, 2: 5, 3: 5}


def test_group_options_checked(shared_broker):
    b = shared_broker.bootstrap
    res = josef("console-consumer", "--bootstrap-server", b, "--topic", "t", "--group", "g",
                "--consumer-property", "group.id=other")
    assert res.returncode == 2 and b"do not match" in res.stderr
    res = josef("console-consumer", "--bootstrap-server", b, "--topic", "t", "--group", "g",
                "--from-beginning", "--consumer-property", "auto.offset.reset=latest")
    assert res.returncode == 2 and b"--from-beginning" in res.stderr


def test_rebalance_commits_before_giving_partitions_up(shared_broker, consoles):
    b = shared_broker.bootstrap
    topic = _create_topic(b)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    # Auto-commit far away: only the commit made before revoking can tell the newcomer
    # where the first consumer stopped.
    args = ["--bootstrap-server", b, "--topic", topic, "--group", group,
            "--property", "print.partition=true", "--consumer-property",
            "session.timeout.ms=6000", "--consumer-property", "heartbeat.interval.ms=300",
            "--consumer-property", "auto.commit.interval.ms=600000"]
    first = consoles(*args)
    _wait_split(b, group, 1)
    before = _produce(b, topic, 80, prefix="a")
    _wait_lines(80, [lambda: first.lines])
    assert len(first.lines) == 80
    second = consoles(*args, "--from-beginning")  # would re-read everything if not resumed
    _wait_split(b, group, 2)
    assert _committed(b, group) == {0: 20, 1: 20, 2: 20, 3: 20}
    after = _produce(b, topic, 80, prefix="b")
    _wait_lines(160, [lambda: first.lines, lambda: second.lines])
    assert first.interrupt() == 130 and second.interrupt() == 130
    _, v1 = _split_lines(first.lines)
    p2, v2 = _split_lines(second.lines)
    assert len(p2) == 2
    assert sorted(v1 + v2) == sorted(before + after)
    assert _committed(b, group) == {0: 40, 1: 40, 2: 40, 3: 40}


def test_static_member_does_not_leave_and_comes_back(shared_broker):
    b = shared_broker.bootstrap
    topic = _create_topic(b, partitions=2)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    values = _produce(b, topic, 10, partitions=2)
    base = ["--bootstrap-server", b, "--topic", topic, "--group", group, *FAST,
            "--consumer-property", "group.instance.id=console-1"]
    first = josef("console-consumer", *base, "--from-beginning", "--max-messages", "4")
    assert first.returncode == 0, first.stderr
    # KIP-345: a static member sends no LeaveGroup; it stays until its session times out.
    members = _members(b, group)
    assert len(members) == 1 and sorted(next(iter(members.values()))) == \
        [(topic, 0), (topic, 1)]
    rest = josef("console-consumer", *base, "--from-beginning", "--timeout-ms", "2000")
    assert rest.returncode == 0, rest.stderr
    assert sorted(first.stdout.decode().split() + rest.stdout.decode().split()) == \
        sorted(values)


def test_reset_position_is_committed_so_a_restart_does_not_skip(shared_broker):
    # Kafka commits the position auto.offset.reset chose even when nothing was read: records
    # produced between two runs of a group are not skipped by a second "latest" reset.
    b = shared_broker.bootstrap
    topic = _create_topic(b, partitions=2)
    group = f"ccg-{uuid.uuid4().hex[:6]}"
    _produce(b, topic, 4, partitions=2, prefix="old")
    base = ["--bootstrap-server", b, "--topic", topic, "--group", group, *FAST,
            "--timeout-ms", "1500"]
    first = josef("console-consumer", *base)
    assert first.returncode == 0 and first.stdout == b"", first.stderr
    assert _committed(b, group) == {0: 2, 1: 2}
    values = _produce(b, topic, 6, partitions=2, prefix="new")
    second = josef("console-consumer", *base)
    assert second.returncode == 0, second.stderr
    assert sorted(second.stdout.decode().split()) == sorted(values)
