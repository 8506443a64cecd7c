"""Replication benchmark: what synchronous 3-way replication costs (issue 12).

One ZooKeeper (Debian package) and 3 Josef brokers (tests/integration/cluster.py), log dirs
in /dev/shm when present. The client is this process: the confluent-kafka producer
(librdkafka), 100-byte records (Kafka's own replication benchmark used 100-byte records),
linger.ms=5, no compression. Measured in the same run, on topics of the same shape (3
partitions, one leader per broker):

1. **Throughput**: acks=all to an RF 3 topic (min.insync.replicas=2) vs acks=1 to an RF 1
   topic; rounds alternate, best round of each; the ratio is the result (Kafka's published
   figure for synchronous 3x replication is ~52% of unreplicated throughput; aim >= 0.5).
2. **CPU per replicated MB**: the brokers' CPU seconds (/proc utime+stime of the 3 processes)
   per MB of records in both runs; the difference, divided by the two extra copies, is the
   cost of one replicated MB.
3. **Latency**: acks=all, one record in flight at a time (linger.ms=0): p50 / p99 of the
   delivery latency librdkafka reports, against acks=1 on the RF 1 topic.
4. **Catch-up**: one follower of a 1-partition RF 3 topic is stopped, `--catchup-mb` MiB are
   written (acks=1), the follower is started again; time until it is back in the ISR, against
   copying the leader's segment files of that partition (shutil.copytree, same file system).

Run: ``python benchmarks/bench_replication.py [--quick] [--rounds N] [--records N]
[--catchup-mb MB]``; writes ``benchmarks/results/replication.md`` (not with --quick).
Never run from the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.cluster import Cluster, ZooKeeperServer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "replication.md"
PARTITIONS = 3


def cpu_seconds(pids) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def create(cluster: Cluster, name: str, rf: int, partitions: int, configs=None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ids = cluster.ids
    assignment = [[ids[(p + i) % len(ids)] for i in range(rf)] for p in range(partitions)]
    futures = admin.create_topics([NewTopic(name, partitions, replica_assignment=assignment,
                                            config=configs or {})])
    futures[name].result(60)
    cluster.wait_for_leaders(name, partitions, timeout=60)
    cluster.wait_until(f"ISR of {name} complete", lambda: all(
        len(cluster.partition_state(name, p)["isr"]) == rf for p in range(partitions)), 60)


def produce(bootstrap: str, topic: str, n: int, acks: str, size: int = 100) -> float:
    """Records per second for `n` records (confluent-kafka, linger.ms=5)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                  "queue.buffering.max.messages": 1000000, "enable.idempotence": False,
                  "batch.size": 1000000})
    value = b"x" * size
    failed = []

    def report(err, _msg):
        if err is not None:
            failed.append(err)

    p.produce(topic, value, on_delivery=report)  # connect and learn metadata first
    p.flush(60)
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(600)
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return n / elapsed


def latencies(bootstrap: str, topic: str, n: int, acks: str) -> list[float]:
    """Delivery latency (ms) of `n` records sent one at a time (linger.ms=0)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "enable.idempotence": False})
    out: list[float] = []

    def report(err, msg):
        if err is None:
            out.append(msg.latency() * 1000)

    p.produce(topic, b"warm", on_delivery=report)
    p.flush(60)
    out.clear()
    for i in range(n):
        p.produce(topic, b"%099d" % i, partition=i % PARTITIONS, on_delivery=report)
        p.flush(30)
    return out


def catch_up(cluster: Cluster, mb: int, work: Path) -> tuple[float, float, int]:
    """(seconds for a stopped follower to rejoin the ISR after `mb` MiB, seconds to copy the
    leader's segment files, bytes)."""
    topic = "bench-catchup"
    create(cluster, topic, 3, 1)
    st = cluster.partition_state(topic, 0)
    leader = st["leader"]
    follower = next(b for b in st["isr"] if b != leader)
    cluster.stop_broker(follower)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1000000, "queue.buffering.max.messages": 1000000,
                  "enable.idempotence": False})
    value = os.urandom(1024)
    for _ in range(mb * 1024):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(900)
    src = cluster.broker(leader).log_dir / f"{topic}-0"
    size = sum(f.stat().st_size for f in src.glob("*.log"))
    cluster.wait_until("leader wrote everything", lambda: cluster.partition_state(
        topic, 0)["isr"] == [leader] or len(cluster.partition_state(topic, 0)["isr"]) == 2,
        timeout=60)
    start = time.perf_counter()
    cluster.start_broker(follower)
    cluster.wait_until("follower back in the ISR", lambda: follower in cluster.partition_state(
        topic, 0)["isr"], timeout=1800, interval=0.05)
    rejoin = time.perf_counter() - start
    dst = work / "copy"
    start = time.perf_counter()
    shutil.copytree(src, dst)
    os.sync()
    copy = time.perf_counter() - start
    shutil.rmtree(dst)
    return rejoin, copy, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--latency-records", type=int, default=None)
    ap.add_argument("--catchup-mb", type=int, default=None)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    quick = args.quick or os.environ.get("JOSEF_BENCH_QUICK") == "1"
    rounds = args.rounds or (1 if quick else 3)
    records = args.records or (50_000 if quick else 1_000_000)
    lat_n = args.latency_records or (200 if quick else 2000)
    catchup_mb = args.catchup_mb or (32 if quick else 1024)

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    work = Path(tempfile.mkdtemp(prefix="josef-bench-replication-", dir=base))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    cluster = Cluster(work / "cluster", zk, 3, props={
        "log.segment.bytes": str(256 << 20), "zookeeper.session.timeout.ms": "10000",
        "replica.lag.time.max.ms": "30000"})
    try:
        cluster.start()
        create(cluster, "bench-rf1", 1, PARTITIONS)
        create(cluster, "bench-rf3", 3, PARTITIONS, {"min.insync.replicas": "2"})
        pids = [cluster.broker(b).pid for b in cluster.ids]
        rf1, rf3, cpu1, cpu3 = [], [], [], []
        for _ in range(rounds):
            for topic, acks, rates, cpus in (("bench-rf1", "1", rf1, cpu1),
                                            ("bench-rf3", "all", rf3, cpu3)):
                before = cpu_seconds(pids)
                rates.append(produce(cluster.bootstrap, topic, records, acks))
                cpus.append(cpu_seconds(pids) - before)
        mb = records * 100 / 1e6
        lat1 = latencies(cluster.bootstrap, "bench-rf1", lat_n, "1")
        lat3 = latencies(cluster.bootstrap, "bench-rf3", lat_n, "all")
        rejoin, copy, size = catch_up(cluster, catchup_mb, work)
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    best1, best3 = max(rf1), max(rf3)
    c1, c3 = min(cpu1) / mb, min(cpu3) / mb
    per_replica = (c3 - c1) / 2
    lines = [
        "# Replication (benchmarks/bench_replication.py)",
        "",
        f"3 brokers + ZooKeeper on this machine, confluent-kafka producer, {records:,} records "
        f"of 100 B per round ({mb:.0f} MB), linger.ms=5, no compression, topics of "
        f"{PARTITIONS} partitions (one leader per broker); {rounds} rounds alternating, best "
        "round.",
        "",
        "| workload | records/s | MB/s | ratio | aim |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| acks=1, RF 1 | {best1:,.0f} | {best1 * 100 / 1e6:.2f} | 1.00 | |",
        f"| acks=all, RF 3, min.insync.replicas=2 | {best3:,.0f} | {best3 * 100 / 1e6:.2f} | "
        f"{best3 / best1:.2f} | >= 0.5 (Kafka ~0.52) |",
        "",
        f"Rounds (records/s): RF 1 {', '.join(f'{x:,.0f}' for x in rf1)}; RF 3 "
        f"{', '.join(f'{x:,.0f}' for x in rf3)}.",
        "",
        "| cost | value |",
        "| --- | ---: |",
        f"| broker CPU per MB produced, acks=1 RF 1 | {c1:.2f} s |",
        f"| broker CPU per MB produced, acks=all RF 3 | {c3:.2f} s |",
        f"| CPU per replicated MB (one extra copy: (RF 3 - RF 1) / 2) | {per_replica:.2f} s |",
        "",
        f"Produce latency, one record in flight (linger.ms=0), {lat_n:,} records:",
        "",
        "| acks | p50 ms | p99 ms |",
        "| --- | ---: | ---: |",
        f"| 1 (RF 1) | {pct(lat1, 0.5):.2f} | {pct(lat1, 0.99):.2f} |",
        f"| all (RF 3) | {pct(lat3, 0.5):.2f} | {pct(lat3, 0.99):.2f} |",
        "",
        f"Catch-up: a follower stopped while {size / 2**20:,.0f} MiB were written (1 KiB "
        f"records, acks=1) was back in the ISR {rejoin:.1f} s after its start (broker startup "
        f"included); copying the same segment files took {copy:.2f} s "
        f"({rejoin / copy:.0f}x; {size / 2**20 / rejoin:.0f} MiB/s vs "
        f"{size / 2**20 / copy:.0f} MiB/s).",
        "",
        f"Median of latency: acks=all {statistics.median(lat3):.2f} ms, acks=1 "
        f"{statistics.median(lat1):.2f} ms.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
