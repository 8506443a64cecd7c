"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Behaviour (Kafka's ``ZkAdminManager``; credentials live in ``/config/users/<user>`` as
``SCRAM-SHA-256=salt=...,stored_key=...,server_key=...,iterations=N``):

* Describe needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level).
  ``users`` null or empty: every user with a credential, sorted; otherwise each named user
  once: RESOURCE_NOT_FOUND "Attempt to describe a user credential that does not exist:
  <u>" for a user without credentials (or the empty name), DUPLICATE_RESOURCE for a user
  named twice. Results list each mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) with its
  iterations; salts and keys are never returned.
* Alter needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user.
  Per user: the empty name -> UNACCEPTABLE_CREDENTIAL "Username must not be empty"; an
  unknown mechanism -> UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism"; iterations
  outside 4096..16384 -> UNACCEPTABLE_CREDENTIAL "Too few/many iterations"; the same
  (user, mechanism) twice -> DUPLICATE_RESOURCE; deleting a credential that does not exist
  -> RESOURCE_NOT_FOUND. The stored credential is computed from the client's salted password
  (the client ran PBKDF2); the change is announced under ``/config/changes`` and applies
  to new authentications at once.

Version notes: v0 only (flexible).
"""

from __future__ import annotations

from collections import Counter

from broker.handlers.authz import AclOperation, authorize_cluster
from broker.handlers.registry import handles
from broker.security import znodes
from common.security.scram import BY_TYPE, credential_from_salted
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
DescribeResponse = api.API_KEYS[DESCRIBE_SCRAM].response_cls
AlterResponse = api.API_KEYS[ALTER_SCRAM].response_cls
DOES_NOT_EXIST = "Attempt to describe a user credential that does not exist"
EMPTY_USER = "Username must not be empty"
MAX_ITERATIONS = 16384


def describe_error(request, version: int, error: KafkaError):
    return DescribeResponse(error_code=int(error.code), error_message=error.message)


@handles(DESCRIBE_SCRAM, 0, 0, error_response=describe_error)
def handle_describe_user_scram_credentials(ctx, request):
    if not authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeResponse(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))
    users = ctx.broker.security.scram_users()
    Result = DescribeResponse.DescribeUserScramCredentialsResult

    def result(user: str):
        creds = users.get(user)
        if not creds:
            return Result(user=user, error_code=int(ErrorCode.RESOURCE_NOT_FOUND),
                          error_message=f"{DOES_NOT_EXIST}: {user}" if user else EMPTY_USER)
        infos = [DescribeResponse.CredentialInfo(mechanism=m.type_id, iterations=creds[m.name].iterations)
                 for m in sorted(BY_TYPE.values(), key=lambda m: m.type_id) if m.name in creds]
        return Result(user=user, credential_infos=infos)

    if not request.users:
        return DescribeResponse(results=[result(u) for u in sorted(users)])
    names = [u.name for u in request.users]
    counts = Counter(names)
    out = []
    for name in dict.fromkeys(names):
        if counts[name] > 1 and name:
            out.append(Result(user=name, error_code=int(ErrorCode.DUPLICATE_RESOURCE),
                              error_message="Cannot describe SCRAM credentials for the same "
                                            f"user twice in a single request: {name}"))
        else:
            out.append(result(name))
    return DescribeResponse(results=out)


def alter_error(request, version: int, error: KafkaError):
    names = dict.fromkeys([u.name for u in request.upsertions]
                          + [d.name for d in request.deletions])
    return AlterResponse(results=[AlterResponse.AlterUserScramCredentialsResult(
        user=n, error_code=int(error.code), error_message=error.message) for n in names])


@handles(ALTER_SCRAM, 0, 0, error_response=alter_error)
async def handle_alter_user_scram_credentials(ctx, request):
    Result = AlterResponse.AlterUserScramCredentialsResult
    if not authorize_cluster(ctx, AclOperation.ALTER):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    results: dict[str, Result] = {}

    def fail(user: str, code: ErrorCode, message: str) -> None:
        results.setdefault(user, Result(user=user, error_code=int(code), error_message=message))

    for d in request.deletions:
        if not d.name:
            fail(d.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER)
        elif d.mechanism not in BY_TYPE:
            fail(d.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    for u in request.upsertions:
        mech = BY_TYPE.get(u.mechanism)
        if not u.name:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, EMPTY_USER)
        elif mech is None:
            fail(u.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u.iterations < mech.min_iterations:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    pairs = Counter([(u.name, u.mechanism) for u in request.upsertions if u.name not in results]
                    + [(d.name, d.mechanism) for d in request.deletions
                       if d.name not in results])
    for (user, _), n in pairs.items():
        if n > 1:
            fail(user, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
    security = ctx.broker.security
    existing = security.scram_users()
    for d in request.deletions:
        if d.name not in results and BY_TYPE[d.mechanism].name not in existing.get(d.name, {}):
            fail(d.name, ErrorCode.RESOURCE_NOT_FOUND,
                 "Attempt to delete a user credential that does not exist")
    updates: dict[str, dict[str, str | None]] = {}
    for d in request.deletions:
        if d.name not in results:
            updates.setdefault(d.name, {})[BY_TYPE[d.mechanism].name] = None
    for u in request.upsertions:
        if u.name not in results:
            mech = BY_TYPE[u.mechanism]
            cred = credential_from_salted(mech, bytes(u.salted_password), bytes(u.salt),
                                          u.iterations)
            updates.setdefault(u.name, {})[mech.name] = cred.to_config()
    for user, changes in updates.items():
        try:
            await security.alter_entity(f"users/{znodes.sanitize(user)}", changes)
            results[user] = Result(user=user)
        except OSError as e:
            fail(user, ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    order = dict.fromkeys([u.name for u in request.upsertions]
                          + [d.name for d in request.deletions])
    return AlterResponse(results=[results[n] for n in order if n in results])
