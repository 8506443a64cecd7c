"""A kafka-python idempotent acks=all producer as a subprocess, for the replication tests
that kill brokers (kafka-python 3 keeps the socket of a refused connect referenced until
interpreter exit, which a test process must not inherit).

    python -m tests.integration.kp_producer --bootstrap B --topic T --count N --prefix P
        [--chunks K] [--partitions N] [--pause-every N --pause-ms MS]

Record i has key and value P + "%08d" % i (explicit partition i % N with --partitions). With
--chunks K the records go in K chunks, each flushed; before chunk k > 0 one line is read from
stdin (the test's "go"). Prints "ack <value>" / "fail <value> <error>" per record as its
callback fires, then "done" (exit 0) or "error <text>" (exit 1).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import warnings


def main() -> int:
    warnings.simplefilter("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--prefix", default="kp-")
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=0)
    ap.add_argument("--pause-every", type=int, default=0)
    ap.add_argument("--pause-ms", type=int, default=0)
    args = ap.parse_args()

    from kafka import KafkaProducer

    lock = threading.Lock()

    def out(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    p = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", enable_idempotence=True,
                      linger_ms=5, delivery_timeout_ms=300000, request_timeout_ms=30000)
    step = args.count // args.chunks
    try:
        for k in range(args.chunks):
            if k:
                sys.stdin.readline()
            end = args.count if k == args.chunks - 1 else (k + 1) * step
            for i in range(k * step, end):
                v = f"{args.prefix}{i:08d}".encode()
                part = i % args.partitions if args.partitions else None
                p.send(args.topic, key=v, value=v, partition=part).add_callback(
                    lambda _md, v=v: out(f"ack {v.decode()}")).add_errback(
                    lambda e, v=v: out(f"fail {v.decode()} {type(e).__name__}"))
                if args.pause_every and i % args.pause_every == args.pause_every - 1:
                    p.flush(300)
                    time.sleep(args.pause_ms / 1000)
            p.flush(600)
        p.close(60)
    except Exception as e:  # noqa: BLE001 - reported to the test
        out(f"error {type(e).__name__}: {e}")
        return 1
    out("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
