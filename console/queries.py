"""The console's read queries on brokers, topics and consumer groups: blocking functions
``fn(client, ...)`` that :meth:`console.service.ClusterService.run` calls on a worker thread,
each returning plain dicts and lists for the templates.

A broker that does not answer leaves holes (``None`` sizes or offsets) instead of failing the
page: offsets are asked per leader and sizes per broker through ``try_node``. APIs: Metadata,
ListOffsets, DescribeLogDirs, DescribeConfigs, ListGroups, DescribeGroups, FindCoordinator,
OffsetFetch.
"""

from __future__ import annotations

from typing import Any

from client.connection import ToolError, error_name
from client.groups import (
    committed_offsets,
    describe_group,
    find_coordinator,
    list_groups,
    parse_assignment,
)
from client.metadata import check_error
from client.offsets import EARLIEST, LATEST, list_offsets
from console.service import ConsoleClient, unreachable

__all__ = ["cluster", "topics", "topic", "broker", "groups", "group", "offsets",
           "log_dir_sizes", "describe_configs", "broker_configs", "all_end_offsets",
           "group_lags", "leaders_of", "INTERNAL_TOPICS"]

DESCRIBE_GROUPS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 15, 32, 35
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state",
                             "__share_group_state"})


def leaders_of(md) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.leader_id for t in md.topics if not t.error_code
            for p in t.partitions}


def offsets(c: ConsoleClient, tps, leaders, timestamp: int) -> dict[tuple[str, int], int]:
    """ListOffsets per leader; partitions of a leader that does not answer, or that answer an
    error (a partition being created or moving: NOT_LEADER_OR_FOLLOWER, ...), are left out."""
    by_leader: dict[int, list] = {}
    for tp in tps:
        if leaders.get(tp, -1) >= 0:
            by_leader.setdefault(leaders[tp], []).append(tp)
    out: dict[tuple[str, int], int] = {}
    for leader, group in by_leader.items():
        try:
            out.update(list_offsets(c, group, timestamp, leaders))
        except (ToolError, OSError) as e:
            if unreachable(e):
                c.reset_connection(leader)
                c.tracker.mark_failed(leader, str(e))
                continue
            for tp in group if len(group) > 1 else ():  # one answered an error: ask each
                try:
                    out.update(list_offsets(c, [tp], timestamp, leaders))
                except ToolError:
                    continue
    return out


def log_dir_sizes(c: ConsoleClient, broker_ids) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes (largest replica), from DescribeLogDirs on every broker."""
    sizes: dict[tuple[str, int], int] = {}
    if not c.supports(DESCRIBE_LOG_DIRS):
        return sizes
    for b in broker_ids:
        resp = c.try_node(DESCRIBE_LOG_DIRS, {"topics": None}, b)
        for d in resp.results if resp is not None else ():
            for t in d.topics:
                for p in t.partitions:
                    key = (t.name, p.partition_index)
                    sizes[key] = max(sizes.get(key, 0), p.partition_size)
    return sizes


def cluster(c: ConsoleClient) -> dict:
    md = c.metadata(None)
    n_topics = partitions = urp = offline = 0
    for t in md.topics:
        if t.error_code:
            continue
        n_topics += 1
        for p in t.partitions:
            partitions += 1
            offline += p.leader_id < 0
            urp += len(p.isr_nodes) < len(p.replica_nodes)
    return {"cluster_id": getattr(md, "cluster_id", None),
            "controller": getattr(md, "controller_id", -1), "brokers": c.tracker.brokers(),
            "topics": n_topics, "partitions": partitions, "under_replicated": urp,
            "offline": offline, "connected_to": c.address}


def topics(c: ConsoleClient) -> list[dict]:
    md = c.metadata(None)
    leaders = leaders_of(md)
    starts = offsets(c, sorted(leaders), leaders, EARLIEST)
    ends = offsets(c, sorted(leaders), leaders, LATEST)
    sizes = log_dir_sizes(c, [b.node_id for b in md.brokers])
    out = []
    for t in md.topics:
        if t.error_code:
            continue
        tps = [(t.name, p.partition_index) for p in t.partitions]
        out.append({
            "name": t.name, "internal": bool(t.is_internal) or t.name in INTERNAL_TOPICS,
            "partitions": len(t.partitions),
            "replication": max((len(p.replica_nodes) for p in t.partitions), default=0),
            "under_replicated": sum(len(p.isr_nodes) < len(p.replica_nodes)
                                    for p in t.partitions),
            "offline": sum(p.leader_id < 0 for p in t.partitions),
            "messages": sum(max(ends.get(tp, 0) - starts.get(tp, 0), 0) for tp in tps),
            "size": sum(sizes.get(tp, 0) for tp in tps),
        })
    return out


def describe_configs(c: ConsoleClient, resource_type: int, name: str) -> list[dict]:
    if not c.supports(DESCRIBE_CONFIGS):
        return []
    body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                           "configuration_keys": None}]}
    if resource_type == BROKER_RESOURCE:
        resp = c.try_node(DESCRIBE_CONFIGS, body, int(name))
        if resp is None:
            return []
    else:
        resp = c.request(DESCRIBE_CONFIGS, body)
    (r,) = resp.results
    check_error(r.error_code, r.error_message, f"DescribeConfigs {name}")
    out = []
    for e in sorted(r.configs, key=lambda e: e.name):
        source = getattr(e, "config_source", -1)
        default = e.is_default if source in (-1, None) else source == 5
        out.append({"name": e.name, "value": None if e.is_sensitive else e.value,
                    "sensitive": e.is_sensitive, "default": default,
                    "read_only": e.read_only})
    return out


def topic(c: ConsoleClient, name: str) -> dict | None:
    md = c.metadata([name])
    (t,) = md.topics
    if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        return None
    check_error(t.error_code, None, f"topic {name}")
    leaders = leaders_of(md)
    starts = offsets(c, sorted(leaders), leaders, EARLIEST)
    ends = offsets(c, sorted(leaders), leaders, LATEST)
    sizes = log_dir_sizes(c, [b.node_id for b in md.brokers])
    parts = []
    for p in sorted(t.partitions, key=lambda p: p.partition_index):
        tp = (name, p.partition_index)
        parts.append({"partition": p.partition_index, "leader": p.leader_id,
                      "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                      "offline": list(getattr(p, "offline_replicas", []) or []),
                      "start": starts.get(tp), "end": ends.get(tp), "size": sizes.get(tp),
                      "error": error_name(p.error_code) if p.error_code else ""})
    return {"name": name, "internal": bool(t.is_internal) or name in INTERNAL_TOPICS,
            "partitions": parts, "configs": describe_configs(c, TOPIC_RESOURCE, name),
            "messages": sum(max((p["end"] or 0) - (p["start"] or 0), 0) for p in parts),
            "size": sum(p["size"] or 0 for p in parts)}


def broker(c: ConsoleClient, broker_id: int) -> dict | None:
    md = c.metadata(None)
    known = {b["id"]: b for b in c.tracker.brokers()}
    if broker_id not in known:
        return None
    leads = replicas = 0
    for t in md.topics:
        for p in t.partitions:
            leads += p.leader_id == broker_id
            replicas += broker_id in p.replica_nodes
    dirs = []
    resp = c.try_node(DESCRIBE_LOG_DIRS, {"topics": None}, broker_id) \
        if broker_id in c.tracker.registered and c.supports(DESCRIBE_LOG_DIRS) else None
    for d in resp.results if resp is not None else ():
        dirs.append({"path": d.log_dir,
                     "error": error_name(d.error_code) if d.error_code else "",
                     "partitions": sum(len(t.partitions) for t in d.topics),
                     "size": sum(p.partition_size for t in d.topics for p in t.partitions),
                     "total": getattr(d, "total_bytes", -1),
                     "usable": getattr(d, "usable_bytes", -1)})
    configs = describe_configs(c, BROKER_RESOURCE, str(broker_id)) \
        if broker_id in c.tracker.registered else []
    b = known[broker_id]
    return {**b, "leaders": leads, "replicas": replicas, "log_dirs": dirs, "configs": configs}


def broker_configs(c: ConsoleClient, broker_ids: list[int], keys: list[str]) -> dict:
    out = {}
    for b in broker_ids:
        resp = c.try_node(DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": BROKER_RESOURCE, "resource_name": str(b),
             "configuration_keys": keys}]}, b)
        for r in resp.results if resp is not None else ():
            if not r.error_code:
                out[b] = {e.name: e.value for e in r.configs}
    return out


def groups(c: ConsoleClient) -> list[dict]:
    out = [{"id": gid, "protocol_type": ptype, "coordinator": node}
           for gid, ptype, node in list_groups(c)]
    by_node: dict[int, list[str]] = {}
    for g in out:
        by_node.setdefault(g["coordinator"], []).append(g["id"])
    states = {}
    for node, ids in by_node.items():
        resp = c.try_node(DESCRIBE_GROUPS, {"groups": ids}, node)
        for g in resp.groups if resp is not None else ():
            states[g.group_id] = (g.group_state, len(g.members))
    for g in out:
        g["state"], g["members"] = states.get(g["id"], ("Unknown", 0))
    return sorted(out, key=lambda g: g["id"])


def group(c: ConsoleClient, group_id: str) -> dict:
    node = find_coordinator(c, group_id)
    g = describe_group(c, group_id)
    committed = committed_offsets(c, group_id)
    owners: dict[tuple[str, int], Any] = {}
    members = []
    for m in g.members:
        assigned = parse_assignment(m.member_assignment)
        for tp in assigned:
            owners[tp] = m
        members.append({"member_id": m.member_id, "instance_id": m.group_instance_id,
                        "client_id": m.client_id, "host": m.client_host,
                        "assignment": sorted(assigned)})
    tps = sorted(set(committed) | set(owners))
    ends: dict = {}
    topic_names: list[str] = []
    if tps:
        md = c.metadata(sorted({t for t, _ in tps}))
        ends = offsets(c, tps, leaders_of(md), LATEST)
        topic_names = sorted({t for t, _ in tps})
    rows = []
    total = 0
    for tp in tps:
        cur, end = committed.get(tp), ends.get(tp)
        lag = None if cur is None or end is None else max(end - cur, 0)
        total += lag or 0
        m = owners.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "committed": cur, "end": end,
                     "lag": lag, "member": m.member_id if m else None,
                     "client_id": m.client_id if m else None})
    return {"id": group_id, "state": g.group_state, "protocol_type": g.protocol_type,
            "protocol": g.protocol_data, "coordinator": node, "members": members,
            "offsets": rows, "lag": total, "topics": topic_names}


def all_end_offsets(c: ConsoleClient) -> dict[tuple[str, int], int]:
    md = c.metadata(None)
    leaders = leaders_of(md)
    return offsets(c, sorted(leaders), leaders, LATEST)


def group_lags(c: ConsoleClient, limit: int) -> dict[str, int]:
    out = {}
    for gid, _, _ in list_groups(c)[:limit]:
        try:
            out[gid] = group(c, gid)["lag"]
        except ToolError:
            continue
    return out
