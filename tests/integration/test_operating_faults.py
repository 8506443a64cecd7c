"""Operating under faults (issue 26), on ZooKeeper clusters with stock clients:

- kill -9 and an immediate restart, 5 times: the broker waits for its previous session's
  registration to expire instead of exiting;
- DeleteRecords inside a batch, a follower's copy wiped: it catches up (ISR within 30 s) and
  its segment is byte-identical to the leader's;
- SIGTERM of a broker leading RF 1 partitions: a clean controlled shutdown in seconds;
- one broker shutdown logs fewer than 200 lines cluster-wide, and a clean restart no recovery
  warnings;
- a full disk (a small tmpfs log dir, skipped where mounting is not permitted): the dir goes
  offline, producers get KAFKA_STORAGE_ERROR, few ERROR lines, leadership moves off the
  broker in seconds, every acknowledged record is readable after a restart with space; with
  its only dir full, a single broker stops with one line naming it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster

pytestmark = pytest.mark.integration

SESSION_TIMEOUT_MS = 4000
JOSEF = [sys.executable, "-m", "broker.cli"]


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("faults"), zookeeper, 3,
                session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        c.start()
        yield c
    finally:
        c.stop(kill=True)


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept alive until the future is done
    fut = admin.create_topics([NewTopic(topic, num_partitions=len(assignment),
                                        replica_assignment=assignment)])
    fut[topic].result(30)


def _wait_isr(cluster: Cluster, topic: str, partition: int, isr: set[int],
              timeout: float = 30.0) -> dict:
    return cluster.wait_until(
        f"{topic}-{partition} ISR {sorted(isr)}",
        lambda: (st := cluster.partition_state(topic, partition)) is not None
        and set(st["isr"]) == isr and st, timeout)


def _lines_since(path: Path, offset: int) -> list[str]:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# ----- fast restart ----------------------------------------------------------------------------

def test_kill9_and_immediate_restart_five_times(cluster):
    """The restarted broker finds /brokers/ids/N of its killed session, waits for it to
    expire and registers: never the "node already exists" exit."""
    for n, bid in enumerate((1, 2, 3, cluster.controller_id(), 1)):
        b = cluster.broker(bid)
        mark = _size(b.out_path)
        old_epoch = cluster.zk_get(f"/brokers/ids/{bid}")[1].czxid
        cluster.kill(bid)
        b.start()  # ready = answers requests, i.e. registered (requests wait for it)
        text = "\n".join(_lines_since(b.out_path, mark))
        assert b.is_running(), f"bounce {n}: broker {bid} exited:\n{b.log_tail()}"
        assert "node already exists" not in text
        cluster.wait_for_brokers_registered([1, 2, 3], timeout=30)
        assert cluster.zk_get(f"/brokers/ids/{bid}")[1].czxid != old_epoch
    cluster.wait_for_controller(timeout=30)
    cluster.wait_metadata_converged(timeout=60)


# ----- a replica rebuilt after DeleteRecords inside a batch ------------------------------------

def test_wiped_follower_catches_up_from_a_log_start_inside_a_batch(cluster):
    from confluent_kafka import Producer, TopicPartition

    topic = "mid-batch"
    _create(cluster.bootstrap, topic, [[1, 2, 3]])
    _wait_isr(cluster, topic, 0, {1, 2, 3})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 500, "acks": "all"})
    for i in range(10):
        p.produce(topic, value=b"value-%d" % i, partition=0)
    assert p.flush(30) == 0
    admin = _admin(cluster.bootstrap)
    deleted = admin.delete_records([TopicPartition(topic, 0, 5)])
    assert deleted[TopicPartition(topic, 0, 5)].result(30).low_watermark == 5
    leader = cluster.partition_state(topic, 0)["leader"]
    follower = 3 if leader != 3 else 2
    cluster.stop_broker(follower)
    shutil.rmtree(cluster.broker(follower).log_dir / f"{topic}-0")
    cluster.start_broker(follower)
    _wait_isr(cluster, topic, 0, {1, 2, 3}, timeout=30)
    seg = "00000000000000000000.log"
    want = (cluster.broker(leader).log_dir / f"{topic}-0" / seg).read_bytes()
    got = (cluster.broker(follower).log_dir / f"{topic}-0" / seg).read_bytes()
    assert got == want and len(want) > 0
    assert "offset 0 < expected 5" not in cluster.broker(follower).log_text()


# ----- clean controlled shutdown ----------------------------------------------------------------

def test_sigterm_of_a_broker_leading_rf1_partitions_is_clean_and_fast(cluster):
    victim = 2
    _create(cluster.bootstrap, "rf1", [[victim], [victim], [victim]])
    cluster.wait_for_leaders("rf1", 3)
    b = cluster.broker(victim)
    mark = _size(b.out_path)
    started = time.monotonic()
    rc = cluster.stop_broker(victim, timeout=30)
    took = time.monotonic() - started
    text = "\n".join(_lines_since(b.out_path, mark))
    assert rc == 0, text[-3000:]
    assert "unclean" not in text.lower()
    assert "Controlled shutdown request returned successfully" in text
    assert took < 15, f"shutdown took {took:.1f}s"
    cluster.start_broker(victim)
    cluster.wait_for_brokers_registered([1, 2, 3])


# ----- log volume ------------------------------------------------------------------------------

def test_a_broker_shutdown_and_clean_restart_log_little(cluster):
    """With producers writing to every partition, one broker's controlled shutdown (its
    leaderships move, it leaves every ISR, the new leaders see it fetch) logs fewer than
    200 lines on the three brokers together; its clean restart logs no warning."""
    import threading

    from confluent_kafka import Producer

    _create(cluster.bootstrap, "noise", [[1, 2, 3], [2, 3, 1], [3, 1, 2]] * 4)
    for p in range(12):
        _wait_isr(cluster, "noise", p, {1, 2, 3})
    stop = threading.Event()
    sent = [0]

    def produce():
        prod = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "linger.ms": 5})
        while not stop.is_set():
            for i in range(12):
                prod.produce("noise", value=b"x" * 100, partition=i)
            sent[0] += 12
            prod.poll(0.01)
        prod.flush(30)

    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    time.sleep(2)
    victim = 3
    marks = {i: _size(cluster.broker(i).out_path) for i in cluster.ids}
    try:
        assert cluster.stop_broker(victim) == 0
        time.sleep(2)  # the others' reaction
    finally:
        stop.set()
        writer.join(60)
    lines = {i: _lines_since(cluster.broker(i).out_path, marks[i]) for i in cluster.ids}
    total = sum(len(v) for v in lines.values())
    print(f"lines logged cluster-wide by one broker shutdown: {total} ({sent[0]} records)")
    assert total < 200, f"{total} lines: " + "\n".join(
        line for v in lines.values() for line in v[:60])
    b = cluster.broker(victim)
    mark = _size(b.out_path)
    cluster.start_broker(victim)
    for p in range(12):
        _wait_isr(cluster, "noise", p, {1, 2, 3})
    restart = _lines_since(b.out_path, mark)
    warnings = [line for line in restart if "] WARNING " in line or "] ERROR " in line]
    assert not warnings, "\n".join(warnings[:20])


# ----- a full disk -----------------------------------------------------------------------------

def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        out = getattr(e, "stderr", b"") or b""
        pytest.skip(f"cannot mount a tmpfs here ({e}; {out.decode(errors='replace').strip()})")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _fill(path: Path, leave: int) -> None:
    """Fill the filesystem of `path` but `leave` bytes with a filler file."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    with open(path / "filler", "wb") as f:
        chunk = b"\0" * (1 << 20)
        todo = max(0, free - leave)
        while todo > 0:
            todo -= f.write(chunk[:min(len(chunk), todo)])


def _produce_until_failure(bootstrap: str, topic: str, partition: int, limit: int = 20000):
    """acks=1, no retries: (acknowledged {offset: value}, error names seen)."""
    from confluent_kafka import KafkaException, Producer

    acked: dict[int, bytes] = {}
    errors: list[str] = []

    def done(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err.name())

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "retries": 0,
                  "linger.ms": 5, "message.timeout.ms": 5000,
                  "enable.idempotence": False})
    for i in range(limit):
        try:
            p.produce(topic, value=b"%08d" % i + b"r" * 992, partition=partition,
                      on_delivery=done)
        except (BufferError, KafkaException):
            p.flush(10)
        p.poll(0)
        if errors:
            break
    p.flush(30)
    return acked, errors


def _consume_all(bootstrap: str, topic: str, partition: int, end: int) -> dict[int, bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and (not got or max(got) < end - 1):
            m = c.poll(0.5)
            if m is not None and not m.error():
                got[m.offset()] = m.value()
    finally:
        c.close()
    return got


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(r"\] (ERROR|CRITICAL) ", line)]


def test_disk_full_takes_the_dir_offline_and_moves_leadership(zookeeper, cluster_factory,
                                                             tmp_path):
    mnt = tmp_path / "small-disk"
    _mount_tmpfs(mnt, "16m")
    try:
        _disk_full_scenario(zookeeper, cluster_factory, tmp_path, mnt)
    finally:
        _umount(mnt)


def _disk_full_scenario(zookeeper, cluster_factory, tmp_path, mnt):
    small, big = mnt / "logs", tmp_path / "big-logs"
    c = cluster_factory(3, zookeeper=zookeeper,
                        broker_props={1: {"log.dirs": f"{small},{big}"}})
    b1 = c.broker(1)
    _create(c.bootstrap, "full", [[1], [1]])
    _create(c.bootstrap, "moving", [[1, 2, 3]] * 4)
    c.wait_for_leaders("full", 2)
    for p in range(4):
        _wait_isr(c, "moving", p, {1, 2, 3})
    on_small = {name for name in os.listdir(small) if os.path.isdir(small / name)}
    full_p = next(int(n.rsplit("-", 1)[1]) for n in on_small if n.startswith("full-"))
    moving_small = sorted(int(n.rsplit("-", 1)[1]) for n in on_small if n.startswith("moving-"))
    assert moving_small, on_small
    mark = _size(b1.out_path)
    _fill(mnt, leave=2 << 20)
    acked, errors = _produce_until_failure(c.bootstrap, "full", full_p)
    failed_at = time.monotonic()
    assert acked and errors, (len(acked), errors)
    assert set(errors) <= {"KAFKA_STORAGE_ERROR", "_TRANSPORT", "NOT_LEADER_OR_FOLLOWER",
                           "_MSG_TIMED_OUT"}, errors
    assert "KAFKA_STORAGE_ERROR" in errors or "_TRANSPORT" in errors
    # the moving partitions on the failed dir get other leaders within seconds
    c.wait_until("leaders moved off broker 1", lambda: all(
        (st := c.partition_state("moving", p))["leader"] not in (1, -1) and 1 not in st["isr"]
        for p in moving_small), timeout=15)
    moved_in = time.monotonic() - failed_at
    assert moved_in < 10, moved_in
    # DescribeLogDirs / josef log-dirs: the small dir is offline, the other one serves
    out = subprocess.run([*JOSEF, "log-dirs", "--bootstrap-server", b1.bootstrap,
                          "--describe"], capture_output=True, text=True, timeout=60)
    doc = json.loads(out.stdout.splitlines()[2])
    dirs = {d["logDir"]: d["error"] for b in doc["brokers"] if b["broker"] == 1
            for d in b["logDirs"]}
    assert dirs[str(small)] is not None and dirs[str(big)] is None, dirs
    text = "\n".join(_lines_since(b1.out_path, mark))
    errs = _error_lines(text)
    assert len(errs) < 20, "\n".join(errs)
    assert "Traceback" not in text, text[-4000:]
    assert b1.is_running()
    # a restart with space: every acknowledged record is there
    assert c.stop_broker(1) == 0
    (mnt / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True, timeout=30)
    c.start_broker(1)
    c.wait_for_leaders("full", 2)
    got = _consume_all(c.bootstrap, "full", full_p, max(acked) + 1)
    missing = [o for o, v in acked.items() if got.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    assert not [n for n in os.listdir(small) if n.endswith(".tmp")]


def test_single_broker_with_its_only_dir_full_stops_with_one_line(broker_factory, tmp_path):
    mnt = tmp_path / "only-disk"
    _mount_tmpfs(mnt, "16m")
    try:
        b = broker_factory({"log.dirs": str(mnt / "logs")})
        _create(b.bootstrap, "only", [[0]])
        _fill(mnt, leave=1 << 20)
        acked, errors = _produce_until_failure(b.bootstrap, "only", 0)
        assert acked and errors
        b.proc.wait(30)
        assert b.proc.returncode == 1
        text = b.log_text()
        fatal = [line for line in text.splitlines() if "] CRITICAL " in line]
        assert len(fatal) == 1 and str(mnt / "logs") in fatal[0], fatal
        assert len(_error_lines(text)) < 20, "\n".join(_error_lines(text))
        (mnt / "filler").unlink()
        b.start()
        got = _consume_all(b.bootstrap, "only", 0, max(acked) + 1)
        missing = [o for o, v in acked.items() if got.get(o) != v]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        b.stop()
    finally:
        _umount(mnt)
