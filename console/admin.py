"""The console's operator pages' queries (blocking, run by
:class:`console.service.ClusterService`): ACLs, SCRAM users, client quotas, transactions,
partition reassignments with the bytes copied, and every broker's log directories.

- ACLs: DescribeAcls with a match-everything filter; a cluster without an authorizer
  answers SECURITY_DISABLED, shown as such.
- SCRAM users: DescribeUserScramCredentials (all users): mechanisms and iterations.
- Quotas: DescribeClientQuotas with no component (every entity, non-strict).
- Transactions: ListTransactions on every broker (each lists the transactional ids it
  coordinates), then DescribeTransactions on each coordinator.
- Reassignments: ListPartitionReassignments (to the controller, through
  :class:`client.admin.AdminRouter`); the bytes copied are the
  smallest size of an adding replica out of the leader's (DescribeLogDirs), as
  ``reassign-partitions --verify`` shows them.
- Log dirs: DescribeLogDirs on every registered broker: each dir's size, disk total and
  usable bytes (v4+), and its replicas (future replicas of an AlterReplicaLogDirs move
  flagged).
"""

from __future__ import annotations

from client.admin import AdminRouter
from client.connection import error_name
from client.metadata import check_error
from common.acl import AclOperation, AclPermissionType, PatternType, ResourceType, code_name
from common.security.scram import BY_TYPE as SCRAM_BY_TYPE
from console.queries import leaders_of

__all__ = ["acls", "scram_users", "quotas", "transactions", "reassignments", "log_dirs"]

DESCRIBE_ACLS, DESCRIBE_LOG_DIRS, LIST_REASSIGNMENTS = 29, 35, 46
DESCRIBE_QUOTAS, DESCRIBE_SCRAM = 48, 50
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
SECURITY_DISABLED = 54
#: DescribeClientQuotas entity types as kafka-configs.sh labels them
ENTITY_LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}


def acls(c) -> dict:
    resp = c.request(DESCRIBE_ACLS, {
        "resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
        "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
    if resp.error_code == SECURITY_DISABLED:
        return {"enabled": False, "acls": []}
    check_error(resp.error_code, resp.error_message, "cannot describe ACLs")
    rows = [{"resource_type": code_name(ResourceType, r.resource_type),
             "name": r.resource_name, "pattern": code_name(PatternType, r.pattern_type),
             "principal": a.principal, "host": a.host,
             "operation": code_name(AclOperation, a.operation),
             "permission": code_name(AclPermissionType, a.permission_type)}
            for r in resp.resources for a in r.acls]
    rows.sort(key=lambda r: (str(r["resource_type"]), r["name"], r["principal"],
                             str(r["operation"])))
    return {"enabled": True, "acls": rows}


def scram_users(c) -> list[dict]:
    resp = c.request(DESCRIBE_SCRAM, {"users": None})
    check_error(resp.error_code, resp.error_message, "cannot describe SCRAM credentials")
    names = {t: m.name for t, m in SCRAM_BY_TYPE.items()}
    out = []
    for r in resp.results:
        out.append({"user": r.user, "error": error_name(r.error_code) if r.error_code else "",
                    "mechanisms": [(names.get(i.mechanism, i.mechanism), i.iterations)
                                   for i in r.credential_infos]})
    return sorted(out, key=lambda u: u["user"])


def quotas(c) -> list[dict]:
    resp = c.request(DESCRIBE_QUOTAS, {"components": [], "strict": False})
    check_error(resp.error_code, resp.error_message, "cannot describe quotas")
    out = []
    for e in resp.entries:
        entity = ", ".join(
            f"{ENTITY_LABEL.get(x.entity_type, x.entity_type)} {x.entity_name}"
            if x.entity_name is not None
            else f"default {ENTITY_LABEL.get(x.entity_type, x.entity_type)}"
            for x in e.entity)
        out.append({"entity": entity, "limits": sorted((v.key, v.value) for v in e.values)})
    return sorted(out, key=lambda q: q["entity"])


def transactions(c) -> list[dict]:
    md = c.metadata([])
    listed: dict[int, list[str]] = {}
    for b in md.brokers:
        resp = c.try_node(LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": []},
                          b.node_id)
        if resp is None or resp.error_code:
            continue
        listed[b.node_id] = [s.transactional_id for s in resp.transaction_states]
    out = []
    for node, ids in listed.items():
        if not ids:
            continue
        resp = c.try_node(DESCRIBE_TRANSACTIONS, {"transactional_ids": ids}, node)
        for s in resp.transaction_states if resp is not None else ():
            out.append({"id": s.transactional_id, "coordinator": node,
                        "state": s.transaction_state if not s.error_code
                        else error_name(s.error_code),
                        "producer_id": s.producer_id, "epoch": s.producer_epoch,
                        "timeout_ms": s.transaction_timeout_ms,
                        "start_ms": s.transaction_start_time_ms,
                        "partitions": [f"{t.topic}-{p}" for t in s.topics
                                       for p in t.partitions]})
    return sorted(out, key=lambda t: t["id"])


def _replica_sizes(c, broker: int) -> dict[tuple[str, int], int] | None:
    resp = c.try_node(DESCRIBE_LOG_DIRS, {"topics": None}, broker)
    if resp is None:
        return None
    sizes: dict[tuple[str, int], int] = {}
    for d in resp.results:
        for t in d.topics:
            for p in t.partitions:
                if not p.is_future_key:
                    key = (t.name, p.partition_index)
                    sizes[key] = sizes.get(key, 0) + p.partition_size
    return sizes


def reassignments(c) -> list[dict]:
    resp = AdminRouter(c).controller(LIST_REASSIGNMENTS, {"timeout_ms": 30000, "topics": None})
    check_error(resp.error_code, resp.error_message, "cannot list reassignments")
    ongoing = [(t.name, p) for t in resp.topics for p in t.partitions]
    if not ongoing:
        return []
    leaders = leaders_of(c.metadata(sorted({t for t, _ in ongoing})))
    sizes: dict[int, dict | None] = {}
    out = []
    for topic, p in sorted(ongoing, key=lambda x: (x[0], x[1].partition_index)):
        tp = (topic, p.partition_index)
        for b in {leaders.get(tp, -1), *p.adding_replicas} - {-1}:
            if b not in sizes:
                sizes[b] = _replica_sizes(c, b)
        total = (sizes.get(leaders.get(tp, -1)) or {}).get(tp)
        copied = [(sizes.get(b) or {}).get(tp) for b in p.adding_replicas]
        known = [x for x in copied if x is not None]
        done = min(known) if known else (total if not p.adding_replicas else None)
        percent = None
        if total is not None and done is not None:
            percent = 100.0 if total == 0 else min(100.0, 100.0 * done / total)
        out.append({"topic": topic, "partition": p.partition_index,
                    "replicas": list(p.replicas), "adding": list(p.adding_replicas),
                    "removing": list(p.removing_replicas), "leader": leaders.get(tp, -1),
                    "copied": done, "total": total, "percent": percent})
    return out


def log_dirs(c) -> list[dict]:
    md = c.metadata([])
    out = []
    for b in sorted(md.brokers, key=lambda b: b.node_id):
        resp = c.try_node(DESCRIBE_LOG_DIRS, {"topics": None}, b.node_id)
        if resp is None:
            out.append({"broker": b.node_id, "error": "not answering", "dirs": []})
            continue
        dirs = []
        for d in sorted(resp.results, key=lambda d: d.log_dir):
            replicas = sorted(
                ({"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                  "lag": p.offset_lag, "future": p.is_future_key}
                 for t in d.topics for p in t.partitions), key=lambda r: r["partition"])
            dirs.append({"path": d.log_dir,
                         "error": error_name(d.error_code) if d.error_code else "",
                         "size": sum(r["size"] for r in replicas),
                         "total": getattr(d, "total_bytes", -1),
                         "usable": getattr(d, "usable_bytes", -1), "replicas": replicas})
        out.append({"broker": b.node_id, "error": "", "dirs": dirs})
    return out

