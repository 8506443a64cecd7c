"""``josef log-dirs``: describe log directories (like ``kafka-log-dirs.sh``) and move a
partition between them.

``--describe [--topic-list a,b]`` prints Kafka's three lines: ``Querying brokers for log
directories information``, ``Received log directory information from brokers <ids>`` and
one JSON document ``{"version":1,"brokers":[{"broker":id,"logDirs":[{"logDir":..,
"error":null,"partitions":[{"partition":"t-0","size":n,"offsetLag":n,"isFuture":b}]}]}]}``.
``--move --topic t --partition p --dir D`` sends AlterReplicaLogDirs to the partition's
leader (Kafka does this through ``kafka-reassign-partitions.sh`` with ``log_dirs``);
``--wait`` polls DescribeLogDirs until the move finished, with a progress bar on stderr
(when it is a terminal, or with ``--progress``): the future replica's size out of the
current replica's, e.g. ``t-0 -> /data/b: 100.0%|####| 12.0MB/12.0MB [00:03, 4.00MB/s]``.
APIs: Metadata, DescribeLogDirs, AlterReplicaLogDirs.
"""

from __future__ import annotations

import argparse
import json
import time

from cli._common import UsageError, add_bootstrap, connect, tool_main
from cli._progress import ProgressBar
from client.admin import AdminRouter
from client.connection import error_name

COMMAND = "log-dirs"
HELP = "Describe log directories and move partitions between them (like kafka-log-dirs.sh)"
DESCRIBE_LOG_DIRS, ALTER_REPLICA_LOG_DIRS = 35, 34


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--describe", action="store_true")
    g.add_argument("--move", action="store_true")
    p.add_argument("--topic-list", help="comma-separated topics (describe)")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--dir", help="destination log directory (absolute path)")
    p.add_argument("--wait", action="store_true", help="wait until the move finished")
    p.add_argument("--progress", action="store_true",
                   help="with --wait: show the progress bar even when stderr is not a terminal")


def _describe(client, topics: list[str] | None, node: int):
    body = {"topics": None if topics is None else [
        {"topic": t, "partitions": list(range(n))} for t, n in topics]}
    return AdminRouter(client).broker(node, DESCRIBE_LOG_DIRS, body)


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        md = client.metadata(None)
        counts = {t.name: len(t.partitions) for t in md.topics if not t.error_code}
        if args.describe:
            topics = None
            if args.topic_list:
                topics = [(t, counts.get(t, 0)) for t in args.topic_list.split(",") if t]
            print("Querying brokers for log directories information")
            brokers = []
            for b in sorted(md.brokers, key=lambda b: b.node_id):
                r = _describe(client, topics, node=b.node_id)
                dirs = []
                for res in r.results:
                    dirs.append({"logDir": res.log_dir,
                                 "error": error_name(res.error_code) if res.error_code
                                 else None,
                                 "partitions": [{"partition": f"{t.name}-{p.partition_index}",
                                                 "size": p.partition_size,
                                                 "offsetLag": p.offset_lag,
                                                 "isFuture": p.is_future_key}
                                                for t in res.topics for p in t.partitions]})
                brokers.append({"broker": b.node_id, "logDirs": dirs})
            print("Received log directory information from brokers "
                  + ",".join(str(b["broker"]) for b in brokers))
            print(json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":")))
            return 0
        if not (args.topic and args.partition is not None and args.dir):
            raise UsageError("--move needs --topic, --partition and --dir")
        leader = next((p.leader_id for t in md.topics if t.name == args.topic
                       for p in t.partitions if p.partition_index == args.partition), None)
        if leader is None:
            raise UsageError(f"unknown partition {args.topic}-{args.partition}")
        r = AdminRouter(client).broker(leader, ALTER_REPLICA_LOG_DIRS, {"dirs": [{
            "path": args.dir, "topics": [{"name": args.topic,
                                          "partitions": [args.partition]}]}]})
        code = r.results[0].partitions[0].error_code
        if code:
            print(f"Error moving {args.topic}-{args.partition}: {error_name(code)}")
            return 1
        print(f"Moving {args.topic}-{args.partition} to {args.dir}.")
        if not args.wait:
            return 0
        return _wait_for_move(client, args, leader, counts.get(args.topic, 0))


def _wait_for_move(client, args, leader: int, partitions: int, timeout_s: float = 300) -> int:
    """Poll DescribeLogDirs every 0.5 s until the replica lives only in ``args.dir``."""
    deadline = time.monotonic() + timeout_s
    with ProgressBar(None, f"{args.topic}-{args.partition} -> {args.dir}",
                     force=args.progress or None) as bar:
        while time.monotonic() < deadline:
            r = _describe(client, [(args.topic, partitions)], node=leader)
            where = {(res.log_dir, p.is_future_key): p.partition_size for res in r.results
                     for t in res.topics for p in t.partitions
                     if p.partition_index == args.partition}
            current = next((size for (_d, future), size in where.items() if not future), 0)
            if list(where) == [(args.dir, False)]:
                bar.set_total(max(current, bar.total or 0))
                bar.update(max(0, (bar.total or current) - bar.done))
                bar.close()
                print("Done.")
                return 0
            if not bar.total and current:
                bar.set_total(current)
            future = where.get((args.dir, True), 0)
            if future > bar.done:
                bar.update(future - bar.done)
            time.sleep(0.5)
    return 1
