"""ListOffsets for the tools: earliest (-2), latest (-1) or by timestamp, per partition,
sent to each partition's leader (Kafka's ``ListOffsets`` v1+ semantics, KIP-79)."""

from __future__ import annotations

from broker.tools._client import KafkaClient, ToolError, error_name
from broker.tools._common import partition_leaders

LIST_OFFSETS = 2
LATEST, EARLIEST = -1, -2


def list_offsets(client: KafkaClient, tps: list[tuple[str, int]], timestamp: int,
                 leaders: dict[tuple[str, int], int] | None = None
                 ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset (-1 when no record has a timestamp >= ``timestamp``).
    ToolError when a partition answers an error or has no leader."""
    if leaders is None:
        leaders = partition_leaders(client, sorted({t for t, _ in tps}))
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp in tps:
        leader = leaders.get(tp)
        if leader is None:
            raise ToolError(f"unknown partition {tp[0]}-{tp[1]}")
        if leader < 0:
            raise ToolError(f"partition {tp[0]}-{tp[1]} has no leader")
        by_leader.setdefault(leader, []).append(tp)
    out = {}
    version = client.version_for(LIST_OFFSETS, max_version=7)
    if version < 1:
        raise ToolError("the broker's ListOffsets is too old (v0 only)")
    for leader, group in by_leader.items():
        topics: dict[str, list] = {}
        for t, p in group:
            topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp})
        resp = client.request(LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            version=version, node=leader)
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    raise ToolError(f"ListOffsets {t.name}-{p.partition_index}: "
                                    f"{error_name(p.error_code)}")
                out[(t.name, p.partition_index)] = p.offset
    return out
