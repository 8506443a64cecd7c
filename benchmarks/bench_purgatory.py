"""Purgatory benchmark: timing wheel vs asyncio `loop.call_later`, in the same run.

Three workloads, each at 10k, 100k and 1M pending operations:

1. timers: add N timers (delays uniform in 1..30 000 ms, seeded), then cancel all N.
   Ours: `SystemTimer.add(task)` + `task.cancel()`. Baseline: `loop.call_later(...)` +
   `handle.cancel()`. Both then yield once to the loop, so asyncio's cleanup of cancelled
   handles (it rebuilds its heap once most handles are cancelled) is counted.
2. parked operations: N operations (100 per key) that complete when their key's counter
   reaches their threshold are parked, then every key's counter is bumped and
   `check_and_complete(key)` completes them. Ours: `DelayedOperationPurgatory` on a
   `SystemTimer`. Baseline: the same steps (try, watch, try, arm a timeout; on completion
   cancel the timeout) written plainly over per-key lists and `loop.call_later`.
3. DelayedFetch: the broker's real fetch path. A `ReplicaManager` hosts 1000 partitions
   (leader, ISR {self}) over logs in a temp dir; N consumer fetches (one partition each, at
   the log end offset, min_bytes 1, max_wait uniform 1..30 000 ms) go through
   `ReplicaManager.fetch_messages`, which reads the log, finds nothing and parks a
   `DelayedFetch` in the Fetch purgatory (SystemTimer). Then one batch is appended to every
   partition with `ReplicaManager.append_records`, whose `check_and_complete` completes every
   parked fetch (each re-reads its partition and resolves its Future). Baseline: the same
   read, the same `DelayedFetch` object and completion check, the same appends, but parked
   in a per-partition list of waiters with a `loop.call_later` timeout that is cancelled on
   completion (no purgatory, no wheel). A third row, `floor`, runs the shared work only
   (read, Future, DelayedFetch object, append, re-read) without parking anywhere: the part
   of the cost neither structure can remove.

One op = one add + one cancel (1), one park + one completion (2, 3). Each is run with Python's
cyclic GC on (default) and off (timed section only). Times are CPU time of this process
(`time.process_time`), so other load on the machine disturbs them less. Prints markdown
tables and writes them to benchmarks/results/purgatory.md, replacing only the sections of the
workloads that ran (`--workloads`).

Run: python benchmarks/bench_purgatory.py [--sizes 10000,100000,1000000] [--repeat 3]
     [--workloads timers,ops,fetch]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pathlib
import platform
import random
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from broker.purgatory import (  # noqa: E402
    DelayedOperation,
    DelayedOperationPurgatory,
    SystemTimer,
    TimerTask,
    TopicPartitionKey,
)
from broker.purgatory.delayed_fetch import (  # noqa: E402
    DelayedFetch,
    FetchParams,
    FetchPartitionData,
    FetchPartitionStatus,
    PartitionFetchInfo,
)
from broker.replica_manager import ReplicaManager  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from protocol.messages import LeaderAndIsrRequest  # noqa: E402
from protocol.record_builder import RecordBatchBuilder  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log_manager import LogManager  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "purgatory.md"
OPS_PER_KEY = 100
MAX_DELAY_MS = 30_000
FETCH_PARTITIONS = 1000
FETCH_TOPIC = "bench-fetch"
BROKER_ID = 1


class NoopTask(TimerTask):
    __slots__ = ()

    def run(self) -> None:
        pass


def _noop() -> None:
    pass


class Counter:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class CounterOp(DelayedOperation):
    """Completes when its key's counter reaches `threshold` (a stand-in for DelayedFetch)."""

    __slots__ = ("counter", "threshold", "done")

    def __init__(self, delay_ms: int, counter: Counter, threshold: int, done: list) -> None:
        super().__init__(delay_ms)
        self.counter = counter
        self.threshold = threshold
        self.done = done

    def try_complete(self) -> bool:
        if self.counter.value >= self.threshold:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.done.append(self)


class BaselineOp:
    """The same operation, with its timeout on `loop.call_later`."""

    __slots__ = ("counter", "threshold", "done", "handle", "completed")

    def __init__(self, counter: Counter, threshold: int, done: list) -> None:
        self.counter = counter
        self.threshold = threshold
        self.done = done
        self.handle = None
        self.completed = False

    def try_complete(self) -> bool:
        if self.counter.value >= self.threshold:
            return self.force_complete()
        return False

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self.handle is not None:
            self.handle.cancel()
        self.done.append(self)
        return True

    def expire(self) -> None:
        self.force_complete()


async def timers_ours(delays: list[int]) -> float:
    timer = SystemTimer("bench")
    gc.collect()
    t0 = time.process_time()
    add = timer.add
    tasks = []
    append = tasks.append
    for d in delays:
        t = NoopTask(d)
        add(t)
        append(t)
    for t in tasks:
        t.cancel()
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    assert timer.size == 0
    timer.shutdown()
    await asyncio.sleep(0)
    return elapsed


async def timers_baseline(delays: list[int]) -> float:
    loop = asyncio.get_running_loop()
    gc.collect()
    t0 = time.process_time()
    call_later = loop.call_later
    handles = []
    append = handles.append
    for d in delays:
        append(call_later(d / 1000, _noop))
    for h in handles:
        h.cancel()
    await asyncio.sleep(0)
    return time.process_time() - t0


def _park_plan(n: int, delays: list[int]):
    keys = [TopicPartitionKey("bench", i) for i in range(max(1, n // OPS_PER_KEY))]
    counters = [Counter() for _ in keys]
    return keys, counters


async def parked_ours(delays: list[int]) -> float:
    n = len(delays)
    keys, counters = _park_plan(n, delays)
    nk = len(keys)
    timer = SystemTimer("bench")
    purgatory = DelayedOperationPurgatory("Bench", timer)
    done: list = []
    ops = [CounterOp(delays[i], counters[i % nk], 1, done) for i in range(n)]
    gc.collect()
    t0 = time.process_time()
    key_tuples = [(key,) for key in keys]  # a caller's keys, built once per key
    watch = purgatory.try_complete_else_watch
    for i, op in enumerate(ops):
        watch(op, key_tuples[i % nk])
    assert purgatory.delayed == n
    check = purgatory.check_and_complete
    for key, counter in zip(keys, counters, strict=True):
        counter.value = 1
        check(key)
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    assert len(done) == n and timer.size == 0 and purgatory.watched == 0
    timer.shutdown()
    await asyncio.sleep(0)
    return elapsed


async def parked_baseline(delays: list[int]) -> float:
    n = len(delays)
    keys, counters = _park_plan(n, delays)
    nk = len(keys)
    loop = asyncio.get_running_loop()
    done: list = []
    ops = [BaselineOp(counters[i % nk], 1, done) for i in range(n)]
    watchers: dict = {}
    gc.collect()
    t0 = time.process_time()
    call_later = loop.call_later
    for i, op in enumerate(ops):
        key = keys[i % nk]
        if op.try_complete():
            continue
        lst = watchers.get(key)
        if lst is None:
            lst = watchers[key] = []
        lst.append(op)
        if op.try_complete():
            continue
        op.handle = call_later(delays[i] / 1000, op.expire)
    for key, counter in zip(keys, counters, strict=True):
        counter.value = 1
        lst = watchers.get(key)
        if lst is None:
            continue
        remaining = [op for op in lst if not (op.completed or op.try_complete())]
        if remaining:
            watchers[key] = remaining
        else:
            del watchers[key]
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    assert len(done) == n and not watchers
    return elapsed

# --------------------------------------------------------------------------- DelayedFetch
class FetchEnv:
    """A ReplicaManager hosting FETCH_PARTITIONS partitions (leader, ISR {self}) over logs in
    a temp dir, on a SystemTimer. Shared by both sides: each run fetches at the current log
    end offsets and appends one batch to every partition."""

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="bench-purgatory-")
        # An index entry per batch: a read finds its batch without scanning, so the cost of a
        # read does not drift as runs append to the logs.
        self.lm = LogManager([self.tmp.name], LogConfig(segment_index_bytes=256 * 1024,
                                                        index_interval_bytes=1))
        self.lm.load_all()
        self.timer = SystemTimer("bench-fetch")
        self.rm = ReplicaManager(None, BROKER_ID, self.lm, None, self.timer)
        self.tps = [(FETCH_TOPIC, p) for p in range(FETCH_PARTITIONS)]
        self.batch = RecordBatchBuilder()
        self.batch.append(1_700_000_000_000, b"key", b"v" * 100)
        self.batch = self.batch.build()

    async def start(self) -> None:
        L = LeaderAndIsrRequest
        states = [L.LeaderAndIsrPartitionState(
            topic_name=FETCH_TOPIC, partition_index=p, controller_epoch=1, leader=BROKER_ID,
            leader_epoch=0, isr=[BROKER_ID], partition_epoch=0, replicas=[BROKER_ID],
            adding_replicas=[], removing_replicas=[], is_new=True)
            for p in range(FETCH_PARTITIONS)]
        await self.rm.become_leader_or_follower(L(
            controller_id=BROKER_ID, controller_epoch=1, broker_epoch=1, type=1,
            topic_states=[L.LeaderAndIsrTopicState(topic_name=FETCH_TOPIC,
                                                   partition_states=states)],
            live_leaders=[]))

    def requests(self, delays: list[int]):
        """Per op: (FetchParams, [(tp, PartitionFetchInfo)]) at the partition's log end
        offset, as the request handler would have decoded them (built outside the timing)."""
        nparts = len(self.tps)
        leo = [self.rm.get_partition(*tp).log_end_offset for tp in self.tps]
        reqs = []
        for i, d in enumerate(delays):
            p = i % nparts
            reqs.append((FetchParams(replica_id=-1, max_wait_ms=d, min_bytes=1,
                                     max_bytes=1 << 20),
                         [(self.tps[p], PartitionFetchInfo(leo[p], 1 << 20))]))
        appends = [{tp: memoryview(bytearray(self.batch))} for tp in self.tps]
        return reqs, appends

    async def close(self) -> None:
        await self.rm.shutdown()
        self.timer.shutdown()
        await asyncio.sleep(0)
        for log in self.lm.all_logs().values():
            log.close_handlers()  # a temp dir: no flush, no fsync
        self.tmp.cleanup()


class BaselineDelayedFetch(DelayedFetch):
    """The same DelayedFetch (same completion check, same re-read), its timeout a
    `call_later` handle that is cancelled on completion."""

    __slots__ = ("handle",)

    def on_complete(self) -> None:
        handle = self.handle
        if handle is not None:
            handle.cancel()
        DelayedFetch.on_complete(self)


class BaselineFetchParking:
    """`ReplicaManager.fetch_messages` with the purgatory replaced by a dict of
    per-partition waiter lists and `loop.call_later` timeouts."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.loop = asyncio.get_running_loop()
        self.waiters: dict[tuple[str, int], list[BaselineDelayedFetch]] = {}

    def fetch(self, params: FetchParams, fetch_infos: list):
        rm = self.rm
        results = rm.read_from_local_log(params, fetch_infos)
        total = 0
        for r in results.values():
            if r.error != ErrorCode.NONE:
                return results
            total += len(r.records)
        if total >= params.min_bytes:
            return results
        statuses = []
        for (tp, info) in fetch_infos:
            part = rm.partitions[tp]
            statuses.append(FetchPartitionStatus(tp[0], tp[1], info, part,
                                                 part.hw_bytes - len(results[tp].records)))
        fut = self.loop.create_future()

        def done(res: dict) -> None:
            if not fut.done():
                fut.set_result(res)

        def read(p, infos):
            try:
                return rm.read_from_local_log(p, infos)
            except Exception as e:  # noqa: BLE001 - as the ReplicaManager does
                return {tp: FetchPartitionData(ErrorCode.UNKNOWN_SERVER_ERROR,
                                               error_message=str(e)) for tp, _ in infos}

        op = BaselineDelayedFetch(params.max_wait_ms, params, statuses, list(fetch_infos),
                                  rm.get_partition, read, done)
        op.handle = None
        if op.try_complete():
            return fut.result()
        waiters = self.waiters
        for tp, _ in fetch_infos:
            lst = waiters.get(tp)
            if lst is None:
                lst = waiters[tp] = []
            lst.append(op)
        if op.try_complete():
            return fut.result()
        op.handle = self.loop.call_later(params.max_wait_ms / 1000, op.run)
        return fut

    def wake(self, tp) -> None:
        lst = self.waiters.get(tp)
        if lst is None:
            return
        remaining = [op for op in lst if not (op.is_completed or op.try_complete())]
        if remaining:
            self.waiters[tp] = remaining
        else:
            del self.waiters[tp]


async def fetch_ours(env: FetchEnv, delays: list[int]) -> float:
    rm = env.rm
    reqs, appends = env.requests(delays)
    futures = []
    gc.collect()
    t0 = time.process_time()
    fetch = rm.fetch_messages
    append = futures.append
    for params, infos in reqs:
        append(fetch(params, infos))
    assert rm.delayed_fetch_purgatory.delayed == len(delays)
    append_records = rm.append_records
    for entries in appends:
        append_records(30_000, 1, entries)
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    _check_fetches(futures)
    assert rm.delayed_fetch_purgatory.watched == 0 and env.timer.size == 0
    return elapsed


async def fetch_baseline(env: FetchEnv, delays: list[int]) -> float:
    rm = env.rm
    reqs, appends = env.requests(delays)
    futures = []
    gc.collect()
    t0 = time.process_time()
    parking = BaselineFetchParking(rm)
    fetch = parking.fetch
    append = futures.append
    for params, infos in reqs:
        append(fetch(params, infos))
    append_records = rm.append_records
    wake = parking.wake
    for entries in appends:
        append_records(30_000, 1, entries)
        for tp in entries:
            wake(tp)
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    _check_fetches(futures)
    assert not parking.waiters
    return elapsed


async def fetch_floor(env: FetchEnv, delays: list[int]) -> float:
    """The work both sides share, without parking: read, Future, DelayedFetch object,
    append, completion check, re-read."""
    rm = env.rm
    reqs, appends = env.requests(delays)
    futures = []
    gc.collect()
    loop = asyncio.get_running_loop()
    t0 = time.process_time()
    ops = []
    for params, infos in reqs:
        results = rm.read_from_local_log(params, infos)
        tp = infos[0][0]
        part = rm.partitions[tp]
        statuses = [FetchPartitionStatus(tp[0], tp[1], infos[0][1], part,
                                         part.hw_bytes - len(results[tp].records))]
        fut = loop.create_future()
        op = DelayedFetch(params.max_wait_ms, params, statuses, list(infos), rm.get_partition,
                          rm.read_from_local_log, fut.set_result)
        op.try_complete()
        ops.append(op)
        futures.append(fut)
    append_records = rm.append_records
    for entries in appends:
        append_records(30_000, 1, entries)
    for op in ops:
        op.try_complete()
    await asyncio.sleep(0)
    elapsed = time.process_time() - t0
    _check_fetches(futures)
    return elapsed


def _check_fetches(futures: list) -> None:
    for fut in futures:
        assert isinstance(fut, asyncio.Future) and fut.done(), "a fetch did not park/complete"
        (data,) = fut.result().values()
        assert data.error == ErrorCode.NONE and len(data.records) > 0, data


async def measure(fn, delays: list[int], repeat: int, gc_off: bool) -> float:
    best = float("inf")
    for _ in range(repeat):
        if gc_off:
            gc.disable()
        try:
            best = min(best, await fn(delays))
        finally:
            gc.enable()
    return len(delays) / best


SECTIONS = ("Timers and parked operations", "DelayedFetch on the real ReplicaManager")


async def run_generic(sizes: list[int], repeat: int, plans: dict, workloads: set[str]) -> str:
    rows = []
    for gc_mode in ("on", "off"):
        gc_off = gc_mode == "off"
        for name, workload, ours, base in (
            ("timers", "add + cancel timer", timers_ours, timers_baseline),
            ("ops", "park + complete op", parked_ours, parked_baseline),
        ):
            if name not in workloads:
                continue
            for n in sizes:
                delays = plans[n]
                r = repeat if n < 1_000_000 else max(1, repeat - 1)
                # interleave so that both sides see the same machine state
                b1 = await measure(base, delays, r, gc_off)
                o = await measure(ours, delays, r, gc_off)
                b2 = await measure(base, delays, 1, gc_off)
                b = max(b1, b2)
                rows.append((gc_mode, workload, n, o, b))
                print(
                    f"gc {gc_mode:3s} {workload:20s} {n:>9,d}  ours {o:>12,.0f}/s"
                    f"  call_later {b:>12,.0f}/s  x{o / b:.2f}",
                    flush=True,
                )
    lines = [
        f"`python benchmarks/bench_purgatory.py --workloads timers,ops --repeat {repeat}`. "
        "Delays uniform "
        f"1..{MAX_DELAY_MS} ms; {OPS_PER_KEY} operations per key; CPU time of the process, "
        "best of runs; baseline (asyncio `loop.call_later`, handles cancelled) measured in "
        "the same run, interleaved.",
        "",
        "An op is one add + one cancel (timers) or one park + one completion by "
        "`check_and_complete` (operations). `gc off`: Python's cyclic GC disabled during the "
        "timed section only; with it on, both sides slow down as the number of live objects "
        "grows (full collections walk all of them), which is the runtime, not the structure.",
        "",
        "| gc | workload | pending | timing wheel (ops/s) | ns/op | call_later (ops/s) | ratio |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for gc_mode, workload, n, o, b in rows:
        lines.append(
            f"| {gc_mode} | {workload} | {n:,d} | {o:,.0f} | {1e9 / o:,.0f} | {b:,.0f} "
            f"| {o / b:.2f}x |"
        )
    return "\n".join(lines) + "\n"


async def run_fetch(sizes: list[int], repeat: int, plans: dict) -> str:
    env = FetchEnv()
    await env.start()
    rows = []
    try:
        for gc_mode in ("on", "off"):
            gc_off = gc_mode == "off"
            for n in sizes:
                delays = plans[n]
                r = repeat if n < 1_000_000 else max(1, repeat - 1)

                def bind(fn):
                    async def run(d):
                        return await fn(env, d)
                    return run

                b1 = await measure(bind(fetch_baseline), delays, r, gc_off)
                o = await measure(bind(fetch_ours), delays, r, gc_off)
                b2 = await measure(bind(fetch_baseline), delays, 1, gc_off)
                f = await measure(bind(fetch_floor), delays, r, gc_off)
                b = max(b1, b2)
                rows.append((gc_mode, n, o, b, f))
                print(
                    f"gc {gc_mode:3s} DelayedFetch {n:>9,d}  purgatory {o:>10,.0f}/s"
                    f"  call_later {b:>10,.0f}/s  x{o / b:.2f}  floor {f:>10,.0f}/s",
                    flush=True,
                )
    finally:
        await env.close()
    lines = [
        f"`python benchmarks/bench_purgatory.py --workloads fetch --repeat {repeat}`. "
        f"{FETCH_PARTITIONS} partitions of one topic (ISR {{self}}, logs in a temp dir); each "
        "op is one consumer fetch of one partition at its log end offset (min_bytes 1, "
        f"max_wait uniform 1..{MAX_DELAY_MS} ms) that `ReplicaManager.fetch_messages` parks, "
        "then completed by one `append_records` per partition (so pending / "
        f"{FETCH_PARTITIONS} fetches per partition), re-reading the log and resolving its "
        "Future. Baseline: the same reads, `DelayedFetch` objects and appends, parked in "
        "per-partition waiter lists with `loop.call_later` timeouts cancelled on completion. "
        "`floor`: the shared work alone (no parking, no timer); `above floor` = ns/op minus "
        "the floor's ns/op, i.e. what parking costs. CPU time, best of runs, interleaved.",
        "",
        "| gc | pending | purgatory (ops/s) | ns/op | call_later (ops/s) | ns/op | ratio "
        "| floor ns/op | purgatory above floor | call_later above floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for gc_mode, n, o, b, f in rows:
        on, bn, fn = 1e9 / o, 1e9 / b, 1e9 / f
        lines.append(
            f"| {gc_mode} | {n:,d} | {o:,.0f} | {on:,.0f} | {b:,.0f} | {bn:,.0f} "
            f"| {o / b:.2f}x | {fn:,.0f} | {on - fn:,.0f} | {bn - fn:,.0f} |"
        )
    return "\n".join(lines) + "\n"


async def main(sizes: list[int], repeat: int, workloads: set[str]) -> dict[str, str]:
    rng = random.Random(1430)
    plans = {n: [rng.randint(1, MAX_DELAY_MS) for _ in range(n)] for n in sizes}
    out = {}
    if workloads & {"timers", "ops"}:
        out[SECTIONS[0]] = await run_generic(sizes, repeat, plans, workloads)
    if "fetch" in workloads:
        out[SECTIONS[1]] = await run_fetch(sizes, repeat, plans)
    return out


def merge_results(existing: str, new: dict[str, str]) -> str:
    """Replace the sections just measured, keep the others as they were."""
    sections: dict[str, str] = {}
    body = existing.split("\n", 1)[1] if existing.startswith("# ") else existing
    parts = ("\n" + body).split("\n## ")
    head = parts[0].strip()
    for part in parts[1:]:
        title, _, text = part.partition("\n")
        sections[title.strip()] = text.strip() + "\n"
    if head and SECTIONS[0] not in sections:  # the file from before sections existed
        sections[SECTIONS[0]] = head + "\n"
    sections.update(new)
    lines = ["# Purgatory benchmark", "",
             f"Python {platform.python_version()} on {platform.machine()}.", ""]
    for title in SECTIONS + tuple(t for t in sections if t not in SECTIONS):
        if title in sections:
            lines += [f"## {title}", "", sections[title].strip(), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workloads", default="timers,ops,fetch",
                        help="comma-separated subset of timers,ops,fetch")
    parser.add_argument("--no-write", action="store_true", help="do not write results file")
    args = parser.parse_args()
    chosen = set(args.workloads.split(","))
    if not chosen <= {"timers", "ops", "fetch"}:
        parser.error(f"unknown workloads {sorted(chosen - {'timers', 'ops', 'fetch'})}")
    tables = asyncio.run(main([int(s) for s in args.sizes.split(",")], args.repeat, chosen))
    print()
    for title, table in tables.items():
        print(f"## {title}\n\n{table}")
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        old = RESULTS.read_text() if RESULTS.exists() else ""
        RESULTS.write_text(merge_results(old, tables))
