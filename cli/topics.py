"""``josef topics``: create, list, describe, alter (partitions) and delete topics.

Modelled on ``kafka-topics.sh --bootstrap-server``: the same options and output lines
("Created topic t.", the tab-separated ``--describe`` layout). ``--topic`` is a regular
expression for --list/--describe/--alter/--delete, as in Kafka. Internal topics
(``__consumer_offsets``, ``__transaction_state``) are refused by --delete with Kafka's message
("... is a kafka internal topic and is not allowed to be marked for deletion."); the broker
itself, like Kafka's, would accept the DeleteTopics request.

APIs: Metadata, CreateTopics, CreatePartitions, DeleteTopics (to the controller, resent
when it moves: ``client.admin.AdminRouter``), DescribeConfigs (for the ``Configs:`` column:
topic overrides only; min.insync.replicas for the ISR filters).

``--describe`` filters, as kafka-topics.sh: ``--under-replicated-partitions`` (ISR smaller
than the replica list), ``--unavailable-partitions`` (no leader, or a leader that is not a
live broker), ``--under-min-isr-partitions`` / ``--at-min-isr-partitions`` (ISR size below /
equal to the topic's min.insync.replicas). With a filter only the matching partition lines
are printed (no topic lines); several filters show the union.
"""

from __future__ import annotations

import argparse
import sys

from cli._common import (
    INTERNAL_TOPICS,
    UsageError,
    add_bootstrap,
    check_error,
    connect,
    split_pairs,
    tool_main,
)
from client.admin import AdminRouter
from client.connection import ToolError, error_name

COMMAND = "topics"
HELP = "Create, list, describe, alter and delete topics (like kafka-topics.sh)"

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 32, 37


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (("create", "create a topic"), ("list", "list topic names"),
                       ("describe", "describe topics"),
                       ("alter", "add partitions to a topic"), ("delete", "delete topics")):
        action.add_argument(f"--{name}", action="store_true", help=text)
    p.add_argument("--topic", metavar="TOPIC", help="topic name (a regex except for --create)")
    p.add_argument("--partitions", type=int, metavar="N", help="partition count")
    p.add_argument("--replication-factor", type=int, metavar="N", help="replication factor")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config override for --create (repeatable)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="--create: do nothing if the topic exists")
    p.add_argument("--if-exists", action="store_true",
                   help="--alter/--delete/--describe: do nothing if no topic matches")
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave internal topics out of --list/--describe")
    # --describe filters (kafka-topics.sh): only the matching partition lines are printed
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="--describe: only partitions without a live leader")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR is below min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="--describe: only partitions whose ISR equals min.insync.replicas")


def _matching(client, args, require: bool = True) -> list[str]:
    from cli._common import topic_matcher

    match = topic_matcher(args.topic)
    md = client.metadata(None)
    names = sorted(t.name for t in md.topics if t.error_code == 0 and match(t.name)
                   and not (args.exclude_internal and t.name in INTERNAL_TOPICS))
    if require and not names and args.topic is not None and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return names


def _create(client, args) -> int:
    if not args.topic:
        raise UsageError("--create needs --topic")
    configs = []
    for c in args.config:
        configs += [{"name": k, "value": v} for k, v in split_pairs(c)]
    version = client.version_for(CREATE_TOPICS)
    parts = args.partitions if args.partitions is not None else -1
    rf = args.replication_factor if args.replication_factor is not None else -1
    if version < 4 and (parts < 0 or rf < 0):
        raise UsageError("this broker needs explicit --partitions and --replication-factor")
    resp = AdminRouter(client).controller(CREATE_TOPICS, {
        "topics": [{"name": args.topic, "num_partitions": parts, "replication_factor": rf,
                    "assignments": [], "configs": configs}],
        "timeout_ms": 30000, "validate_only": False}, version=version,
        errors=lambda r: [t.error_code for t in r.topics])
    (r,) = resp.topics
    if r.error_code == 36 and args.if_not_exists:  # TOPIC_ALREADY_EXISTS
        return 0
    if r.error_code == 36:
        raise ToolError(f"Topic '{args.topic}' already exists.")
    check_error(r.error_code, r.error_message, f"cannot create topic {args.topic}")
    if "." in args.topic or "_" in args.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or "
              "underscore ('_') could collide. To avoid issues it is best to use either, "
              "but not both.", file=sys.stderr)
    print(f"Created topic {args.topic}.")
    return 0


def _overrides(client, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    if not names or not client.supports(DESCRIBE_CONFIGS):
        return {}
    resp = client.request(DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": None}
                      for n in names]})
    out = {}
    for r in resp.results:
        entries = []
        for c in r.configs:
            source = getattr(c, "config_source", -1)
            overridden = source == 1 if source not in (-1, None) else not c.is_default
            if overridden:
                entries.append((c.name, "" if c.is_sensitive else (c.value or "")))
        out[r.resource_name] = entries
    return out


def _min_isr(client, names: list[str]) -> dict[str, int]:
    """min.insync.replicas of each topic (its override, else the broker default)."""
    if not names or not client.supports(DESCRIBE_CONFIGS):
        return {}
    resp = client.request(DESCRIBE_CONFIGS, {
        "resources": [{"resource_type": 2, "resource_name": n,
                       "configuration_keys": ["min.insync.replicas"]} for n in names]})
    out = {}
    for r in resp.results:
        for c in r.configs:
            if c.name == "min.insync.replicas" and c.value is not None:
                out[r.resource_name] = int(c.value)
    return out


def _partition_filter(client, args, names: list[str], live: set[int]):
    """The --describe partition filter (Kafka's TopicCommand.PartitionDescription), or None
    when every partition is shown."""
    wanted = []
    if args.under_replicated_partitions:
        wanted.append(lambda t, p: len(p.isr_nodes) < len(p.replica_nodes))
    if args.unavailable_partitions:
        wanted.append(lambda t, p: p.leader_id < 0 or p.leader_id not in live)
    if args.under_min_isr_partitions or args.at_min_isr_partitions:
        min_isr = _min_isr(client, names)
        if args.under_min_isr_partitions:
            wanted.append(lambda t, p: len(p.isr_nodes) < min_isr.get(t, 1))
        if args.at_min_isr_partitions:
            wanted.append(lambda t, p: len(p.isr_nodes) == min_isr.get(t, 1))
    if not wanted:
        return None
    return lambda t, p: any(w(t, p) for w in wanted)


def _describe(client, args) -> int:
    names = _matching(client, args)
    if not names:
        return 0
    md = client.metadata(names)
    live = {b.node_id for b in md.brokers}
    show = _partition_filter(client, args, names, live)
    configs = _overrides(client, names) if show is None else {}
    for t in sorted(md.topics, key=lambda t: t.name):
        if t.error_code:
            if show is None:
                print(f"Topic: {t.name}\tError: {error_name(t.error_code)}")
            continue
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        tid = getattr(t, "topic_id", None)
        cfg = ",".join(f"{k}={v}" for k, v in configs.get(t.name, []))
        if show is None:  # Kafka prints the topic line only without partition filters
            print(f"Topic: {t.name}\tTopicId: {tid if tid is not None else 'none'}\t"
                  f"PartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {cfg}")
        for p in parts:
            if show is not None and not show(t.name, p):
                continue
            line = (f"\tTopic: {t.name}\tPartition: {p.partition_index}\t"
                    f"Leader: {p.leader_id if p.leader_id >= 0 else 'none'}\t"
                    f"Replicas: {','.join(map(str, p.replica_nodes))}\t"
                    f"Isr: {','.join(map(str, p.isr_nodes))}")
            if p.error_code:
                line += f"\tError: {error_name(p.error_code)}"
            print(line)
    return 0


def _alter(client, args) -> int:
    if args.partitions is None:
        raise UsageError("--alter needs --partitions (use 'josef configs' for configs)")
    names = _matching(client, args)
    if not names:
        return 0
    resp = AdminRouter(client).controller(CREATE_PARTITIONS, {
        "topics": [{"name": n, "count": args.partitions, "assignments": None} for n in names],
        "timeout_ms": 30000, "validate_only": False},
        errors=lambda r: [t.error_code for t in r.results])
    failed = False
    for r in resp.results:
        if r.error_code:
            failed = True
            print(f"Error while executing topic command : {error_name(r.error_code)}"
                  + (f": {r.error_message}" if r.error_message else ""), file=sys.stderr)
    return 1 if failed else 0


def _delete(client, args) -> int:
    names = [args.topic] if args.topic in INTERNAL_TOPICS else _matching(client, args)
    internal = [n for n in names if n in INTERNAL_TOPICS]
    if internal:
        raise ToolError(f"Topic {internal[0]} is a kafka internal topic and is not allowed "
                        "to be marked for deletion.")
    if not names:
        return 0
    version = client.version_for(DELETE_TOPICS)
    body = {"timeout_ms": 30000}
    if version >= 6:
        body["topics"] = [{"name": n} for n in names]
    else:
        body["topic_names"] = names
    resp = AdminRouter(client).controller(DELETE_TOPICS, body, version=version,
                                          errors=lambda r: [t.error_code for t in r.responses])
    failed = False
    for r in resp.responses:
        if r.error_code:
            failed = True
            print(f"Error while deleting topic {r.name}: {error_name(r.error_code)}",
                  file=sys.stderr)
    return 1 if failed else 0


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.create:
            return _create(client, args)
        if args.list:
            for name in _matching(client, args, require=False):
                print(name)
            return 0
        if args.describe:
            return _describe(client, args)
        if args.alter:
            return _alter(client, args)
        return _delete(client, args)
