"""Load-independent cost of replication: Python function calls per acks=all append.

Three brokers run in this process (tests/unit/replication/mini_cluster: real TCP between
them, a stub controller); one partition of RF 3 (or RF 1) is appended to through
`ReplicaManager.append_records` (acks=-1) with batches of 150 records of 100 B (one 16 KiB
producer batch), 1 or 5 appends in flight. `sys.setprofile` counts every Python and C
function call the event loop makes meanwhile (the brokers' request handling, fetchers,
purgatories, asyncio itself), and the replica fetchers count their fetch rounds. Unlike
CPU seconds on a shared machine, the counts do not move with the load: they tell whether a
change made a fetch round, or the rounds per append, cheaper.

Used by ``python benchmarks/bench_replication.py --calls`` (also alone:
``python benchmarks/replication_calls.py``).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["measure", "table"]


def _batch() -> bytes:
    from protocol.record_builder import RecordBatchBuilder

    b = RecordBatchBuilder()
    for i in range(150):
        b.append(1000 + i, None, b"x" * 100)
    return bytes(b.build())


async def _measure(rf: int, inflight: int, appends: int) -> tuple[float, float]:
    from tests.unit.replication.mini_cluster import MiniCluster, wait_for

    data = _batch()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None
                                     ) as tmp:
        c = await MiniCluster.start(Path(tmp), 3)
        try:
            await c.create("t", [1, 2, 3][:rf])
            await wait_for(lambda: len(c.partition(1, "t", 0).isr) == rf, 30, "ISR")
            rm = c.rm(1)

            async def one() -> None:
                res = rm.append_records(10000, -1, {("t", 0): memoryview(bytearray(data))})
                if isinstance(res, asyncio.Future):
                    res = await res
                assert res[("t", 0)].error == 0, res

            def rounds() -> int:
                return sum(f.fetches for b in c.ids
                           for f in c.rm(b).fetcher_manager.fetchers.values())

            for _ in range(20):
                await one()
            await asyncio.sleep(0.2)
            calls = [0]

            def count(frame, event, arg) -> None:
                if event == "call" or event == "c_call":
                    calls[0] += 1

            before = rounds()
            sem = asyncio.Semaphore(inflight)
            tasks = []
            sys.setprofile(count)
            try:
                for _ in range(appends):
                    await sem.acquire()
                    t = asyncio.ensure_future(one())
                    t.add_done_callback(lambda _: sem.release())
                    tasks.append(t)
                await asyncio.gather(*tasks)
            finally:
                sys.setprofile(None)
            return calls[0] / appends, (rounds() - before) / appends
        finally:
            await c.shutdown()


def measure(appends: int = 300) -> dict:
    """{(rf, inflight): (calls per append, fetch rounds per append)}."""
    out = {}
    for rf, inflight in ((1, 1), (3, 1), (3, 5)):
        out[(rf, inflight)] = asyncio.run(_measure(rf, inflight, appends))
    return out


def table(res: dict, appends: int) -> list[str]:
    base = res[(1, 1)][0]
    lines = [f"Python calls per acks=all append (in-process brokers, sys.setprofile, {appends} "
             "appends of one 16 KiB batch; independent of the machine's load):", "",
             "| partition | appends in flight | calls per append | fetch rounds per append "
             "| vs RF 1 |", "| --- | ---: | ---: | ---: | ---: |"]
    for (rf, inflight), (calls, rounds) in res.items():
        lines.append(f"| RF {rf} | {inflight} | {calls:,.0f} | {rounds:.2f} | "
                     f"{calls / base:.1f}x |")
    lines.append("")
    return lines


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print("\n".join(table(measure(n), n)))
