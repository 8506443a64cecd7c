"""Purgatory benchmark: timing wheel vs asyncio `loop.call_later`, in the same run.

Two workloads, each at 10k, 100k and 1M pending operations:

1. timers: add N timers (delays uniform in 1..30 000 ms, seeded), then cancel all N.
   Ours: `SystemTimer.add(task)` + `task.cancel()`. Baseline: `loop.call_later(...)` +
   `handle.cancel()`. Both then yield once to the loop, so asyncio's cleanup of cancelled
   handles (it rebuilds its heap once most handles are cancelled) is counted.
2. parked operations: N operations (100 per key) that complete when their key's counter
   reaches their threshold are parked, then every key's counter is bumped and
   `check_and_complete(key)` completes them. Ours: `DelayedOperationPurgatory` on a
   `SystemTimer`. Baseline: the same steps (try, watch, try, arm a timeout; on completion
   cancel the timeout) written plainly over per-key lists and `loop.call_later`.

One op = one add + one cancel (1), or one park + one completion (2). Each is run with Python's
cyclic GC on (default) and off (timed section only). Times are CPU time of this process
(`time.process_time`), so other load on the machine disturbs them less. Prints a markdown
table and writes it to benchmarks/results/purgatory.md.

Run: python benchmarks/bench_purgatory.py [--sizes 10000,100000,1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pathlib
import platform
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from broker.purgatory import (  # noqa: E402
    DelayedOperation,
    DelayedOperationPurgatory,
    SystemTimer,
    TimerTask,
    TopicPartitionKey,
)

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "purgatory.md"
OPS_PER_KEY = 100
MAX_DELAY_MS = 30_000


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


async def main(sizes: list[int], repeat: int) -> str:
    rng = random.Random(1430)
    plans = {n: [rng.randint(1, MAX_DELAY_MS) for _ in range(n)] for n in sizes}
    rows = []
    for gc_mode in ("on", "off"):
        gc_off = gc_mode == "off"
        for workload, ours, base in (
            ("add + cancel timer", timers_ours, timers_baseline),
            ("park + complete op", parked_ours, parked_baseline),
        ):
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
        "# Purgatory benchmark",
        "",
        f"Python {platform.python_version()} on {platform.machine()}, "
        f"`python benchmarks/bench_purgatory.py --repeat {repeat}`. Delays uniform "
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="do not write results file")
    args = parser.parse_args()
    table = asyncio.run(main([int(s) for s in args.sizes.split(",")], args.repeat))
    print()
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
