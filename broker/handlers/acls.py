"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

Behaviour (Kafka's ``AclApis`` with the ZooKeeper ``AclAuthorizer``):

* DescribeAcls needs DESCRIBE on the cluster, Create/DeleteAcls need ALTER on it; otherwise
  CLUSTER_AUTHORIZATION_FAILED (every result of the request).
* Without an authorizer (``authorizer.class.name`` empty): SECURITY_DISABLED ("No Authorizer
  is configured on the broker").
* Filters (describe/delete): resource type ANY, null name, pattern type ANY or MATCH
  (MATCH: what a literal name would match: itself, ``*``, its prefixes), null principal and
  host, operation ANY, permission ANY match everything; a filter with UNKNOWN elements
  (codes out of range included) -> INVALID_REQUEST.
* Creations: UNKNOWN/ANY elements, a pattern type other than LITERAL/PREFIXED, an empty
  name, a name with ``/``, a CLUSTER name other than ``kafka-cluster``, a principal not in
  ``Type:name`` form -> INVALID_REQUEST for that creation only.
* Results come back in request order; DescribeAcls groups entries by resource pattern.

Version notes: v0 has no pattern type (LITERAL); v1 adds pattern types (KIP-290); v2+
flexible; v3 adds the USER resource type (KIP-48 delegation tokens, describe only).
"""

from __future__ import annotations

from broker.handlers.authz import AclOperation, authorize_cluster
from broker.handlers.registry import handles
from broker.security.principal import parse_principal
from common.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DescribeAclsResponse = api.API_KEYS[DESCRIBE_ACLS].response_cls
CreateAclsResponse = api.API_KEYS[CREATE_ACLS].response_cls
DeleteAclsResponse = api.API_KEYS[DELETE_ACLS].response_cls
NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _authorizer(ctx, operation: AclOperation, no_authorizer: str):
    """The broker's authorizer once `operation` on the cluster is allowed (KafkaError
    CLUSTER_AUTHORIZATION_FAILED, or SECURITY_DISABLED with Kafka's `no_authorizer` text)."""
    if not authorize_cluster(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    security = ctx.broker.security
    authorizer = security.authorizer if security is not None else None
    if authorizer is None:
        raise KafkaError(ErrorCode.SECURITY_DISABLED, no_authorizer)
    return authorizer


def _enum(cls, value):
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def _filter(f, version: int) -> AclBindingFilter:
    """A request filter (DescribeAcls body or a DeleteAclsFilter); KafkaError
    INVALID_REQUEST for UNKNOWN elements."""
    flt = AclBindingFilter(
        _enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
        _enum(PatternType, f.pattern_type_filter) if version >= 1 else PatternType.LITERAL,
        f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
        _enum(AclPermissionType, f.permission_type))
    if PatternType.UNKNOWN in (flt.pattern_type,) or ResourceType.UNKNOWN is flt.resource_type \
            or AclOperation.UNKNOWN is flt.operation \
            or AclPermissionType.UNKNOWN is flt.permission_type:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "The filter contains UNKNOWN elements")
    return flt


def describe_error(request, version: int, error: KafkaError):
    return DescribeAclsResponse(error_code=int(error.code), error_message=error.message,
                                resources=[])


@handles(DESCRIBE_ACLS, 0, 3, error_response=describe_error)
def handle_describe_acls(ctx, request):
    authorizer = _authorizer(ctx, AclOperation.DESCRIBE, NO_AUTHORIZER)
    bindings = authorizer.acls(_filter(request, ctx.api_version))
    grouped: dict[ResourcePattern, list[AclEntry]] = {}
    for b in bindings:
        grouped.setdefault(b.pattern, []).append(b.entry)
    Resource = DescribeAclsResponse.DescribeAclsResource
    Acl = DescribeAclsResponse.AclDescription
    return DescribeAclsResponse(resources=[
        Resource(resource_type=int(p.resource_type), resource_name=p.name,
                 pattern_type=int(p.pattern_type),
                 acls=[Acl(principal=e.principal, host=e.host, operation=int(e.operation),
                           permission_type=int(e.permission_type)) for e in entries])
        for p, entries in grouped.items()])


def create_error(request, version: int, error: KafkaError):
    return CreateAclsResponse(results=[
        CreateAclsResponse.AclCreationResult(error_code=int(error.code),
                                             error_message=error.message)
        for _ in request.creations])


def _binding(c, version: int) -> AclBinding:
    """A creation as an AclBinding; ValueError with Kafka's message when invalid."""
    rtype = _enum(ResourceType, c.resource_type)
    ptype = _enum(PatternType, c.resource_pattern_type) if version >= 1 else PatternType.LITERAL
    op = _enum(AclOperation, c.operation)
    perm = _enum(AclPermissionType, c.permission_type)
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY) or op in (
            AclOperation.UNKNOWN, AclOperation.ANY) or perm in (
            AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        raise ValueError("ACL binding contains unknown elements")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"Invalid pattern type {ptype.name} for an ACL")
    name = c.resource_name or ""
    if rtype is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise ValueError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not name:
        raise ValueError("Invalid empty resource name")
    if "/" in name:
        raise ValueError(f"ACL binding contains invalid resource name: {name}")
    parse_principal(c.principal or "")
    return AclBinding(ResourcePattern(rtype, name, ptype),
                      AclEntry(c.principal, c.host or "", op, perm))


@handles(CREATE_ACLS, 0, 3, error_response=create_error)
async def handle_create_acls(ctx, request):
    authorizer = _authorizer(ctx, AclOperation.ALTER, "No Authorizer is configured.")
    Result = CreateAclsResponse.AclCreationResult
    results: list = [None] * len(request.creations)
    valid: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(request.creations):
        try:
            valid.append((i, _binding(c, ctx.api_version)))
        except ValueError as e:
            results[i] = Result(error_code=int(ErrorCode.INVALID_REQUEST),
                                error_message=f"Failed to create ACL: {e}")
    outcomes = await authorizer.create_acls([b for _, b in valid])
    for (i, _), err in zip(valid, outcomes, strict=True):
        results[i] = Result() if err is None else Result(
            error_code=int(getattr(err, "code", ErrorCode.UNKNOWN_SERVER_ERROR)),
            error_message=str(err))
    return CreateAclsResponse(results=results)


def delete_error(request, version: int, error: KafkaError):
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=int(error.code),
                                                  error_message=error.message)
        for _ in request.filters])


@handles(DELETE_ACLS, 0, 3, error_response=delete_error)
async def handle_delete_acls(ctx, request):
    authorizer = _authorizer(ctx, AclOperation.ALTER, "No Authorizer is configured.")
    FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
    Matching = DeleteAclsResponse.DeleteAclsMatchingAcl
    filters, bad = [], {}
    for i, f in enumerate(request.filters):
        try:
            filters.append((i, _filter(f, ctx.api_version)))
        except KafkaError as e:
            bad[i] = FilterResult(error_code=int(e.code), error_message=e.message)
    deleted = await authorizer.delete_acls([f for _, f in filters])
    out: list = [None] * len(request.filters)
    for i, r in bad.items():
        out[i] = r
    for (i, _), matches in zip(filters, deleted, strict=True):
        out[i] = FilterResult(matching_acls=[Matching(
            error_code=0 if err is None else int(ErrorCode.UNKNOWN_SERVER_ERROR),
            error_message=None if err is None else str(err),
            resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
            pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
            host=b.entry.host, operation=int(b.entry.operation),
            permission_type=int(b.entry.permission_type)) for b, err in matches])
    return DeleteAclsResponse(filter_results=out)
