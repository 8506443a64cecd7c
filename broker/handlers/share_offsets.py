"""DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92).

Behaviour (Kafka 4.2's ``KafkaApis`` + ``GroupCoordinatorService``; the share-group side is
``coordinator.group.share_groups``, which reaches the share coordinator):
- Describe: per group (DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED) and per
  requested topic partition (topics null: every partition the group has share state for)
  the share-partition start offset and leader epoch from ReadShareGroupStateSummary;
  -1 when the partition has no state yet. Topics the principal may not DESCRIBE answer
  TOPIC_AUTHORIZATION_FAILED; an unknown topic UNKNOWN_TOPIC_OR_PARTITION. Group-level
  errors: GROUP_ID_NOT_FOUND, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE.
- Alter (READ on the group, READ on each topic): the group must be Empty (NON_EMPTY_GROUP);
  each partition's share state restarts at the given start offset with a new state epoch
  (InitializeShareGroupState), so a leader still holding the old state is fenced and
  reloads. Per partition: UNKNOWN_TOPIC_OR_PARTITION, the share coordinator's errors.
- Delete (DELETE on the group, READ on each topic): a topic a member still subscribes to
  answers GROUP_SUBSCRIBED_TO_TOPIC; otherwise its share state is deleted
  (DeleteShareGroupState) and the group forgets it.
All answer UNSUPPORTED_VERSION while ``share.version`` is 0.

Version notes: v0 only (flexible), as Kafka 4.2.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.groups import group_coordinator
from broker.handlers.registry import handles
from broker.handlers.share_groups import require_share_groups
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE, ALTER, DELETE = 90, 91, 92
DescribeResponse = api.API_KEYS[DESCRIBE].response_cls
AlterResponse = api.API_KEYS[ALTER].response_cls
DeleteResponse = api.API_KEYS[DELETE].response_cls
E = ErrorCode
ZERO = api.API_KEYS[DESCRIBE].response_cls.DescribeShareGroupOffsetsResponseTopic().topic_id


def _share(ctx):
    share = group_coordinator(ctx).share
    if share is None:
        raise KafkaError(E.COORDINATOR_NOT_AVAILABLE, "no share group coordinator")
    return share


def describe_error_response(request, version: int, error: KafkaError):
    return DescribeResponse(groups=[DescribeResponse.DescribeShareGroupOffsetsResponseGroup(
        group_id=g.group_id, topics=[], error_code=int(error.code), error_message=error.message)
        for g in request.groups])


def _described_group(group_id, error, message, topics=()):
    R = DescribeResponse
    return R.DescribeShareGroupOffsetsResponseGroup(
        group_id=group_id, error_code=int(error), error_message=message, topics=[
            R.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=tid or ZERO, partitions=[
                    R.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p, start_offset=start, leader_epoch=epoch,
                        error_code=int(code), error_message=msg)
                    for p, start, epoch, code, msg in parts])
            for name, tid, parts in topics])


@handles(DESCRIBE, 0, 0, error_response=describe_error_response)
async def handle_describe_share_group_offsets(ctx, request):
    require_share_groups(ctx)
    share = _share(ctx)
    out = []
    for g in request.groups:
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP,
                               g.group_id or ""):
            out.append(_described_group(g.group_id, E.GROUP_AUTHORIZATION_FAILED, None))
            continue
        wanted = None if g.topics is None else [(t.topic_name, list(t.partitions or ()))
                                                for t in g.topics]
        denied = set()
        if wanted is not None:
            denied = authz.unauthorized(ctx, authz.AclOperation.DESCRIBE,
                                        authz.ResourceType.TOPIC, [n for n, _ in wanted])
            wanted_ok = [(n, ps) for n, ps in wanted if n not in denied]
        else:
            wanted_ok = None
        error, message, topics = await share.describe_offsets(g.group_id, wanted_ok)
        if wanted is None:
            topics = [t for t in topics if authz.authorize(
                ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.TOPIC, t[0],
                log_if_denied=False)]
        for name, ps in (wanted or ()):
            if name in denied:
                topics.append((name, None, [(p, -1, -1, E.TOPIC_AUTHORIZATION_FAILED, None)
                                            for p in ps]))
        out.append(_described_group(g.group_id, error, message, topics))
    return DescribeResponse(groups=out)


def alter_error_response(request, version: int, error: KafkaError):
    return AlterResponse(error_code=int(error.code), error_message=error.message, responses=[])


@handles(ALTER, 0, 0, error_response=alter_error_response)
async def handle_alter_share_group_offsets(ctx, request):
    require_share_groups(ctx)
    if not authz.authorize(ctx, authz.AclOperation.READ, authz.ResourceType.GROUP,
                           request.group_id or ""):
        return AlterResponse(error_code=int(E.GROUP_AUTHORIZATION_FAILED), responses=[])
    topics = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
              for t in request.topics]
    denied = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC,
                                [n for n, _ in topics])
    error, message, results = await _share(ctx).alter_offsets(
        request.group_id, [t for t in topics if t[0] not in denied])
    results += [(n, None, [(p, E.TOPIC_AUTHORIZATION_FAILED, None) for p, _ in ps])
                for n, ps in topics if n in denied]
    R = AlterResponse
    return R(error_code=int(error), error_message=message, responses=[
        R.AlterShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid or ZERO, partitions=[
            R.AlterShareGroupOffsetsResponsePartition(partition_index=p, error_code=int(code),
                                                      error_message=msg)
            for p, code, msg in parts])
        for name, tid, parts in results])


def delete_error_response(request, version: int, error: KafkaError):
    return DeleteResponse(error_code=int(error.code), error_message=error.message, responses=[])


@handles(DELETE, 0, 0, error_response=delete_error_response)
async def handle_delete_share_group_offsets(ctx, request):
    require_share_groups(ctx)
    if not authz.authorize(ctx, authz.AclOperation.DELETE, authz.ResourceType.GROUP,
                           request.group_id or ""):
        return DeleteResponse(error_code=int(E.GROUP_AUTHORIZATION_FAILED), responses=[])
    names = [t.topic_name for t in request.topics]
    denied = authz.unauthorized(ctx, authz.AclOperation.READ, authz.ResourceType.TOPIC, names)
    error, message, results = await _share(ctx).delete_offsets(
        request.group_id, [n for n in names if n not in denied])
    results += [(n, None, E.TOPIC_AUTHORIZATION_FAILED, None) for n in names if n in denied]
    R = DeleteResponse
    return R(error_code=int(error), error_message=message, responses=[
        R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid or ZERO,
                                               error_code=int(code), error_message=msg)
        for name, tid, code, msg in results])
