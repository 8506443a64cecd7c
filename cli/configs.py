"""``josef configs``: describe and alter topic and broker configs (like kafka-configs.sh).

``--describe --entity-type topics --entity-name t`` prints Kafka's layout::

    Dynamic configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}

(``--all`` lists every config: "All configs for topic t are:"). Without ``--entity-name``
every topic (or the broker defaults) is described. ``--alter --add-config k=v,k2=[a,b]
--delete-config k`` sends IncrementalAlterConfigs (SET / DELETE) and prints "Completed
updating config for topic t."; a broker that lacks IncrementalAlterConfigs is refused with a
message. APIs: DescribeConfigs, IncrementalAlterConfigs (a broker's own configs go to that
broker, topics and ``--entity-default`` to any broker, as Kafka's AdminClient sends them),
Metadata.

``--entity-type groups --entity-name g``: a group's configs (GROUP resources: Kafka 4.2's
consumer/share group configs and Josef's share retry and dead-letter keys; source
GROUP_CONFIG).

``--entity-type users`` / ``clients`` (also ``--user U``, ``--client C``, both for a
user+client pair, ``--entity-default``/``--user-defaults``/``--client-defaults``): SCRAM
credentials and client quotas, see :mod:`cli._configs_clients`.
"""

from __future__ import annotations

import argparse

from cli._common import (
    UsageError,
    add_bootstrap,
    check_error,
    connect,
    split_pairs,
    tool_main,
)
from client.admin import AdminRouter

COMMAND = "configs"
HELP = "Describe and alter topic and broker configs (like kafka-configs.sh)"

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
RESOURCE = {"topics": 2, "brokers": 4, "groups": 32}
CLIENT_ENTITY_TYPES = ("users", "clients")
SINGULAR = {"topics": "topic", "brokers": "broker", "groups": "group"}
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_SOURCES = {1, 2, 3, 6, 8}
OP_SET, OP_DELETE = 0, 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    p.add_argument("--entity-type", action="append", default=[],
                   choices=sorted(RESOURCE) + list(CLIENT_ENTITY_TYPES),
                   help="topics, brokers, users or clients (users and clients together for "
                        "a user's client)")
    p.add_argument("--entity-name", action="append", dest="entity_names", default=[],
                   metavar="NAME", help="topic name, broker id, user principal or client id")
    p.add_argument("--entity-default", action="append_const", dest="entity_names", const="",
                   help="the default entity (brokers: cluster-wide; users/clients: <default>)")
    p.add_argument("--user", metavar="PRINCIPAL", help="= --entity-type users --entity-name")
    p.add_argument("--client", metavar="CLIENT-ID",
                   help="= --entity-type clients --entity-name")
    p.add_argument("--user-defaults", action="store_true", help="the default user")
    p.add_argument("--client-defaults", action="store_true", help="the default client id")
    p.add_argument("--all", action="store_true",
                   help="--describe: every config, not only dynamic ones")
    p.add_argument("--add-config", metavar="K=V,...", default="",
                   help="--alter: configs to set; a list value in brackets: k=[a,b]")
    p.add_argument("--delete-config", metavar="K,...", default="",
                   help="--alter: configs to remove (back to the default)")


def _fmt_value(c) -> str:
    return "null" if c.value is None else c.value


def _entity_names(client, args) -> list[str]:
    if args.entity_default:
        if args.entity_type != "brokers":
            raise UsageError("--entity-default is only valid for brokers")
        return [""]
    if args.entity_name is not None:
        return [args.entity_name]
    if args.alter:
        raise UsageError("--alter needs --entity-name (or --entity-default for brokers)")
    md = client.metadata(None)
    if args.entity_type == "topics":
        return sorted(t.name for t in md.topics if t.error_code == 0)
    if args.entity_type == "groups":
        raise UsageError("--describe --entity-type groups needs --entity-name")
    return [str(b.node_id) for b in sorted(md.brokers, key=lambda b: b.node_id)]


def _by_node(rtype: int, names: list[str]) -> list[tuple[int | None, list[str]]]:
    """Where Kafka's AdminClient sends config requests: a broker's own configs to that
    broker, everything else (topics, the ``<default>`` broker) to any broker (None)."""
    if rtype != RESOURCE["brokers"]:
        return [(None, names)]
    out: list[tuple[int | None, list[str]]] = []
    for n in names:
        try:
            out.append((int(n), [n]) if n != "" else (None, [n]))
        except ValueError:
            raise UsageError(f"a broker is named by its id, not {n!r}") from None
    return out


def _describe(client, args) -> int:
    rtype = RESOURCE[args.entity_type]
    names = _entity_names(client, args)
    version = client.version_for(DESCRIBE_CONFIGS)
    results = []
    for node, group in _by_node(rtype, names):
        body = {"resources": [{"resource_type": rtype, "resource_name": n,
                               "configuration_keys": None} for n in group],
                "include_synonyms": True}
        router = AdminRouter(client)
        resp = router.any(DESCRIBE_CONFIGS, body, version) if node is None else \
            router.broker(node, DESCRIBE_CONFIGS, body, version)
        results += resp.results
    for r in results:
        label = (f"default {SINGULAR[args.entity_type]}" if r.resource_name == ""
                 else f"{SINGULAR[args.entity_type]} {r.resource_name}")
        check_error(r.error_code, r.error_message, f"cannot describe {label}")
        print(f"{'All' if args.all else 'Dynamic'} configs for {label} are:")
        for c in sorted(r.configs, key=lambda c: c.name):
            source = c.config_source if version >= 1 else (5 if c.is_default else 1)
            if not args.all and source not in DYNAMIC_SOURCES:
                continue
            syn = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}="
                            f"{'null' if s.value is None else s.value}"
                            for s in (c.synonyms if version >= 1 else []))
            print(f"  {c.name}={_fmt_value(c)} sensitive={str(c.is_sensitive).lower()} "
                  f"synonyms={{{syn}}}")
    return 0


def _alter(client, args) -> int:
    rtype = RESOURCE[args.entity_type]
    (name,) = _entity_names(client, args)
    ops = [{"name": k, "config_operation": OP_SET, "value": v}
           for k, v in split_pairs(args.add_config)]
    ops += [{"name": k.strip(), "config_operation": OP_DELETE, "value": None}
            for k in args.delete_config.split(",") if k.strip()]
    if not ops:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    if not client.supports(INCREMENTAL_ALTER_CONFIGS):
        raise UsageError("the broker does not support IncrementalAlterConfigs")
    ((node, _),) = _by_node(rtype, [name])
    body = {"resources": [{"resource_type": rtype, "resource_name": name, "configs": ops}],
            "validate_only": False}
    router = AdminRouter(client)
    resp = router.any(INCREMENTAL_ALTER_CONFIGS, body) if node is None else \
        router.broker(node, INCREMENTAL_ALTER_CONFIGS, body)
    (r,) = resp.responses
    label = f"default {SINGULAR[args.entity_type]}" if name == "" \
        else f"{SINGULAR[args.entity_type]} {name}"
    check_error(r.error_code, r.error_message, f"cannot alter config for {label}")
    print(f"Completed updating config for {label}.")
    return 0


def _normalize(args: argparse.Namespace) -> None:
    """--user/--client shortcuts into entity types and names (kafka-configs' rules)."""
    types, names = list(args.entity_type), list(args.entity_names)
    if args.user is not None or args.user_defaults:
        types.append("users")
        names.append("" if args.user_defaults else args.user)
    if args.client is not None or args.client_defaults:
        types.append("clients")
        names.append("" if args.client_defaults else args.client)
    if not types:
        raise UsageError("--entity-type (or --user/--client) is required")
    if len(names) > len(types):
        raise UsageError("More entity names specified than entity types")
    if len(types) > 1 and sorted(types) != ["clients", "users"]:
        raise UsageError("only users and clients can be combined as entity types")
    if len(types) > 1 and types[0] == "clients":  # a user's client: user first
        types.reverse()
        names.reverse()
    args.entity_types, args.entity_names = types, names
    args.entity_type = types[0]
    args.entity_default = bool(names) and names[0] == "" and types[0] not in CLIENT_ENTITY_TYPES
    args.entity_name = names[0] if names and names[0] != "" else None


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    _normalize(args)
    with connect(args) as client:
        if args.entity_type in CLIENT_ENTITY_TYPES:
            from cli import _configs_clients as configs_clients
            return configs_clients.run(client, args)
        return _describe(client, args) if args.describe else _alter(client, args)
