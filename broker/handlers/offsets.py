"""OffsetCommit (8), OffsetFetch (9), OffsetDelete (47): committed offsets of groups.

Behaviour (Kafka's ``KafkaApis`` + ``GroupCoordinator``; offsets are records in
``__consumer_offsets``, see ``coordinator.group.records``):
- OffsetCommit: a partition of a topic the broker does not know answers
  UNKNOWN_TOPIC_OR_PARTITION (3); the rest go to the coordinator: generation/member checks
  (ILLEGAL_GENERATION 22, UNKNOWN_MEMBER_ID 25, REBALANCE_IN_PROGRESS 27,
  FENCED_INSTANCE_ID 82), commits with generation -1 and no member for Empty groups (simple
  consumers; v0 always commits this way), metadata over ``offset.metadata.max.bytes`` ->
  OFFSET_METADATA_TOO_LARGE (12), an append too large -> INVALID_COMMIT_OFFSET_SIZE (28).
  Commit timestamp: now (v1: the partition's own timestamp when not -1). v2-v4
  ``retention_time_ms`` != -1 sets an explicit expire timestamp (now + retention).
- OffsetFetch: per partition the committed offset, leader epoch (v5+) and metadata, or -1 /
  -1 / "" when none; ``topics`` null (v2+) = every committed offset of the group. A group
  error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) is top-level in v2+ and in
  every partition in v0/v1. v7+ ``require_stable``: UNSTABLE_OFFSET_COMMIT (88) for a
  partition with a commit in flight. v8+ fetches several groups, each with its own error.
- OffsetDelete: top-level GROUP_ID_NOT_FOUND (69) / NON_EMPTY_GROUP (68) / coordinator
  errors; per partition GROUP_SUBSCRIBED_TO_TOPIC (86) when a member still subscribes to
  the topic, UNKNOWN_TOPIC_OR_PARTITION for unknown topics; tombstones are written.
- Authorization (Kafka's checks, with an authorizer): OffsetCommit needs READ on the group
  (else GROUP_AUTHORIZATION_FAILED everywhere) and READ on each topic; OffsetFetch DESCRIBE
  on the group (group error) and on each named topic (TOPIC_AUTHORIZATION_FAILED; a fetch
  of all offsets silently leaves such topics out); OffsetDelete DELETE on the group
  (top-level) and READ on each topic (TOPIC_AUTHORIZATION_FAILED).

Version notes: OffsetCommit v0-v10 (v8+ flexible; v1 generation, member id and
per-partition timestamp, v2-v4 retention time, v6 committed leader epoch, v7 group instance
id, v9 KIP-848 member epoch: a classic group reads it as the generation; v10 topic ids
instead of names, an id the broker does not know answers UNKNOWN_TOPIC_ID for its
partitions). OffsetFetch v0-v10 (v6+ flexible; v2 null topics + top-level error, v5 leader
epoch, v7 require_stable, v8 groups, v9 member id/epoch (checked for KIP-848 groups:
UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; unused by classic groups), v10 topic ids: an unknown
id answers UNKNOWN_TOPIC_ID, and a fetch of all offsets leaves out topics without an id, as
Kafka's KafkaApis does). OffsetCommit and OffsetFetch v10 are still marked unstable in
Kafka 4.2's specs; they are advertised as the specs define them. OffsetDelete v0.
"""

from __future__ import annotations

import time

from broker.handlers import authz
from broker.handlers.groups import deny_group, group_coordinator
from broker.handlers.registry import handles
from coordinator.group.group import OffsetAndMetadata
from protocol import api
from protocol.errors import ErrorCode, KafkaError
from protocol.types import ZERO_UUID

OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
OffsetCommitResponse = api.API_KEYS[OFFSET_COMMIT].response_cls
OffsetFetchResponse = api.API_KEYS[OFFSET_FETCH].response_cls
OffsetDeleteResponse = api.API_KEYS[OFFSET_DELETE].response_cls
E = ErrorCode
TOPIC_ID_VERSION = 10  # OffsetCommit and OffsetFetch name topics by id from v10 (KIP-848)


def _now_ms() -> int:
    return int(time.time() * 1000)


# ----- OffsetCommit ---------------------------------------------------------------------------

def _names_from_ids(cache, topics) -> None:
    """v10: each topic's name from its id ("" when the id is unknown)."""
    for t in topics:
        t.name = cache.topic_name(t.topic_id) or ""


def _commit_response(request, errors: dict[tuple[str, int], int]):
    return OffsetCommitResponse(topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id,
                                                       partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=int(errors.get((t.name, p.partition_index), E.NONE)))
            for p in t.partitions])
        for t in request.topics])


def commit_error_response(request, version: int, error: KafkaError):
    return _commit_response(request, {(t.name, p.partition_index): error.code
                                      for t in request.topics for p in t.partitions})


@handles(OFFSET_COMMIT, 0, 10, error_response=commit_error_response)
async def handle_offset_commit(ctx, request):
    deny_group(ctx, request.group_id)
    version = ctx.api_version
    cache = ctx.broker.metadata_cache
    if version >= TOPIC_ID_VERSION:
        _names_from_ids(cache, request.topics)
    denied = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC,
                                (t.name for t in request.topics))
    coordinator = group_coordinator(ctx)
    now = _now_ms()
    errors: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    expire = -1
    if 2 <= version <= 4 and request.retention_time_ms != -1:
        expire = now + request.retention_time_ms
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if version >= TOPIC_ID_VERSION and not t.name:
                errors[tp] = E.UNKNOWN_TOPIC_ID
                continue
            if t.name in denied:
                errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
                continue
            if not cache.contains_partition(t.name, p.partition_index):
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
                continue
            commit_ts = now
            if version == 1 and p.commit_timestamp != -1:
                commit_ts = p.commit_timestamp
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                metadata=p.committed_metadata if p.committed_metadata is not None else "",
                commit_timestamp=commit_ts, expire_timestamp=expire)
    if offsets:
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        results = await coordinator.handle_commit_offsets(
            request.group_id, member_id or "",
            request.group_instance_id if version >= 7 else None, generation, offsets)
        errors.update(results)
    return _commit_response(request, errors)


# ----- OffsetFetch ----------------------------------------------------------------------------

def _fetch_group(ctx, coordinator, group_id: str, topics, require_stable: bool):
    """-> (group error, [(topic, [(partition, offset, epoch, metadata, error)])])"""
    if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP,
                           group_id):
        error = E.GROUP_AUTHORIZATION_FAILED
        return error, [(t.name, [(p, -1, -1, "", error) for p in t.partition_indexes])
                       for t in topics or ()]
    denied = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC,
                                (t.name for t in topics or ()))
    wanted = None if topics is None else [(t.name, p) for t in topics
                                          for p in t.partition_indexes if t.name not in denied]
    error, found = coordinator.handle_fetch_offsets(group_id, wanted, require_stable)
    if topics is None and authz.enabled(ctx) and error == E.NONE:  # all offsets: filter
        hidden = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC,
                                    {tp[0] for tp in found}, log_if_denied=False)
        found = {tp: v for tp, v in found.items() if tp[0] not in hidden}
    if denied and error == E.NONE:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
        found = {**found, **{tp: (None, E.TOPIC_AUTHORIZATION_FAILED) for tp in wanted
                             if tp[0] in denied}}
    if error != E.NONE:
        return error, [(t.name, [(p, -1, -1, "", error) for p in t.partition_indexes])
                       for t in topics or ()]
    by_topic: dict[str, list] = {}
    order = wanted if wanted is not None else sorted(found)
    for tp in order:
        om, perr = found.get(tp, (None, E.NONE))
        row = (tp[1], -1, -1, "", perr) if om is None else \
            (tp[1], om.offset, om.leader_epoch, om.metadata, perr)
        by_topic.setdefault(tp[0], []).append(row)
    return E.NONE, list(by_topic.items())


def fetch_error_response(request, version: int, error: KafkaError):
    if version >= 8:
        return OffsetFetchResponse(groups=[OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=g.group_id, topics=[], error_code=int(error.code))
            for g in request.groups])
    return _fetch_response_v0_7(version, error.code, [
        (t.name, [(p, -1, -1, "", error.code) for p in t.partition_indexes])
        for t in request.topics or ()])


def _fetch_response_v0_7(version: int, error, topics):
    if version < 2 and error != E.NONE:  # v0/v1: no top-level error field
        topics = [(name, [(p, o, ep, m, error) for p, o, ep, m, _ in rows])
                  for name, rows in topics]
    return OffsetFetchResponse(error_code=int(error), topics=[
        OffsetFetchResponse.OffsetFetchResponseTopic(name=name, partitions=[
            OffsetFetchResponse.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=ep,
                metadata=m, error_code=int(e))
            for p, o, ep, m, e in rows])
        for name, rows in topics])


def _member_epoch_error(coordinator, g):
    """OffsetFetch v9 on a KIP-848 group: the member id and epoch, when given, must be
    current (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; Kafka's validateOffsetFetch)."""
    group = coordinator.consumer_groups.get(g.group_id)
    if group is None or coordinator.consumer is None:
        return E.NONE
    return coordinator.consumer.validate_offset_fetch(group, g.member_id, g.member_epoch)


def _fetch_group_by_ids(ctx, coordinator, g, require_stable: bool):
    """v10: `_fetch_group` with the topics named by id; -> (group error, [(topic id, rows)]).
    Unknown ids answer UNKNOWN_TOPIC_ID; topics without an id are left out."""
    cache = ctx.broker.metadata_cache
    unknown = []
    topics = g.topics
    if topics is not None:
        _names_from_ids(cache, topics)
        unknown = [t for t in topics if not t.name]
        topics = [t for t in topics if t.name]
    error, rows = _fetch_group(ctx, coordinator, g.group_id, topics, require_stable)
    ids = {t.name: t.topic_id for t in topics or ()}
    out = []
    for name, parts in rows:
        topic_id = ids.get(name) or cache.topic_id(name)
        if topic_id is not None:
            out.append((topic_id, parts))
    out += [(t.topic_id, [(p, -1, -1, "", E.UNKNOWN_TOPIC_ID) for p in t.partition_indexes])
            for t in unknown]
    return error, out


@handles(OFFSET_FETCH, 0, 10, error_response=fetch_error_response)
def handle_offset_fetch(ctx, request):
    coordinator = group_coordinator(ctx)
    version = ctx.api_version
    require_stable = bool(request.require_stable) if version >= 7 else False
    if version >= 8:
        by_id = version >= TOPIC_ID_VERSION
        groups = []
        for g in request.groups:
            error = _member_epoch_error(coordinator, g) if version >= 9 else E.NONE
            if error == E.NONE:
                error, topics = _fetch_group_by_ids(ctx, coordinator, g, require_stable) \
                    if by_id else _fetch_group(ctx, coordinator, g.group_id, g.topics,
                                               require_stable)
            groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=int(error), topics=[] if error else [
                    OffsetFetchResponse.OffsetFetchResponseTopics(
                        name="" if by_id else key, topic_id=key if by_id else ZERO_UUID,
                        partitions=[OffsetFetchResponse.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o, committed_leader_epoch=ep,
                            metadata=m, error_code=int(e))
                            for p, o, ep, m, e in rows])
                    for key, rows in topics]))
        return OffsetFetchResponse(groups=groups)
    topics = request.topics
    if topics is None and version < 2:
        topics = []
    error, rows = _fetch_group(ctx, coordinator, request.group_id, topics, require_stable)
    if error != E.NONE and version >= 2:
        rows = []
    return _fetch_response_v0_7(version, error, rows)


# ----- OffsetDelete ---------------------------------------------------------------------------

def _delete_response(request, error, errors: dict[tuple[str, int], int]):
    return OffsetDeleteResponse(error_code=int(error), topics=[] if error else [
        OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=[
            OffsetDeleteResponse.OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=int(errors.get((t.name, p.partition_index), E.NONE)))
            for p in t.partitions])
        for t in request.topics])


def delete_error_response(request, version: int, error: KafkaError):
    return _delete_response(request, error.code, {})


@handles(OFFSET_DELETE, 0, 0, error_response=delete_error_response)
async def handle_offset_delete(ctx, request):
    deny_group(ctx, request.group_id, authz.AclOperation.DELETE)
    denied = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC,
                                (t.name for t in request.topics))
    coordinator = group_coordinator(ctx)
    cache = ctx.broker.metadata_cache
    errors: dict[tuple[str, int], int] = {}
    wanted = []
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in denied:
                errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
            elif cache.contains_partition(*tp):
                wanted.append(tp)
            else:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
    error, results = await coordinator.handle_delete_offsets(request.group_id, wanted)
    errors.update(results)
    return _delete_response(request, error, errors)
