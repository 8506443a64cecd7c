"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77): KIP-932 share groups.

Behaviour (Kafka's ``GroupMetadataManager`` share paths; the state machine is
``coordinator.group.share_groups``):
- ShareGroupHeartbeat: join (epoch 0), heartbeat, leave (-1); answers the member id, member
  epoch, the heartbeat interval and the assignment (topic ids) when the member joined or
  its assignment changed. Errors (top level, with a message): INVALID_REQUEST,
  NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
  UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED, GROUP_ID_NOT_FOUND (the id
  belongs to another group type, or a heartbeat for a group that does not exist);
  GROUP_AUTHORIZATION_FAILED without READ on the group, TOPIC_AUTHORIZATION_FAILED when a
  subscribed topic may not be described; UNSUPPORTED_VERSION while the ``share.version``
  feature is 0 (share groups off).
- ShareGroupDescribe: per group its state (Empty/Stable), group epoch, assignment epoch,
  assignor ("simple") and members (epoch, client, rack, subscriptions, assignment with topic
  names). A group of another type or an unknown one answers GROUP_ID_NOT_FOUND ("Group g is
  not a share group." / "Group g not found."), an empty id INVALID_GROUP_ID, plus the
  coordinator errors; GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group.
  ``authorized_operations`` (when asked): what the principal may do on the group.

Version notes: both v1 only, as Kafka 4.1+ (v0 was KIP-932's early access in Kafka 4.0 and is
not served); flexible.
"""

from __future__ import annotations

import functools

from broker.handlers import authz
from broker.handlers.consumer_groups import (
    describe_error_response_of,
    described_group,
    heartbeat_response,
    topic_assignment,
)
from broker.handlers.features import finalized_level
from broker.handlers.group_admin import AUTHORIZED_OPERATIONS_OMITTED
from broker.handlers.groups import client_host, group_coordinator
from broker.handlers.registry import handles
from protocol import api
from protocol.errors import ErrorCode, KafkaError

HEARTBEAT, DESCRIBE = 76, 77
HeartbeatResponse = api.API_KEYS[HEARTBEAT].response_cls
DescribeResponse = api.API_KEYS[DESCRIBE].response_cls
ASSIGNOR_NAME = "simple"


def share_groups_enabled(ctx) -> bool:
    """``share.version`` >= 1 (a new cluster starts at 1)."""
    return finalized_level(ctx.broker, "share.version") >= 1


def require_share_groups(ctx) -> None:
    if not share_groups_enabled(ctx):
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                         "Share groups are disabled (share.version is 0).")


def heartbeat_error_response(request, version: int, error: KafkaError):
    return HeartbeatResponse(error_code=int(error.code), error_message=error.message)


@handles(HEARTBEAT, 1, 1, error_response=heartbeat_error_response)
async def handle_share_group_heartbeat(ctx, request):
    require_share_groups(ctx)
    denied = authz.heartbeat_error(ctx, request.group_id, request.subscribed_topic_names)
    if denied is not None:
        return HeartbeatResponse(error_code=int(denied))
    share = group_coordinator(ctx).share
    if share is None:
        return HeartbeatResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    r = await share.heartbeat(request.group_id, request.member_id or "", request.member_epoch,
                              request.rack_id, request.subscribed_topic_names,
                              ctx.client_id or "", client_host(ctx))
    return heartbeat_response(HeartbeatResponse, r)


_described = functools.partial(described_group, DescribeResponse)
_assignment = functools.partial(topic_assignment, DescribeResponse)
describe_error_response = describe_error_response_of(DescribeResponse)


@handles(DESCRIBE, 1, 1, error_response=describe_error_response)
def handle_share_group_describe(ctx, request):
    require_share_groups(ctx)
    share = group_coordinator(ctx).share
    out = []
    for group_id in request.group_ids:
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP,
                               group_id or ""):
            out.append(_described(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if not group_id:
            out.append(_described(group_id, ErrorCode.INVALID_GROUP_ID))
            continue
        if share is None:
            out.append(_described(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        ops = authz.authorized_operations(ctx, authz.ResourceType.GROUP, group_id) \
            if request.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        error, message, group = share.describe(group_id)
        if error != ErrorCode.NONE:
            out.append(_described(group_id, error, message))
            continue
        members = [DescribeResponse.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=_assignment(m.assigned, share.topics))
            for m in group.members.values()]
        out.append(DescribeResponse.DescribedGroup(
            error_code=0, group_id=group_id, group_state=str(group.state),
            group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
            assignor_name=ASSIGNOR_NAME, members=members, authorized_operations=ops))
    return DescribeResponse(groups=out)
