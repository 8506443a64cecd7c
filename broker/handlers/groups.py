"""JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13): classic group membership.

Behaviour (Kafka's ``KafkaApis`` group handlers over ``coordinator.group``): the requests go
to ``ctx.broker.group_coordinator`` (COORDINATOR_NOT_AVAILABLE when the broker has none).
JoinGroup and SyncGroup park until the rebalance completes (the handler returns a future the
coordinator resolves); Heartbeat and LeaveGroup answer at once. An empty group id is
INVALID_GROUP_ID (24). With an authorizer each needs READ on the group, else
GROUP_AUTHORIZATION_FAILED (30). Errors and their meaning are listed on the coordinator methods:
``handle_join_group`` (MEMBER_ID_REQUIRED 79 with the generated id for v4+,
INVALID_SESSION_TIMEOUT 26, GROUP_MAX_SIZE_REACHED 81, FENCED_INSTANCE_ID 82, ...),
``handle_sync_group``, ``handle_heartbeat``, ``handle_leave_group``.

Version notes:
- JoinGroup v0-v9 (v6+ flexible): v1 rebalance timeout (v0 uses the session timeout), v4
  member id required (KIP-394), v5 group instance id (KIP-345), v7 protocol type in the
  response and a nullable protocol name, v8 reason, v9 skip_assignment (KIP-814: a static
  leader rejoining a Stable group keeps the assignment).
- SyncGroup v0-v5 (v4+ flexible): v3 group instance id, v5 protocol type/name checked
  (INCONSISTENT_GROUP_PROTOCOL 23) and returned.
- Heartbeat v0-v4 (v4+ flexible): v3 group instance id.
- LeaveGroup v0-v5 (v4+ flexible): v3 batches members (by member id or instance id) with an
  error per member; before v3 the single member's error is the top-level error. v5 reason.
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.request_channel import Deferred
from coordinator.group.group import JoinResult, SyncResult
from protocol import api
from protocol.errors import ErrorCode, KafkaError

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
JoinGroupResponse = api.API_KEYS[JOIN_GROUP].response_cls
HeartbeatResponse = api.API_KEYS[HEARTBEAT].response_cls
LeaveGroupResponse = api.API_KEYS[LEAVE_GROUP].response_cls
SyncGroupResponse = api.API_KEYS[SYNC_GROUP].response_cls


def group_coordinator(ctx):
    """The broker's GroupCoordinator, or KafkaError(COORDINATOR_NOT_AVAILABLE)."""
    coordinator = getattr(ctx.broker, "group_coordinator", None)
    if coordinator is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no group coordinator")
    return coordinator


def deny_group(ctx, group_id: str, operation=authz.AclOperation.READ) -> None:
    """GROUP_AUTHORIZATION_FAILED unless the principal may ``operation`` the group (Kafka:
    READ for JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit)."""
    if not authz.authorize(ctx, operation, authz.ResourceType.GROUP, group_id or ""):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, None)


def client_host(ctx) -> str:
    addr = ctx.client_address
    host = addr[0] if isinstance(addr, (tuple, list)) and addr else str(addr or "")
    return f"/{host}"


def _future_and_callback(convert):
    """A Deferred response and the coordinator callback that completes it: the response
    leaves inside the coordinator's callback (the SyncGroup leader's inside the append
    callback), as Kafka's coordinator answers, never a loop turn later."""
    fut = Deferred()

    def callback(result) -> None:
        if not fut.done():
            fut.set_result(convert(result))

    return fut, callback


def _settled(fut: Deferred):
    return fut.result() if fut.done() else fut


# ----- JoinGroup ------------------------------------------------------------------------------

def join_response(result: JoinResult, version: int):
    members = [JoinGroupResponse.JoinGroupResponseMember(
        member_id=mid, group_instance_id=iid, metadata=meta)
        for mid, iid, meta in (result.members or [])]
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return JoinGroupResponse(
        error_code=int(result.error), generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name,
        leader=result.leader_id or "", skip_assignment=bool(result.skip_assignment),
        member_id=result.member_id or "", members=members)


def join_error_response(request, version: int, error: KafkaError):
    return join_response(JoinResult(int(error.code), request.member_id or ""), version)


@handles(JOIN_GROUP, 0, 9, error_response=join_error_response)
def handle_join_group(ctx, request):
    deny_group(ctx, request.group_id)
    coordinator = group_coordinator(ctx)
    version = ctx.api_version
    fut, callback = _future_and_callback(lambda r: join_response(r, version))
    if not request.group_id:
        callback(JoinResult(int(ErrorCode.INVALID_GROUP_ID), request.member_id or ""))
        return _settled(fut)
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else \
        request.session_timeout_ms
    if rebalance_timeout < 0:
        rebalance_timeout = request.session_timeout_ms
    coordinator.handle_join_group(
        request.group_id, request.member_id or "",
        request.group_instance_id if version >= 5 else None, version >= 4,
        ctx.client_id or "", client_host(ctx), rebalance_timeout, request.session_timeout_ms,
        request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
        callback, support_skip_assignment=version >= 9)
    return _settled(fut)


# ----- SyncGroup ------------------------------------------------------------------------------

def sync_response(result: SyncResult):
    return SyncGroupResponse(error_code=int(result.error), protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name,
                             assignment=result.assignment or b"")


def sync_error_response(request, version: int, error: KafkaError):
    return sync_response(SyncResult(int(error.code)))


@handles(SYNC_GROUP, 0, 5, error_response=sync_error_response)
def handle_sync_group(ctx, request):
    deny_group(ctx, request.group_id)
    coordinator = group_coordinator(ctx)
    version = ctx.api_version
    fut, callback = _future_and_callback(sync_response)
    if not request.group_id:
        callback(SyncResult(int(ErrorCode.INVALID_GROUP_ID)))
        return _settled(fut)
    coordinator.handle_sync_group(
        request.group_id, request.generation_id, request.member_id,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        request.group_instance_id if version >= 3 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments}, callback)
    return _settled(fut)


# ----- Heartbeat ------------------------------------------------------------------------------

def heartbeat_error_response(request, version: int, error: KafkaError):
    return HeartbeatResponse(error_code=int(error.code))


@handles(HEARTBEAT, 0, 4, error_response=heartbeat_error_response)
def handle_heartbeat(ctx, request):
    deny_group(ctx, request.group_id)
    coordinator = group_coordinator(ctx)
    if not request.group_id:
        return HeartbeatResponse(error_code=int(ErrorCode.INVALID_GROUP_ID))
    error = coordinator.handle_heartbeat(
        request.group_id, request.member_id,
        request.group_instance_id if ctx.api_version >= 3 else None, request.generation_id)
    return HeartbeatResponse(error_code=int(error))


# ----- LeaveGroup -----------------------------------------------------------------------------

def _leaving(request, version: int) -> list[tuple[str, str | None]]:
    if version >= 3:
        return [(m.member_id or "", m.group_instance_id) for m in request.members]
    return [(request.member_id or "", None)]


def _leave_response(version: int, top: ErrorCode, leaving, errors):
    if version < 3:
        error = top if top != ErrorCode.NONE else (errors[0] if errors else ErrorCode.NONE)
        return LeaveGroupResponse(error_code=int(error))
    return LeaveGroupResponse(error_code=int(top), members=[
        LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid,
                                          error_code=int(e))
        for (mid, iid), e in zip(leaving, errors, strict=True)])


def leave_error_response(request, version: int, error: KafkaError):
    leaving = _leaving(request, version)
    return _leave_response(version, error.code, leaving, [error.code] * len(leaving))


@handles(LEAVE_GROUP, 0, 5, error_response=leave_error_response)
def handle_leave_group(ctx, request):
    coordinator = group_coordinator(ctx)
    version = ctx.api_version
    leaving = _leaving(request, version)
    if not authz.authorize(ctx, authz.AclOperation.READ, authz.ResourceType.GROUP,
                           request.group_id or ""):
        return _leave_response(version, ErrorCode.GROUP_AUTHORIZATION_FAILED, [], [])
    if not request.group_id:
        raise KafkaError(ErrorCode.INVALID_GROUP_ID, "empty group id")
    top, errors = coordinator.handle_leave_group(request.group_id, leaving)
    if version >= 3 and top != ErrorCode.NONE:
        return _leave_response(version, top, [], [])
    return _leave_response(version, top, leaving, errors)
