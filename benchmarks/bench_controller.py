"""ZooKeeper-mode controller benchmark: leadership moves against a real cluster.

A real ZooKeeper (Debian's package) and broker subprocesses on 127.0.0.1, started with
tests/integration/cluster.py and stopped by PID; one fresh cluster per partition count.

1. Broker death: kill -9 a broker that is not the controller; ``t0`` = the moment its
   ``/brokers/ids/<id>`` znode disappears (ZooKeeper expired its session: what the controller
   is notified of), ``t1`` = the first moment every partition it led has a new leader that
   accepts a produce (acks=1, one record per partition, polled every 20 ms through Metadata +
   Produce to each leader). Reported: ``t1 - t0`` for 100, 1,000 and 10,000 partitions.
   Ceiling: the same number of fenced conditional ZooKeeper writes (``setData`` behind one
   ``check`` per multi, batched as the controller batches them: its minimum work per
   election) issued by this process, so ``ratio = election time / raw ZK writes``.
2. Controlled shutdown of a broker leading 1,000 partitions (3 brokers, 3,000 partitions):
   from the broker's "Starting controlled shutdown" log line to "Controlled shutdown request
   returned successfully" (the controller moved every leadership; aim: under 1 s).
3. Controller failover to a working cluster: kill -9 the controller; from its ``/controller``
   znode disappearing to (a) a new controller registered, (b) every partition it led serving
   produce again and a CreateTopics answered by the new controller.

Replication factor 2 (so a dead broker's partitions have an in-sync follower);
``--brokers`` (default 4) spreads 10,000 x 2 replicas so each broker stays under the machine's
open-file limit. ``zookeeper.session.timeout.ms`` is 6000 (only the part after expiry is
timed). Run: ``nice python benchmarks/bench_controller.py [--quick] [--sizes 100,1000,10000]``;
prints a markdown table and writes ``benchmarks/results/controller.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from client.connection import KafkaClient  # noqa: E402
from protocol.record_builder import RecordBatchBuilder  # noqa: E402
from tests.integration.cluster import Cluster, ZooKeeperServer  # noqa: E402

CREATE_TOPICS, PRODUCE = 19, 0
LOG_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _batch() -> bytes:
    b = RecordBatchBuilder()
    b.append(int(time.time() * 1000), None, b"x")
    return b.build()


class ZnodeGone:
    """Wall-clock time at which a child of ``parent`` disappeared (kazoo watch)."""

    def __init__(self, zk, parent: str, child: str) -> None:
        self.at: float | None = None
        self.event = threading.Event()
        self.zk, self.parent, self.child = zk, parent, child

        def watch(children):
            if child not in children and self.at is None:
                self.at = time.monotonic()
                self.event.set()
                return False
            return True
        zk.ChildrenWatch(parent, watch)


def create_topic(c: Cluster, topic: str, n: int, rf: int) -> None:
    with KafkaClient(c.broker(c.controller_id()).bootstrap, timeout=900) as k:
        r = k.request(CREATE_TOPICS, {"topics": [{
            "name": topic, "num_partitions": n, "replication_factor": rf, "assignments": [],
            "configs": []}], "timeout_ms": 900000}, version=5)
    if r.topics[0].error_code:
        raise RuntimeError(f"CreateTopics failed: {r.topics[0].error_code}")


def zk_states(c: Cluster, topic: str, n: int) -> dict[int, dict]:
    return {p: c.partition_state(topic, p) for p in range(n)}


def wait_full_isr(c: Cluster, topic: str, n: int, rf: int, timeout: float = 900) -> None:
    c.wait_until("every ISR full", lambda: all(
        len(st["isr"]) == rf for st in zk_states(c, topic, n).values()), timeout=timeout,
        interval=1.0)


def wait_serving(c: Cluster, topic: str, partitions: set[int], dead: set[int],
                 timeout: float = 300.0) -> float:
    """Poll until every partition in ``partitions`` accepts a record (acks=1) on some live
    broker; returns the monotonic time it first happened. Every pending partition is
    offered to every live broker (a non-leader answers NOT_LEADER_OR_FOLLOWER at once), so
    the probe needs no Metadata (whose size would dominate at 10,000 partitions)."""
    batch = _batch()
    live = [b for b in c.running_ids() if b not in dead]
    pending = set(partitions)
    deadline = time.monotonic() + timeout
    clients = {b: KafkaClient(c.broker(b).bootstrap, timeout=30) for b in live}
    try:
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pending)} partitions still without a serving leader")
            for b, k in clients.items():
                ps = sorted(pending)
                if not ps:
                    break
                try:
                    resp = k.request(PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [{
                        "name": topic, "partition_data": [{"index": p, "records": batch}
                                                          for p in ps]}]}, version=9)
                except Exception:  # noqa: BLE001 - a moving cluster; retried
                    clients[b] = KafkaClient(c.broker(b).bootstrap, timeout=30)
                    continue
                for t in resp.responses:
                    for pr in t.partition_responses:
                        if pr.error_code == 0:
                            pending.discard(pr.index)
            if pending:
                time.sleep(0.02)
    finally:
        for k in clients.values():
            k.close()
    return time.monotonic()


async def _raw_zk_writes(connect: str, n: int, in_flight: int) -> float:
    """Seconds for ``n`` fenced conditional writes by ZkClient, batched as the controller
    batches them (multis of ``kafka_zk_client.BATCH`` setData behind one check)."""
    from controller.kafka_zk_client import BATCH
    from controller.zk_client import CheckOp, SetDataOp, ZkClient

    zk = ZkClient(connect, session_timeout_ms=6000, max_in_flight=in_flight)
    await zk.start()
    try:
        base = f"/bench-raw-{os.getpid()}-{n}"
        await zk.ensure_path(base)
        await zk.create(base + "/epoch", b"1")
        await asyncio.gather(*(zk.create(f"{base}/{i}", b"{}") for i in range(n)))
        t = time.perf_counter()
        await asyncio.gather(*(zk.multi([CheckOp(base + "/epoch", 0)] + [
            SetDataOp(f"{base}/{i}", b'{"leader":2}', 0) for i in range(j, min(n, j + BATCH))])
            for j in range(0, n, BATCH)))
        elapsed = time.perf_counter() - t
        await zk.delete_recursive(base)
        return elapsed
    finally:
        await zk.close()


def log_seconds(text: str, start: str, end: str) -> float | None:
    t0 = t1 = None
    for line in text.splitlines():
        m = LOG_TS.match(line)
        if not m:
            continue
        ts = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if start in line:
            t0 = ts
        elif end in line and t0 is not None:
            t1 = ts
    return None if t0 is None or t1 is None else t1 - t0


def death_and_failover(workdir: Path, n: int, brokers: int, rf: int) -> dict:
    from kazoo.client import KazooClient

    out: dict = {"partitions": n}
    with ZooKeeperServer(workdir / f"zk-{n}") as zk:
        c = Cluster(workdir / f"cluster-{n}", zk, brokers, session_timeout_ms=6000,
                    props={"auto.leader.rebalance.enable": "false",
                           "num.replica.fetchers": "1", "log.segment.bytes": "1048576",
                           "log.index.size.max.bytes": "65536"})
        kz = KazooClient(hosts=zk.connect + c.chroot)
        try:
            c.start(timeout=120)
            kz.start(timeout=15)
            t = time.monotonic()
            create_topic(c, "bench", n, rf)
            c.wait_for_leaders("bench", n, timeout=900)
            wait_full_isr(c, "bench", n, rf)
            out["setup_s"] = time.monotonic() - t
            # 1. a broker dies
            cid = c.controller_id()
            victim = next(b for b in c.ids if b != cid)
            affected = {p for p, st in zk_states(c, "bench", n).items() if st["leader"] == victim}
            gone = ZnodeGone(kz, "/brokers/ids", str(victim))
            killed = time.monotonic()
            c.kill(victim)
            gone.event.wait(60)
            served = wait_serving(c, "bench", affected, {victim})
            out.update(affected=len(affected), expiry_s=gone.at - killed,
                       election_s=served - gone.at)
            out["raw_zk_s"] = asyncio.run(_raw_zk_writes(zk.connect, len(affected), 10))
            # 3. controller failover (the victim back first, every ISR full again)
            c.start_broker(victim)
            wait_full_isr(c, "bench", n, rf)
            cid = c.controller_id()
            affected = {p for p, st in zk_states(c, "bench", n).items() if st["leader"] == cid}
            gone = ZnodeGone(kz, "/", "controller")
            c.kill(cid)
            gone.event.wait(60)
            new = c.wait_for_controller(exclude=[cid], timeout=60)
            elected = time.monotonic()
            served = wait_serving(c, "bench", affected, {cid})
            with KafkaClient(c.broker(new).bootstrap, timeout=60) as k:
                r = k.request(CREATE_TOPICS, {"topics": [{
                    "name": "after-failover", "num_partitions": 1, "replication_factor": rf,
                    "assignments": [], "configs": []}], "timeout_ms": 60000}, version=5)
            assert r.topics[0].error_code == 0, r
            working = max(served, time.monotonic())
            out.update(controller_affected=len(affected), elect_s=elected - gone.at,
                       working_s=working - gone.at)
        finally:
            kz.stop()
            kz.close()
            c.stop(kill=True)
    return out


def controlled_shutdown(workdir: Path, leading: int) -> dict:
    with ZooKeeperServer(workdir / "zk-cs") as zk:
        c = Cluster(workdir / "cluster-cs", zk, 3, session_timeout_ms=6000,
                    props={"auto.leader.rebalance.enable": "false",
                           "log.segment.bytes": "1048576", "log.index.size.max.bytes": "65536"})
        try:
            c.start(timeout=120)
            create_topic(c, "cs", 3 * leading, 2)
            c.wait_for_leaders("cs", 3 * leading, timeout=900)
            wait_full_isr(c, "cs", 3 * leading, 2)
            victim = next(b for b in c.ids if b != c.controller_id())
            led = sum(1 for st in zk_states(c, "cs", 3 * leading).values()
                      if st["leader"] == victim)
            c.stop_broker(victim, timeout=120)
            seconds = log_seconds(c.broker(victim).log_text(), "Starting controlled shutdown",
                                  "Controlled shutdown request returned successfully")
            left = sum(1 for st in zk_states(c, "cs", 3 * leading).values()
                       if st["leader"] == victim)
            return {"led": led, "seconds": seconds, "left": left}
        finally:
            c.stop(kill=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 partitions, 300 for shutdown")
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--brokers", type=int, default=4)
    ap.add_argument("--rf", type=int, default=2)
    ap.add_argument("--shutdown-leading", type=int, default=1000)
    args = ap.parse_args()
    if args.quick or os.environ.get("JOSEF_BENCH_QUICK"):
        args.sizes, args.shutdown_leading = "100", 100
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="josef-bench-controller-") as tmp:
        work = Path(tmp)
        for n in sizes:
            print(f"... {n} partitions", file=sys.stderr, flush=True)
            rows.append(death_and_failover(work, n, args.brokers, args.rf))
            print(rows[-1], file=sys.stderr, flush=True)
        print("... controlled shutdown", file=sys.stderr, flush=True)
        cs = controlled_shutdown(work, args.shutdown_leading)
    lines = [
        "## Controller benchmark (benchmarks/bench_controller.py)",
        "",
        f"{datetime.now():%Y-%m-%d}, Python {platform.python_version()}, load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} (shared machine), "
        f"{args.brokers} brokers, replication factor {args.rf}, session timeout 6 s.",
        "",
        "Broker death (kill -9 of a non-controller broker): from its registration vanishing "
        "(session expired) to every partition it led serving produce on a new leader; the "
        "ceiling is the same number of fenced conditional ZooKeeper writes from one client, "
        "batched as the controller batches them.",
        "",
        "| partitions | led by the dead broker | session expiry (s) | new leaders serving (s) "
        "| raw ZK writes (s) | ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['partitions']:,} | {r['affected']:,} | {r['expiry_s']:.1f} | "
                     f"{r['election_s']:.2f} | {r['raw_zk_s']:.2f} | "
                     f"{r['election_s'] / max(r['raw_zk_s'], 1e-9):.1f} |")
    lines += [
        "",
        "Controller failover (kill -9 of the controller): from `/controller` vanishing to a "
        "new controller, and to a working cluster (every partition the old controller led "
        "serving produce, CreateTopics answered).",
        "",
        "| partitions | led by the old controller | new controller (s) | working cluster (s) |",
        "|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['partitions']:,} | {r['controller_affected']:,} | "
                     f"{r['elect_s']:.2f} | {r['working_s']:.2f} |")
    cs_s = "n/a" if cs["seconds"] is None else f"{cs['seconds']:.2f}"
    lines += [
        "",
        f"Controlled shutdown (SIGTERM) of a broker leading {cs['led']:,} partitions (3 "
        f"brokers, {3 * args.shutdown_leading:,} partitions, RF 2): {cs_s} s from the "
        f"request to the controller's answer (aim: under 1 s); partitions it still led "
        f"afterwards: {cs['left']}.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    (ROOT / "benchmarks" / "results" / "controller.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
