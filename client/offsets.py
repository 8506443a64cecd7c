"""Offsets for the tools: ListOffsets earliest (-2), latest (-1) or by timestamp, per
partition, sent to each partition's leader (Kafka's ``ListOffsets`` v1+ semantics, KIP-79);
OffsetCommit of a standalone consumer's positions to the group coordinator."""

from __future__ import annotations

from client.admin import AdminRouter
from client.connection import KafkaClient, ToolError, error_name

LIST_OFFSETS = 2
OFFSET_COMMIT = 8
LATEST, EARLIEST = -1, -2


def list_offsets(client: KafkaClient, tps: list[tuple[str, int]], timestamp: int,
                 leaders: dict[tuple[str, int], int] | None = None
                 ) -> dict[tuple[str, int], int]:
    """(topic, partition) -> offset (-1 when no record has a timestamp >= ``timestamp``),
    each asked of its leader and asked again of the new one after a leader change
    (``client.admin.AdminRouter.to_leaders``; ``leaders`` is not needed and only kept for
    callers that have it). ToolError when a partition answers another error or keeps no
    leader."""
    version = client.version_for(LIST_OFFSETS, max_version=7)
    if version < 1:
        raise ToolError("the broker's ListOffsets is too old (v0 only)")

    def build(group):
        topics: dict[str, list] = {}
        for t, p in group:
            topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp})
        return {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    def results(resp):
        for t in resp.topics:
            for p in t.partitions:
                yield (t.name, p.partition_index), p.error_code, p.offset

    out = {}
    for (t, p), (code, offset) in AdminRouter(client).to_leaders(
            LIST_OFFSETS, tps, build, results, version).items():
        if code:
            raise ToolError(f"ListOffsets {t}-{p}: {error_name(code)}")
        out[(t, p)] = offset
    return out


def commit_offsets(client: KafkaClient, group: str,
                   positions: dict[tuple[str, int], int]) -> None:
    """Commit ``positions`` ((topic, partition) -> offset) for ``group`` as a standalone
    consumer (OffsetCommit v0-v7: generation -1, member id "", empty metadata, retention -1
    in v2-v4) to the group coordinator (found again when it moves). ToolError naming the
    first partition that answered an error."""
    version = client.version_for(OFFSET_COMMIT, max_version=7)
    topics: dict[str, list] = {}
    for (t, p), off in sorted(positions.items()):
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                         "committed_metadata": ""})
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    if 2 <= version <= 4:
        body["retention_time_ms"] = -1
    resp = AdminRouter(client).coordinator(
        group, OFFSET_COMMIT, body, version=version,
        errors=lambda r: [p.error_code for t in r.topics for p in t.partitions])
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"cannot commit {t.name}-{p.partition_index} for group "
                                f"{group}: {error_name(p.error_code)}")
