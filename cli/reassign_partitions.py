"""``josef reassign-partitions``: move partition replicas (like kafka-reassign-partitions.sh).

The same JSON files and output as Kafka's tool:

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3`` reads
  ``{"topics":[{"topic":"t"}],"version":1}`` and prints the current assignment and a proposed
  one (Kafka's replica assignment over the given brokers, rack-aware unless
  ``--disable-rack-aware``), both as reassignment JSON:
  ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}``.
- ``--execute --reassignment-json-file F`` prints the current assignment ("Save this to use as
  the --reassignment-json-file option during rollback") and starts the reassignments
  (AlterPartitionReassignments, KIP-455); refused while others run unless ``--additional``.
- ``--verify --reassignment-json-file F``: "Reassignment of partition t-0 is completed." /
  "... is still in progress." per partition (exit code 0 either way, as Kafka's), each
  followed by an indented bar of the bytes copied (:mod:`cli._reassign_progress`):
  ``  t-0:  41.7%|########            | 5.00MB/12.0MB on broker 3``.
- ``--list``: the reassignments in progress; ``--cancel --reassignment-json-file F``: cancel
  those of the file.

Throttles (KIP-73), as Kafka's tool: ``--execute --throttle B`` (bytes/s) sets the topic
configs ``leader.replication.throttled.replicas`` (each moving partition's current
replicas, ``partition:broker``) and ``follower.replication.throttled.replicas`` (its new
replicas) and the broker configs ``leader.replication.throttled.rate`` /
``follower.replication.throttled.rate`` on every broker involved; resubmitting with
``--additional`` changes them. ``--verify``, once no reassignment of the file is in
progress, removes the broker throttles from every live broker and the topic throttles from
the file's topics ("Clearing broker-level throttles on brokers 1,2,3"), unless
``--preserve-throttles``. Log-dir moves (and so ``--replica-alter-log-dirs-throttle``) are
not supported. APIs: Metadata, AlterPartitionReassignments, ListPartitionReassignments (to
the controller, resent when it moves: ``client.admin.AdminRouter``),
IncrementalAlterConfigs (a broker's configs to that broker).
"""

from __future__ import annotations

import argparse
import json

from cli._common import UsageError, add_bootstrap, connect, tool_main
from cli._reassign_progress import verify_bars
from client.admin import AdminRouter
from client.connection import ToolError, error_name
from controller.replica_assignment import (
    RACK_AWARE_DISABLED,
    RACK_AWARE_ENFORCED,
    assign_replicas_to_brokers,
    broker_metadatas,
)
from protocol.errors import KafkaError

COMMAND = "reassign-partitions"
HELP = "Move partition replicas between brokers (like kafka-reassign-partitions.sh)"

ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, INCREMENTAL_ALTER_CONFIGS = 45, 46, 44
OP_SET, OP_DELETE = 0, 1
BROKER, TOPIC = 4, 2
BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                    "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_THROTTLES = ("leader.replication.throttled.replicas",
                   "follower.replication.throttled.replicas")
VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment "
                       "completes, to ensure the throttle is removed.")
CANNOT_EXECUTE = ("Cannot execute because there is an existing partition assignment.  Use "
                  "--additional to override this and create a new partition assignment in "
                  "addition to the existing one. The --additional flag can also be used to "
                  "change the throttle by resubmitting the current reassignment.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for name, text in (("generate", "propose an assignment"), ("execute", "start it"),
                       ("verify", "check progress"), ("list", "list reassignments in progress"),
                       ("cancel", "cancel the file's reassignments")):
        action.add_argument(f"--{name}", action="store_true", help=text)
    p.add_argument("--topics-to-move-json-file", metavar="FILE")
    p.add_argument("--broker-list", metavar="1,2,3")
    p.add_argument("--reassignment-json-file", metavar="FILE")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.add_argument("--additional", action="store_true")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="--verify: do not remove broker or topic throttles")
    p.add_argument("--throttle", type=int, default=-1, metavar="BYTES/S",
                   help="--execute: throttle the replication of moving partitions (KIP-73)")
    p.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1,
                   metavar="BYTES/S", help="not supported (no log-dir moves)")


# ----- JSON -----------------------------------------------------------------------------------

def format_reassignment_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    parts = [{"topic": t, "partition": p, "replicas": list(rs), "log_dirs": ["any"] * len(rs)}
             for (t, p), rs in sorted(assignment.items())]
    return json.dumps({"version": 1, "partitions": parts}, separators=(",", ":"))


def parse_reassignment_json(text: str) -> dict[tuple[str, int], list[int]]:
    try:
        doc = json.loads(text)
    except ValueError:
        raise ToolError("The input string is not a valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise ToolError("Partition reassignment list cannot be empty")
    if doc.get("version", 1) != 1:
        raise ToolError(f"Not supported version field value {doc.get('version')}")
    out: dict[tuple[str, int], list[int]] = {}
    dups = []
    for item in doc["partitions"]:
        try:
            tp = (str(item["topic"]), int(item["partition"]))
            replicas = [int(r) for r in item["replicas"]]
        except (KeyError, TypeError, ValueError):
            raise ToolError(f"bad partition entry {item!r}") from None
        if any(d not in ("any", None) for d in item.get("log_dirs", []) or []):
            raise ToolError("log directory moves (log_dirs other than \"any\") are not "
                            "supported")
        if tp in out:
            dups.append(tp)
        if not replicas:
            raise ToolError("Partition replica list cannot be empty")
        out[tp] = replicas
    if not out:
        raise ToolError("Partition reassignment list cannot be empty")
    if dups:
        raise ToolError("Partition reassignment contains duplicate topic partitions: "
                        + ",".join(f"{t}-{p}" for t, p in dups))
    bad = [f"{t}-{p} contains multiple entries for " + ",".join(
        str(r) for r in sorted({r for r in rs if rs.count(r) > 1}))
           for (t, p), rs in out.items() if len(set(rs)) != len(rs)]
    if bad:
        raise ToolError("Partition replica lists may not contain duplicate entries: "
                        + ". ".join(bad))
    return out


def parse_topics_json(text: str) -> list[str]:
    try:
        doc = json.loads(text)
    except ValueError:
        raise ToolError("The input string is not a valid JSON") from None
    if doc.get("version", 1) != 1:
        raise ToolError(f"Not supported version field value {doc.get('version')}")
    topics = [str(t["topic"]) for t in doc.get("topics", [])]
    dups = sorted({t for t in topics if topics.count(t) > 1})
    if dups:
        raise ToolError(f"List of topics to reassign contains duplicate entries: {dups}")
    return topics


def _read(path: str | None, option: str) -> str:
    if not path:
        raise UsageError(f"Missing required argument \"[{option}]\"")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None


# ----- helpers ---------------------------------------------------------------------------------

def _current(client, topics) -> dict[tuple[str, int], list[int]]:
    md = client.metadata(sorted(set(topics)))
    out = {}
    for t in md.topics:
        if t.error_code:
            raise ToolError(f"Topic {t.name} not found ({error_name(t.error_code)})")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = list(p.replica_nodes)
    return out


def _in_progress(router: AdminRouter) -> dict:
    resp = router.controller(LIST_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None})
    if resp.error_code:
        raise ToolError(f"listing reassignments failed: {error_name(resp.error_code)}")
    return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


def _alter(router: AdminRouter, changes: dict) -> dict:
    by_topic: dict[str, list] = {}
    for (t, p), rs in sorted(changes.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": rs})
    resp = router.controller(ALTER_REASSIGNMENTS, {
        "timeout_ms": 30000,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
        errors=lambda r: [r.error_code] + [p.error_code for t in r.responses
                                           for p in t.partitions])
    if resp.error_code:
        raise ToolError(f"reassignment failed: {error_name(resp.error_code)}"
                        + (f": {resp.error_message}" if resp.error_message else ""))
    return {(t.name, p.partition_index): (p.error_code, p.error_message)
            for t in resp.responses for p in t.partitions if p.error_code}


# ----- throttles (KIP-73) ----------------------------------------------------------------------

def move_map(ongoing: dict, wanted: dict, current: dict) -> dict[tuple[str, int], tuple]:
    """(topic, partition) -> (sources, destinations) of every partition moving: those in
    progress (sources = replicas without the adding ones) and the file's (sources = their
    current replicas unless already moving; destinations = new replicas not among them)."""
    moves = {tp: (set(r.replicas) - set(r.adding_replicas), set(r.adding_replicas))
             for tp, r in ongoing.items()}
    for tp, replicas in wanted.items():
        sources = moves[tp][0] if tp in moves else set(current[tp])
        moves[tp] = (sources, set(replicas) - sources)
    return moves


def topic_throttles(moves: dict) -> dict[str, tuple[str, str]]:
    """topic -> (leader throttled replicas, follower throttled replicas) as Kafka's tool
    writes them: ``partition:broker`` items, sorted as strings, comma-joined."""
    out: dict[str, tuple[set, set]] = {}
    for (t, p), (sources, destinations) in moves.items():
        leader, follower = out.setdefault(t, (set(), set()))
        leader.update(f"{p}:{b}" for b in sources)
        follower.update(f"{p}:{b}" for b in destinations - sources)
    return {t: (",".join(sorted(lead)), ",".join(sorted(fol)))
            for t, (lead, fol) in out.items()}


def _alter_configs(router: AdminRouter, rtype: int, name: str, ops: list) -> None:
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": False}
    resp = router.broker(int(name), INCREMENTAL_ALTER_CONFIGS, body) if rtype == BROKER \
        else router.any(INCREMENTAL_ALTER_CONFIGS, body)
    (r,) = resp.responses
    if r.error_code:
        what = f"broker {name}" if rtype == BROKER else f"topic {name}"
        raise ToolError(f"setting the throttles of {what} failed: {error_name(r.error_code)}"
                        + (f": {r.error_message}" if r.error_message else ""))


def _set_throttles(router: AdminRouter, moves: dict, rate: int) -> None:
    for topic, (leader, follower) in sorted(topic_throttles(moves).items()):
        _alter_configs(router, TOPIC, topic, [(TOPIC_THROTTLES[0], OP_SET, leader),
                                              (TOPIC_THROTTLES[1], OP_SET, follower)])
    brokers = sorted({b for sources, dests in moves.values() for b in sources | dests})
    for b in brokers:
        _alter_configs(router, BROKER, str(b), [(BROKER_THROTTLES[0], OP_SET, str(rate)),
                                                (BROKER_THROTTLES[1], OP_SET, str(rate))])
    print(f"The inter-broker throttle limit was set to {rate} B/s")


def _clear_throttles(router: AdminRouter, wanted: dict) -> None:
    """Kafka's clearAllThrottles, on the live brokers (a broker that is down cannot be
    asked; its stored throttle is removed by the next --verify while it is up)."""
    brokers = {b.node_id for b in router.client.metadata([]).brokers}
    print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
          + ",".join(map(str, sorted(brokers))))
    for b in sorted(brokers):
        _alter_configs(router, BROKER, str(b), [(k, OP_DELETE, None) for k in BROKER_THROTTLES])
    topics = sorted({t for t, _ in wanted})
    print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
          + ",".join(topics))
    for t in topics:
        _alter_configs(router, TOPIC, t, [(k, OP_DELETE, None) for k in TOPIC_THROTTLES])


def _tps(tps) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


# ----- actions ---------------------------------------------------------------------------------

def _generate(client, args) -> int:
    topics = parse_topics_json(_read(args.topics_to_move_json_file,
                                     "topics-to-move-json-file"))
    if not args.broker_list:
        raise UsageError('Missing required argument "[broker-list]"')
    try:
        brokers = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        raise UsageError(f"bad --broker-list {args.broker_list!r}") from None
    dups = sorted({b for b in brokers if brokers.count(b) > 1})
    if dups:
        raise ToolError(f"Broker list contains duplicate entries: {dups}")
    current = _current(client, topics)
    md = client.metadata([])
    racks = {b.node_id: b.rack for b in md.brokers}
    unknown = [b for b in brokers if b not in racks]
    if unknown:
        raise ToolError(f"Unknown broker id {unknown[0]}")
    mode = RACK_AWARE_DISABLED if args.disable_rack_aware else RACK_AWARE_ENFORCED
    try:
        metas = broker_metadatas([(b, racks[b]) for b in brokers], mode)
        proposed = {}
        for topic in dict.fromkeys(t for t, _ in sorted(current)):
            parts = [p for t, p in current if t == topic]
            rf = len(current[(topic, 0)]) if (topic, 0) in current else 1
            for p, rs in assign_replicas_to_brokers(metas, len(parts), rf).items():
                proposed[(topic, p)] = rs
    except KafkaError as e:
        raise ToolError(e.message or error_name(e.code)) from None
    print("Current partition replica assignment")
    print(format_reassignment_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_reassignment_json(proposed))
    return 0


def _execute(client, args) -> int:
    if args.replica_alter_log_dirs_throttle >= 0:
        raise UsageError("--replica-alter-log-dirs-throttle: log directory moves are not "
                         "supported")
    wanted = parse_reassignment_json(_read(args.reassignment_json_file,
                                           "reassignment-json-file"))
    router = AdminRouter(client)
    ongoing = _in_progress(router)
    if ongoing and not args.additional:
        raise ToolError(CANNOT_EXECUTE)
    live = {b.node_id for b in client.metadata([]).brokers}
    unknown = sorted({r for rs in wanted.values() for r in rs} - live)
    if unknown:
        raise ToolError(f"Unknown broker id {unknown[0]}")
    current = _current(client, {t for t, _ in wanted})
    missing = sorted(set(wanted) - set(current))
    if missing:
        raise ToolError(f"Unable to find partition: {_tps(missing[:1])}")
    print("Current partition replica assignment")
    print()
    print(format_reassignment_json({tp: current[tp] for tp in wanted}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        print(VERIFY_PERIODICALLY)
        _set_throttles(router, move_map(ongoing, wanted, current), args.throttle)
    errors = _alter(router, wanted)
    if errors:
        raise ToolError("Error reassigning partition(s):\n" + "\n".join(
            f"{t}-{p}: {msg or error_name(code)}" for (t, p), (code, msg) in sorted(errors.items())))
    print(f"Successfully started partition reassignment{'' if len(wanted) == 1 else 's'} "
          f"for {_tps(wanted)}")
    return 0


def _verify(client, args) -> int:
    wanted = parse_reassignment_json(_read(args.reassignment_json_file,
                                           "reassignment-json-file"))
    router = AdminRouter(client)
    ongoing = _in_progress(router)
    current = _current(client, {t for t, _ in wanted if (t, _) not in ongoing})
    bars = verify_bars(client, wanted, ongoing)  # bytes copied and percent, per partition
    print("Status of partition reassignment:")
    for tp, target in sorted(wanted.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
            print(f"  {bars[tp]}")
        elif current.get(tp) == target:
            print(f"Reassignment of partition {name} is completed.")
            print(f"  {bars[tp]}")
        else:
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{','.join(map(str, current.get(tp, [])))} rather than "
                  f"{','.join(map(str, target))}.")
    if not any(tp in ongoing for tp in wanted) and not args.preserve_throttles:
        _clear_throttles(router, wanted)  # Kafka: every throttle, once nothing moves
    return 0


def _list(client, _args) -> int:
    ongoing = _in_progress(AdminRouter(client))
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), r in sorted(ongoing.items()):
        line = f"{t}-{p}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        print(line)
    return 0


def _cancel(client, args) -> int:
    wanted = parse_reassignment_json(_read(args.reassignment_json_file,
                                           "reassignment-json-file"))
    router = AdminRouter(client)
    ongoing = _in_progress(router)
    targets = {tp: None for tp in wanted if tp in ongoing}
    if not targets:
        print("None of the specified partition reassignments are active.")
        return 0
    errors = _alter(router, targets)
    if errors:
        raise ToolError(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'}"
                        " for:\n" + "\n".join(f"{t}-{p}: {msg or error_name(code)}"
                                              for (t, p), (code, msg) in sorted(errors.items())))
    print(f"Successfully cancelled partition reassignment{'' if len(targets) == 1 else 's'} "
          f"for: {_tps(targets)}")
    return 0


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.generate:
            return _generate(client, args)
        if args.execute:
            return _execute(client, args)
        if args.verify:
            return _verify(client, args)
        if args.list:
            return _list(client, args)
        return _cancel(client, args)
