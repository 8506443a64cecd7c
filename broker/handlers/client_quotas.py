"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546.

Behaviour (Kafka's ``ZkAdminManager``; quotas live in ``/config/users/...``,
``/config/clients/...`` and ``/config/ips/<ip>``, see ``broker.security.quotas``):

* Entity types ``user``, ``client-id`` (alone or together) and ``ip`` (alone); a null name
  is the default entity (``<default>``).
* Describe needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
  Filter components match an exact name (0), the default (1) or any entity of the type
  (2); ``strict`` limits results to entities with exactly the filtered types. An entity type
  twice -> INVALID_REQUEST; ``ip`` mixed with user/client-id -> INVALID_REQUEST. Values are
  the quota keys only (SCRAM credentials share the user's znode and are never shown).
* Alter needs ALTER_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED per entry).
  Per entry: keys ``producer_byte_rate``, ``consumer_byte_rate`` (whole numbers),
  ``request_percentage``, ``controller_mutation_rate`` for user/client-id entities,
  ``connection_creation_rate`` (a whole number) for ip entities; anything else, a
  non-positive value, a bad ip, an entity type twice -> INVALID_REQUEST for that entry.
  ``validate_only`` checks without writing. Changes are announced under ``/config/changes``
  and apply at once.

Version notes: both v0-v1 (v1 flexible).
"""

from __future__ import annotations

import ipaddress
from collections import Counter

from broker.handlers import authz
from broker.handlers.registry import handles
from broker.security import znodes
from broker.security.quotas import QUOTA_KEYS
from protocol import api
from protocol.errors import ErrorCode, KafkaError

DESCRIBE_QUOTAS, ALTER_QUOTAS = 48, 49
DescribeResponse = api.API_KEYS[DESCRIBE_QUOTAS].response_cls
AlterResponse = api.API_KEYS[ALTER_QUOTAS].response_cls
USER, CLIENT, IP = "user", "client-id", "ip"
IP_KEYS = ("connection_creation_rate",)
LONG_KEYS = ("producer_byte_rate", "consumer_byte_rate", "connection_creation_rate")
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
_TYPE_DIR = {USER: "users", CLIENT: "clients", IP: "ips"}
_DIR_TYPE = {v: k for k, v in _TYPE_DIR.items()}


def entity_path(entity: dict[str, str | None]) -> str:
    """{user, client-id, ip: name or None (default)} -> the znode entity path."""
    def name(t: str) -> str:
        n = entity[t]
        return znodes.DEFAULT_ENTITY if n is None else znodes.sanitize(n)

    if IP in entity:
        return f"ips/{name(IP)}"
    if USER in entity and CLIENT in entity:
        return f"users/{name(USER)}/clients/{name(CLIENT)}"
    if USER in entity:
        return f"users/{name(USER)}"
    return f"clients/{name(CLIENT)}"


def entity_of(path: str) -> dict[str, str | None]:
    parts = path.split("/")

    def name(n: str) -> str | None:
        return None if n == znodes.DEFAULT_ENTITY else znodes.desanitize(n)

    out = {_DIR_TYPE[parts[0]]: name(parts[1])}
    if len(parts) == 4 and parts[2] == "clients":
        out[CLIENT] = name(parts[3])
    return out


def describe_error(request, version: int, error: KafkaError):
    return DescribeResponse(error_code=int(error.code), error_message=error.message,
                            entries=None)


@handles(DESCRIBE_QUOTAS, 0, 1, error_response=describe_error)
def handle_describe_client_quotas(ctx, request):
    authz.require_cluster(ctx, authz.AclOperation.DESCRIBE_CONFIGS)
    comps = request.components or []
    types = Counter(c.entity_type for c in comps)
    for t, n in types.items():
        if t not in (USER, CLIENT, IP):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected entity type: {t}")
        if n > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Duplicate {t} filter component entity type")
    if IP in types and len(types) > 1:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "Invalid entity filter component combination, IP filter component "
                         "should not be used with user or clientId filter component.")
    entries = []
    for path, config in sorted(ctx.broker.security.entity_configs.items()):
        values = {k: v for k, v in config.items() if k in QUOTA_KEYS + IP_KEYS}
        if not values:
            continue
        entity = entity_of(path)
        if request.strict and set(entity) != set(types):
            continue
        if not all(_matches(c, entity) for c in comps):
            continue
        entries.append(DescribeResponse.EntryData(
            entity=[DescribeResponse.EntityData(entity_type=t, entity_name=n)
                    for t, n in sorted(entity.items(), key=lambda kv: (kv[0] != USER, kv[0]))],
            values=[DescribeResponse.ValueData(key=k, value=float(v))
                    for k, v in sorted(values.items())]))
    return DescribeResponse(entries=entries)


def _matches(c, entity: dict[str, str | None]) -> bool:
    if c.entity_type not in entity:
        return False
    name = entity[c.entity_type]
    if c.match_type == MATCH_EXACT:
        return name is not None and name == c.match
    if c.match_type == MATCH_DEFAULT:
        return name is None
    return True


def alter_error(request, version: int, error: KafkaError):
    return AlterResponse(entries=[AlterResponse.EntryData(
        error_code=int(error.code), error_message=error.message,
        entity=[AlterResponse.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                for e in entry.entity]) for entry in request.entries])


def _validate(entry) -> tuple[str, dict[str, str | None]]:
    """(entity path, {key: value string or None to remove}); KafkaError INVALID_REQUEST."""
    types = Counter(e.entity_type for e in entry.entity)
    if not types:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    for t, n in types.items():
        if t not in (USER, CLIENT, IP):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity "
                                                        f"type: {t}")
        if n > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {t} entity type")
    entity = {e.entity_type: e.entity_name for e in entry.entity}
    if IP in entity:
        if len(entity) > 1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid quota entity combination, "
                             "IP entity should not be combined with User or ClientId entities.")
        if entity[IP] is not None:
            try:
                ipaddress.ip_address(entity[IP])
            except ValueError:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"{entity[IP]} is not a valid IP or resolvable host.") from None
    allowed = IP_KEYS if IP in entity else QUOTA_KEYS
    updates: dict[str, str | None] = {}
    for op in entry.ops:
        if op.key not in allowed:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}")
        if op.remove:
            updates[op.key] = None
            continue
        value = op.value
        if value is None or value <= 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Quota {op.key} must be positive, got {value}")
        if op.key in LONG_KEYS:
            if value != int(value):
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Configuration {op.key} must be a Long value")
            updates[op.key] = str(int(value))
        else:
            updates[op.key] = repr(float(value))
    return entity_path(entity), updates


@handles(ALTER_QUOTAS, 0, 1, error_response=alter_error)
async def handle_alter_client_quotas(ctx, request):
    if not authz.authorize_cluster(ctx, authz.AclOperation.ALTER_CONFIGS):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    security = ctx.broker.security
    out = []
    for entry in request.entries:
        res = AlterResponse.EntryData(entity=[
            AlterResponse.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity])
        try:
            path, updates = _validate(entry)
            if not request.validate_only and updates:
                await security.alter_entity(path, updates)
        except KafkaError as e:
            res.error_code, res.error_message = int(e.code), e.message
        except OSError as e:
            res.error_code, res.error_message = int(ErrorCode.UNKNOWN_SERVER_ERROR), str(e)
        out.append(res)
    return AlterResponse(entries=out)
