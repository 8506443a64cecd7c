"""Authorization helpers every handler uses (Kafka's ``AuthHelper``).

With no authorizer configured (``authorizer.class.name`` empty) everything is allowed, as in
Kafka. Otherwise each call asks ``ctx.broker.security.authorizer`` (``broker.security
.authorizer.AclAuthorizer``) for the request's principal and client host; denials (and, at
DEBUG, allowed operations) go to the authorizer log as Kafka writes them.

* ``authorize(ctx, op, resource_type, name)`` -> bool (``log_if_denied=False`` for checks
  whose denial is not an error, e.g. CREATE on the cluster before trying the topic);
* ``filter_authorized(ctx, op, resource_type, names)`` -> the allowed subset (one log line
  per denied name);
* ``authorize_by_resource_type(ctx, op, resource_type)`` -> True if any resource of that
  type may be accessed (KIP-679's IDEMPOTENT_WRITE fallback);
* ``authorized_operations(ctx, resource_type, name)`` -> the int32 bit field of the
  ``*_authorized_operations`` response fields (bit n = operation code n allowed).
"""

from __future__ import annotations

from collections.abc import Iterable

from common.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
)
from protocol.errors import ErrorCode, KafkaError

__all__ = ["CLUSTER_NAME", "AclOperation", "ResourceType", "authorize", "authorize_cluster",
           "authorize_by_resource_type", "authorized_operations", "enabled", "require_cluster",
           "filter_authorized", "unauthorized", "heartbeat_error"]


def _authorizer(ctx):
    security = getattr(ctx.broker, "security", None)
    return security.authorizer if security is not None else None


def authorize(ctx, operation: AclOperation, resource_type: ResourceType, name: str, *,
              log_if_denied: bool = True, log_if_allowed: bool = True) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize(ctx, operation, resource_type, name,
                                log_if_denied=log_if_denied, log_if_allowed=log_if_allowed)


def authorize_cluster(ctx, operation: AclOperation, *, log_if_denied: bool = True) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME,
                     log_if_denied=log_if_denied)


def require_cluster(ctx, operation: AclOperation) -> None:
    """Kafka's ``authorizeClusterOperation``: KafkaError CLUSTER_AUTHORIZATION_FAILED (the
    handler's error response) unless ``operation`` on the cluster is allowed."""
    if not authorize_cluster(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)


def filter_authorized(ctx, operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str], *, log_if_denied: bool = True) -> set[str]:
    names = set(names)
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return names
    return {n for n in names
            if authorizer.authorize(ctx, operation, resource_type, n,
                                    log_if_denied=log_if_denied)}


def enabled(ctx) -> bool:
    """True when an authorizer is configured (handlers may skip all checks otherwise)."""
    return _authorizer(ctx) is not None


def unauthorized(ctx, operation: AclOperation, resource_type: ResourceType,
                 names: Iterable[str], *, log_if_denied: bool = True) -> set[str]:
    """The names in ``names`` the principal may NOT access (empty without an authorizer)."""
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return set()
    return {n for n in set(names)
            if not authorizer.authorize(ctx, operation, resource_type, n,
                                        log_if_denied=log_if_denied)}


def heartbeat_error(ctx, group_id: str | None, topics) -> ErrorCode | None:
    """What a KIP-848 / KIP-932 group heartbeat answers before it reaches the coordinator:
    GROUP_AUTHORIZATION_FAILED without READ on the group, TOPIC_AUTHORIZATION_FAILED without
    DESCRIBE on a subscribed topic (Kafka's KafkaApis for ConsumerGroupHeartbeat and
    ShareGroupHeartbeat); None when both hold."""
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id or ""):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if topics and unauthorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topics):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None


def authorize_by_resource_type(ctx, operation: AclOperation,
                               resource_type: ResourceType) -> bool:
    authorizer = _authorizer(ctx)
    if authorizer is None:
        return True
    return authorizer.authorize_by_resource_type(ctx, operation, resource_type)


def authorized_operations(ctx, resource_type: ResourceType, name: str) -> int:
    ops = SUPPORTED_OPERATIONS[resource_type]
    authorizer = _authorizer(ctx)
    bits = 0
    for op in ops:
        if authorizer is None or authorizer.authorize(ctx, op, resource_type, name,
                                                      log_if_denied=False,
                                                      log_if_allowed=False):
            bits |= 1 << int(op)
    return bits
