"""``josef consumer-groups``: list, describe (with lag), reset offsets of and delete consumer
groups, like ``kafka-consumer-groups.sh``.

- ``--list``: ListGroups on every broker, one group id per line.
- ``--describe --group g``: FindCoordinator, ConsumerGroupDescribe (KIP-848 groups; a
  classic group falls back to DescribeGroups) and OffsetFetch on the coordinator,
  ListOffsets (latest) on the leaders; Kafka's table::

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

  (``-`` where unknown; an empty group also prints "Consumer group 'g' has no active
  members." first). Members' partitions come from their ConsumerProtocol assignment
  (int16 version, then ``[topic string, [int32 partition]]``).
- ``--reset-offsets --group g (--topic t[:p,...] | --all-topics)`` with one of
  ``--to-earliest``, ``--to-latest``, ``--to-offset N``, ``--shift-by N``: prints the plan
  (GROUP TOPIC PARTITION NEW-OFFSET); ``--execute`` commits it (OffsetCommit, generation -1,
  as Kafka's tool does), ``--dry-run`` (default) does not. Like Kafka, only an inactive group
  (Empty or Dead) can be reset.
- ``--delete --group g``: DeleteGroups; "Deletion of requested consumer groups ('g') was
  successful." or the error per group.
"""

from __future__ import annotations

import argparse

from cli._common import (
    UsageError,
    add_bootstrap,
    check_error,
    connect,
    delete_groups,
    format_table,
    partition_leaders,
    tool_main,
)
from client.connection import ToolError
from client.groups import committed_offsets, describe_group, find_coordinator, parse_assignment
from client.offsets import EARLIEST, LATEST, commit_offsets, list_offsets

COMMAND = "consumer-groups"
HELP = "List, describe, reset and delete consumer groups (like kafka-consumer-groups.sh)"
OFFSET_FETCH, FIND_COORDINATOR = 9, 10
CONSUMER_GROUP_DESCRIBE = 69
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list groups")
    action.add_argument("--describe", action="store_true", help="offsets, lag and members")
    action.add_argument("--reset-offsets", action="store_true", help="reset committed offsets")
    action.add_argument("--delete", action="store_true", help="delete groups")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="group id (repeatable for --describe/--delete)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]",
                   help="--reset-offsets: topic, optionally with partitions")
    p.add_argument("--all-topics", action="store_true",
                   help="--reset-offsets: every topic the group has offsets for")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N")
    p.add_argument("--execute", action="store_true", help="--reset-offsets: apply the plan")
    p.add_argument("--dry-run", action="store_true", help="--reset-offsets: only show (default)")


class _Member:
    def __init__(self, member_id: str, client_id: str, client_host: str) -> None:
        self.member_id, self.client_id, self.client_host = member_id, client_id, client_host


def _consumer_group(client, node: int, group: str):
    """The KIP-848 consumer group ``group`` (ConsumerGroupDescribe), or None when the broker
    does not serve that API or the group is not a consumer group."""
    if not client.supports(CONSUMER_GROUP_DESCRIBE):
        return None
    r = client.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": [group]}, node=node)
    g = r.groups[0]
    return g if g.error_code == 0 else None


def _group_state(client, node: int, group: str) -> str:
    cg = _consumer_group(client, node, group)
    return cg.group_state if cg is not None else describe_group(client, node, group).group_state


def _describe(client, args) -> int:
    for group in args.group:
        node = find_coordinator(client, group)
        owners = {}
        cg = _consumer_group(client, node, group)
        if cg is not None:  # KIP-848 group: members' current assignments by topic name
            members = cg.members
            for m in cg.members:
                member = _Member(m.member_id, m.client_id, m.client_host)
                for tp in m.assignment.topic_partitions:
                    for p in tp.partitions:
                        owners[(tp.topic_name, p)] = member
        else:
            members = describe_group(client, node, group).members
            for m in members:
                for tp in parse_assignment(m.member_assignment):
                    owners[tp] = m
        committed = committed_offsets(client, node, group)
        tps = sorted(set(committed) | set(owners))
        ends = list_offsets(client, tps, LATEST) if tps else {}
        print()
        if not members:
            print(f"Consumer group '{group}' has no active members.")
            print()
        rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "HOST", "CLIENT-ID"]]
        for tp in tps:
            cur = committed.get(tp)
            end = ends.get(tp)
            lag = "-" if cur is None or end is None else str(max(end - cur, 0))
            m = owners.get(tp)
            rows.append([group, tp[0], str(tp[1]), "-" if cur is None else str(cur),
                         "-" if end is None else str(end), lag,
                         m.member_id if m else "-", m.client_host if m else "-",
                         m.client_id if m else "-"])
        print(format_table(rows))
    return 0


def _reset_targets(client, args, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    if not args.topic:
        raise UsageError("--reset-offsets needs --topic or --all-topics")
    out = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            out += [(topic, int(p)) for p in parts.split(",") if p.strip()]
        else:
            out += sorted(tp for tp in partition_leaders(client, [topic]))
    return out


def _reset(client, args) -> int:
    if len(args.group) != 1:
        raise UsageError("--reset-offsets needs exactly one --group")
    if not (args.to_earliest or args.to_latest or args.to_offset is not None
            or args.shift_by is not None):
        raise UsageError("--reset-offsets needs --to-earliest, --to-latest, --to-offset or "
                         "--shift-by")
    group = args.group[0]
    node = find_coordinator(client, group)
    state = _group_state(client, node, group)
    if args.execute and state not in ("Empty", "Dead", ""):
        raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}.")
    committed = committed_offsets(client, node, group)
    tps = _reset_targets(client, args, committed)
    if not tps:
        raise ToolError("no partitions to reset")
    earliest = list_offsets(client, tps, EARLIEST)
    latest = list_offsets(client, tps, LATEST)
    plan = {}
    for tp in tps:
        if args.to_earliest:
            new = earliest[tp]
        elif args.to_latest:
            new = latest[tp]
        elif args.to_offset is not None:
            new = args.to_offset
        else:
            new = committed.get(tp, latest[tp]) + args.shift_by
        plan[tp] = min(max(new, earliest[tp]), latest[tp])  # Kafka clamps into the log
    if args.execute:
        commit_offsets(client, node, group, plan)
    print()
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(off)] for (t, p), off in sorted(plan.items())]
    print(format_table(rows))
    return 0


def _delete(client, args) -> int:
    if not args.group:
        raise UsageError("--delete needs --group")
    return delete_groups(client, args.group, "consumer", "Group")


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.list:
            md = client.metadata([])
            seen = set()
            for b in sorted(md.brokers, key=lambda b: b.node_id):
                resp = client.request(LIST_GROUPS, {}, node=b.node_id)
                check_error(resp.error_code, None, f"ListGroups on broker {b.node_id}")
                seen.update(g.group_id for g in resp.groups)
            for g in sorted(seen):
                print(g)
            return 0
        if not args.group:
            raise UsageError("--group is required")
        if args.describe:
            return _describe(client, args)
        if args.reset_offsets:
            return _reset(client, args)
        return _delete(client, args)
