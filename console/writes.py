"""The console's writes to the cluster, as blocking functions ``fn(client, ...)`` (run by
:class:`console.service.ClusterService`); the HTTP side (``--allow-writes``, same-origin
check, audit log) is :mod:`console.write_routes`.

- create / delete a topic: CreateTopics, DeleteTopics (to the controller, resent when it
  moves: :class:`client.admin.AdminRouter`, as every write here);
- produce one record: Produce (acks=all, to the partition's leader) with key, value and
  headers; no partition given: the key's murmur2 hash (Kafka's default partitioner) or, for
  a null key, a random partition;
- edit a topic's configs: IncrementalAlterConfigs (SET / DELETE ops, KIP-339);
- add partitions: CreatePartitions (new total count);
- delete records: DeleteRecords (up to an offset, ``-1`` = the high watermark) per partition;
- reset a group's committed offsets to the earliest, latest, a timestamp (the first offset at
  or after it, else the log end, as ``kafka-consumer-groups.sh --to-datetime``) or an offset
  (clamped into the log), for one topic or all the group's topics, only while the group is
  inactive (Empty or Dead), as Kafka's tool requires; OffsetCommit as a standalone consumer.

Each returns a short text describing what was done, for the page's note and the audit log.
"""

from __future__ import annotations

import random
import time

from client.admin import AdminRouter
from client.connection import ToolError, error_name
from client.groups import committed_offsets, describe_group
from client.metadata import check_error
from client.offsets import EARLIEST, LATEST, commit_offsets
from client.producer import Sender, key_partition
from console.queries import leaders_of, offsets

__all__ = ["create_topic", "delete_topic", "produce", "alter_topic_configs",
           "add_partitions", "delete_records", "reset_offsets", "RESET_MODES"]

CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 19, 20, 21
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 37, 44
TOPIC_RESOURCE = 2
OP_SET, OP_DELETE = 0, 1
RESET_MODES = ("earliest", "latest", "timestamp", "offset")


def create_topic(c, name: str, partitions: int, replication: int,
                 configs: dict[str, str]) -> str:
    resp = AdminRouter(c).controller(CREATE_TOPICS, {
        "topics": [{"name": name, "num_partitions": partitions,
                    "replication_factor": replication, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30000, "validate_only": False},
        errors=lambda r: [t.error_code for t in r.topics])
    (r,) = resp.topics
    check_error(r.error_code, getattr(r, "error_message", None), f"create topic {name}")
    _await_metadata(c, name, lambda t: t.error_code == 0)
    return f"created topic {name}"


def delete_topic(c, name: str) -> str:
    version = c.version_for(DELETE_TOPICS, max_version=5)
    resp = AdminRouter(c).controller(DELETE_TOPICS, {"topic_names": [name], "timeout_ms": 30000},
                                     version=version,
                                     errors=lambda r: [t.error_code for t in r.responses])
    (r,) = resp.responses
    check_error(r.error_code, getattr(r, "error_message", None), f"delete topic {name}")
    return f"deleted topic {name}"


def _await_metadata(c, topic: str, ready, timeout_s: float = 10.0) -> None:
    """Wait (at most ``timeout_s``) until the broker's Metadata shows the change: the
    controller answers once ZooKeeper has it, the brokers learn it from UpdateMetadata a
    moment later, and the page shown next should include it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (t,) = c.metadata([topic]).topics
        if ready(t):
            return
        time.sleep(0.1)


def produce(c, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
            headers: list[tuple[str, bytes]]) -> str:
    md = c.metadata([topic])
    leaders = {p: lead for (t, p), lead in leaders_of(md).items() if t == topic}
    if not leaders:
        raise ToolError(f"topic {topic} does not exist")
    if partition is None:
        partition = key_partition(key, len(leaders)) if key is not None else \
            random.randrange(len(leaders))
    if partition not in leaders:
        raise ToolError(f"topic {topic} has no partition {partition}")
    if leaders[partition] < 0:
        raise ToolError(f"{topic}-{partition} has no leader")
    sender = Sender(c, topic, leaders, 0, -1, 1 << 30)
    sender.add(partition, headers, key, value)
    sender.flush()
    return f"produced a record to {topic}-{partition}"


def alter_topic_configs(c, topic: str, set_: dict[str, str], delete: list[str]) -> str:
    ops = [{"name": k, "config_operation": OP_SET, "value": v} for k, v in set_.items()]
    ops += [{"name": k, "config_operation": OP_DELETE, "value": None} for k in delete]
    if not ops:
        raise ToolError("no config to change")
    resp = c.request(INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": ops}],
        "validate_only": False})
    (r,) = resp.responses
    check_error(r.error_code, r.error_message, f"alter configs of {topic}")
    parts = [f"{k}={v}" for k, v in set_.items()] + [f"-{k}" for k in delete]
    return f"altered configs of {topic}: {', '.join(parts)}"


def add_partitions(c, topic: str, count: int) -> str:
    resp = AdminRouter(c).controller(CREATE_PARTITIONS, {
        "topics": [{"name": topic, "count": count, "assignments": None}],
        "timeout_ms": 30000, "validate_only": False},
        errors=lambda r: [t.error_code for t in r.results])
    (r,) = resp.results
    check_error(r.error_code, r.error_message, f"add partitions to {topic}")
    _await_metadata(c, topic, lambda t: len(t.partitions) >= count)
    return f"topic {topic} now has {count} partitions"


def delete_records(c, topic: str, before: dict[int, int]) -> str:
    """``before``: partition -> offset (-1 = the high watermark)."""
    def build(parts):
        return {"topics": [{"name": topic, "partitions": [
            {"partition_index": p, "offset": before[p]} for _t, p in parts]}],
            "timeout_ms": 30000}

    def outcomes(resp):
        for t in resp.topics:
            for p in t.partitions:
                yield (t.name, p.partition_index), p.error_code, p.low_watermark

    # each partition to its leader, resent to the new one after a move
    results = AdminRouter(c).to_leaders(DELETE_RECORDS, [(topic, p) for p in sorted(before)],
                                        build, outcomes)
    done = []
    for (_t, p), (code, low) in sorted(results.items()):
        if code:
            raise ToolError(f"delete records of {topic}-{p}: {error_name(code)}")
        done.append(f"{topic}-{p} low watermark {low}")
    return "deleted records: " + ", ".join(done)


def reset_offsets(c, group: str, topic: str | None, mode: str,
                  value: int | None = None) -> str:
    """See the module docstring; ``value`` is the timestamp (ms) or the offset."""
    if mode not in RESET_MODES:
        raise ToolError(f"unknown reset mode {mode!r}")
    if mode in ("timestamp", "offset") and value is None:
        raise ToolError(f"resetting to a {mode} needs a value")
    state = describe_group(c, group).group_state
    if state not in ("Empty", "Dead", ""):
        raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}.")
    committed = committed_offsets(c, group)
    md = c.metadata(None if topic is None else [topic])
    leaders = leaders_of(md)
    if topic is None:
        tps = sorted(committed)
    else:
        tps = sorted(tp for tp in leaders if tp[0] == topic)
    if not tps:
        raise ToolError(f"group {group} has no offsets to reset"
                        + (f" on {topic}" if topic else ""))
    earliest = offsets(c, tps, leaders, EARLIEST)
    latest = offsets(c, tps, leaders, LATEST)
    missing = [tp for tp in tps if tp not in earliest or tp not in latest]
    if missing:
        raise ToolError(f"the leader of {missing[0][0]}-{missing[0][1]} does not answer")
    at = offsets(c, tps, leaders, value) if mode == "timestamp" else {}
    plan = {}
    for tp in tps:
        if mode == "earliest":
            new = earliest[tp]
        elif mode == "latest":
            new = latest[tp]
        elif mode == "timestamp":
            new = at.get(tp, -1)
            new = latest[tp] if new < 0 else new
        else:
            new = value
        plan[tp] = min(max(new, earliest[tp]), latest[tp])
    commit_offsets(c, group, plan)
    return f"reset group {group} to {mode}" + (f" {value}" if value is not None else "") + \
        ": " + ", ".join(f"{t}-{p}={off}" for (t, p), off in sorted(plan.items()))

