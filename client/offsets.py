"""Offsets for the tools: ListOffsets earliest (-2), latest (-1) or by timestamp, per
partition, sent to each partition's leader (Kafka's ``ListOffsets`` v1+ semantics, KIP-79);
OffsetCommit of a standalone consumer's positions to the group coordinator."""

from __future__ import annotations

from client.connection import KafkaClient, ToolError, error_name
from client.metadata import partition_leaders

LIST_OFFSETS = 2
OFFSET_COMMIT = 8
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


def commit_offsets(client: KafkaClient, node: int, group: str,
                   positions: dict[tuple[str, int], int]) -> None:
    """Commit ``positions`` ((topic, partition) -> offset) for ``group`` as a standalone
    consumer (OffsetCommit v0-v7: generation -1, member id "", empty metadata, retention -1
    in v2-v4) to ``node``, the group coordinator. ToolError naming the first partition that
    answered an error."""
    version = client.version_for(OFFSET_COMMIT, max_version=7)
    topics: dict[str, list] = {}
    for (t, p), off in sorted(positions.items()):
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_metadata": ""})
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    if 2 <= version <= 4:
        body["retention_time_ms"] = -1
    resp = client.request(OFFSET_COMMIT, body, version=version, node=node)
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"cannot commit {t.name}-{p.partition_index} for group "
                                f"{group}: {error_name(p.error_code)}")
