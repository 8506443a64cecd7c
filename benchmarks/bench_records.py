"""Record batch micro-benchmarks: build, CRC validate, iterate, patch (per codec).

Run: ``python benchmarks/bench_records.py [records_per_batch] [value_bytes]``.
Prints records/s and MB/s for each operation; no external services.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from protocol.record_builder import RecordBatchBuilder  # noqa: E402
from protocol.records import RecordBatch  # noqa: E402

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _timeit(fn, min_seconds: float = 0.5) -> float:
    n = 0
    start = time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / n


def main(records: int = 500, value_bytes: int = 200) -> None:
    value = (b"0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
    print(f"{records} records/batch, {value_bytes}-byte values, 1 header each")
    print(f"{'codec':8}{'op':10}{'records/s':>14}{'MB/s':>10}")
    for codec, name in CODECS.items():

        def build(codec=codec):
            b = RecordBatchBuilder(compression_type=codec)
            for i in range(records):
                b.append(1_700_000_000_000 + i, b"key-%d" % i, value, [("h", b"v")])
            return b.build()

        data = build()
        buf = bytearray(data)
        batch = RecordBatch(buf)
        raw_bytes = records * (value_bytes + 16)
        ops = {
            "build": build,
            "validate": batch.validate,
            "iterate": lambda batch=batch: sum(1 for _ in batch),
            "patch": lambda batch=batch: (
                batch.set_base_offset(5),
                batch.set_partition_leader_epoch(1),
            ),
        }
        for op, fn in ops.items():
            t = _timeit(fn)
            per_batch = 1 if op == "patch" else records
            mb = (len(data) if op == "validate" else raw_bytes) / t / 1e6
            print(f"{name:8}{op:10}{per_batch / t:>14,.0f}{mb:>10.1f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
