"""Consumer-group helpers on :class:`client.connection.KafkaClient` (Kafka's admin-client
calls for groups), routed by :class:`client.admin.AdminRouter` (to the coordinator, found
again when it moves): the coordinator of a group (FindCoordinator), its committed offsets
(OffsetFetch v2+), its description (DescribeGroups), every group (ListGroups on every
broker) and the ConsumerProtocol assignment of a member. Errors are
:class:`~client.connection.ToolError` naming the group."""

from __future__ import annotations

import struct

from client.admin import AdminRouter
from client.connection import ToolError
from client.metadata import check_error

__all__ = ["committed_offsets", "describe_group", "find_coordinator", "list_groups",
           "parse_assignment"]

OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 9, 10, 15, 16


def find_coordinator(client, group: str) -> int:
    """The coordinator of ``group`` (retried while it is not available yet)."""
    return AdminRouter(client).find_coordinator(group)


def committed_offsets(client, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch v2-v7 on its coordinator, resent when the
    coordinator moves or is loading)."""
    version = client.version_for(OFFSET_FETCH, max_version=7)
    if version < 2:
        raise ToolError("the broker's OffsetFetch is too old (needs v2+)")
    resp = AdminRouter(client).coordinator(
        group, OFFSET_FETCH, {"group_id": group, "topics": None}, version=version,
        errors=lambda r: [r.error_code] + [p.error_code for t in r.topics
                                           for p in t.partitions])
    check_error(resp.error_code, None, f"cannot fetch offsets of group {group}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code == 0 and p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def parse_assignment(data) -> list[tuple[str, int]]:
    """ConsumerProtocol assignment bytes -> (topic, partition) pairs ([] if unreadable)."""
    if not data:
        return []
    buf = bytes(data)
    try:
        pos = 2  # version
        (n,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        out = []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", buf, pos)
            pos += 2
            topic = buf[pos:pos + ln].decode("utf-8")
            pos += ln
            (m,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            for _ in range(max(m, 0)):
                (p,) = struct.unpack_from(">i", buf, pos)
                pos += 4
                out.append((topic, p))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def describe_group(client, group: str):
    """DescribeGroups of ``group`` on its coordinator (a group that does not exist is
    described with state "Dead")."""
    resp = AdminRouter(client).coordinator(group, DESCRIBE_GROUPS, {"groups": [group]},
                                           errors=lambda r: [g.error_code for g in r.groups])
    (g,) = resp.groups
    check_error(g.error_code, None, f"cannot describe group {group}")
    return g


def list_groups(client) -> list[tuple[str, str, int]]:
    """(group id, protocol type, coordinator id) of every group, from ListGroups on every
    broker (each lists the groups it coordinates); brokers that fail are skipped."""
    out = []
    for node, resp in AdminRouter(client).each_broker(LIST_GROUPS, {}).items():
        if isinstance(resp, ToolError) or resp.error_code:
            continue
        out.extend((g.group_id, g.protocol_type, node) for g in resp.groups)
    return sorted(out)
