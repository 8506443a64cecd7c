"""Replication benchmark: what synchronous 3-way replication costs (issues 12 and 21).

One ZooKeeper (Debian package) and 3 Josef brokers as processes (tests/integration/cluster.py,
ZooKeeper mode), log dirs in /dev/shm when present. Topics of 3 partitions, one leader per
broker. Run: ``python benchmarks/bench_replication.py`` (about 15 minutes on 2 cores; prints
the tables below and writes ``benchmarks/results/replication.md``; ``--profile DIR`` adds the
py-spy profiles).

1. **The issue-21 workload** (Kafka's ``kafka-producer-perf-test`` shape): a producer process
   sends ``--records`` (2,000,000) records of 100 B with ``linger.ms=5`` and 16 KiB batches
   (``batch.size`` 16384, the Java client's default), acks=all to an RF 3 topic
   (min.insync.replicas=2) and acks=1 to an RF 1 topic, ``--rounds`` (3) rounds alternating.
   Kafka's perf tool cannot be assembled from the kafka-clients jar alone (it needs
   argparse4j and kafka-server-common), so the producer is ``benchmarks/java/PerfProducer.java``
   (compiled at start against the kafka-clients jar tests/setup.sh installs): the genuine
   Java client with its own defaults (idempotence on for acks=all, off for acks=1, 5 requests
   in flight, TCP_NODELAY), sending as fast as it accepts and timing each record from send()
   to its callback, as the perf tool does. ``--client confluent`` uses confluent-kafka
   (librdkafka) in its own process instead, set up the same way. Reported per workload:
   records/s, the three brokers' CPU seconds (/proc utime+stime) for the round, p50/p99 of
   the per-record latency; then the throughput ratio (best round / best round; aim >= 0.6)
   and the CPU ratio (median / median; aim <= 3.5), and the largest event-loop lag any
   broker reported meanwhile (``josef_event_loop_lag_seconds`` scraped every second; aim
   < 0.1 s; on a loaded machine it also counts the time the process waited for a CPU).
2. **Large batches**: the same with ``batch.size`` 1,000,000 (aim: throughput ratio >= 0.9).
3. **Idle cost**: ``--idle-partitions`` (3,000) partitions of RF 3 over 30 topics, leaders
   spread over the brokers, nothing produced: each broker's CPU over ``--idle-seconds`` (30)
   as % of one core (aim < 2%).
4. With ``--profile DIR``: one more round of each workload under ``py-spy record --format
   raw`` on all three brokers (a pass of its own: sampling pauses the process), raw files in
   DIR and the top self / inclusive entries printed (benchmarks/profiling.py).
5. Python function calls and fetch rounds per acks=all append with three brokers in this
   process (benchmarks/replication_calls.py; ``--no-calls`` skips it): a cost measure the
   machine's load does not move.
6. With ``--extras`` (issue 12's sections): single-record latency (linger.ms=0, one record in
   flight) and catch-up of a follower ``--catchup-mb`` behind against copying the files.

``uptime``'s load average is printed with the figures: on a shared machine the throughput
swings with the load, the CPU-seconds ratio much less. ``--quick`` runs a smoke-sized
version (not written to results). Never run from the test suite.
"""

from __future__ import annotations

import argparse
import array
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from profiling import PySpy, markdown_top  # noqa: E402

from tests.integration.cluster import Cluster, ZooKeeperServer  # noqa: E402
from tests.integration.harness import free_port  # noqa: E402

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


def produce_child(spec: dict) -> dict:
    """Runs in the producer process (``--produce-child JSON``): send ``spec["records"]``
    records of ``spec["size"]`` bytes and return rate (records/s), elapsed s, p50/p99 ms."""
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": spec["bootstrap"], "acks": spec["acks"], "linger.ms": 5,
            "batch.size": spec["batch_size"], "queue.buffering.max.messages": 1000000,
            "queue.buffering.max.kbytes": 1 << 20,
            # the Java client's 3.x defaults, which kafka-producer-perf-test runs with:
            # idempotent when acks=all (not with acks=1), 5 requests in flight per broker,
            # TCP_NODELAY (librdkafka's defaults differ: no idempotence, 1,000,000 in flight,
            # Nagle on)
            "enable.idempotence": spec["acks"] == "all",
            "max.in.flight.requests.per.connection": 5, "socket.nagle.disable": True,
            "log_level": 3}
    conf.update(spec.get("extra") or {})
    p = Producer(conf)
    value = b"x" * spec["size"]
    lat = array.array("f")
    failed = []

    def report(err, msg):
        if err is not None:
            failed.append(err)
        else:
            lat.append(msg.latency())

    p.produce(spec["topic"], value, on_delivery=report)  # connect and learn metadata first
    p.flush(60)
    del lat[:]
    n = spec["records"]
    produce_ = p.produce
    topic = spec["topic"]
    start = time.perf_counter()
    for _ in range(n):
        try:
            produce_(topic, value, on_delivery=report)
        except BufferError:
            while True:
                p.poll(0.005)
                try:
                    produce_(topic, value, on_delivery=report)
                    break
                except BufferError:
                    pass
    p.flush(600)
    elapsed = time.perf_counter() - start
    if failed:
        raise SystemExit(f"{len(failed)} records failed: {failed[0]}")
    xs = sorted(lat)
    return {"rate": n / elapsed, "elapsed": elapsed,
            "p50": xs[len(xs) // 2] * 1000, "p99": xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1000}


JAVA_SRC = Path(__file__).resolve().parent / "java" / "PerfProducer.java"
_java: dict = {}


def java_producer_classpath() -> str | None:
    """Compile benchmarks/java/PerfProducer.java against the kafka-clients jar that
    tests/setup.sh installs (once per run); None without javac, java or the jar."""
    if "cp" in _java:
        return _java["cp"]
    _java["cp"] = None
    if shutil.which("javac") is None or shutil.which("java") is None:
        return None
    from tests.integration.harness import JAVA_JARS, java_jar_dir

    try:
        lib = java_jar_dir()
    except FileNotFoundError:
        return None
    jars = [str(lib / j) for j in JAVA_JARS if (lib / j).exists()]
    if not jars or not jars[0].endswith("kafka-clients.jar"):
        return None
    build = Path(tempfile.mkdtemp(prefix="josef-perf-producer-"))
    subprocess.run(["javac", "-nowarn", "-d", str(build), "-cp", os.pathsep.join(jars),
                    str(JAVA_SRC)], check=True, capture_output=True, timeout=300)
    _java["cp"] = os.pathsep.join([str(build), *jars])
    return _java["cp"]


def produce(bootstrap: str, topic: str, n: int, acks: str, batch_size: int,
            size: int = 100, extra: dict | None = None, client: str = "java") -> dict:
    """One round in a producer process of its own: the Java client (PerfProducer, the
    client's own defaults plus acks, linger.ms=5, batch.size) or confluent-kafka (see
    `produce_child`); `extra`: more producer settings (also from JOSEF_BENCH_PRODUCER,
    JSON)."""
    extra = {**json.loads(os.environ.get("JOSEF_BENCH_PRODUCER", "{}")), **(extra or {})}
    if client == "java":
        conf = {"acks": acks, "linger.ms": 5, "batch.size": batch_size, **extra}
        cmd = ["java", "-cp", java_producer_classpath(), "PerfProducer", bootstrap, topic,
               str(n), str(size), *(f"{k}={v}" for k, v in conf.items())]
    else:
        spec = {"bootstrap": bootstrap, "topic": topic, "records": n, "acks": acks,
                "batch_size": batch_size, "size": size, "extra": extra}
        cmd = [sys.executable, __file__, "--produce-child", json.dumps(spec)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"producer failed ({out.returncode}): {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result.get("failed"):
        raise RuntimeError(f"{result['failed']} records failed")
    return result


class LagWatcher:
    """Scrapes ``josef_event_loop_lag_seconds`` from each broker's /metrics once a second
    (a thread); `peak()` is the largest value seen since the last `reset()`, by broker."""

    def __init__(self, urls: dict[int, str]) -> None:
        self.urls = urls
        self.peaks = dict.fromkeys(urls, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def reset(self) -> None:
        self.peaks = dict.fromkeys(self.urls, 0.0)

    def peak(self) -> float:
        return max(self.peaks.values(), default=0.0)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for b, url in self.urls.items():
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        text = r.read().decode()
                except OSError:
                    continue
                m = re.search(r"^josef_event_loop_lag_seconds ([0-9.eE+-]+)$", text, re.M)
                if m:
                    self.peaks[b] = max(self.peaks[b], float(m.group(1)))


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


def idle_cost(cluster: Cluster, partitions: int, seconds: float) -> tuple[dict, float]:
    """({broker: % of one core}, s to create and replicate) with `partitions` idle RF 3
    partitions in 30 topics, leaders spread over the brokers."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ids = cluster.ids
    per_topic = max(1, partitions // 30)
    names = [f"idle-{i:02d}" for i in range(max(1, partitions // per_topic))]
    start = time.perf_counter()
    topics = [NewTopic(n, per_topic, replica_assignment=[
        [ids[(p + i) % len(ids)] for i in range(3)] for p in range(per_topic)])
        for n in names]
    for f in admin.create_topics(topics, request_timeout=300).values():
        f.result(300)

    def all_in_sync() -> bool:
        md = admin.list_topics(timeout=30)
        parts = [p for n in names for p in md.topics[n].partitions.values()] \
            if all(n in md.topics for n in names) else []
        return len(parts) == len(names) * per_topic and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in parts)

    cluster.wait_until("idle partitions created and in sync", all_in_sync, timeout=900,
                       interval=1.0)
    created = time.perf_counter() - start
    time.sleep(10)  # let the creation work (LeaderAndIsr, first fetches) settle
    pids = {b: cluster.broker(b).pid for b in ids}
    before = {b: cpu_seconds([pid]) for b, pid in pids.items()}
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    return {b: 100 * (cpu_seconds([pid]) - before[b]) / wall for b, pid in pids.items()}, created


def run_workload(cluster: Cluster, rounds: int, records: int, batch_size: int,
                 lag: LagWatcher | None, client: str) -> dict:
    """Alternating rounds of acks=1 RF 1 and acks=all RF 3; per workload the rounds'
    results with the brokers' CPU seconds, and the peak loop lag during the RF 3 rounds."""
    pids = [cluster.broker(b).pid for b in cluster.ids]
    out = {"rf1": [], "rf3": [], "lag": 0.0}
    for _ in range(rounds):
        for key, topic, acks in (("rf1", "bench-rf1", "1"), ("rf3", "bench-rf3", "all")):
            if lag is not None:
                lag.reset()
            before = cpu_seconds(pids)
            r = produce(cluster.bootstrap, topic, records, acks, batch_size, client=client)
            time.sleep(0.5)  # the followers' last fetches belong to the round
            r["cpu"] = cpu_seconds(pids) - before
            out[key].append(r)
            print(f"  {topic} acks={acks} batch.size={batch_size}: {r['rate']:,.0f} records/s, "
                  f"brokers {r['cpu']:.1f} CPU-s, p99 {r['p99']:.0f} ms (load "
                  f"{load()})", file=sys.stderr, flush=True)
            if lag is not None and key == "rf3":
                time.sleep(1.2)
                out["lag"] = max(out["lag"], lag.peak())
    return out


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def workload_table(title: str, res: dict, records: int) -> list[str]:
    rf1, rf3 = res["rf1"], res["rf3"]
    best1, best3 = max(r["rate"] for r in rf1), max(r["rate"] for r in rf3)
    cpu1 = statistics.median(r["cpu"] for r in rf1)
    cpu3 = statistics.median(r["cpu"] for r in rf3)

    def rates(rs):
        return ", ".join(f"{r['rate'] / 1000:,.0f}k" for r in rs)

    def cpus(rs):
        return ", ".join(f"{r['cpu']:.1f}" for r in rs)

    def lat(rs, k):
        return statistics.median(r[k] for r in rs)

    return [
        title, "",
        f"| topic | records/s (rounds) | best | brokers' CPU s for {records:,} records "
        "(rounds) | median CPU s | p50 ms | p99 ms |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: |",
        f"| acks=1, RF 1 | {rates(rf1)} | {best1:,.0f} | {cpus(rf1)} | {cpu1:.1f} | "
        f"{lat(rf1, 'p50'):.1f} | {lat(rf1, 'p99'):.1f} |",
        f"| acks=all, RF 3, min.insync 2 | {rates(rf3)} | {best3:,.0f} | {cpus(rf3)} | "
        f"{cpu3:.1f} | {lat(rf3, 'p50'):.1f} | {lat(rf3, 'p99'):.1f} |",
        f"| **RF 3 / RF 1** | | **{best3 / best1:.2f}x** | | **{cpu3 / cpu1:.1f}x** | | |",
        "",
        f"Largest event-loop lag a broker reported during the RF 3 rounds: "
        f"{res['lag'] * 1000:.0f} ms.",
        "",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--large-records", type=int, default=None,
                    help="records per round with 1 MB batches (default: --records)")
    ap.add_argument("--idle-partitions", type=int, default=None, help="0 = skip")
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--profile", type=Path, default=None,
                    help="directory for py-spy raw profiles of one extra round")
    ap.add_argument("--no-calls", action="store_true",
                    help="skip the in-process count of Python calls per acks=all append")
    ap.add_argument("--extras", action="store_true",
                    help="also single-record latency and follower catch-up (issue 12)")
    ap.add_argument("--latency-records", type=int, default=None)
    ap.add_argument("--catchup-mb", type=int, default=None)
    ap.add_argument("--client", choices=("java", "confluent"), default=None,
                    help="the producer: the Java client (default when javac and the "
                         "kafka-clients jar are there) or confluent-kafka")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--produce-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.produce_child:
        print(json.dumps(produce_child(json.loads(args.produce_child))))
        return 0
    quick = args.quick or os.environ.get("JOSEF_BENCH_QUICK") == "1"
    rounds = args.rounds or (1 if quick else 3)
    records = args.records or (100_000 if quick else 2_000_000)
    large_records = args.large_records or records
    idle_n = args.idle_partitions if args.idle_partitions is not None else \
        (300 if quick else 3000)
    lat_n = args.latency_records or (200 if quick else 2000)
    catchup_mb = args.catchup_mb or (32 if quick else 1024)
    client = args.client or ("java" if java_producer_classpath() else "confluent")
    if client == "java" and not java_producer_classpath():
        ap.error("--client java needs javac, java and the kafka-clients jar (tests/setup.sh)")

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    work = Path(tempfile.mkdtemp(prefix="josef-bench-replication-", dir=base))
    zk = ZooKeeperServer(work / "zk")
    zk.start()
    metrics_ports = {b: free_port() for b in (1, 2, 3)}
    cluster = Cluster(work / "cluster", zk, 3, props={
        "log.segment.bytes": str(256 << 20), "zookeeper.session.timeout.ms": "10000",
        "replica.lag.time.max.ms": "30000"}, broker_props={
        b: {"prometheus.listener": f"http://127.0.0.1:{port}"}
        for b, port in metrics_ports.items()})
    lag = LagWatcher({b: f"http://127.0.0.1:{port}/metrics"
                      for b, port in metrics_ports.items()})
    started = time.strftime("%Y-%m-%d %H:%M")
    sections: list[str] = []
    try:
        cluster.start()
        lag.start()
        create(cluster, "bench-rf1", 1, PARTITIONS)
        create(cluster, "bench-rf3", 3, PARTITIONS, {"min.insync.replicas": "2"})
        load_before = load()
        small = run_workload(cluster, rounds, records, 16384, lag, client)
        load_small = load()
        large = run_workload(cluster, rounds, large_records, 1_000_000, lag, client)
        load_large = load()
        sections += workload_table(
            f"Issue 21's workload: {records:,} records of 100 B, linger.ms=5, batch.size "
            f"16384, {rounds} rounds alternating (load average before {load_before}, after "
            f"{load_small}). Aim: throughput ratio >= 0.6, CPU ratio <= 3.5, loop lag "
            "< 100 ms.", small, records)
        sections += workload_table(
            f"Large batches: {large_records:,} records of 100 B, linger.ms=5, batch.size "
            f"1,000,000 (load average after {load_large}). Aim: throughput ratio >= 0.9.",
            large, large_records)
        if args.profile is not None:
            sections += profile_round(cluster, args.profile, records, client)
        if not args.no_calls:
            from replication_calls import measure, table

            sections += table(measure(), 300)
        if args.extras:
            lat1 = latencies(cluster.bootstrap, "bench-rf1", lat_n, "1")
            lat3 = latencies(cluster.bootstrap, "bench-rf3", lat_n, "all")
            rejoin, copy, size = catch_up(cluster, catchup_mb, work)
            sections += extras_lines(lat_n, lat1, lat3, rejoin, copy, size)
        if idle_n:
            lag.stop()  # scraping /metrics every second is not idle
            cores, created = idle_cost(cluster, idle_n, args.idle_seconds)
            sections += [
                f"Idle cost: {idle_n:,} RF 3 partitions (30 topics, leaders spread), nothing "
                f"produced; created and in sync in {created:.0f} s; CPU over "
                f"{args.idle_seconds:.0f} s (load average {load()}). Aim: < 2% per broker.",
                "",
                "| broker | % of one core |", "| --- | ---: |",
                *[f"| {b} | {pct:.2f} |" for b, pct in sorted(cores.items())], ""]
    finally:
        lag.stop()
        cluster.stop()
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)

    lines = ["# Replication (benchmarks/bench_replication.py)", "",
             f"{started}; 3 brokers + ZooKeeper on this machine ({os.cpu_count()} CPUs), "
             f"{producer_name(client)} producer in its own process, topics of "
             f"{PARTITIONS} partitions (one leader per broker), log dirs in "
             f"{base or 'a temp dir'}.", "", *sections]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)
    return 0


def producer_name(client: str) -> str:
    if client == "java":
        return "the Java client's (kafka-clients jar, benchmarks/java/PerfProducer.java)"
    import confluent_kafka

    return f"confluent-kafka {confluent_kafka.libversion()[0]}"


def profile_round(cluster: Cluster, directory: Path, records: int, client: str) -> list[str]:
    """One more round of each workload with py-spy on every broker."""
    if not PySpy.available():
        return ["py-spy is not installed (pip install py-spy): no profile.", ""]
    out = []
    for name, topic, acks in (("rf3", "bench-rf3", "all"), ("rf1", "bench-rf1", "1")):
        spy = PySpy({f"{name}-broker{b}": cluster.broker(b).pid for b in cluster.ids},
                    directory)
        spy.start()
        time.sleep(1.0)
        r = produce(cluster.bootstrap, topic, records, acks, 16384, client=client)
        files = spy.stop()
        out += markdown_top(
            f"py-spy, {'acks=all RF 3' if name == 'rf3' else 'acks=1 RF 1'}, the three brokers "
            f"together ({records:,} records, 16 KiB batches, {r['rate']:,.0f} records/s under "
            f"the profiler)", files.values(), 20)
    return out


def extras_lines(lat_n, lat1, lat3, rejoin, copy, size) -> list[str]:
    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return [
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
    ]


if __name__ == "__main__":
    sys.exit(main())
