"""``josef share-groups``: list, describe, reset and delete share groups (KIP-932), like
Kafka 4.2's ``kafka-share-groups.sh`` (same flags, same tables). Requests go through
``client.admin.AdminRouter`` (the group coordinator, found again when it moves; ListGroups
on every broker; ListOffsets to the leaders).

- ``--list [--state [S]]``: ListGroups (types_filter ``share``) on every broker; one group id
  per line, or ``GROUP STATE`` with ``--state`` (a value filters by state).
- ``--describe --group g | --all-groups`` with ``--offsets`` (the default), ``--state`` or
  ``--members`` (``--verbose`` adds member epochs)::

    GROUP  TOPIC  PARTITION  LEADER-EPOCH  START-OFFSET  LAG          (DescribeShareGroupOffsets)
    GROUP  COORDINATOR (ID)  STATE  #MEMBERS                          (ShareGroupDescribe)
    GROUP  CONSUMER-ID  HOST  CLIENT-ID  #PARTITIONS  ASSIGNMENT      (ShareGroupDescribe)

  LAG is the log end offset (ListOffsets latest) minus the share-partition start offset,
  ``-`` where unknown. An empty group prints "Share group 'g' has no active members." too.
- ``--reset-offsets --group g (--topic t[:p,...] | --all-topics)`` with ``--to-earliest``,
  ``--to-latest``, ``--to-offset N`` or ``--to-datetime YYYY-MM-DDTHH:mm:SS.sss``: prints
  the plan (GROUP TOPIC PARTITION NEW-OFFSET); ``--execute`` applies it
  (AlterShareGroupOffsets: the group must be empty), ``--dry-run`` (default) does not.
- ``--delete --group g``: DeleteGroups; "Deletion of requested share groups ('g') was
  successful." or the error per group.
- ``--delete-offsets --group g --topic t``: DeleteShareGroupOffsets; ``TOPIC STATUS`` rows.
"""

from __future__ import annotations

import argparse
import datetime

from cli._common import (
    UsageError,
    add_bootstrap,
    check_error,
    connect,
    delete_groups,
    format_table,
    tool_main,
    topic_partition_specs,
)
from client.admin import AdminRouter
from client.connection import ToolError, error_name
from client.offsets import EARLIEST, LATEST, list_offsets

COMMAND = "share-groups"
HELP = "List, describe, reset and delete share groups (like kafka-share-groups.sh)"
LIST_GROUPS, DELETE_GROUPS, SHARE_GROUP_DESCRIBE = 16, 42, 77
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list share groups")
    action.add_argument("--describe", action="store_true", help="offsets, state or members")
    action.add_argument("--reset-offsets", action="store_true",
                        help="reset share-partition start offsets")
    action.add_argument("--delete", action="store_true", help="delete share groups")
    action.add_argument("--delete-offsets", action="store_true",
                        help="delete a share group's state for topics")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="share group id (repeatable for --describe/--delete)")
    p.add_argument("--all-groups", action="store_true", help="--describe/--delete every group")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--offsets", action="store_true", help="--describe: start offsets (default)")
    what.add_argument("--members", action="store_true", help="--describe: members")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE",
                   help="--describe: group state; --list: show (or filter by) state")
    p.add_argument("--verbose", action="store_true", help="--describe --members: epochs")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]",
                   help="--reset-offsets/--delete-offsets: topic, optionally with partitions")
    p.add_argument("--all-topics", action="store_true",
                   help="--reset-offsets: every topic the group has state for")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--execute", action="store_true", help="--reset-offsets: apply the plan")
    p.add_argument("--dry-run", action="store_true", help="--reset-offsets: only show (default)")


def _list(router: AdminRouter) -> list[tuple[str, str]]:
    """(group id, state) of every share group, from every broker."""
    seen: dict[str, str] = {}
    for node, resp in router.each_broker(LIST_GROUPS, {"types_filter": ["share"],
                                                       "states_filter": []}).items():
        if isinstance(resp, ToolError):
            raise ToolError(f"ListGroups on broker {node}: {resp}")
        check_error(resp.error_code, None, f"ListGroups on broker {node}")
        for g in resp.groups:
            if (getattr(g, "group_type", "") or "share") == "share":
                seen[g.group_id] = g.group_state
    return sorted(seen.items())


def _groups(router: AdminRouter, args) -> list[str]:
    if args.all_groups:
        return [g for g, _ in _list(router)]
    if not args.group:
        raise UsageError("--group or --all-groups is required")
    return list(args.group)


def _describe_group(router: AdminRouter, group: str):
    r = router.coordinator(group, SHARE_GROUP_DESCRIBE,
                           {"group_ids": [group], "include_authorized_operations": False},
                           errors=lambda r: [g.error_code for g in r.groups])
    g = r.groups[0]
    check_error(g.error_code, g.error_message, f"Share group '{group}'")
    return g


def _offsets(router: AdminRouter, group: str, topics=None):
    r = router.coordinator(group, DESCRIBE_OFFSETS,
                           {"groups": [{"group_id": group, "topics": topics}]},
                           errors=lambda r: [g.error_code for g in r.groups])
    g = r.groups[0]
    check_error(g.error_code, g.error_message, f"Share group '{group}'")
    return [(t.topic_name, p) for t in g.topics for p in t.partitions]


def _describe(router: AdminRouter, args) -> int:
    client = router.client
    for group in _groups(router, args):
        desc = _describe_group(router, group)
        print()
        if args.state is not None:
            node = router.find_coordinator(group)
            coordinator = next((b for b in client.metadata([]).brokers if b.node_id == node),
                               None)
            where = f"{coordinator.host}:{coordinator.port} ({node})" if coordinator else \
                f"({node})"
            print(format_table([["GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS"],
                          [group, where, desc.group_state, str(len(desc.members))]]))
            continue
        if not desc.members:
            print(f"Share group '{group}' has no active members.")
            print()
        if args.members:
            head = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            head += ["MEMBER-EPOCH"] if args.verbose else []
            rows = [head + ["ASSIGNMENT"]]
            for m in desc.members:
                parts = [(tp.topic_name, p) for tp in m.assignment.topic_partitions
                         for p in tp.partitions]
                assignment = ",".join(f"{t}:{p}" for t, p in sorted(parts)) or "-"
                row = [group, m.member_id, m.client_host, m.client_id, str(len(parts))]
                row += [str(m.member_epoch)] if args.verbose else []
                rows.append(row + [assignment])
            print(format_table(rows))
            continue
        found = _offsets(router, group)
        tps = sorted({(t, p.partition_index) for t, p in found})
        ends = list_offsets(client, tps, LATEST) if tps else {}
        rows = [["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET", "LAG"]]
        for topic, p in sorted(found, key=lambda x: (x[0], x[1].partition_index)):
            start = p.start_offset
            end = ends.get((topic, p.partition_index))
            lag = "-" if start < 0 or end is None else str(max(end - start, 0))
            rows.append([group, topic, str(p.partition_index),
                         "-" if p.leader_epoch < 0 else str(p.leader_epoch),
                         "-" if start < 0 else str(start), lag])
        print(format_table(rows))
    return 0


def _reset_targets(router: AdminRouter, args, group: str) -> list[tuple[str, int]]:
    client = router.client
    if args.all_topics:
        return sorted({(t, p.partition_index) for t, p in _offsets(router, group)})
    if not args.topic:
        raise UsageError("--reset-offsets needs --topic or --all-topics")
    return topic_partition_specs(client, args.topic)


def _reset(router: AdminRouter, args) -> int:
    client = router.client
    if len(args.group) != 1:
        raise UsageError("--reset-offsets needs exactly one --group")
    if not (args.to_earliest or args.to_latest or args.to_offset is not None
            or args.to_datetime):
        raise UsageError("--reset-offsets needs --to-earliest, --to-latest, --to-offset or "
                         "--to-datetime")
    group = args.group[0]
    desc = _describe_group(router, group)
    if args.execute and desc.members:
        raise ToolError(f"Share group '{group}' is not empty.")
    tps = _reset_targets(router, args, group)
    if not tps:
        raise ToolError("no partitions to reset")
    earliest = list_offsets(client, tps, EARLIEST)
    latest = list_offsets(client, tps, LATEST)
    if args.to_datetime:
        ts = _timestamp_ms(args.to_datetime)
        at = list_offsets(client, tps, ts)
        plan = {tp: (at[tp] if at.get(tp, -1) >= 0 else latest[tp]) for tp in tps}
    elif args.to_earliest:
        plan = {tp: earliest[tp] for tp in tps}
    elif args.to_latest:
        plan = {tp: latest[tp] for tp in tps}
    else:
        plan = {tp: min(max(args.to_offset, earliest[tp]), latest[tp]) for tp in tps}
    if args.execute:
        by_topic: dict[str, list] = {}
        for (t, p), off in sorted(plan.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "start_offset": off})
        r = router.coordinator(group, ALTER_OFFSETS, {"group_id": group, "topics": [
            {"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
        check_error(r.error_code, r.error_message, f"Share group '{group}'")
        for t in r.responses:
            for p in t.partitions:
                check_error(p.error_code, p.error_message, f"{t.topic_name}-{p.partition_index}")
    print()
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(off)] for (t, p), off in sorted(plan.items())]
    print(format_table(rows))
    return 0


def _timestamp_ms(text: str) -> int:
    try:
        dt = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime: not a date-time: {text}") from None
    if dt.tzinfo is None:
        dt = dt.astimezone()
    return int(dt.timestamp() * 1000)


def _delete(router: AdminRouter, args) -> int:
    return delete_groups(router, _groups(router, args), "share", "Share group")


def _delete_offsets(router: AdminRouter, args) -> int:
    if len(args.group) != 1 or not args.topic:
        raise UsageError("--delete-offsets needs one --group and --topic")
    group = args.group[0]
    r = router.coordinator(group, DELETE_OFFSETS, {"group_id": group, "topics": [
        {"topic_name": t.partition(":")[0]} for t in args.topic]})
    check_error(r.error_code, r.error_message, f"Share group '{group}'")
    rows = [["TOPIC", "STATUS"]]
    bad = 0
    for t in r.responses:
        ok = t.error_code == 0
        bad += not ok
        rows.append([t.topic_name, "Successful" if ok else f"Error: {error_name(t.error_code)}"])
    print()
    print(format_table(rows))
    return 1 if bad else 0


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        router = AdminRouter(client)
        if args.list:
            wanted = (args.state or "").lower()
            groups = [(g, s) for g, s in _list(router) if not wanted or s.lower() == wanted]
            if args.state is not None:
                print(format_table([["GROUP", "STATE"]] + [[g, s] for g, s in groups]))
            else:
                for g, _ in groups:
                    print(g)
            return 0
        if args.describe:
            return _describe(router, args)
        if args.reset_offsets:
            return _reset(router, args)
        if args.delete_offsets:
            return _delete_offsets(router, args)
        return _delete(router, args)
