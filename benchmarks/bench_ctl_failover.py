"""The ZooKeeper controller's own failover work at scale, in one process (issue 22).

A real ZooKeeper (Debian's package, started here) holds P partitions in T topics at RF 3 on
brokers 1-3, every partition led by its first replica with a full ISR. Brokers 2 and 3 are
bare ZooKeeper sessions with a registration; broker 1 runs the real ``KafkaController``,
which is elected and fails over. The requests it sends are encoded (that is the controller's
work) and not delivered. Measured: wall time, CPU of the main thread (the event loop), of the
whole process (with kazoo's threads) and of ZooKeeper's JVM, per step:

- ``failover`` (default): broker 3 is already gone when broker 1 takes over, as after a
  SIGKILL of controller broker 3: context initialisation, elections for the partitions
  broker 3 led, broker 3 out of every ISR, the LeaderAndIsr / UpdateMetadata batches;
- ``--all-live``: the same with brokers 2 and 3 live, then broker 3's session closes
  (a broker failure handled by the controller).

Per step it also prints when it began, and when each part of the elections' LeaderAndIsr
left (seconds after the failover began, with the partition states of all brokers' copies).
Broker 1 gets a leader hint, as its MetadataCache gives the real controller (every partition
led by its first replica), so the states of the partitions broker 3 led are read first;
``--no-hint`` reads every state first, as Kafka does. ``--holds`` prints each time the event
loop was held 40 ms or more, with the controller frames seen most often meanwhile.

Run: ``python3 benchmarks/bench_ctl_failover.py [--partitions 100000] [--topics 100]
[--all-live] [--no-hint] [--holds] [--profile [--profile-out FILE]]`` (about a minute at
100,000 partitions, most of it filling ZooKeeper). ``JOSEF_TREE=/path`` measures another checkout of the code;
``JOSEF_BENCH_QUICK=1`` (run_all.py --quick) makes it 3,000 partitions. Prints its figures
(no results file: they go to benchmarks/results/scale.md by hand). Not a test: note
``uptime`` next to the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import functools
import gc
import inspect
import logging
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.environ.get("JOSEF_TREE") or str(Path(__file__).resolve().parents[1]))

from broker.config import Endpoint  # noqa: E402
from controller import zk_data as zd  # noqa: E402
from controller.controller_core import ControllerConfig  # noqa: E402
from controller.kafka_controller import KafkaController  # noqa: E402
from controller.kafka_zk_client import KafkaZkClient  # noqa: E402
from controller.zk_client import CreateOp, ZkClient  # noqa: E402
from protocol.messages import AlterPartitionRequest  # noqa: E402
from tests.integration.cluster import ZooKeeperServer  # noqa: E402


def _info(broker_id: int) -> zd.BrokerInfo:
    return zd.BrokerInfo(broker_id, (Endpoint("PLAINTEXT", "127.0.0.1", 1),))


async def _populate(admin: ZkClient, partitions: int, topics: int) -> None:
    per = partitions // topics
    ops = []
    for ti in range(topics):
        name = f"t{ti}"
        assignment = {p: zd.ReplicaAssignment(tuple((p + k) % 3 + 1 for k in range(3)))
                      for p in range(per)}
        ops.append(CreateOp(zd.TopicZNode.path(name), zd.TopicZNode.encode(
            zd.TopicAssignment(uuid.uuid4(), assignment))))
        ops.append(CreateOp(zd.TopicPartitionsZNode.path(name)))
        for p in range(per):
            replicas = assignment[p].replicas
            state = zd.LeaderIsrAndControllerEpoch(replicas[0], 0, replicas, 1)
            ops.append(CreateOp(zd.TopicPartitionZNode.path(name, p)))
            ops.append(CreateOp(zd.TopicPartitionStateZNode.path(name, p),
                                zd.TopicPartitionStateZNode.encode(state)))
    for i in range(0, len(ops), 1000):
        await admin.multi(ops[i:i + 1000])


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _watch_holds(threshold_s: float = 0.04) -> None:
    """Print where the event loop is held: a heartbeat task notes each turn; a thread
    samples the loop thread's stack every 10 ms while the heartbeat is more than
    ``threshold_s`` late and, when the loop turns again, prints the hold's length and the
    innermost project frames seen most often during it."""
    loop = asyncio.get_running_loop()
    main = threading.get_ident()
    last = [time.monotonic()]

    async def beat() -> None:
        while True:
            last[0] = time.monotonic()
            await asyncio.sleep(0.005)

    def watch() -> None:
        seen: collections.Counter = collections.Counter()
        began = None
        while True:
            time.sleep(0.01)
            late = time.monotonic() - last[0]
            if late > threshold_s:
                began = began or last[0]
                frame = sys._current_frames().get(main)
                where = []
                while frame is not None and len(where) < 3:
                    code = frame.f_code
                    if "/controller/" in code.co_filename:
                        where.append(f"{code.co_name}:{frame.f_lineno}")
                    frame = frame.f_back
                seen[" < ".join(where) or "?"] += 1
            elif began is not None:
                print(f"  loop held {time.monotonic() - began:.2f} s: " + "; ".join(
                    f"{w} x{n}" for w, n in seen.most_common(3)))
                seen.clear()
                began = None
    loop.create_task(beat())
    threading.Thread(target=watch, daemon=True).start()


def _by_send(sent: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """The LeaderAndIsr requests of one flush (sent within 50 ms) summed."""
    out: list[list] = []
    for at, n in sent:
        if out and at - out[-1][0] < 0.05:
            out[-1][1] += n
        else:
            out.append([at, n])
    return [(at, n) for at, n in out]


def _timed(obj, name: str, out: list) -> None:
    fn = getattr(obj, name)

    async def wrapper(*a, **k):
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            return await fn(*a, **k)
        finally:
            out.append((f"{type(obj).__name__}.{name}", time.monotonic() - t0,
                        time.thread_time() - c0, t0))
    setattr(obj, name, wrapper)


async def run(zk: ZooKeeperServer, args) -> None:
    admin = ZkClient(zk.connect + "/k", session_timeout_ms=30000)
    await admin.start()
    await KafkaZkClient(admin).create_top_level_paths()
    t = time.monotonic()
    await _populate(admin, args.partitions, args.topics)
    print(f"ZooKeeper filled: {args.partitions:,} partitions in {time.monotonic() - t:.1f} s")
    sessions = {}
    for b in (1, 2, 3):
        c = ZkClient(zk.connect + "/k", session_timeout_ms=30000)
        await c.start()
        sessions[b] = c
        if b == 2 or (b == 3 and args.all_live):
            await KafkaZkClient(c).register_broker(_info(b))
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)  # as the broker does (broker/server.py)
    kz = KafkaZkClient(sessions[1])
    epoch = await kz.register_broker(_info(1))
    per = args.partitions // args.topics
    # broker 1's MetadataCache as the last controller left it: every partition led by its
    # first replica (as _populate wrote); a tree without the hint reads every state first
    hint = {"leader_hint": lambda topic: {p: p % 3 + 1 for p in range(per)}} \
        if "leader_hint" in inspect.signature(KafkaController).parameters and not args.no_hint \
        else {}
    ctl = KafkaController(ControllerConfig(broker_id=1, auto_leader_rebalance_enable=False),
                          kz, _info(1), epoch, **hint)
    steps: list = []
    enc = {"s": 0.0, "requests": 0, "states": 0}
    lai_sent: list[tuple[float, int]] = []  # (monotonic s, partition states) per LeaderAndIsr

    def send(broker_id, api_key, version, request, callback):
        t0 = time.monotonic()
        request.encode(version)
        enc["s"] += time.monotonic() - t0
        enc["requests"] += 1
        topics = getattr(request, "_topics", None)  # direct encoding: do not build objects
        n = sum(len(t[2]) for t in topics) if topics is not None else sum(
            len(ts.partition_states) for ts in getattr(request, "topic_states", ()))
        enc["states"] += n
        if api_key == 4:  # LeaderAndIsr: when each part of the elections left
            lai_sent.append((t0, n))
    ctl.batch.send = send
    for obj, name in ((kz, "get_topic_assignments"), (kz, "get_partition_states"),
                      (ctl, "_initialize_controller_context"), (ctl.partition_sm, "startup"),
                      (ctl.replica_sm, "startup"),
                      (ctl.brokers, "on_replicas_become_offline")):
        _timed(obj, name, steps)
    prof = cProfile.Profile() if args.profile else None

    cpu0 = {}

    def start_cpu() -> None:
        cpu0.update(proc=time.process_time(), zk=_proc_cpu(zk.pid))

    def report(what: str, t0: float, c0: float) -> None:
        print(f"{what}: {time.monotonic() - t0:.2f} s wall, {time.thread_time() - c0:.2f} s "
              f"main-thread CPU ({time.process_time() - cpu0['proc']:.2f} s all threads, "
              f"ZooKeeper {_proc_cpu(zk.pid) - cpu0['zk']:.2f} s); requests encoded: "
              f"{enc['requests']} ({enc['states']:,} partition states, {enc['s']:.2f} s)")
        for name, wall, cpu, began in steps:
            print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, from {began - t0:.2f} s")
        steps.clear()
        print("  LeaderAndIsr sent (s after the start: partition states, all brokers): " + ", ".join(
            f"{at - t0:.2f}: {n:,}" for at, n in _by_send(lai_sent)))
        lai_sent.clear()
        enc.update(s=0.0, requests=0, states=0)
        if prof is not None:
            prof.disable()
            if args.profile_out:
                prof.dump_stats(args.profile_out)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            prof.clear()

    done = asyncio.Event()
    timed = functools.partial(_timed_step, start_cpu=start_cpu, report=report, prof=prof,
                              done=done)
    ctl._on_controller_failover = timed(
        ctl._on_controller_failover,
        lambda: "failover" + (" (all brokers live)" if args.all_live else " (broker 3 gone)"))
    if args.holds:
        _watch_holds()
    await ctl.startup()
    await asyncio.wait_for(done.wait(), 600)
    if args.all_live:
        done.clear()
        ctl.brokers._on_broker_failure = timed(ctl.brokers._on_broker_failure,
                                               lambda dead: f"broker failure {dead}")
        await sessions[3].close()
        await asyncio.wait_for(done.wait(), 600)
    if args.rejoin:
        await _rejoin(zk, ctl, sessions, timed, start_cpu, report, prof, done)
    await ctl.shutdown()
    for b, c in sessions.items():
        if b != 3 or not args.all_live:
            await c.close()
    await admin.close()


def _timed_step(fn, label, *, start_cpu, report, prof, done):
    """`fn` wrapped to report its wall and CPU time as ``label(*args)``, then set `done`."""
    async def wrapper(*a):
        t0, c0 = time.monotonic(), time.thread_time()
        start_cpu()
        if prof is not None:
            prof.enable()
        await fn(*a)
        report(label(*a), t0, c0)
        done.set()
    return wrapper


async def _rejoin(zk, ctl, sessions, timed, start_cpu, report, prof, done) -> None:
    """Broker 3 comes back (a clean restart's controller side): its registration's
    onBrokerStartup (UpdateMetadata to every broker, LeaderAndIsr for its replicas), then
    each leader's AlterPartition adding it back to every ISR it left, one request per
    leader as the brokers' AlterPartitionManager sends them."""
    done.clear()
    ctl.brokers._on_broker_startup = timed(ctl.brokers._on_broker_startup,
                                           lambda new: f"broker startup {new}")
    c = ZkClient(zk.connect + "/k", session_timeout_ms=30000)
    await c.start()
    sessions[3] = c
    await KafkaZkClient(c).register_broker(_info(3))
    await asyncio.wait_for(done.wait(), 600)
    ctx = ctl.context
    by_leader: dict[int, dict[str, list]] = {}
    for tp, st in ctx.leadership.items():
        if 3 in ctx.partition_replica_assignment(tp) and 3 not in st.isr:
            by_leader.setdefault(st.leader, {}).setdefault(tp[0], []).append(
                AlterPartitionRequest.PartitionData(
                    partition_index=tp[1], leader_epoch=st.leader_epoch,
                    new_isr=list(st.isr) + [3], leader_recovery_state=0,
                    partition_epoch=st.partition_epoch))
    t0, c0 = time.monotonic(), time.thread_time()
    start_cpu()
    if prof is not None:
        prof.enable()
    answers = await asyncio.gather(*(ctl.leadership.alter_partition(AlterPartitionRequest(
        broker_id=leader, broker_epoch=ctx.live_broker_epochs[leader],
        topics=[AlterPartitionRequest.TopicData(topic_name=t, partitions=ps)
                for t, ps in topics.items()]), 1) for leader, topics in by_leader.items()))
    n = sum(len(p.partitions) for a in answers for p in a.topics)
    bad = sum(1 for a in answers for t in a.topics for p in t.partitions if p.error_code)
    report(f"AlterPartition: broker 3 back into {n:,} ISRs ({bad} errors, "
           f"{len(answers)} requests)", t0, c0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--all-live", action="store_true")
    ap.add_argument("--rejoin", action="store_true", help="with --all-live: after broker 3's "
                    "failure it registers again and the leaders add it back to every ISR")
    ap.add_argument("--no-hint", action="store_true",
                    help="no leader hint: every partition state read before the elections")
    ap.add_argument("--holds", action="store_true",
                    help="log every callback that held the event loop 50 ms or more "
                         "(asyncio debug mode: slower)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-out", metavar="FILE", help="with --profile: also write the "
                    "cProfile data (pstats format) of the last measured step to FILE")
    args = ap.parse_args()
    if os.environ.get("JOSEF_BENCH_QUICK"):  # run_all.py --quick: a smoke-sized run
        args.partitions, args.topics = min(args.partitions, 3000), min(args.topics, 10)
    logging.basicConfig(level=logging.ERROR)
    with open("/proc/loadavg") as f:
        print("load average at the start:", " ".join(f.read().split()[:3]))
    work = Path(tempfile.mkdtemp(prefix="bench-ctl-failover-"))
    zk = ZooKeeperServer(work / "zk", heap_mb=2048).start()
    try:
        asyncio.run(run(zk, args))
    finally:
        zk.stop()
        shutil.rmtree(work, ignore_errors=True)
    with open("/proc/loadavg") as f:
        print("load average at the end:", " ".join(f.read().split()[:3]))


if __name__ == "__main__":
    main()
