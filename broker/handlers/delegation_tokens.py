"""CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40),
DescribeDelegationToken (41): KIP-48 (``broker.security.delegation_tokens``).

Behaviour (Kafka's ``KafkaApis`` token handlers, ZooKeeper mode):

* Token requests are refused with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED from a session that
  authenticated with a token, on PLAINTEXT listeners and from SSL clients without a
  certificate (ANONYMOUS); without ``delegation.token.secret.key`` every request answers
  DELEGATION_TOKEN_AUTH_DISABLED.
* Create: the owner is the requester unless ``owner_principal_name`` names another (v3),
  which needs CREATE_TOKENS on that USER (else DELEGATION_TOKEN_AUTHORIZATION_FAILED);
  renewers must be ``User`` principals (else INVALID_PRINCIPAL_TYPE). ``max_lifetime_ms``
  <= 0 takes ``delegation.token.max.lifetime.ms``.
* Renew / Expire: the token is found by its HMAC (DELEGATION_TOKEN_NOT_FOUND), the
  requester must be its owner or a renewer (DELEGATION_TOKEN_OWNER_MISMATCH), an expired
  token answers DELEGATION_TOKEN_EXPIRED; ``renew_period_ms`` < 0 = the default renew time,
  ``expiry_time_period_ms`` < 0 expires at once.
* Describe: ``owners`` empty -> nothing, null -> every token; a token is shown to its owner
  and renewers, and to principals with DESCRIBE on the DELEGATION_TOKEN or DESCRIBE_TOKENS
  on its owner USER.

Version notes: Create v0-v3 (v2+ flexible, v3 owner and requester fields), Renew/Expire
v0-v2 (v2 flexible), Describe v0-v3 (v3 token requester).
"""

from __future__ import annotations

from broker.handlers import authz
from broker.handlers.registry import error_code_response, handles
from broker.security.principal import ANONYMOUS, KafkaPrincipal
from protocol import api
from protocol.errors import ErrorCode, KafkaError

CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
CreateResponse = api.API_KEYS[CREATE].response_cls
RenewResponse = api.API_KEYS[RENEW].response_cls
ExpireResponse = api.API_KEYS[EXPIRE].response_cls
DescribeResponse = api.API_KEYS[DESCRIBE].response_cls


def _tokens(ctx):
    security = ctx.broker.security
    return security.tokens if security is not None else None


def _refusal(ctx) -> ErrorCode | None:
    """Kafka's ``allowTokenRequests`` and the feature switch."""
    principal = ctx.principal
    session = ctx.session
    protocol = session.security_protocol if session is not None else "PLAINTEXT"
    if principal.token_authenticated or protocol == "PLAINTEXT" or (
            protocol == "SSL" and principal == ANONYMOUS):
        return ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    tokens = _tokens(ctx)
    if tokens is None or not tokens.enabled:
        return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    return None


def create_error(request, version: int, error: KafkaError):
    return CreateResponse(error_code=int(error.code), principal_type="", principal_name="",
                          issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1,
                          token_id="", hmac=b"")


@handles(CREATE, 0, 3, error_response=create_error)
async def handle_create_delegation_token(ctx, request):
    requester = ctx.principal
    version = ctx.api_version
    if version >= 3 and request.owner_principal_name:
        owner = KafkaPrincipal(request.owner_principal_type or "User",
                               request.owner_principal_name)
    else:
        owner = KafkaPrincipal(requester.principal_type, requester.name)
    renewers = [KafkaPrincipal(r.principal_type, r.principal_name) for r in request.renewers]

    def fail(code: ErrorCode):
        return CreateResponse(error_code=int(code), principal_type=owner.principal_type,
                              principal_name=owner.name,
                              token_requester_principal_type=requester.principal_type,
                              token_requester_principal_name=requester.name,
                              issue_timestamp_ms=-1, expiry_timestamp_ms=-1,
                              max_timestamp_ms=-1, token_id="", hmac=b"")

    refusal = _refusal(ctx)
    if refusal is not None:
        return fail(refusal)
    if (owner.principal_type, owner.name) != (requester.principal_type, requester.name) and \
            not authz.authorize(ctx, authz.AclOperation.CREATE_TOKENS, authz.ResourceType.USER,
                                str(owner)):
        return fail(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    if any(r.principal_type != "User" for r in renewers):
        return fail(ErrorCode.INVALID_PRINCIPAL_TYPE)
    info = await _tokens(ctx).create(owner, KafkaPrincipal(requester.principal_type,
                                                           requester.name),
                                     renewers, request.max_lifetime_ms)
    return CreateResponse(
        error_code=0, principal_type=owner.principal_type, principal_name=owner.name,
        token_requester_principal_type=requester.principal_type,
        token_requester_principal_name=requester.name, issue_timestamp_ms=info.issue_ms,
        expiry_timestamp_ms=info.expiry_ms, max_timestamp_ms=info.max_ms,
        token_id=info.token_id, hmac=info.hmac)


async def _change_expiry(ctx, response_cls, change, hmac: bytes, period_ms: int):
    refusal = _refusal(ctx)
    if refusal is not None:
        return response_cls(error_code=int(refusal), expiry_timestamp_ms=-1)
    code, expiry = await change(ctx.principal, bytes(hmac), period_ms)
    return response_cls(error_code=int(code), expiry_timestamp_ms=expiry)


@handles(RENEW, 0, 2, error_response=error_code_response(RenewResponse,
                                                         expiry_timestamp_ms=-1))
async def handle_renew_delegation_token(ctx, request):
    return await _change_expiry(ctx, RenewResponse, _tokens(ctx).renew, request.hmac,
                                request.renew_period_ms)


@handles(EXPIRE, 0, 2, error_response=error_code_response(ExpireResponse,
                                                          expiry_timestamp_ms=-1))
async def handle_expire_delegation_token(ctx, request):
    return await _change_expiry(ctx, ExpireResponse, _tokens(ctx).expire, request.hmac,
                                request.expiry_time_period_ms)


@handles(DESCRIBE, 0, 3, error_response=error_code_response(DescribeResponse))
def handle_describe_delegation_token(ctx, request):
    refusal = _refusal(ctx)
    if refusal is not None:
        return DescribeResponse(error_code=int(refusal), tokens=[])
    if request.owners is not None and not request.owners:
        return DescribeResponse(tokens=[])
    owners = None if request.owners is None else [
        KafkaPrincipal(o.principal_type, o.principal_name) for o in request.owners]
    me = ctx.principal
    out = []
    for info in sorted(_tokens(ctx).tokens.values(), key=lambda t: t.issue_ms):
        if owners is not None and not any(info.owner_or_renewer(o) for o in owners):
            continue
        if not (info.owner_or_renewer(me) or authz.authorize(
                ctx, authz.AclOperation.DESCRIBE, authz.ResourceType.DELEGATION_TOKEN,
                info.token_id) or authz.authorize(ctx, authz.AclOperation.DESCRIBE_TOKENS,
                                                  authz.ResourceType.USER, str(info.owner))):
            continue
        out.append(DescribeResponse.DescribedDelegationToken(
            principal_type=info.owner.principal_type, principal_name=info.owner.name,
            token_requester_principal_type=info.requester.principal_type,
            token_requester_principal_name=info.requester.name,
            issue_timestamp=info.issue_ms, expiry_timestamp=info.expiry_ms,
            max_timestamp=info.max_ms, token_id=info.token_id, hmac=info.hmac,
            renewers=[DescribeResponse.DescribedDelegationTokenRenewer(
                principal_type=r.principal_type, principal_name=r.name)
                for r in info.renewers]))
    return DescribeResponse(tokens=out)
