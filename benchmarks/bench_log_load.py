"""Loading many partition logs after a clean shutdown, in one process (issue 22, restart aim).

What a broker does between its spawn and listening, minus everything but the logs:
`LogManager.load_all` over one log dir whose last run ended with a clean shutdown (the
`.kafka_cleanshutdown` marker: no recovery, offsets from the checkpoints and the segments'
names and sizes), then the broker's one full collection and `gc.freeze()` after startup
(`broker.server._tune_gc_once`), with the broker's GC thresholds. Figures: wall time, CPU time
of this process (`time.process_time`: user + system, what to compare on a shared machine)
and CPU per log.

Run: ``python benchmarks/bench_log_load.py N DIR [--make] [--profile] [--repeat R]``.
``--make`` first creates N empty partitions (100 topics) in DIR and shuts down cleanly;
later runs reuse DIR (each run ends with a clean shutdown again). ``--profile`` prints the
cProfile top 30 by own time. Figures go to stdout only; tables live in
``benchmarks/results/scale.md`` ("Startup after a clean shutdown").
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.server import GC_THRESHOLDS  # noqa: E402
from storage.checkpoints import read_meta_properties  # noqa: E402
from storage.config import LogConfig  # noqa: E402
from storage.log_manager import LogManager  # noqa: E402


async def make(n: int, log_dir: str) -> None:
    lm = LogManager([log_dir], LogConfig(), broker_id=1, cluster_id="bench")
    await lm.startup(background=False)
    topics = 100
    per_topic = max(1, -(-n // topics))
    await lm.create_logs([((f"load-{i // per_topic}", i % per_topic), None, None)
                          for i in range(n)])
    await lm.shutdown()


async def close(lm: LogManager) -> None:
    lm._loop = asyncio.get_running_loop()
    await lm.shutdown()  # writes the clean shutdown marker for the next run


def load_once(log_dir: str, profile: bool) -> tuple[float, float, int]:
    gc.set_threshold(*GC_THRESHOLDS)
    meta = read_meta_properties(log_dir) or {}  # a dir made by another tool keeps its ids
    lm = LogManager([log_dir], LogConfig(), broker_id=int(meta.get("broker.id", 1)),
                    cluster_id=meta.get("cluster.id", "bench"))
    prof = cProfile.Profile() if profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    lm.load_all()
    gc.collect()
    gc.freeze()
    if prof:
        prof.disable()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = len(lm.all_logs())
    if not lm.had_clean_shutdown.get(log_dir):
        print("warning: the dir had no clean shutdown marker (this run recovered every log)")
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    asyncio.run(close(lm))
    gc.unfreeze()
    return wall, cpu, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    log_dir = os.path.abspath(args.dir)
    if args.make:
        t = time.perf_counter()
        asyncio.run(make(args.n, log_dir))
        print(f"made {args.n:,} logs in {time.perf_counter() - t:.1f} s")
    print(f"load average at start: {os.getloadavg()}")
    for _ in range(args.repeat):
        wall, cpu, n = load_once(log_dir, args.profile)
        print(f"loaded {n:,} logs: wall {wall:.2f} s, CPU {cpu:.2f} s, "
              f"{cpu / max(n, 1) * 1e6:.0f} us CPU per log")


if __name__ == "__main__":
    main()
