"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): KIP-848 consumer groups.

Behaviour (Kafka's ``GroupMetadataManager``; the state machine is
``coordinator.group.consumer_coordinator``):
- ConsumerGroupHeartbeat: join (epoch 0), heartbeat, leave (-1) or static leave (-2);
  answers the member id, member epoch, ``group.consumer.heartbeat.interval.ms`` and the
  assignment (topic ids) when it changed or the request was a full one. Errors (top level,
  with a message): INVALID_REQUEST, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, FENCED_INSTANCE_ID,
  UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED, GROUP_ID_NOT_FOUND
  (the id belongs to a classic group that cannot be upgraded), INVALID_REGULAR_EXPRESSION
  (v1), UNSUPPORTED_VERSION when ``group.coordinator.rebalance.protocols`` lacks
  ``consumer`` or the finalized ``group.version`` is below 1 (KIP-848; both APIs, before
  any other check, as Kafka's ``isConsumerGroupProtocolEnabled``); GROUP_AUTHORIZATION_FAILED without READ on the group, TOPIC_AUTHORIZATION_FAILED
  when a subscribed topic name may not be described (Kafka's checks).
- ConsumerGroupDescribe: per group its state, group epoch, assignment epoch, assignor
  and members (epoch, client, subscriptions, current and target assignment with topic
  names). A classic or unknown group answers GROUP_ID_NOT_FOUND ("Group g is not a consumer
  group." / "Group g not found."), an empty id INVALID_GROUP_ID, plus the coordinator
  errors; GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group.
  ``authorized_operations`` (when asked): what the principal may do on the group.

Version notes: ConsumerGroupHeartbeat v0-v1 (v1 adds ``subscribed_topic_regex``, and the
member id comes from the client, KIP-1082); ConsumerGroupDescribe v0-v1 (v1: each member's
``member_type``, 0 classic / 1 consumer, KIP-1099). Both flexible.
"""

from __future__ import annotations

import functools

from broker.handlers import authz
from broker.handlers.group_admin import AUTHORIZED_OPERATIONS_OMITTED
from broker.handlers.groups import client_host, group_coordinator
from broker.handlers.registry import handles
from protocol import api
from protocol.errors import ErrorCode, KafkaError

HEARTBEAT, DESCRIBE = 68, 69
HeartbeatResponse = api.API_KEYS[HEARTBEAT].response_cls
DescribeResponse = api.API_KEYS[DESCRIBE].response_cls
MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1  # ConsumerGroupDescribe v1 (KIP-1099)


def heartbeat_error_response(request, version: int, error: KafkaError):
    return HeartbeatResponse(error_code=int(error.code), error_message=error.message)


def _protocol_disabled() -> KafkaError:
    return KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                      "The consumer group protocol is disabled: the finalized group.version "
                      "is below 1 (KIP-848).")


def _protocol_enabled(ctx) -> bool:
    from broker.handlers.features import finalized_level

    return finalized_level(ctx.broker, "group.version") >= 1


@handles(HEARTBEAT, 0, 1, error_response=heartbeat_error_response)
async def handle_consumer_group_heartbeat(ctx, request):
    if not _protocol_enabled(ctx):
        raise _protocol_disabled()
    denied = authz.heartbeat_error(ctx, request.group_id, request.subscribed_topic_names)
    if denied is not None:
        return HeartbeatResponse(error_code=int(denied))
    coordinator = group_coordinator(ctx)
    consumer = coordinator.consumer
    if consumer is None:
        return HeartbeatResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    owned = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            if tp.partitions:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(
                    tp.partitions)
    regex = request.subscribed_topic_regex if ctx.api_version >= 1 else None
    r = await consumer.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.instance_id,
        request.rack_id, request.rebalance_timeout_ms, request.subscribed_topic_names, regex,
        request.server_assignor, owned, ctx.client_id or "", client_host(ctx), ctx.api_version)
    return heartbeat_response(HeartbeatResponse, r)


def heartbeat_response(cls, r):
    """A Consumer/ShareGroupHeartbeat response (``cls``) from a coordinator's
    ``HeartbeatResult``: the error with its message, or the member id, epoch, heartbeat
    interval and (when it changed) the assignment by topic id."""
    if r.error != ErrorCode.NONE:
        return cls(error_code=int(r.error), error_message=r.message, member_id=None,
                   member_epoch=0, heartbeat_interval_ms=0)
    assignment = None
    if r.assignment is not None:
        assignment = cls.Assignment(topic_partitions=[
            cls.TopicPartitions(topic_id=t, partitions=sorted(ps))
            for t, ps in sorted(r.assignment.items(), key=lambda kv: str(kv[0])) if ps])
    return cls(error_code=0, member_id=r.member_id, member_epoch=r.member_epoch,
               heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment)


def described_group(cls, group_id: str, error, message=None):
    """A ``DescribedGroup`` of ``cls`` (ConsumerGroupDescribe or ShareGroupDescribe response)
    that carries only an error."""
    return cls.DescribedGroup(error_code=int(error), error_message=message, group_id=group_id,
                              group_state="", group_epoch=-1, assignment_epoch=-1,
                              assignor_name="", members=[])


def describe_error_response_of(cls):
    """The ``error_response`` of a describe handler answering with ``cls``: every requested
    group gets the error."""
    def error_response(request, version: int, error: KafkaError):
        return cls(groups=[described_group(cls, g, error.code, error.message)
                           for g in request.group_ids])
    return error_response


def topic_assignment(cls, a: dict, topics):
    """``{topic_id: partitions}`` as ``cls.Assignment`` (topic names from ``topics``; empty
    partition sets left out; ordered by topic id)."""
    return cls.Assignment(topic_partitions=[
        cls.TopicPartitions(topic_id=t, topic_name=topics.name_of(t) or "",
                            partitions=sorted(ps))
        for t, ps in sorted(a.items(), key=lambda kv: str(kv[0])) if ps])


_described = functools.partial(described_group, DescribeResponse)
_assignment = functools.partial(topic_assignment, DescribeResponse)
describe_error_response = describe_error_response_of(DescribeResponse)


@handles(DESCRIBE, 0, 1, error_response=describe_error_response)
def handle_consumer_group_describe(ctx, request):
    if not _protocol_enabled(ctx):
        raise _protocol_disabled()
    coordinator = group_coordinator(ctx)
    consumer = coordinator.consumer
    out = []
    for group_id in request.group_ids:
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP,
                               group_id or ""):
            out.append(_described(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        ops = authz.authorized_operations(ctx, authz.ResourceType.GROUP, group_id) \
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        if not group_id:
            out.append(_described(group_id, ErrorCode.INVALID_GROUP_ID))
            continue
        if consumer is None:
            out.append(_described(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        error, message, group = consumer.describe(group_id)
        if error != ErrorCode.NONE:
            out.append(_described(group_id, error, message))
            continue
        topics = consumer.topics
        members = [DescribeResponse.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_assignment(m.assigned, topics),
            target_assignment=_assignment(group.target.get(m.member_id, {}), topics),
            member_type=MEMBER_TYPE_CLASSIC if m.classic is not None else MEMBER_TYPE_CONSUMER)
            for m in group.members.values()]
        out.append(DescribeResponse.DescribedGroup(
            error_code=0, group_id=group_id, group_state=str(group.state),
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=consumer.assignor_for(group).name, members=members,
            authorized_operations=ops))
    return DescribeResponse(groups=out)
