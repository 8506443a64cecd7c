"""Shared pieces of the ``josef`` tools: the bootstrap option, error reporting, leaders.

Every tool's ``run`` is wrapped by :func:`tool_main`: a :class:`ToolError` becomes one line
``josef <tool>: error: <message>`` on stderr and exit code 1; bad usage is exit code 2
(argparse's convention); Ctrl-C is 130.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable

from client.connection import KafkaClient, ToolError
from client.metadata import check_error, partition_leaders  # noqa: F401  (re-exported for the tools)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                        help="the broker(s) to connect to")
    parser.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                        help="socket timeout of each request (default 30000)")
    parser.add_argument("--command-config", metavar="FILE",
                        help="client properties for secured listeners (security.protocol, "
                             "ssl.truststore.location, sasl.mechanism, sasl.jaas.config, ...)")


SECURITY_PREFIXES = ("security.", "ssl.", "sasl.")


def security_props(args: argparse.Namespace, extra: dict[str, str] | None = None
                   ) -> dict[str, str] | None:
    """Security settings from ``--command-config`` plus the ``security.*``/``ssl.*``/
    ``sasl.*`` keys of ``extra`` (a tool's own client properties); None when there are none."""
    props: dict[str, str] = {}
    path = getattr(args, "command_config", None)
    if path:
        from client.security import load_client_properties
        try:
            props.update(load_client_properties(path))
        except Exception as e:  # noqa: BLE001 - reported as one line
            raise UsageError(f"cannot read --command-config {path}: {e}") from None
    for k, v in (extra or {}).items():
        if k.startswith(SECURITY_PREFIXES):
            props[k] = v
    props = {k: v for k, v in props.items() if k.startswith(SECURITY_PREFIXES)}
    return props or None


def connect(args: argparse.Namespace, props: dict[str, str] | None = None) -> KafkaClient:
    return KafkaClient(args.bootstrap_server, timeout=args.command_timeout_ms / 1000.0,
                       security=security_props(args, props))


class UsageError(ToolError):
    """Wrong combination of options (exit code 2)."""


def tool_main(command: str) -> Callable:
    """Decorator for ``run``: turn ToolError/UsageError/Ctrl-C into a message and exit code."""
    def deco(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(fn)
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return fn(args)
            except UsageError as e:
                print(f"josef {command}: error: {e}", file=sys.stderr)
                return EXIT_USAGE
            except ToolError as e:
                print(f"josef {command}: error: {e}", file=sys.stderr)
                return EXIT_ERROR
            except KeyboardInterrupt:
                return EXIT_INTERRUPTED
            except BrokenPipeError:
                return EXIT_OK
        return wrapper
    return deco




def format_table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by one space, as Kafka's tools print tables."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def delete_groups(router, groups: list[str], kind: str, label: str) -> int:
    """DeleteGroups at each group's coordinator (``client.admin.AdminRouter``); prints Kafka's
    lines ("Deletion of requested <kind> groups ('g') was successful." / "* <label> 'g'
    could not be deleted due to: E"); exit code 1 when one failed."""
    from client.connection import error_name
    failed = {}
    for group in groups:
        resp = router.coordinator(group, 42, {"groups_names": [group]},  # DeleteGroups
                                  errors=lambda r: [g.error_code for g in r.results])
        for r in resp.results:
            if r.error_code:
                failed[r.group_id] = error_name(r.error_code)
    ok = [g for g in groups if g not in failed]
    if ok:
        names = ", ".join(f"'{g}'" for g in ok)
        print(f"Deletion of requested {kind} groups ({names}) was successful.")
    if failed:
        print(f"Deletion of some {kind} groups failed:")
        for g, e in failed.items():
            print(f"* {label} '{g}' could not be deleted due to: {e}")
        return 1
    return 0


def topic_partition_specs(client, specs: list[str]) -> list[tuple[str, int]]:
    """``--topic t`` (every partition, from Metadata) or ``--topic t:0,2`` arguments as
    (topic, partition) pairs (the group tools' ``--reset-offsets`` targets)."""
    out = []
    for spec in specs:
        topic, _, parts = spec.partition(":")
        if parts:
            out += [(topic, int(p)) for p in parts.split(",") if p.strip()]
        else:
            out += sorted(tp for tp in partition_leaders(client, [topic]))
    return out


def split_pairs(text: str) -> list[tuple[str, str]]:
    """``k=v,k2=[a,b]`` -> pairs (square brackets group a list value, as kafka-configs)."""
    out = []
    for item in re.findall(r"[^,=]+=(?:\[[^\]]*\]|[^,]*)", text or ""):
        k, _, v = item.partition("=")
        v = v.strip()
        if v.startswith("[") and v.endswith("]"):
            v = v[1:-1]
        out.append((k.strip(), v))
    rest = re.sub(r"[^,=]+=(?:\[[^\]]*\]|[^,]*)", "", text or "").replace(",", "").strip()
    if rest:
        raise UsageError(f"cannot parse {text!r}: expected key=value[,key=value...]")
    return out


def topic_matcher(pattern: str | None) -> Callable[[str], bool]:
    """Kafka treats --topic as a regular expression matched against the whole name."""
    if pattern is None:
        return lambda name: True
    try:
        rx = re.compile(pattern)
    except re.error:
        return lambda name: name == pattern
    return lambda name: name == pattern or rx.fullmatch(name) is not None
