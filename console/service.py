"""What the console asks the cluster, through the blocking protocol client (:mod:`client`) run
in a small thread pool so the web server's event loop never waits on a socket.

Every public coroutine returns plain data (dicts, lists, tuples) for the templates, or raises
:class:`ClusterUnavailable` (cannot connect, timeout, connection lost) or
:class:`~client.connection.ToolError` (the cluster answered an error). Each worker thread keeps
its own :class:`~client.connection.KafkaClient`; a client that failed is dropped and the next
call reconnects, so the console recovers when the cluster comes back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from client.connection import KafkaClient, ToolError, error_name
from client.groups import (
    committed_offsets,
    describe_group,
    find_coordinator,
    list_groups,
    parse_assignment,
)
from client.metadata import check_error
from client.offsets import EARLIEST, LATEST, list_offsets
from client.records import fetched_records

__all__ = ["ClusterService", "ClusterUnavailable"]

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER = 35, 60
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

_UNREACHABLE = ("cannot connect", "timed out", "connection closed", "no bootstrap",
                "Connection", "Broken pipe", "refused", "reset")


class ClusterUnavailable(Exception):
    """The cluster cannot be reached (shown as the banner, not as a page error)."""


class ClusterService:
    def __init__(self, bootstrap: str, timeout: float = 10.0, workers: int = 4) -> None:
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kafka")
        self._local = threading.local()
        self._clients: list[KafkaClient] = []
        self._lock = threading.Lock()

    # ----- plumbing ------------------------------------------------------------------------
    def _client(self) -> KafkaClient:
        c = getattr(self._local, "client", None)
        if c is None:
            try:
                c = KafkaClient(self.bootstrap, client_id="josef-console", timeout=self.timeout)
            except ToolError as e:
                raise ClusterUnavailable(str(e)) from None
            self._local.client = c
            with self._lock:
                self._clients.append(c)
        return c

    def _drop_client(self) -> None:
        c = getattr(self._local, "client", None)
        self._local.client = None
        if c is not None:
            c.close()
            with self._lock:
                if c in self._clients:
                    self._clients.remove(c)

    def _call(self, fn: Callable[..., Any], *args) -> Any:
        try:
            return fn(self._client(), *args)
        except ClusterUnavailable:
            raise
        except ToolError as e:
            text = str(e)
            if any(s in text for s in _UNREACHABLE):
                self._drop_client()
                raise ClusterUnavailable(text) from None
            raise
        except OSError as e:
            self._drop_client()
            raise ClusterUnavailable(str(e)) from None

    async def run(self, fn: Callable[..., Any], *args) -> Any:
        """``fn(client, *args)`` in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, fn,
                                                                *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for c in self._clients:
                c.close()
            self._clients.clear()

    # ----- cluster ---------------------------------------------------------------------------
    async def cluster(self) -> dict:
        return await self.run(_cluster)

    async def topics(self) -> list[dict]:
        return await self.run(_topics)

    async def topic(self, name: str) -> dict | None:
        return await self.run(_topic, name)

    async def broker(self, broker_id: int) -> dict | None:
        return await self.run(_broker, broker_id)

    async def create_topic(self, name: str, partitions: int, replication: int,
                           configs: dict[str, str]) -> None:
        await self.run(_create_topic, name, partitions, replication, configs)

    async def delete_topic(self, name: str) -> None:
        await self.run(_delete_topic, name)

    async def messages(self, topic: str, partition: int, *, offset: int | None = None,
                       timestamp_ms: int | None = None, limit: int = 50) -> dict:
        return await self.run(_messages, topic, partition, offset, timestamp_ms, limit)

    async def groups(self) -> list[dict]:
        return await self.run(_groups)

    async def group(self, group_id: str) -> dict:
        return await self.run(_group, group_id)

    async def end_offsets(self) -> dict[tuple[str, int], int]:
        return await self.run(_all_end_offsets)

    async def group_lags(self, limit: int = 50) -> dict[str, int]:
        return await self.run(_group_lags, limit)

    async def broker_configs(self, broker_ids: list[int], keys: list[str]) -> dict:
        return await self.run(_broker_configs, broker_ids, keys)


# ----- the blocking calls (worker threads) ------------------------------------------------------

def _cluster(c: KafkaClient) -> dict:
    md = c.metadata(None)
    cluster_id = getattr(md, "cluster_id", None)
    controller = getattr(md, "controller_id", -1)
    brokers = sorted(({"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                      for b in md.brokers), key=lambda b: b["id"])
    topics = partitions = urp = offline = 0
    for t in md.topics:
        if t.error_code:
            continue
        topics += 1
        for p in t.partitions:
            partitions += 1
            if p.leader_id < 0:
                offline += 1
            if len(p.isr_nodes) < len(p.replica_nodes):
                urp += 1
    return {"cluster_id": cluster_id, "controller": controller, "brokers": brokers,
            "topics": topics, "partitions": partitions, "under_replicated": urp,
            "offline": offline, "bootstrap": c.versions and None}


def _log_dir_sizes(c: KafkaClient, broker_ids: list[int]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> bytes (largest replica), from DescribeLogDirs on every broker."""
    sizes: dict[tuple[str, int], int] = {}
    if not c.supports(DESCRIBE_LOG_DIRS):
        return sizes
    for b in broker_ids:
        try:
            resp = c.request(DESCRIBE_LOG_DIRS, {"topics": None}, node=b)
        except ToolError:
            continue
        for d in resp.results:
            for t in d.topics:
                for p in t.partitions:
                    key = (t.name, p.partition_index)
                    sizes[key] = max(sizes.get(key, 0), p.partition_size)
    return sizes


def _offsets(c: KafkaClient, tps: list[tuple[str, int]], leaders) -> tuple[dict, dict]:
    ok = [tp for tp in tps if leaders.get(tp, -1) >= 0]
    if not ok:
        return {}, {}
    return list_offsets(c, ok, EARLIEST, leaders), list_offsets(c, ok, LATEST, leaders)


def _topics(c: KafkaClient) -> list[dict]:
    md = c.metadata(None)
    leaders = {(t.name, p.partition_index): p.leader_id
               for t in md.topics if not t.error_code for p in t.partitions}
    starts, ends = _offsets(c, sorted(leaders), leaders)
    sizes = _log_dir_sizes(c, [b.node_id for b in md.brokers])
    out = []
    for t in sorted(md.topics, key=lambda t: t.name):
        if t.error_code:
            continue
        tps = [(t.name, p.partition_index) for p in t.partitions]
        out.append({
            "name": t.name, "internal": bool(t.is_internal) or t.name in INTERNAL_TOPICS,
            "partitions": len(t.partitions),
            "replication": max((len(p.replica_nodes) for p in t.partitions), default=0),
            "under_replicated": sum(len(p.isr_nodes) < len(p.replica_nodes)
                                    for p in t.partitions),
            "messages": sum(max(ends.get(tp, 0) - starts.get(tp, 0), 0) for tp in tps),
            "size": sum(sizes.get(tp, 0) for tp in tps),
        })
    return out


def _describe_configs(c: KafkaClient, resource_type: int, name: str) -> list[dict]:
    if not c.supports(DESCRIBE_CONFIGS):
        return []
    resp = c.request(DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}]},
        node=int(name) if resource_type == BROKER_RESOURCE else None)
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


def _topic(c: KafkaClient, name: str) -> dict | None:
    md = c.metadata([name])
    (t,) = md.topics
    if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION
        return None
    check_error(t.error_code, None, f"topic {name}")
    leaders = {(name, p.partition_index): p.leader_id for p in t.partitions}
    starts, ends = _offsets(c, sorted(leaders), leaders)
    sizes = _log_dir_sizes(c, [b.node_id for b in md.brokers])
    parts = []
    for p in sorted(t.partitions, key=lambda p: p.partition_index):
        tp = (name, p.partition_index)
        parts.append({"partition": p.partition_index, "leader": p.leader_id,
                      "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                      "offline": list(getattr(p, "offline_replicas", []) or []),
                      "start": starts.get(tp), "end": ends.get(tp), "size": sizes.get(tp),
                      "error": error_name(p.error_code) if p.error_code else ""})
    configs = _describe_configs(c, TOPIC_RESOURCE, name)
    return {"name": name, "internal": bool(t.is_internal) or name in INTERNAL_TOPICS,
            "partitions": parts, "configs": configs,
            "messages": sum(max((p["end"] or 0) - (p["start"] or 0), 0) for p in parts),
            "size": sum(p["size"] or 0 for p in parts)}


def _broker(c: KafkaClient, broker_id: int) -> dict | None:
    md = c.metadata(None)
    match = [b for b in md.brokers if b.node_id == broker_id]
    if not match:
        return None
    b = match[0]
    leads = replicas = 0
    for t in md.topics:
        for p in t.partitions:
            leads += p.leader_id == broker_id
            replicas += broker_id in p.replica_nodes
    dirs = []
    if c.supports(DESCRIBE_LOG_DIRS):
        try:
            resp = c.request(DESCRIBE_LOG_DIRS, {"topics": None}, node=broker_id)
            for d in resp.results:
                dirs.append({"path": d.log_dir, "error": error_name(d.error_code)
                             if d.error_code else "",
                             "partitions": sum(len(t.partitions) for t in d.topics),
                             "size": sum(p.partition_size for t in d.topics
                                         for p in t.partitions),
                             "total": getattr(d, "total_bytes", -1),
                             "usable": getattr(d, "usable_bytes", -1)})
        except ToolError as e:
            dirs.append({"path": "", "error": str(e), "partitions": 0, "size": 0,
                         "total": -1, "usable": -1})
    try:
        configs = _describe_configs(c, BROKER_RESOURCE, str(broker_id))
    except ToolError:
        configs = []
    return {"id": broker_id, "host": b.host, "port": b.port, "rack": b.rack,
            "controller": getattr(md, "controller_id", -1) == broker_id,
            "leaders": leads, "replicas": replicas, "log_dirs": dirs, "configs": configs}


def _broker_configs(c: KafkaClient, broker_ids: list[int], keys: list[str]) -> dict:
    out = {}
    for b in broker_ids:
        try:
            resp = c.request(DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": BROKER_RESOURCE, "resource_name": str(b),
                 "configuration_keys": keys}]}, node=b)
        except ToolError:
            continue
        for r in resp.results:
            if not r.error_code:
                out[b] = {e.name: e.value for e in r.configs}
    return out


def _create_topic(c: KafkaClient, name: str, partitions: int, replication: int,
                  configs: dict[str, str]) -> None:
    resp = c.request(CREATE_TOPICS, {
        "topics": [{"name": name, "num_partitions": partitions,
                    "replication_factor": replication, "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 30000, "validate_only": False}, node=c.controller_node())
    (r,) = resp.topics
    check_error(r.error_code, getattr(r, "error_message", None), f"create topic {name}")


def _delete_topic(c: KafkaClient, name: str) -> None:
    version = c.version_for(DELETE_TOPICS, max_version=5)
    resp = c.request(DELETE_TOPICS, {"topic_names": [name], "timeout_ms": 30000},
                     version=version, node=c.controller_node())
    (r,) = resp.responses
    check_error(r.error_code, getattr(r, "error_message", None), f"delete topic {name}")


def _timestamp_offset(c: KafkaClient, tp, timestamp_ms: int, leaders) -> int:
    return list_offsets(c, [tp], timestamp_ms, leaders)[tp]


def _messages(c: KafkaClient, topic: str, partition: int, offset: int | None,
              timestamp_ms: int | None, limit: int) -> dict:
    md = c.metadata([topic])
    leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics
               for p in t.partitions if not t.error_code}
    tp = (topic, partition)
    if tp not in leaders:
        raise ToolError(f"unknown partition {topic}-{partition}")
    start = list_offsets(c, [tp], EARLIEST, leaders)[tp]
    end = list_offsets(c, [tp], LATEST, leaders)[tp]
    if timestamp_ms is not None:
        pos = _timestamp_offset(c, tp, timestamp_ms, leaders)
        if pos < 0:
            pos = end
    elif offset is None:
        pos = max(start, end - limit)
    else:
        pos = min(max(offset, start), end)
    first = pos
    records = []
    version = c.version_for(FETCH, max_version=12)
    deadline = time.monotonic() + 5
    while pos < end and len(records) < limit and time.monotonic() < deadline:
        resp = c.request(FETCH, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 4 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "fetch_offset": pos,
                 "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}, version=version, node=leaders[tp])
        got = False
        for t in resp.responses:
            for pr in t.partitions:
                check_error(pr.error_code, None, f"fetch {topic}-{partition}")
                for item, nxt in fetched_records(pr.records, pos):
                    pos = max(pos, nxt)
                    if item is None:
                        continue
                    got = True
                    r, ts_type = item
                    records.append(_record(r, ts_type))
                    if len(records) >= limit:
                        break
        if not got:
            break
    return {"topic": topic, "partition": partition, "start": start, "end": end,
            "first": first, "next": pos, "records": records}


def _record(r, ts_type: int) -> dict:
    ts = r.timestamp
    when = ""
    if ts is not None and ts >= 0:
        when = datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    headers = [(k, None if v is None else bytes(v)) for k, v in (r.headers or [])]
    return {"offset": r.offset, "timestamp": ts, "time": when,
            "timestamp_type": "LogAppendTime" if ts_type == 1 else "CreateTime",
            "key": None if r.key is None else bytes(r.key),
            "value": None if r.value is None else bytes(r.value), "headers": headers}


def _groups(c: KafkaClient) -> list[dict]:
    out = []
    for gid, ptype, node in list_groups(c):
        out.append({"id": gid, "protocol_type": ptype, "coordinator": node})
    if not out:
        return out
    by_node: dict[int, list[str]] = {}
    for g in out:
        by_node.setdefault(g["coordinator"], []).append(g["id"])
    states = {}
    for node, ids in by_node.items():
        try:
            resp = c.request(15, {"groups": ids}, node=node)
        except ToolError:
            continue
        for g in resp.groups:
            states[g.group_id] = (g.group_state, len(g.members))
    for g in out:
        g["state"], g["members"] = states.get(g["id"], ("Unknown", 0))
    return out


def _group(c: KafkaClient, group_id: str) -> dict:
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
    if tps:
        md = c.metadata(sorted({t for t, _ in tps}))
        leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics
                   if not t.error_code for p in t.partitions}
        known = [tp for tp in tps if leaders.get(tp, -1) >= 0]
        ends = list_offsets(c, known, LATEST, leaders) if known else {}
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
            "offsets": rows, "lag": total}


def _all_end_offsets(c: KafkaClient) -> dict[tuple[str, int], int]:
    md = c.metadata(None)
    leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics
               if not t.error_code for p in t.partitions}
    ok = [tp for tp, lead in leaders.items() if lead >= 0]
    return list_offsets(c, ok, LATEST, leaders) if ok else {}


def _group_lags(c: KafkaClient, limit: int) -> dict[str, int]:
    out = {}
    for gid, _, _ in list_groups(c)[:limit]:
        try:
            out[gid] = _group(c, gid)["lag"]
        except ToolError:
            continue
    return out


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
