"""Share groups (KIP-932) benchmark: share consumers on one partition against a classic consumer
on the same partition, in the same run, against one live broker (a subprocess on 127.0.0.1
started with tests/integration/harness.py, log dir under /dev/shm, stopped by PID).

One topic with one partition holds ``--records`` records of ``--value-bytes`` bytes
(confluent-kafka producer, linger 5 ms, batch.size 16384: Kafka's producer default, so a
RecordBatch holds ~130 records; acquisition hands out whole batches). Each row's consumers
(each its own process) start first: share consumers join their group subscribed to an
empty topic; once all have polled 10 times (plus 1 s), all of them switch to the data topic
at once (so no consumer drains the partition before the others joined). Rate = records /
(last record received - first record received), across the row's consumers.

1. **Classic**: a confluent-kafka Consumer assigned to the partition from offset 0 (no
   group commits: the cheapest way a client reads a partition).
2. **Share, 1 / 3 / 6 consumers**: a fresh share group (``share.auto.offset.reset=earliest``)
   per row (confluent-kafka 2.16 ShareConsumer, implicit acknowledgement: every poll
   acknowledges the previous batch, piggy-backed on the next ShareFetch). Each record is
   acquired, delivered and acknowledged (a durable write to ``__share_group_state``).
3. **Acknowledgement latency**: one ShareConsumer in explicit mode on a topic of
   RecordBatches of 10 records; each poll's 10 records are ACCEPTed and ``commit_sync()``
   is timed (the ShareAcknowledge
   round trip: the share-partition's write through the share coordinator, acks=all on
   one replica); p50 / p99 over ``--acks`` commits.

Run: ``python benchmarks/bench_share.py [--quick]``; prints a markdown table and writes it to
``benchmarks/results/share.md`` (with ``uptime``: other work on this 2-CPU machine moves
absolute numbers; the ratios are what carries over).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _log(what: str, t0: float) -> None:
    print(f"[bench_share] {what}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)


def _set_group(bootstrap: str, group: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


def _create(bootstrap: str, topic: str) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        try:
            f.result(30)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def _produce(bootstrap: str, topic: str, n: int, size: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * size
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, key=str(i).encode())
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0


def worker(kind: str, bootstrap: str, group: str, topic: str, out: str, max_records: int
           ) -> int:
    """A consumer process: `share` (ShareConsumer, implicit acks) or `classic` (Consumer
    assigned to the partition from offset 0). Until `<out>.go` exists a share consumer is
    subscribed to `<topic>-idle` (it joins the group and polls an empty topic), then it
    subscribes to `topic`. Writes {"n", "first", "last", "polls"} to `out`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, ShareConsumer, TopicPartition
    go = Path(out + ".go")
    if kind == "share":
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "max.poll.records": max_records})
        c.subscribe([topic + "-idle"])

        def poll():
            return c.poll(0.2) or []
    else:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False})

        def poll():
            return c.consume(1000, 0.2)
    n, polls, first, last = 0, 0, None, None
    written = 0.0
    stop = Path(out + ".stop")
    while not go.exists():
        if kind == "share":
            poll()
        else:
            time.sleep(0.05)
        polls += 1
        Path(out).write_text(json.dumps({"n": 0, "first": None, "last": None,
                                         "polls": polls}))
    if kind == "share":
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while not stop.exists():
        for m in poll():
            if m.error():
                continue
            n += 1
            last = time.monotonic()
            first = first or last
        polls += 1
        if time.monotonic() - written > 0.1:
            Path(out).write_text(json.dumps({"n": n, "first": first, "last": last,
                                             "polls": polls}))
            written = time.monotonic()
    if kind == "share":
        c.commit_sync(10)
    c.close()
    Path(out).write_text(json.dumps({"n": n, "first": first, "last": last, "polls": polls}))
    return 0


def run_row(kind: str, bootstrap: str, topic: str, n: int, consumers: int, work: Path,
            max_records: int) -> tuple[float, int]:
    """Start the consumers (share ones join on an idle topic), wait until they all poll,
    then let them read `topic` (`n` records); the rate from the first record received to
    the last, across the consumers."""
    group = f"bench-{kind}-{consumers}"
    if kind == "share":
        _create(bootstrap, topic + "-idle")
        _set_group(bootstrap, group)
    outs = [str(work / f"{group}-{i}.json") for i in range(consumers)]
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", kind, bootstrap, group,
                               topic, o, str(max_records)], cwd=ROOT) for o in outs]

    def state():
        rows = []
        for o in outs:
            try:
                rows.append(json.loads(Path(o).read_text()))
            except (OSError, ValueError):
                rows.append({"n": 0, "first": None, "last": None, "polls": 0})
        return rows

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and min(r["polls"] for r in state()) < 10:
        time.sleep(0.1)
    time.sleep(1.0)  # share groups: every member has joined (heartbeats)
    for o in outs:
        Path(o + ".go").touch()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and sum(r["n"] for r in state()) < n:
        time.sleep(0.05)
    for o in outs:
        Path(o + ".stop").touch()
    for p in procs:
        p.wait(60)
    rows = state()
    total = sum(r["n"] for r in rows)
    assert total >= n, total
    first = min(r["first"] for r in rows if r["first"])
    last = max(r["last"] for r in rows if r["last"])
    return n / (last - first), sum(1 for r in rows if r["n"])


def ack_latency(bootstrap: str, topic: str, commits: int) -> tuple[float, float]:
    """commit_sync of explicit ACCEPTs, 10 records a commit (RecordBatches of 10)."""
    from confluent_kafka import Producer, ShareConsumer
    group = "bench-ack"
    _create(bootstrap, topic)
    _set_group(bootstrap, group)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(commits):
        for j in range(10):
            p.produce(topic, b"x" * 100, key=str(i * 10 + j).encode())
        p.flush(30)  # one RecordBatch of 10: a poll gets 10
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit", "max.poll.records": 10})
    c.subscribe([topic])
    times = []
    idle_since = time.monotonic()
    while len(times) < commits and time.monotonic() - idle_since < 10:
        msgs = [m for m in c.poll(1.0) or [] if not m.error()]
        if not msgs:
            continue
        idle_since = time.monotonic()
        for m in msgs:
            c.acknowledge(m)
        t = time.perf_counter()
        c.commit_sync(30)
        times.append((time.perf_counter() - t) * 1000)
    c.close()
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--acks", type=int, default=1000)
    ap.add_argument("--max-records", type=int, default=500)
    ap.add_argument("--worker", nargs=6)
    args = ap.parse_args()
    if args.worker:
        kind, bs, group, topic, out, mr = args.worker
        return worker(kind, bs, group, topic, out, int(mr))
    if args.quick or os.environ.get("JOSEF_BENCH_QUICK"):
        args.records, args.acks = 20_000, 100
    from tests.integration.harness import BrokerProcess
    base = Path(os.environ.get("JOSEF_BENCH_DIR") or tempfile.mkdtemp(
        prefix="josef-bench-share-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    broker = BrokerProcess(base / "broker", {"num.partitions": "1",
                                             "offsets.topic.num.partitions": "3",
                                             "share.coordinator.state.topic.num.partitions": "3"})
    broker.start()
    rows = []
    try:
        bs = broker.bootstrap
        t0 = time.monotonic()
        n, mr = args.records, args.max_records
        _create(bs, "bench-share")
        _produce(bs, "bench-share", n, args.value_bytes)
        _log("produced", t0)
        base_rate, _ = run_row("classic", bs, "bench-share", n, 1, base, mr)
        _log("classic", t0)
        rows.append(("classic consumer (assign, no commits)", base_rate, 1, None))
        for k in (1, 3, 6):
            rate, served = run_row("share", bs, "bench-share", n, k, base, mr)
            _log(f"{k} share consumers", t0)
            rows.append((f"{k} share consumer{'s' if k > 1 else ''} (implicit acks)", rate,
                         served, rate / base_rate))
        p50, p99 = ack_latency(bs, "bench-acks", args.acks)
        _log("acks", t0)
    finally:
        broker.stop()
        if not os.environ.get("JOSEF_BENCH_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {os.cpu_count()} "
        f"CPUs; one broker (log dir under /dev/shm), one partition, {args.records:,} records "
        f"of {args.value_bytes} bytes; ShareFetch MaxRecords {args.max_records}; "
        f"`uptime`: {uptime}",
        "",
        "| workload | records/s | consumers served | vs classic |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, rate, served, ratio in rows:
        lines.append(f"| {name} | {rate:,.0f} | {served} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    lines += ["", f"Acknowledgement latency (explicit ACCEPT of 10 records, commit_sync round "
                  f"trip, {args.acks} commits): p50 {p50:.2f} ms, p99 {p99:.2f} ms.", "",
              "Reading: a share consumer is bound by round trips. Each ShareFetch hands out up "
              "to MaxRecords (whole batches) and, with implicit acknowledgement, the next "
              "fetch (carrying the acknowledgements, which the broker makes durable in "
              "`__share_group_state` before answering) leaves only when the application "
              "polls again; a classic consumer streams the partition with prefetching and "
              "no per-record state. On a 2-CPU machine 3 and 6 consumer processes also "
              "compete with the broker for the CPUs.", ""]
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "share.md"
    out.write_text("## Share groups benchmark (benchmarks/bench_share.py)\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
