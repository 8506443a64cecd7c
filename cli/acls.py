"""``josef acls``: add, remove and list ACLs (like kafka-acls.sh).

    josef acls --bootstrap-server h:9094 --command-config admin.properties \\
        --add --allow-principal User:alice --operation Read --operation Describe --topic t
    josef acls ... --add --allow-principal User:bob --producer --topic t [--idempotent]
    josef acls ... --add --allow-principal User:carol --consumer --topic t --group g
    josef acls ... --add --allow-principal User:dave --operation Write \\
        --topic logs- --resource-pattern-type prefixed
    josef acls ... --list [--topic t] [--principal User:alice]
    josef acls ... --remove --allow-principal User:alice --operation Read --topic t --force

Resources: ``--topic``, ``--group``, ``--transactional-id``, ``--delegation-token``,
``--user-principal`` (repeatable), ``--cluster``; ``*`` means all of that type.
``--resource-pattern-type`` literal (default) / prefixed; for --list/--remove also any /
match. ``--allow-host``/``--deny-host`` default to ``*``. ``--producer`` = WRITE, DESCRIBE,
CREATE on the topics (+ IDEMPOTENT_WRITE on the cluster with --idempotent, + WRITE and
DESCRIBE on --transactional-id); ``--consumer`` = READ, DESCRIBE on the topics and READ on
the groups. Output layout as kafka-acls.sh ("Adding ACLs for resource
`ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`: ..." then "Current ACLs
for resource ..."). --remove asks for confirmation unless --force. APIs: CreateAcls,
DescribeAcls, DeleteAcls.
"""

from __future__ import annotations

import argparse
import sys

from cli._common import UsageError, add_bootstrap, check_error, connect, tool_main
from common.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    code_name,
)

COMMAND = "acls"
HELP = "Add, remove and list ACLs (like kafka-acls.sh)"

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31



def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], help="topic ('*' = all topics)")
    p.add_argument("--group", action="append", default=[], help="consumer group")
    p.add_argument("--transactional-id", action="append", default=[], help="transactional id")
    p.add_argument("--delegation-token", action="append", default=[], help="token id")
    p.add_argument("--user-principal", action="append", default=[],
                   help="user the token ACLs are about (CreateTokens/DescribeTokens)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default=None,
                   choices=["literal", "prefixed", "any", "match"],
                   help="literal (default) or prefixed; --list/--remove also any or match")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--principal", action="append", default=[],
                   help="--list: only ACLs of this principal")
    p.add_argument("--operation", action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                        "DescribeConfigs, AlterConfigs, IdempotentWrite, CreateTokens, "
                        "DescribeTokens, All (default All)")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs")
    p.add_argument("--idempotent", action="store_true",
                   help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--force", action="store_true", help="--remove without asking")


def _resources(args, ptype: int) -> list[tuple[int, str, int]]:
    R = ResourceType
    out = [(R.TOPIC, n, ptype) for n in args.topic]
    out += [(R.GROUP, n, ptype) for n in args.group]
    out += [(R.TRANSACTIONAL_ID, n, ptype) for n in args.transactional_id]
    out += [(R.DELEGATION_TOKEN, n, ptype) for n in args.delegation_token]
    out += [(R.USER, n, ptype) for n in args.user_principal]
    if args.cluster:
        out.append((R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return out


def _ops(names: list[str]) -> set[int]:
    out = set()
    for n in names or ["All"]:
        try:
            op = AclOperation.parse(n)
        except ValueError:
            op = None
        if op in (None, AclOperation.ANY, AclOperation.UNKNOWN):
            raise UsageError(f"unknown operation {n}")
        out.add(op)
    return out


def _entries(args, ops: set[int]) -> list[tuple[str, str, int, int]]:
    out = []
    for principals, hosts, perm in ((args.allow_principal, args.allow_host,
                                     AclPermissionType.ALLOW),
                                    (args.deny_principal, args.deny_host,
                                     AclPermissionType.DENY)):
        for pr in principals:
            if ":" not in pr:
                raise UsageError(f"principal {pr!r} must be in principalType:name format")
            for h in hosts or ["*"]:
                for op in sorted(ops):
                    out.append((pr, h, op, perm))
    return out


def _resource_to_acls(args) -> dict[tuple[int, str, int], list]:
    ptype = PatternType[(args.resource_pattern_type or "literal").upper()]
    R, Op = ResourceType, AclOperation
    result: dict[tuple[int, str, int], list] = {}
    if args.producer or args.consumer:
        if args.producer:
            if not args.topic:
                raise UsageError("With --producer you must specify a --topic")
            for t in args.topic:
                result.setdefault((R.TOPIC, t, ptype), []).extend(
                    _entries(args, {Op.WRITE, Op.DESCRIBE, Op.CREATE}))
            for x in args.transactional_id:
                result.setdefault((R.TRANSACTIONAL_ID, x, ptype), []).extend(
                    _entries(args, {Op.WRITE, Op.DESCRIBE}))
            if args.idempotent:
                result.setdefault((R.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), []).extend(
                    _entries(args, {Op.IDEMPOTENT_WRITE}))
        if args.consumer:
            if not args.topic or not args.group:
                raise UsageError("With --consumer you must specify a --topic and a --group")
            for t in args.topic:
                result.setdefault((R.TOPIC, t, ptype), []).extend(
                    _entries(args, {Op.READ, Op.DESCRIBE}))
            for g in args.group:
                result.setdefault((R.GROUP, g, ptype), []).extend(_entries(args, {Op.READ}))
        return result
    ops = _ops(args.operation)
    resources = _resources(args, ptype)
    if not resources:
        raise UsageError("You must specify one of: --topic, --cluster, --group, "
                         "--transactional-id, --delegation-token, --user-principal")
    for r in resources:
        allowed = set(SUPPORTED_OPERATIONS[r[0]]) | {Op.ALL}
        if ops - allowed:
            raise UsageError(f"ResourceType {r[0].name} only supports operations "
                             + ", ".join(o.name for o in sorted(allowed)))
        result[r] = _entries(args, ops)
    return result


def _pattern_str(rtype: int, name: str, ptype: int) -> str:
    return (f"ResourcePattern(resourceType={code_name(ResourceType, rtype)}, name={name}, "
            f"patternType={code_name(PatternType, ptype)})")


def _entry_str(principal: str, host: str, op: int, perm: int) -> str:
    return (f"(principal={principal}, host={host}, operation={code_name(AclOperation, op)}, "
            f"permissionType={code_name(AclPermissionType, perm)})")


def _print_block(title: str, entries) -> None:
    body = "\n".join("\t" + _entry_str(*e) for e in entries)
    print(f"{title}: \n {body} \n")


def _describe(client, rtype=1, name=None, ptype=1) -> dict[tuple[int, str, int], list]:
    resp = client.request(DESCRIBE_ACLS, {
        "resource_type_filter": rtype, "resource_name_filter": name,
        "pattern_type_filter": ptype, "principal_filter": None, "host_filter": None,
        "operation": 1, "permission_type": 1})
    check_error(resp.error_code, resp.error_message, "cannot describe ACLs")
    return {(r.resource_type, r.resource_name, r.pattern_type):
            [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls]
            for r in resp.resources}


def _list(client, args) -> None:
    ptype = PatternType[(args.resource_pattern_type or "any").upper()]
    resources = _resources(args, ptype)
    found: dict = {}
    if resources:
        for rtype, name, pt in resources:
            found.update(_describe(client, rtype, name, pt))
    else:
        found = _describe(client)
    principals = args.principal or [None]
    for pr in principals:
        if pr is not None:
            print(f"ACLs for principal `{pr}`")
        for key, entries in sorted(found.items()):
            shown = [e for e in entries if pr is None or e[0] == pr]
            if shown:
                _print_block(f"Current ACLs for resource `{_pattern_str(*key)}`", shown)


def _add(client, args) -> None:
    todo = _resource_to_acls(args)
    for key, entries in todo.items():
        if not entries:
            raise UsageError("You must specify one of: --allow-principal, --deny-principal "
                             "when trying to add ACLs.")
        _print_block(f"Adding ACLs for resource `{_pattern_str(*key)}`", entries)
        resp = client.request(CREATE_ACLS, {"creations": [
            {"resource_type": key[0], "resource_name": key[1], "resource_pattern_type": key[2],
             "principal": e[0], "host": e[1], "operation": e[2], "permission_type": e[3]}
            for e in entries]})
        for r in resp.results:
            check_error(r.error_code, r.error_message, "cannot add ACL")
    for key in todo:
        _print_block(f"Current ACLs for resource `{_pattern_str(*key)}`",
                     _describe(client, *key).get(key, []))


def _remove(client, args) -> None:
    todo = _resource_to_acls(args)
    for key, entries in todo.items():
        flt = _pattern_str(*key).replace("ResourcePattern(", "ResourcePatternFilter(")
        if not args.force:
            what = "all ACLs for resource filter" if not entries else "ACLs"
            print(f"Are you sure you want to remove {what} `{flt}`? (y/n)")
            if sys.stdin.readline().strip().lower() != "y":
                continue
        filters = [{"resource_type_filter": key[0], "resource_name_filter": key[1],
                    "pattern_type_filter": key[2], "principal_filter": e[0],
                    "host_filter": e[1], "operation": e[2], "permission_type": e[3]}
                   for e in entries] or [
            {"resource_type_filter": key[0], "resource_name_filter": key[1],
             "pattern_type_filter": key[2], "principal_filter": None, "host_filter": None,
             "operation": 1, "permission_type": 1}]
        resp = client.request(DELETE_ACLS, {"filters": filters})
        for r in resp.filter_results:
            check_error(r.error_code, r.error_message, "cannot remove ACLs")


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.list:
            _list(client, args)
        elif args.add:
            if args.resource_pattern_type in ("any", "match"):
                raise UsageError("A '--resource-pattern-type' value of 'any' or 'match' is "
                                 "not valid when adding acls.")
            _add(client, args)
        else:
            _remove(client, args)
    return 0
