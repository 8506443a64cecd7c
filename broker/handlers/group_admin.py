"""DescribeGroups (15), ListGroups (16), DeleteGroups (42): classic groups for admin tools.

Behaviour (Kafka's ``KafkaApis`` + ``GroupCoordinator``):
- DescribeGroups: per group, from ``ctx.broker.group_coordinator``: NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE per group; an unknown group is
  described with error NONE and state "Dead", and so is a KIP-848 consumer group (as Kafka
  3.9: DescribeGroups describes classic groups; ConsumerGroupDescribe the others). A Stable group shows its protocol and, per
  member, the metadata for that protocol and the assignment; other states show protocol ""
  and members without metadata/assignment. v3+ ``include_authorized_operations``: the bit
  field of what the principal may do on the group (every group operation without an
  authorizer); else -2147483648. A group the principal may not DESCRIBE answers
  GROUP_AUTHORIZATION_FAILED. v6+ (KIP-1043): an unknown group, or one that is not a classic
  group, answers GROUP_ID_NOT_FOUND with an error message instead of the "Dead" group.
- ListGroups: the groups this broker coordinates, classic, KIP-848 consumer and KIP-932
  share groups (protocol type and group type "share", state Empty or Stable)
  (COORDINATOR_LOAD_IN_PROGRESS while a partition loads, listing what is loaded); v4
  ``states_filter`` (case-insensitive; consumer groups have Empty/Assigning/Reconciling/
  Stable), v5 ``types_filter`` ("classic" / "consumer" / "share", KIP-1043) and ``group_type``.
  Without DESCRIBE on the cluster only the groups the principal may DESCRIBE are listed.
- DeleteGroups: per group NONE (Empty groups: offsets and the group get tombstones; an
  Empty share group's state in ``__share_group_state`` is deleted first),
  NON_EMPTY_GROUP (68), GROUP_ID_NOT_FOUND (69), the coordinator error, or
  GROUP_AUTHORIZATION_FAILED without DELETE on the group.

Version notes: DescribeGroups v0-v6 (v5+ flexible; v3 authorized operations, v4 group
instance ids, v6 error_message and GROUP_ID_NOT_FOUND); ListGroups v0-v5 (v3+ flexible); DeleteGroups v0-v2 (v2+ flexible).
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.groups import group_coordinator
from broker.handlers.registry import handles
from coordinator.group.group import GroupState
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
DescribeGroupsResponse = api.API_KEYS[DESCRIBE_GROUPS].response_cls
ListGroupsResponse = api.API_KEYS[LIST_GROUPS].response_cls
DeleteGroupsResponse = api.API_KEYS[DELETE_GROUPS].response_cls
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
# AclOperation codes (KIP-430): READ 3, DELETE 6, DESCRIBE 8
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))
GROUP_TYPE_CLASSIC = "classic"
GROUP_TYPE_CONSUMER = "consumer"
GROUP_TYPE_SHARE = "share"


def _described(group_id: str, error, state: str = "", ops: int = AUTHORIZED_OPERATIONS_OMITTED,
               message: str | None = None):
    return DescribeGroupsResponse.DescribedGroup(
        error_code=int(error), group_id=group_id, group_state=state, protocol_type="",
        protocol_data="", members=[], authorized_operations=ops, error_message=message)


def describe_error_response(request, version: int, error: KafkaError):
    return DescribeGroupsResponse(groups=[_described(g, error.code) for g in request.groups])


@handles(DESCRIBE_GROUPS, 0, 6, error_response=describe_error_response)
def handle_describe_groups(ctx, request):
    coordinator = group_coordinator(ctx)
    want_ops = ctx.api_version >= 3 and request.include_authorized_operations
    out = []
    for group_id in request.groups:
        if not authz.authorize(ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP,
                               group_id):
            out.append(_described(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        ops = authz.authorized_operations(ctx, authz.ResourceType.GROUP, group_id) \
            if want_ops else AUTHORIZED_OPERATIONS_OMITTED
        error, group = coordinator.handle_describe_group(group_id)
        if error != ErrorCode.NONE:
            out.append(_described(group_id, error, "", ops))
            continue
        if group is None or group.is_state(GroupState.DEAD):
            if ctx.api_version >= 6:  # KIP-1043
                share = getattr(coordinator, "share", None)
                other = group_id in getattr(coordinator, "consumer_groups", {}) or (
                    share is not None and group_id in share.groups)
                message = f"Group {group_id} is not a classic group." if other \
                    else f"Group {group_id} not found."
                out.append(_described(group_id, ErrorCode.GROUP_ID_NOT_FOUND, "", ops, message))
            else:
                out.append(_described(group_id, ErrorCode.NONE, str(GroupState.DEAD), ops))
            continue
        stable = group.is_state(GroupState.STABLE)
        members = [DescribeGroupsResponse.DescribedGroupMember(
            member_id=m["member_id"], group_instance_id=m["group_instance_id"],
            client_id=m["client_id"], client_host=m["client_host"],
            member_metadata=m["metadata"], member_assignment=m["assignment"])
            for m in coordinator.describe_members(group)]
        out.append(DescribeGroupsResponse.DescribedGroup(
            error_code=0, group_id=group_id, group_state=str(group.state),
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members, authorized_operations=ops))
    return DescribeGroupsResponse(groups=out)


def list_error_response(request, version: int, error: KafkaError):
    return ListGroupsResponse(error_code=int(error.code), groups=[])


@handles(LIST_GROUPS, 0, 5, error_response=list_error_response)
def handle_list_groups(ctx, request):
    coordinator = group_coordinator(ctx)
    version = ctx.api_version
    states = list(request.states_filter or ()) if version >= 4 else []
    types = {t.lower() for t in (request.types_filter or ())} if version >= 5 else set()
    error, groups = coordinator.handle_list_groups(states)
    if authz.enabled(ctx) and not authz.authorize_cluster(ctx, authz.AclOperation.DESCRIBE,
                                                          log_if_denied=False):
        groups = [g for g in groups if authz.authorize(
            ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.GROUP, g.group_id,
            log_if_denied=False)]
    listed = [(g, _group_type(g)) for g in sorted(groups, key=lambda g: g.group_id)]
    return ListGroupsResponse(error_code=int(error), groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                                       group_state=str(g.state), group_type=kind)
        for g, kind in listed if not types or kind in types])


def _group_type(group) -> str:
    """KIP-1043 group type: "consumer" for KIP-848 groups, "share" for KIP-932 share groups,
    else "classic"."""
    if getattr(group, "is_share_group", False):
        return GROUP_TYPE_SHARE
    return GROUP_TYPE_CONSUMER if getattr(group, "is_consumer_group", False) \
        else GROUP_TYPE_CLASSIC


def delete_error_response(request, version: int, error: KafkaError):
    return DeleteGroupsResponse(results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(error.code))
        for g in request.groups_names])


@handles(DELETE_GROUPS, 0, 2, error_response=delete_error_response)
async def handle_delete_groups(ctx, request):
    coordinator = group_coordinator(ctx)
    names = list(request.groups_names)
    denied = authz.unauthorized(ctx, authz.AclOperation.DELETE, authz.ResourceType.GROUP, names)
    results = await coordinator.handle_delete_groups(
        [g for g in dict.fromkeys(names) if g not in denied])
    results.update({g: ErrorCode.GROUP_AUTHORIZATION_FAILED for g in denied})
    return DeleteGroupsResponse(results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(results[g]))
        for g in names])
