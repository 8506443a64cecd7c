"""Metrics benchmark: does scraping ``/metrics`` 10 times a second slow produce down?

One Josef broker (``python -m broker``, log dir in /dev/shm when present) with
``prometheus.listener`` set and a topic of ``--partitions`` partitions (so the scrape carries
per-partition Log gauges too). The client is this process: the confluent-kafka producer
(librdkafka), ``--records`` records of 100 bytes, acks=1, ``linger.ms=0`` (many small produce
requests, the workload most sensitive to per-request work). Rounds alternate between
*quiet* (nobody scrapes) and *scraped* (a thread GETs ``/metrics`` every 100 ms for the whole
round, from its own process as Prometheus would), quiet first in even rounds and scraped
first in odd ones; the best round of each is compared (target: scraped >= 0.95 x quiet), and
the median of the per-round ratios is reported beside it. Also reported:
the scrape's latency (median and max, ms), its size, and the broker's event-loop lag gauge
seen during the scraped rounds.

Run: ``python benchmarks/bench_metrics.py [--quick] [--rounds N] [--records N]``; writes
``benchmarks/results/metrics.md``. Never run from the test suite.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "metrics.md"
TOPIC = "bench-metrics"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, partitions: int) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="josef-bench-metrics-", dir=base))
        self.port, self.mport = free_port(), free_port()
        props = self.dir / "server.properties"
        props.write_text(
            f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{self.port}\n"
            f"log.dirs={self.dir / 'data'}\noffsets.topic.replication.factor=1\n"
            f"num.partitions={partitions}\n"
            f"prometheus.listener=http://127.0.0.1:{self.mport}\n")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.out = open(self.dir / "broker.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", str(props),
                                      "--log-dir", str(self.dir / "logs")],
                                     stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.mport}/metrics"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url, timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("broker did not start: " + (self.dir / "broker.out").read_text())

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def produce(bootstrap: str, n: int) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"x" * 100
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, value=value, key=b"%d" % (i % 1000))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return n / elapsed


def _scrape_loop(url: str, period: float, stop, results) -> None:
    """In its own process, as Prometheus would be: GET ``url`` every ``period`` s."""
    lag_re = re.compile(rb"^josef_event_loop_lag_seconds ([0-9.e+-]+)$", re.M)
    latencies: list[float] = []
    size, lag = 0, 0.0
    next_at = time.monotonic()
    while not stop.is_set():
        t = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=10).read()
        latencies.append((time.perf_counter() - t) * 1000)
        size = len(body)
        m = lag_re.search(body)
        if m:
            lag = max(lag, float(m.group(1)))
        next_at += period
        stop.wait(max(0.0, next_at - time.monotonic()))
    results.put((latencies, size, lag))


class Scraper:
    """A separate process scraping every ``period`` seconds (not sharing the client's GIL)."""

    def __init__(self, url: str, period: float = 0.1) -> None:
        ctx = multiprocessing.get_context("fork")
        self.stop_event = ctx.Event()
        self.results = ctx.Queue()
        self.proc = ctx.Process(target=_scrape_loop,
                                args=(url, period, self.stop_event, self.results), daemon=True)
        self.latencies: list[float] = []
        self.size = 0
        self.loop_lag = 0.0

    def start(self) -> None:
        self.proc.start()

    def join(self) -> None:
        self.stop_event.set()
        self.latencies, self.size, self.loop_lag = self.results.get(timeout=60)
        self.proc.join(30)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (from /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_cpu_cost(broker: Broker, seconds: float) -> tuple[float, float]:
    """Broker CPU (ms per second) over ``seconds`` idle, then scraped every 100 ms: what the
    scrapes cost in CPU time, independent of how busy the machine is."""
    pid = broker.proc.pid
    t0 = cpu_seconds(pid)
    time.sleep(seconds)
    idle = (cpu_seconds(pid) - t0) / seconds * 1000
    s = Scraper(broker.url)
    t0 = cpu_seconds(pid)
    s.start()
    time.sleep(seconds)
    s.join()
    scraped = (cpu_seconds(pid) - t0) / seconds * 1000
    return idle, (scraped - idle) * seconds / max(1, len(s.latencies))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 4)
    records = args.records or (20_000 if args.quick else 200_000)
    partitions = args.partitions or (8 if args.quick else 64)
    broker = Broker(partitions)
    quiet: list[float] = []
    scraped: list[float] = []
    latencies: list[float] = []
    size = 0
    lag = 0.0
    try:
        produce(broker.bootstrap, 2000)  # creates the topic, warms up
        idle_cpu, per_scrape_ms = scrape_cpu_cost(broker, 3.0 if args.quick else 10.0)
        for i in range(rounds):
            if i % 2 == 0:  # the order alternates, so a drifting machine favours neither side
                quiet.append(produce(broker.bootstrap, records))
            s = Scraper(broker.url)
            s.start()
            try:
                scraped.append(produce(broker.bootstrap, records))
            finally:
                s.join()
            if i % 2 == 1:
                quiet.append(produce(broker.bootstrap, records))
            latencies += s.latencies
            size = s.size
            lag = max(lag, s.loop_lag)
    finally:
        broker.stop()
    best_q, best_s = max(quiet), max(scraped)
    ratio = best_s / best_q
    # each scraped round against the quiet round next to it: robust to a drifting machine
    paired = statistics.median(s_ / q for s_, q in zip(scraped, quiet, strict=True))
    lines = [
        "# Metrics: produce throughput while Prometheus scrapes",
        "",
        f"confluent-kafka producer, {records:,} records of 100 B per round, acks=1, "
        f"linger.ms=0, topic of {partitions} partitions; {rounds} rounds each, alternating; "
        "best round.",
        "",
        "| workload | records/s | ratio | aim |",
        "| --- | ---: | ---: | --- |",
        f"| produce, nobody scrapes | {best_q:,.0f} | 1.00 | |",
        f"| produce, /metrics scraped every 100 ms | {best_s:,.0f} | {ratio:.2f} | >= 0.95 |",
        "",
        f"Median of the per-round ratios (each scraped round over its neighbouring quiet "
        f"round): {paired:.2f}.",
        "",
        f"Rounds (records/s): quiet {', '.join(f'{x:,.0f}' for x in quiet)}; scraped "
        f"{', '.join(f'{x:,.0f}' for x in scraped)}. Scrape latency median "
        f"{statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms over "
        f"{len(latencies)} scrapes of {size:,} bytes; largest event-loop lag the broker "
        f"reported while scraped: {lag * 1000:.1f} ms.",
        "",
        f"Broker CPU per scrape (idle broker, /proc utime+stime with and without 10 scrapes "
        f"a second): {per_scrape_ms:.1f} ms, i.e. {per_scrape_ms:.1f}% of one core at 10 "
        f"scrapes/s (idle broker: {idle_cpu:.0f} ms CPU per second).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write and not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
