"""``josef consumer-groups``: list, describe (offsets and lag, members, state), reset
offsets of and delete consumer groups, like ``kafka-consumer-groups.sh``.

- ``--list``: ListGroups on every broker, one group id per line.
- ``--describe --group g`` (repeatable, or ``--all-groups``), on the group's coordinator
  (FindCoordinator; ConsumerGroupDescribe for KIP-848 groups, DescribeGroups for classic
  ones; resent when the coordinator moves, ``client.admin.AdminRouter``):

  - ``--offsets`` (the default): OffsetFetch and ListOffsets (latest, on the leaders)::

      GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

  - ``--members`` (``--verbose`` adds ASSIGNMENT, ``topic(0,1), other(2)``)::

      GROUP  CONSUMER-ID  [GROUP-INSTANCE-ID]  HOST  CLIENT-ID  #PARTITIONS

  - ``--state``: ``GROUP  COORDINATOR (ID)  ASSIGNMENT-STRATEGY  STATE  #MEMBERS``.

  Kafka's columns and widths (``-`` where unknown). On stderr, as Kafka: "Consumer group
  'g' has no active members." (Empty), "Warning: Consumer group 'g' is rebalancing.", and
  for a group that does not exist (state Dead) "Error: Consumer group 'g' does not
  exist." (then exit code 1). Members' partitions come from their ConsumerProtocol
  assignment (int16 version, then ``[topic string, [int32 partition]]``).
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
import sys

from cli._common import (
    UsageError,
    add_bootstrap,
    connect,
    delete_groups,
    format_table,
    tool_main,
    topic_partition_specs,
)
from client.admin import AdminRouter
from client.connection import ToolError, error_name
from client.groups import committed_offsets, describe_group, list_groups, parse_assignment
from client.offsets import EARLIEST, LATEST, commit_offsets, list_offsets

COMMAND = "consumer-groups"
HELP = "List, describe, reset and delete consumer groups (like kafka-consumer-groups.sh)"
CONSUMER_GROUP_DESCRIBE = 69
DELETE_GROUPS = 42
GROUP_ID_NOT_FOUND = 69
MISSING = "-"
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list groups")
    action.add_argument("--describe", action="store_true",
                        help="describe groups: --offsets (default), --members or --state")
    action.add_argument("--reset-offsets", action="store_true", help="reset committed offsets")
    action.add_argument("--delete", action="store_true", help="delete groups")
    p.add_argument("--group", action="append", default=[], metavar="GROUP",
                   help="group id (repeatable for --describe/--delete)")
    p.add_argument("--all-groups", action="store_true", help="--describe: every group")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true",
                      help="--describe: committed offsets, log end offsets and lag (default)")
    view.add_argument("--members", action="store_true", help="--describe: the members")
    view.add_argument("--state", action="store_true", help="--describe: the group's state")
    p.add_argument("--verbose", action="store_true",
                   help="--describe --members: each member's assignment too")
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
    def __init__(self, member_id: str, instance_id: str | None, client_id: str,
                 client_host: str, assignment: list[tuple[str, int]]) -> None:
        self.member_id, self.instance_id = member_id, instance_id or ""
        self.client_id, self.client_host, self.assignment = client_id, client_host, assignment


class _Group:
    """What the coordinator says of a group: state, assignor, members."""

    def __init__(self, group: str, state: str, strategy: str, members: list[_Member]) -> None:
        self.group, self.state, self.strategy, self.members = group, state, strategy, members


def _describe_group(router: AdminRouter, group: str) -> _Group:
    """ConsumerGroupDescribe (a KIP-848 group), else DescribeGroups (classic; a group that
    does not exist is "Dead")."""
    client = router.client
    if client.supports(CONSUMER_GROUP_DESCRIBE):
        r = router.coordinator(group, CONSUMER_GROUP_DESCRIBE, {"group_ids": [group]},
                               errors=lambda r: [g.error_code for g in r.groups])
        g = r.groups[0]
        if g.error_code == 0:
            return _Group(group, g.group_state, g.assignor_name, [
                _Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                        [(tp.topic_name, p) for tp in m.assignment.topic_partitions
                         for p in tp.partitions]) for m in g.members])
        if g.error_code not in (GROUP_ID_NOT_FOUND, 35):  # not a consumer group / no API
            raise ToolError(f"cannot describe group {group}: {error_name(g.error_code)}")
    g = describe_group(client, group)
    return _Group(group, g.group_state, g.protocol_data or "", [
        _Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                parse_assignment(m.member_assignment)) for m in g.members])


def _should_print(g: _Group, rows: int) -> bool:
    """Kafka's shouldPrintMemberState: the messages on stderr; False when there is no
    table to print (a Dead group raises: it does not exist)."""
    if g.state == "Dead":
        raise _Missing(g.group)
    if g.state == "Empty":
        print(f"\nConsumer group '{g.group}' has no active members.", file=sys.stderr)
    elif g.state in REBALANCING:
        print(f"\nWarning: Consumer group '{g.group}' is rebalancing.", file=sys.stderr)
    return rows > 0


class _Missing(ToolError):
    def __init__(self, group: str) -> None:
        super().__init__(f"Consumer group '{group}' does not exist.")
        self.group = group


def _fmt(widths: list[int]) -> str:
    return " ".join(f"%-{w}s" for w in widths)


def _print_offsets(router: AdminRouter, g: _Group) -> None:
    owners = {tp: m for m in g.members for tp in m.assignment}
    committed = committed_offsets(router.client, g.group)
    tps = sorted(set(committed) | set(owners))
    ends = list_offsets(router.client, tps, LATEST) if tps else {}
    rows = []
    for tp in tps:
        cur, end = committed.get(tp), ends.get(tp)
        m = owners.get(tp)
        rows.append([g.group, tp[0], str(tp[1]), MISSING if cur is None else str(cur),
                     MISSING if end is None else str(end),
                     MISSING if cur is None or end is None else str(max(end - cur, 0)),
                     m.member_id if m else MISSING, m.client_host if m else MISSING,
                     m.client_id if m else MISSING])
    if not _should_print(g, len(rows)):
        return
    w = [max([15] + [len(r[i]) for r in rows]) for i in (0, 1, 6, 7)]
    fmt = _fmt([w[0], w[1], 10, 15, 15, 15, w[2], w[3]]) + " %s"
    for r in [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
               "CONSUMER-ID", "HOST", "CLIENT-ID"]] + rows:
        print("\n" + (fmt % tuple(r)).rstrip(), end="")
    print()


def _print_members(g: _Group, verbose: bool) -> None:
    _should_print(g, len(g.members))  # the header is printed even without members
    with_instance = any(m.instance_id for m in g.members)
    cols = ["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if with_instance else []) + \
        ["HOST", "CLIENT-ID", "#PARTITIONS"]
    rows = []
    for m in g.members:
        row = [g.group, m.member_id] + ([m.instance_id] if with_instance else []) + \
            [m.client_host, m.client_id, str(len(m.assignment))]
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for t, p in m.assignment:
                by_topic.setdefault(t, []).append(p)
            row.append(", ".join(sorted(f"{t}({','.join(map(str, sorted(ps)))})"
                                        for t, ps in by_topic.items())) or MISSING)
        rows.append(row)
    mins = [15, 15] + ([17] if with_instance else []) + [15, 15, 15]
    widths = [max([mins[i]] + [len(r[i]) for r in rows] + [len(cols[i])])
              for i in range(len(cols))]
    fmt = _fmt(widths) + " "
    print("\n" + fmt % tuple(cols) + ("ASSIGNMENT" if verbose else ""))
    for r in rows:
        print((fmt % tuple(r[:len(cols)]) + (r[-1] if verbose else "")).rstrip())


def _print_state(router: AdminRouter, g: _Group) -> None:
    _should_print(g, 1)
    node = router.find_coordinator(g.group)
    host, port = router.client.node_address(node)
    coordinator = f"{host}:{port}  ({node})"
    fmt = "\n" + _fmt([max(25, len(coordinator)), 25, 20, 15]) + " %s"
    print(fmt % ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
          end="")
    print(fmt % (g.group, coordinator, g.strategy, g.state, len(g.members)))


def _describe(router: AdminRouter, args) -> int:
    groups = sorted({g for g, _, _ in list_groups(router.client)}) if args.all_groups \
        else args.group
    missing = []
    for group in groups:
        try:
            g = _describe_group(router, group)
            if args.members:
                _print_members(g, args.verbose)
            elif args.state:
                _print_state(router, g)
            else:
                _print_offsets(router, g)
        except _Missing as e:
            print(f"\nError: {e}", file=sys.stderr)
            missing.append(group)
    return 1 if missing else 0


def _reset_targets(client, args, committed) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    if not args.topic:
        raise UsageError("--reset-offsets needs --topic or --all-topics")
    return topic_partition_specs(client, args.topic)


def _reset(router: AdminRouter, args) -> int:
    if len(args.group) != 1:
        raise UsageError("--reset-offsets needs exactly one --group")
    if not (args.to_earliest or args.to_latest or args.to_offset is not None
            or args.shift_by is not None):
        raise UsageError("--reset-offsets needs --to-earliest, --to-latest, --to-offset or "
                         "--shift-by")
    client = router.client
    group = args.group[0]
    state = _describe_group(router, group).state
    if args.execute and state not in ("Empty", "Dead", ""):
        raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}.")
    committed = committed_offsets(client, group)
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
        commit_offsets(client, group, plan)
    print()
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(off)] for (t, p), off in sorted(plan.items())]
    print(format_table(rows))
    return 0


def _delete(router: AdminRouter, args) -> int:
    if not args.group:
        raise UsageError("--delete needs --group")
    return delete_groups(router, args.group, "consumer", "Group")


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    if (args.members or args.state or args.offsets or args.verbose) and not args.describe:
        raise UsageError("--members, --state, --offsets and --verbose go with --describe")
    if args.verbose and not args.members:
        raise UsageError("--verbose goes with --describe --members")
    if args.all_groups and not args.describe:
        raise UsageError("--all-groups goes with --describe")
    with connect(args) as client:
        router = AdminRouter(client)
        if args.list:
            for g in sorted({g for g, _, _ in list_groups(client)}):
                print(g)
            return 0
        if not args.group and not (args.describe and args.all_groups):
            raise UsageError("--group is required")
        if args.describe:
            return _describe(router, args)
        if args.reset_offsets:
            return _reset(router, args)
        return _delete(router, args)
