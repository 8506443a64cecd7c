"""A broker applying the controller's big LeaderAndIsr / UpdateMetadata, in process (issue 22).

Broker 1 of a 3-broker cluster hosts P partitions in T topics at RF 3 (the six orders of
brokers 1-3 in turn, so broker 1 first leads a third of them and follows the rest). Its real
`ReplicaManager` (logs on disk through a real `LogManager`, a real `ReplicaFetcherManager`
whose fetchers find no leader address and stay idle, a `FetchSessionCache`) and its real
`MetadataCache` are fed requests encoded with the generated codec (v7 / v8) and decoded as
the broker decodes them. Steps, each timed on its own:

- ``decode``: decoding the failover's LeaderAndIsr (P partition states);
- ``create``: LeaderAndIsr of all P partitions, ``is_new`` (logs created), all brokers live;
- ``failover``: broker 3 died: one LeaderAndIsr of all P partitions, the third broker 3 led
  move to their next live replica (leader epoch + 1), broker 3 leaves every ISR (partition
  epoch + 1): broker 1 then leads half of them and follows the other half;
- ``response``: building and encoding the failover's LeaderAndIsr response;
- ``update-metadata``: UpdateMetadata of the P partitions (after the failover);
- ``restart``: a new ReplicaManager over the logs loaded from disk (the load is not timed)
  gets the failover's states again, not ``is_new`` (a broker's restart).

For each: wall time, CPU time of the main thread (the event loop) and of the process, and
the longest time the event loop was held (the most loop-thread CPU between two turns of a
1 ms heartbeat task) and the longest cyclic-GC collection within the step (the broker's GC
settings: `gc.freeze()` after setup, thresholds 50,000 / 20 / 100).

Run: ``python3 benchmarks/bench_leader_and_isr.py [--partitions 100000] [--topics 100]
[--profile STEP,... [--profile-out FILE]]``; ``JOSEF_TREE=/path`` measures another checkout
(e.g. main) for a before/after in the same run. ``JOSEF_BENCH_QUICK=1`` makes it 3,000
partitions. Prints a table (figures go to benchmarks/results/scale.md by hand). Not a test:
note ``uptime`` next to the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import itertools
import logging
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.environ.get("JOSEF_TREE") or str(Path(__file__).resolve().parents[1]))

from broker.fetch_session import FetchSessionCache  # noqa: E402
from broker.handlers.control_requests import _lai_response  # noqa: E402
from broker.metadata_cache import MetadataCache  # noqa: E402
from broker.purgatory import MockTimer  # noqa: E402
from broker.replica_manager import ReplicaManager  # noqa: E402
from broker.replication.fetcher import FetcherConfig  # noqa: E402
from broker.replication.fetcher_manager import ReplicaFetcherManager  # noqa: E402
from protocol import api  # noqa: E402
from protocol.messages import LeaderAndIsrRequest, UpdateMetadataRequest  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log_manager import LogManager  # noqa: E402

BROKER_ID = 1
ORDERS = list(itertools.permutations((1, 2, 3)))
LAI = LeaderAndIsrRequest
UMR = UpdateMetadataRequest


def _cluster(partitions: int, topics: int):
    """[(topic, topic id, [(partition, replicas)])]."""
    per = partitions // topics
    return [(f"t{ti}", uuid.uuid4(), [(p, ORDERS[(ti + p) % 6]) for p in range(per)])
            for ti in range(topics)]


def _lai_bytes(cluster, failover: bool, is_new: bool) -> bytes:
    """The controller's LeaderAndIsr v7 to broker 1, encoded."""
    topic_states = []
    for topic, tid, parts in cluster:
        states = []
        for p, replicas in parts:
            leader, epoch, isr, pepoch = replicas[0], 0, list(replicas), 0
            if failover:
                isr = [r for r in replicas if r != 3]
                pepoch = 1
                if leader == 3:
                    leader, epoch = isr[0], 1
            states.append(LAI.LeaderAndIsrPartitionState(
                topic_name=topic, partition_index=p, controller_epoch=2 if failover else 1,
                leader=leader, leader_epoch=epoch, isr=isr, partition_epoch=pepoch,
                replicas=list(replicas), adding_replicas=[], removing_replicas=[],
                is_new=is_new))
        topic_states.append(LAI.LeaderAndIsrTopicState(topic_name=topic, topic_id=tid,
                                                       partition_states=states))
    req = LAI(controller_id=2, controller_epoch=2 if failover else 1, broker_epoch=-1,
              type=0, topic_states=topic_states,
              live_leaders=[LAI.LeaderAndIsrLiveLeader(broker_id=b, host_name="127.0.0.1",
                                                       port=1) for b in (1, 2)])
    return api.encode_request(req, 7)


def _um_bytes(cluster) -> bytes:
    topic_states = []
    for topic, tid, parts in cluster:
        states = []
        for p, replicas in parts:
            isr = [r for r in replicas if r != 3]
            leader = replicas[0] if replicas[0] != 3 else isr[0]
            states.append(UMR.UpdateMetadataPartitionState(
                topic_name=topic, partition_index=p, controller_epoch=2, leader=leader,
                leader_epoch=1 if replicas[0] == 3 else 0, isr=isr, zk_version=1,
                replicas=list(replicas), offline_replicas=[3]))
        topic_states.append(UMR.UpdateMetadataTopicState(topic_name=topic, topic_id=tid,
                                                         partition_states=states))
    live = [UMR.UpdateMetadataBroker(id=b, endpoints=[UMR.UpdateMetadataEndpoint(
        port=1, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)], rack=None)
        for b in (1, 2)]
    req = UMR(controller_id=2, controller_epoch=2, broker_epoch=-1, type=0,
              topic_states=topic_states, live_brokers=live)
    return api.encode_request(req, 8)


def _replica_manager(log_dir: str, cache: MetadataCache):
    lm = LogManager([log_dir], LogConfig())
    lm.load_all()
    rm = ReplicaManager(None, BROKER_ID, lm, cache, MockTimer())
    rm.fetch_session_cache = FetchSessionCache()
    rm.fetcher_manager = ReplicaFetcherManager(
        rm, FetcherConfig(broker_id=BROKER_ID), 1, lambda _b: None)
    return rm, lm


class _LoopWatch:
    """How long the loop was held: the largest loop-thread CPU time between two turns of a
    1 ms heartbeat task (CPU, not wall: on a loaded machine the wall gap also counts the
    time the process waited for a core)."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self.max_gc = 0.0  # the longest cyclic-GC collection meanwhile (CPU s)
        self._gc_start = 0.0
        self._task = None

    def _on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            self.max_gc = max(self.max_gc, time.thread_time() - self._gc_start)

    async def _beat(self) -> None:
        last = time.thread_time()
        while True:
            await asyncio.sleep(0.001)
            now = time.thread_time()
            self.max_gap = max(self.max_gap, now - last)
            last = now

    def __enter__(self):
        self._task = asyncio.get_running_loop().create_task(self._beat())
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        self._task.cancel()
        gc.callbacks.remove(self._on_gc)


async def _timed(name: str, rows: list, profile: str | None, prof_out: str | None, fn):
    gc.collect()
    prof = cProfile.Profile() if name in (profile or ()) else None
    with _LoopWatch() as watch:
        await asyncio.sleep(0.002)
        w0, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        if prof is not None:
            prof.enable()
        result = await fn()
        if prof is not None:
            prof.disable()
        w1, t1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
        await asyncio.sleep(0.002)
    rows.append((name, w1 - w0, t1 - t0, p1 - p0, watch.max_gap, watch.max_gc))
    if prof is not None:
        stats = pstats.Stats(prof)
        if prof_out:
            stats.dump_stats(f"{prof_out}.{name}")
        print(f"--- profile of {name}")
        stats.sort_stats("tottime").print_stats(25)
    return result


async def run(partitions: int, topics: int, profile: str | None, prof_out: str | None) -> None:
    cluster = _cluster(partitions, topics)
    create_b = _lai_bytes(cluster, failover=False, is_new=True)
    failover_b = _lai_bytes(cluster, failover=True, is_new=False)
    um_b = _um_bytes(cluster)
    rows: list = []
    tmp = tempfile.mkdtemp(prefix="bench-lai-")
    try:
        cache = MetadataCache(BROKER_ID)
        rm, lm = _replica_manager(tmp, cache)
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)  # as the broker does after startup (broker/server.py)

        async def decode():
            return api.decode_request(4, 7, failover_b)

        failover_req = await _timed("decode", rows, profile, prof_out, decode)
        create_req = api.decode_request(4, 7, create_b)
        res = await _timed("create", rows, profile, prof_out,
                           lambda: rm.become_leader_or_follower(create_req))
        _check(res, partitions, "create")
        res = await _timed("failover", rows, profile, prof_out,
                           lambda: rm.become_leader_or_follower(failover_req))
        _check(res, partitions, "failover")

        async def response():
            return api.encode_response(_lai_response(failover_req, 7, 0, res), 7)

        await _timed("response", rows, profile, prof_out, response)
        leaders = sum(1 for p in rm.partitions.values() if p.is_leader)
        um_req = api.decode_request(6, 8, um_b)

        async def update_metadata():  # as BrokerMetadataListener calls it (sliced if it can)
            sliced = getattr(cache, "update_metadata_sliced", None)
            return await sliced(um_req) if sliced else cache.update_metadata(um_req)

        await _timed("update-metadata", rows, profile, prof_out, update_metadata)
        await rm.shutdown()
        lm.close_all()
        del rm, lm
        gc.collect()
        rm, lm = _replica_manager(tmp, cache)
        restart_req = api.decode_request(4, 7, failover_b)
        res = await _timed("restart", rows, profile, prof_out,
                           lambda: rm.become_leader_or_follower(restart_req))
        _check(res, partitions, "restart")
        await rm.shutdown()
        lm.close_all()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tree = os.environ.get("JOSEF_TREE") or "this tree"
    print(f"\n{partitions:,} partitions in {topics} topics, RF 3, broker 1 "
          f"({leaders:,} leaders after the failover); code: {tree}")
    print("| step | wall s | loop-thread CPU s | process CPU s | longest loop hold, ms of CPU "
          "| longest GC collection, ms of CPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, wall, tcpu, pcpu, gap, gc_max in rows:
        print(f"| {name} | {wall:.2f} | {tcpu:.2f} | {pcpu:.2f} | {gap * 1000:.0f} "
              f"| {gc_max * 1000:.0f} |")


def _check(results, partitions: int, what: str) -> None:
    bad = sum(1 for e in results.values() if e)
    if len(results) != partitions or bad:
        raise SystemExit(f"{what}: {len(results)} results, {bad} errors")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quick = os.environ.get("JOSEF_BENCH_QUICK") == "1"
    ap.add_argument("--partitions", type=int, default=3000 if quick else 100_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--profile", default="", help="cProfile these steps (comma-separated: "
                    "decode, create, failover, response, update-metadata, restart)")
    ap.add_argument("--profile-out", help="write each profile's stats to FILE.<step>")
    args = ap.parse_args()
    args.profile = [s for s in args.profile.split(",") if s]
    # the broker logs at INFO to a file: what it logs per partition costs as it would
    log_file = tempfile.NamedTemporaryFile(prefix="bench-lai-", suffix=".log", delete=False)
    logging.basicConfig(level=logging.INFO, filename=log_file.name,
                        format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    try:
        asyncio.run(run(args.partitions, args.topics, args.profile, args.profile_out))
    finally:
        print(f"broker log: {os.path.getsize(log_file.name):,} bytes")
        os.unlink(log_file.name)


if __name__ == "__main__":
    main()
