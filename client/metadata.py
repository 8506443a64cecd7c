"""Metadata helpers shared by every program built on :mod:`client.connection`: partition
leaders of topics (Metadata v1+, retrying LEADER_NOT_AVAILABLE while a topic is created) and
turning a Kafka error code into a :class:`~client.connection.ToolError`."""

from __future__ import annotations

import time

from client.connection import KafkaClient, ToolError, error_name


def check_error(code: int, message: str | None, what: str) -> None:
    if code:
        raise ToolError(f"{what}: {error_name(code)}" + (f" ({message})" if message else ""))


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
