"""AlterReplicaLogDirs (KIP-113): a partition moved between two log.dirs while a producer
keeps writing loses nothing; DescribeLogDirs and ``josef log-dirs`` show where it is."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.integration

JOSEF = [sys.executable, "-m", "broker.cli"]


def test_partition_moves_between_log_dirs_while_producing(broker_factory, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    d1, d2 = tmp_path / "dir-a", tmp_path / "dir-b"
    broker = broker_factory({"log.dirs": f"{d1},{d2}", "log.segment.bytes": "200000"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("mv", 1, 1)])["mv"].result(20)

    def where() -> dict:
        out = subprocess.run([*JOSEF, "log-dirs", "--bootstrap-server", broker.bootstrap,
                              "--describe", "--topic-list", "mv"], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "Querying brokers for log directories information"
        doc = json.loads(lines[2])
        return {(d["logDir"], p["isFuture"]): p for b in doc["brokers"] for d in b["logDirs"]
                for p in d["partitions"]}

    start = where()
    (src, _), = start
    dest = str(d2) if src == str(d1) else str(d1)

    acked: list[int] = []
    stop = threading.Event()
    failures: list = []

    def produce():
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                      "batch.size": 16384,
                      "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            try:
                p.produce("mv", value=b"%08d" % i + b"." * 200, callback=lambda e, m, i=i:
                          (failures.append(e) if e else acked.append(i)))
            except BufferError:
                p.poll(0.1)
                continue
            i += 1
            p.poll(0)
            if i % 100 == 0:
                time.sleep(0.005)
        p.flush(30)

    t = threading.Thread(target=produce)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 2000 and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.05)
        assert len(acked) >= 2000, (len(acked), failures[:3], broker.log_tail(20))
        run = subprocess.run([*JOSEF, "log-dirs", "--bootstrap-server", broker.bootstrap,
                              "--move", "--topic", "mv", "--partition", "0", "--dir", dest,
                              "--wait", "--progress"], capture_output=True, text=True,
                             timeout=200)
        assert run.returncode == 0, (run.stdout, run.stderr, broker.log_tail(30))
        # the bar's last redraw: the future replica caught up with the current one
        bar = [f for f in re.split(r"[\r\n]", run.stderr) if f.startswith(f"mv-0 -> {dest}:")]
        assert bar and re.fullmatch(
            rf"mv-0 -> {re.escape(dest)}: 100\.0%\|[^|]+\| ([\d.]+[kMG]?B)/\1 "
            rf"\[\d\d:\d\d, [\d.]+[kMG]?B/s\]", bar[-1]), run.stderr
        time.sleep(0.5)  # keep producing into the moved log
    finally:
        stop.set()
        t.join(60)
    assert not failures, failures[:3]
    after = where()
    assert list(after) == [(dest, False)]
    assert not any(p.name.startswith("mv-0") for p in (d1 if src == str(d1) else d2)
                   .iterdir() if not p.name.endswith("-delete"))

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("mv", 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if not m.error():
                seen.append(int(m.value()[:8]))
    c.close()
    assert sorted(seen) == sorted(acked) == list(range(len(acked)))
    # and after a restart the broker finds the partition in its new dir
    broker.restart()
    assert list(where()) == [(dest, False)]
    assert "Traceback" not in broker.log_text(), broker.log_tail(40)
