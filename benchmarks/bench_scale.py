"""Scale benchmark (issue 22): many partitions, descriptors, memory, failover, metadata storms.

Brokers are subprocesses on 127.0.0.1 (tests/integration/harness.py and cluster.py), stopped by
PID; figures come from /proc (VmRSS, open descriptors, utime+stime) and from clients in this
process (the project's protocol client; Metadata polls, produce probes).

1. One broker (embedded metadata store), for each size (default 10,000 and 50,000 partitions,
   as 100 topics): CreateTopics time; RSS, open descriptors and descriptors per segment; idle
   CPU over 20 s (% of one core); clean restart (SIGTERM, then spawn -> every partition led).
2. Three brokers and ZooKeeper, 100,000 partitions at RF 3 (100 topics of 1,000): create time
   (CreateTopics -> every partition led on every broker's Metadata) and time to full ISR;
   RSS and idle CPU per broker; controller SIGKILL -> every partition led by a live broker
   (from its ``/controller`` znode vanishing, i.e. after the session expired); the killed
   broker restarted -> full ISR again; a clean restart (SIGTERM, spawn) -> full ISR again.
3. A Metadata storm: one request naming 100,000 unknown topics with auto-creation on one
   broker, while another client produces (acks=1) in a loop: answer time, the producer's
   p99 and max latency during the storm.

Aims (issue 22): controller failover < 5 s and clean broker restart < 60 s at 100,000
partitions RF 3; one descriptor or fewer per segment; idle CPU < 2% of a core per broker
with 30,000 idle partitions; RSS under 1 GiB per broker at 100,000 partitions RF 3.

Run: ``nice python benchmarks/bench_scale.py [--quick] [--single 10000,50000]
[--cluster 100000] [--storm 100000] [--skip single,cluster,storm]``; prints a markdown table
and writes ``benchmarks/results/scale.md`` (with ``uptime``: the machine is shared).
``--quick`` (or JOSEF_BENCH_QUICK=1): 2,000 / 3,000 / 5,000.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metadata_view import wait_view  # noqa: E402

from client.connection import KafkaClient  # noqa: E402
from protocol.record_builder import RecordBatchBuilder  # noqa: E402
from tests.integration.cluster import Cluster, ZooKeeperServer  # noqa: E402
from tests.integration.harness import BrokerProcess  # noqa: E402

METADATA, PRODUCE, CREATE_TOPICS = 3, 0, 19
TOPICS = 100
#: zookeeper.session.timeout.ms of the cluster (Kafka's default is 18 s; a shared 2-core
#: machine running 3 brokers with 100,000 partitions starves ZooKeeper heartbeats at times)
SESSION_MS = int(os.environ.get("BENCH_SCALE_SESSION_MS", "30000"))
CLK_TCK = os.sysconf("SC_CLK_TCK")
RESULTS = ROOT / "benchmarks" / "results" / "scale.md"


# ----------------------------------------------------------------------------- /proc
def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def idle_cpu_pct(pids: list[int], seconds: float = 20.0) -> list[float]:
    before = [cpu_s(p) for p in pids]
    time.sleep(seconds)
    return [100.0 * (cpu_s(p) - b) / seconds for p, b in zip(pids, before, strict=True)]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# ----------------------------------------------------------------------------- clients
def create_topics(bootstrap: str, prefix: str, partitions: int, rf: int) -> float:
    """CreateTopics for TOPICS topics sharing ``partitions``, 10 per request; seconds."""
    per = partitions // TOPICS
    started = time.monotonic()
    with KafkaClient(bootstrap, timeout=3600) as k:
        for i in range(0, TOPICS, 10):
            r = k.request(CREATE_TOPICS, {"topics": [
                {"name": f"{prefix}-{t}", "num_partitions": per, "replication_factor": rf}
                for t in range(i, min(i + 10, TOPICS))], "timeout_ms": 3_600_000},
                timeout=3600)
            bad = [(t.name, t.error_code) for t in r.topics if t.error_code]
            if bad:
                raise RuntimeError(f"CreateTopics failed: {bad[:3]}")
    return time.monotonic() - started


def _batch() -> bytes:
    b = RecordBatchBuilder()
    b.append(int(time.time() * 1000), None, b"x")
    return b.build()


class LatencyProbe:
    """A client producing one small record at a time (acks=1) in a thread."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.samples: list[tuple[float, float]] = []  # (start, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        data = _batch()
        with KafkaClient(self.bootstrap, timeout=600) as k:
            while not self._stop.is_set():
                t0 = time.monotonic()
                k.request(PRODUCE, {"acks": 1, "timeout_ms": 30000, "topic_data": [
                    {"name": self.topic, "partition_data": [{"index": 0, "records": data}]}]})
                self.samples.append((t0, time.monotonic() - t0))
                time.sleep(0.005)

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        while not self.samples:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def between(self, start: float, end: float) -> list[float]:
        return [s for t, s in self.samples if start <= t <= end]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# ----------------------------------------------------------------------------- scenarios
def single_broker(work: Path, partitions: int, rows: list) -> None:
    b = BrokerProcess(work / f"single-{partitions}", {"num.partitions": "1"},
                      startup_timeout=1800)
    try:
        b.start()
        base_fds = open_fds(b.pid)
        created = create_topics(b.bootstrap, "s", partitions, 1)
        wait_view([b.bootstrap], "s", partitions, lambda lead, isr: lead >= 0, "leaders")
        time.sleep(5)
        rss, fds = rss_mb(b.pid), open_fds(b.pid)
        cpu = idle_cpu_pct([b.pid])[0]
        t0 = time.monotonic()
        b.stop(timeout=1800)
        stopped = time.monotonic() - t0
        t0 = time.monotonic()
        b.start()
        up = time.monotonic() - t0
        led = wait_view([b.bootstrap], "s", partitions, lambda lead, isr: lead >= 0,
                        "leaders after restart") - t0
        rows.append((f"1 broker, {partitions:,} partitions", [
            ("CreateTopics (100 topics)", f"{created:.1f} s"),
            ("RSS", f"{rss:,.0f} MB ({rss * 1024 / partitions:.1f} KB/partition)"),
            ("open descriptors", f"{fds:,} ({fds - base_fds:+,} for {partitions:,} segments: "
                                 f"{(fds - base_fds) / partitions:.2f} per segment)"),
            ("idle CPU", f"{cpu:.1f}% of a core"),
            ("clean shutdown", f"{stopped:.1f} s"),
            ("restart: spawn -> listening / every partition led", f"{up:.1f} s / {led:.1f} s"),
        ]))
    finally:
        b.stop(timeout=1800)


def storm(work: Path, names: int, rows: list) -> None:
    b = BrokerProcess(work / "storm", {"num.partitions": "1"})
    try:
        b.start()
        create_topics(b.bootstrap, "busy", TOPICS, 1)
        with LatencyProbe(b.bootstrap, "busy-0") as probe:
            time.sleep(1)
            t0 = time.monotonic()
            with KafkaClient(b.bootstrap, timeout=3600) as k:
                r = k.request(METADATA, {"topics": [{"name": f"storm-{i}"} for i in range(names)],
                                         "allow_auto_topic_creation": True}, version=9,
                              timeout=3600)
            t1 = time.monotonic()
            time.sleep(0.5)
        during = probe.between(t0, t1)
        before = probe.between(0, t0)
        codes: dict[int, int] = {}
        for t in r.topics:
            codes[t.error_code] = codes.get(t.error_code, 0) + 1
        rows.append((f"Metadata storm, {names:,} unknown topics", [
            ("answer", f"{t1 - t0:.2f} s ({codes.get(5, 0):,} created now, "
                       f"{codes.get(3, 0):,} UNKNOWN_TOPIC_OR_PARTITION)"),
            ("other producer during the storm", f"p99 {pct(during, 0.99) * 1000:.0f} ms, max "
                                                f"{max(during, default=0) * 1000:.0f} ms "
                                                f"({len(during)} requests)"),
            ("same producer before", f"p99 {pct(before, 0.99) * 1000:.0f} ms"),
        ]))
    finally:
        b.stop()


def cluster(work: Path, partitions: int, rows: list) -> None:
    zk = ZooKeeperServer(work / "zk", heap_mb=2048).start()
    c = Cluster(work / "cluster", zk, 3, session_timeout_ms=SESSION_MS, startup_timeout=3600,
                props={"zookeeper.connection.timeout.ms": "60000"})
    out: list[tuple[str, str]] = []
    try:
        c.start(timeout=600)
        boots = [c.broker(i).bootstrap for i in c.ids]
        t0 = time.monotonic()
        created = create_topics(c.broker(c.controller_id()).bootstrap, "c", partitions, 3)
        # pollers' pauses: each broker is polled every `interval` s or as long as it took
        # to answer, whichever is longer; short only where the figure is seconds
        led = wait_view(boots, "c", partitions, lambda lead, isr: lead >= 0, "leaders",
                        interval=1.0) - t0
        full = wait_view(boots, "c", partitions, lambda lead, isr: isr == 3, "full ISR",
                         interval=2.0) - t0
        out += [("create (CreateTopics answered / every partition led / full ISR)",
                  f"{created:.0f} s / {led:.0f} s / {full:.0f} s")]
        time.sleep(30)  # creation's after-effects (the first checkpoints) pass
        pids = [c.broker(i).pid for i in c.ids]
        rss = [rss_mb(p) for p in pids]
        cpu = idle_cpu_pct(pids, 60.0)  # a whole recovery-point checkpoint period
        out += [("RSS per broker", " / ".join(f"{r:,.0f} MB" for r in rss)),
                ("open descriptors per broker", " / ".join(f"{open_fds(p):,}" for p in pids)),
                ("idle CPU per broker (60 s)", " / ".join(f"{x:.1f}%" for x in cpu))]

        # controller SIGKILL -> every partition led by a live broker
        cid = c.controller_id()
        gone = threading.Event()
        at: list[float] = []

        def watch(children):
            if "controller" not in children and not at:
                at.append(time.monotonic())
                gone.set()
                return False
            return True
        c.zk().ChildrenWatch("/", watch)
        c.kill(cid)
        live = [c.broker(i).bootstrap for i in c.ids if i != cid]
        gone.wait(300)
        t1 = wait_view(live, "c", partitions, lambda lead, isr: lead >= 0 and lead != cid,
                       "leaders after controller SIGKILL", interval=0.5)
        out.append(("controller SIGKILL -> every partition led by a live broker "
                    "(from /controller vanishing)", f"{t1 - at[0]:.1f} s"))
        t0 = time.monotonic()
        c.start_broker(cid)
        t1 = wait_view(boots, "c", partitions, lambda lead, isr: isr == 3,
                       "full ISR after SIGKILL + restart", interval=2.0)
        out.append(("killed broker restarted: spawn -> full ISR", f"{t1 - t0:.0f} s"))

        # clean restart of a broker that is not the controller
        victim = next(i for i in c.ids if i != c.controller_id())
        t0 = time.monotonic()
        c.stop_broker(victim, timeout=3600)
        stopped = time.monotonic() - t0
        t0 = time.monotonic()
        c.start_broker(victim)
        up = time.monotonic() - t0
        t1 = wait_view(boots, "c", partitions, lambda lead, isr: isr == 3,
                       "full ISR after a clean restart", interval=2.0)
        out.append(("clean restart: controlled shutdown / spawn -> listening / -> full ISR",
                    f"{stopped:.0f} s / {up:.0f} s / {t1 - t0:.0f} s"))
    finally:
        rows.append((f"3 brokers, {partitions:,} partitions, RF 3", out))
        c.stop(timeout=1800)
        zk.stop()


# ----------------------------------------------------------------------------- main
def _compile_sources() -> None:
    """Write the brokers' bytecode first, as an installed package has it: with
    PYTHONDONTWRITEBYTECODE set (some CI images) every broker start would compile every
    module again, 1-2 s of CPU in each restart measured."""
    import compileall
    for d in ("broker", "protocol", "storage", "controller", "coordinator", "common",
              "client"):
        compileall.compile_dir(str(ROOT / d), quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--single", default="10000,50000")
    ap.add_argument("--cluster", type=int, default=100_000)
    ap.add_argument("--storm", type=int, default=100_000)
    ap.add_argument("--skip", default="")
    ap.add_argument("--work", default=None, help="directory for the brokers' data")
    args = ap.parse_args()
    if args.quick or os.environ.get("JOSEF_BENCH_QUICK"):
        args.single, args.cluster, args.storm = "2000", 3000, 5000
    skip = set(filter(None, args.skip.split(",")))
    rows: list = []
    _compile_sources()
    start_load = uptime()
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.work) as tmp:
        work = Path(tmp)
        try:
            if "single" not in skip:
                for n in [int(x) for x in args.single.split(",") if x]:
                    single_broker(work, n, rows)
            if "storm" not in skip:
                storm(work, args.storm, rows)
            if "cluster" not in skip:
                cluster(work, args.cluster, rows)
        finally:
            text = render(rows, start_load, uptime())
            print(text)
            if not (args.quick or os.environ.get("JOSEF_BENCH_QUICK")):
                RESULTS.write_text(merge_results(text, RESULTS.read_text()
                                                 if RESULTS.exists() else ""))


def merge_results(new: str, old: str) -> str:
    """The new table, plus the old table's rows of setups this run skipped (marked with
    the old run's date) and every hand-written section (``### ...``) after the table."""
    head, sep, sections = old.partition("\n### ")
    measured = {line.split(" | ")[0] for line in new.splitlines() if line.startswith("| ")}
    stamp = next((line.split(",")[0] for line in head.splitlines() if line[:2] == "20"), "")
    kept = [line.replace(" |", f" (run of {stamp}) |", 1) if "(run of" not in line else line
            for line in head.splitlines()
            if line.startswith("| ") and " | " in line[2:] and line.split(" | ")[0] not in measured
            and not line.startswith(("| setup", "| ---"))]
    if kept:
        before, aims_sep, aims = new.rpartition("\nAims:")
        new = before.rstrip("\n") + "\n" + "\n".join(kept) + "\n" + aims_sep + aims
    return new + (("\n### " + sections) if sep else "")


def render(rows: list, start_load: str, end_load: str) -> str:
    lines = ["## Scale benchmark (benchmarks/bench_scale.py)", "",
             f"{datetime.now():%Y-%m-%d %H:%M}, Python {platform.python_version()}, "
             f"{os.cpu_count()} CPUs, shared machine.", "",
             f"- `uptime` at the start: {start_load}", f"- `uptime` at the end: {end_load}", "",
             "| setup | measure | result |", "| --- | --- | --- |"]
    for setup, measures in rows:
        for name, value in measures:
            lines.append(f"| {setup} | {name} | {value} |")
    lines.append("")
    lines.append("Aims: controller failover < 5 s and clean broker restart < 60 s at 100,000 "
                 "partitions RF 3; <= 1 descriptor per segment; idle CPU < 2% of a core per "
                 "broker with 30,000 idle partitions; RSS < 1 GiB per broker at 100,000 "
                 "partitions RF 3.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
