"""Transactions benchmark against a live broker (a subprocess on 127.0.0.1, started with
tests/integration/harness.py and stopped by PID at the end).

The same confluent-kafka producer code writes the same records (``--records`` values of
``--value-size`` bytes to a 3-partition topic, linger.ms=5, acks=all) in three ways, in
each of ``--rounds`` rounds:

1. **idempotent** (the reference): ``enable.idempotence=true``, produce everything, flush;
2. **transactions of 100 records**: begin, produce 100, commit, repeated;
3. **transactions of 10,000 records**: the same with 10,000 per transaction.

Throughput is records/s from the first produce to the last flush/commit. The three
workloads run back to back in each round (the first one rotating); a transactional rate is
compared with the idempotent rate of its own round and the median of those ratios is
reported (aim: >= 0.7 with 10,000-record transactions), with each workload's best rate.
Commit latency is the time of each ``commit_transaction()`` call after the transaction's records were flushed (EndTxn: the
PrepareCommit record; the markers and CompleteCommit follow asynchronously), p50 and p99
over every commit of every round.

Run: ``python benchmarks/bench_transactions.py [--quick]``; prints a markdown table and
writes it to ``benchmarks/results/transactions.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PARTITIONS = 3
NOTE = ("Transactions of 100 records are bound by per-transaction round trips "
        "(AddPartitionsToTxn writes the Ongoing record, the records wait linger.ms, EndTxn "
        "writes PrepareCommit); in librdkafka's debug log about one AddPartitionsToTxn in five "
        "meets the previous transaction's markers still being written and is retried after "
        "20 ms (CONCURRENT_TRANSACTIONS, as against Kafka).")


def producer(bootstrap: str, **extra):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                     "queue.buffering.max.messages": 1_000_000, **extra})


def produce_all(p, topic: str, n: int, value: bytes) -> None:
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)


def run_idempotent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    p = producer(bootstrap, **{"enable.idempotence": True})
    p.list_topics(topic, timeout=30)
    t0 = time.perf_counter()
    produce_all(p, topic, n, value)
    assert p.flush(120) == 0
    return n / (time.perf_counter() - t0)


def run_transactional(bootstrap: str, topic: str, n: int, value: bytes, size: int,
                      txn_id: str) -> tuple[float, list[float]]:
    p = producer(bootstrap, **{"transactional.id": txn_id})
    p.init_transactions(60)
    p.list_topics(topic, timeout=30)
    commits = []
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(size, n - done)
        p.begin_transaction()
        produce_all(p, topic, k, value)
        p.flush(120)  # the records are written; what follows is the commit alone
        c0 = time.perf_counter()
        p.commit_transaction(120)
        commits.append((time.perf_counter() - c0) * 1000)
        done += k
    return n / (time.perf_counter() - t0), commits


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.integration.harness import BrokerProcess

    quick = os.environ.get("JOSEF_BENCH_QUICK") == "1"
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", default=quick)
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--no-write", action="store_true", help="do not write results/*.md")
    args = ap.parse_args()
    records = args.records or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 5)
    value = b"v" * args.value_size
    work = Path(tempfile.mkdtemp(prefix="josef-bench-txn-", dir="/dev/shm"
                                 if os.path.isdir("/dev/shm") else None))
    broker = BrokerProcess(work / "broker", {
        "transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"},
        startup_timeout=60)
    best: dict[str, float] = {}
    ratios: dict[str, list[float]] = {"t100": [], "t10k": []}
    commit_ms: dict[str, list[float]] = {"t100": [], "t10k": []}
    try:
        broker.start()
        bs = broker.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("warmup", PARTITIONS, 1)]).values():
            f.result(30)
        run_idempotent(bs, "warmup", min(records, 5000), value)  # first-run costs
        run_transactional(bs, "warmup", min(records, 5000), value, 1000, "warmup")
        for r in range(rounds):
            topics = [f"bench-{r}-{k}" for k in ("idem", "t100", "t10k")]
            for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics]).values():
                f.result(30)
            def one(name: str, topics=topics, r=r):
                if name == "idem":
                    return run_idempotent(bs, topics[0], records, value), None
                size = 100 if name == "t100" else 10_000
                return run_transactional(bs, topics[1 if size == 100 else 2], records, value,
                                         size, f"b{size}-{r}")

            names = ["idem", "t100", "t10k"]
            order = names[r % 3:] + names[:r % 3]  # rotate who runs first
            got = {name: one(name) for name in order}
            (idem, _), (t100, c100), (t10k, c10k) = got["idem"], got["t100"], got["t10k"]
            print(f"round {r + 1}: idempotent {idem:,.0f}/s, txn(100) {t100:,.0f}/s, "
                  f"txn(10000) {t10k:,.0f}/s", flush=True)
            for name, rate, commits in (("idem", idem, None), ("t100", t100, c100),
                                        ("t10k", t10k, c10k)):
                best[name] = max(best.get(name, 0), rate)
                if commits is not None:
                    ratios[name].append(rate / idem)
                    commit_ms[name] += commits
    finally:
        broker.stop()
    rows = [
        "| workload | best records/s | vs idempotent (median of the rounds' ratios) | aim | "
        "commit p50 | commit p99 |",
        "|---|---|---|---|---|---|",
        f"| idempotent producer (reference) | {best['idem']:,.0f} | 1.00 | - | - | - |",
    ]
    for name, label, aim in (("t100", "transactions of 100 records", "report"),
                             ("t10k", "transactions of 10,000 records", ">= 0.7")):
        c = commit_ms[name]
        rows.append(f"| {label} | {best[name]:,.0f} | {statistics.median(ratios[name]):.2f} | "
                    f"{aim} | {pct(c, 0.5):.1f} ms | {pct(c, 0.99):.1f} ms |")
    text = "\n".join([
        "# Transactions benchmark (benchmarks/bench_transactions.py)",
        "",
        f"Python {platform.python_version()}, one broker subprocess on 127.0.0.1, confluent-kafka "
        f"(librdkafka) producer, {records:,} records of {args.value_size} bytes over "
        f"{PARTITIONS} partitions, linger.ms=5, acks=all, {rounds} round(s) "
        f"(load average {os.getloadavg()[0]:.1f}). Commit latency: each commit_transaction() "
        f"call once the records are flushed ({statistics.fmean(commit_ms['t100']):.1f} ms "
        "mean for 100-record transactions); each transaction spans the 3 partitions.",
        "",
        NOTE,
        "",
        *rows,
        "",
    ])
    print(text)
    if not args.no_write and not args.quick:
        out = ROOT / "benchmarks" / "results" / "transactions.md"
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
