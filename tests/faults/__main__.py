"""Command line: ``python -m tests.faults run ...`` and ``python -m tests.faults fuzz ...``
(from the repository root; see tests/faults/README.md)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults",
                                     description="Josef fault injection and fuzzing")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="a cluster under faults with a checked workload")
    run.add_argument("--brokers", type=int, default=1)
    run.add_argument("--nemesis", default="kill",
                     help="comma-separated: kill,pause,partition,zk,torn (empty: none)")
    run.add_argument("--time-limit", type=float, default=60.0, help="seconds of faults")
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--out", required=True, help="directory for results and logs")
    run.add_argument("--partitions", type=int, default=3)
    run.add_argument("--producers", type=int, default=2,
                     help="alternating confluent-kafka and kafka-python")
    run.add_argument("--consumers", type=int, default=2,
                     help="alternating confluent-kafka and kafka-python, one group")
    run.add_argument("--rate", type=float, default=50.0, help="sends/s per producer")
    run.add_argument("--txn-producers", type=int, default=1,
                     help="transactional producers (with one read_committed consumer); 0: none")
    run.add_argument("--txn-rate", type=float, default=5.0, help="transactions/s per producer")
    run.add_argument("--replication-factor", type=int, default=None)
    run.add_argument("--min-insync-replicas", type=int, default=None)
    run.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--network", choices=["auto", "netns", "proxy", "loopback"],
                     default="auto")
    run.add_argument("--keep-data", action="store_true",
                     help="keep the brokers' data directories of a valid run too")

    fuzz = sub.add_parser("fuzz", help="a protocol fuzzer against a live broker")
    fuzz.add_argument("--frames", type=int, default=200_000)
    fuzz.add_argument("--seed", type=int, default=None)
    fuzz.add_argument("--out", required=True)
    fuzz.add_argument("--connections", type=int, default=32,
                      help="fuzzing connections open at a time")
    fuzz.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE")

    args = parser.parse_args(argv)
    if args.command == "run":
        from tests.faults.runner import run as run_faults
        return run_faults(args)
    from tests.faults.fuzzer import fuzz as run_fuzz
    return run_fuzz(args)


if __name__ == "__main__":
    sys.exit(main())
