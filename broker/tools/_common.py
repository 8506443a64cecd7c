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
import time
from collections.abc import Callable

from broker.tools._client import KafkaClient, ToolError, error_name

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def add_bootstrap(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                        help="the broker(s) to connect to")
    parser.add_argument("--command-timeout-ms", type=int, default=30000, metavar="MS",
                        help="socket timeout of each request (default 30000)")


def connect(args: argparse.Namespace) -> KafkaClient:
    return KafkaClient(args.bootstrap_server, timeout=args.command_timeout_ms / 1000.0)


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


def check_error(code: int, message: str | None, what: str) -> None:
    if code:
        raise ToolError(f"{what}: {error_name(code)}" + (f" ({message})" if message else ""))


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


def partition_leaders(client: KafkaClient, topics: list[str],
                      auto_create: bool = False) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader id for existing topics; ToolError for unknown ones.
    With ``auto_create`` the broker may create missing topics (when its
    ``auto.create.topics.enable`` allows); LEADER_NOT_AVAILABLE (5), its first answer for a
    topic being created, is retried for up to ``client.timeout`` seconds."""
    deadline = time.monotonic() + client.timeout
    while True:
        md = client.metadata(topics, auto_create=auto_create)
        if not any(t.error_code == 5 for t in md.topics) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    out = {}
    for t in md.topics:
        if t.error_code:
            check_error(t.error_code, None, f"topic {t.name}")
        for p in t.partitions:
            out[(t.name, p.partition_index)] = p.leader_id
    return out
