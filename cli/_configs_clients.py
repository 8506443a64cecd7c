"""``josef configs --entity-type users|clients``: SCRAM credentials and client quotas, as
kafka-configs.sh does with ``--bootstrap-server``.

* ``--alter --entity-type users --entity-name alice --add-config
  'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=pw]'``:
  AlterUserScramCredentials (the salt is random, PBKDF2 runs here; iterations default 4096);
  ``--delete-config SCRAM-SHA-512`` deletes a credential. SCRAM and quota configs cannot be
  altered together, and not for the default user.
* quotas (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
  ``controller_mutation_rate``) for a user, a client id, a user's client id, or defaults:
  AlterClientQuotas / DescribeClientQuotas.
* ``--describe``: "Quota configs for user-principal 'alice' are producer_byte_rate=1024.0"
  per matching entity, then (users only, not defaults) "SCRAM credential configs for
  user-principal 'alice' are SCRAM-SHA-256=iterations=8192".
Prints "Completed updating config for user alice." / "Completed updating default config for
users in the cluster." as Kafka's tool.
"""

from __future__ import annotations

import re

from cli._common import UsageError, check_error, split_pairs
from client.connection import ToolError
from common.security.scram import BY_TYPE as SCRAM_BY_TYPE
from common.security.scram import MECHANISMS as SCRAM_MECHANISMS

DESCRIBE_QUOTAS, ALTER_QUOTAS, DESCRIBE_SCRAM, ALTER_SCRAM = 48, 49, 50, 51
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
ENTITY_KEY = {"users": "user", "clients": "client-id"}
LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
DEFAULT_ITERATIONS = 4096
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)")


def run(client, args) -> int:
    return _describe(client, args) if args.describe else _alter(client, args)


def _alter(client, args) -> int:
    types, names = args.entity_types, args.entity_names
    if len(names) != len(types):
        raise UsageError("--alter needs an entity name (or default) for every entity type")
    added = dict(split_pairs(args.add_config))
    deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not added and not deleted:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    scram_add = {k: v for k, v in added.items() if k in SCRAM_MECHANISMS}
    scram_del = [k for k in deleted if k in SCRAM_MECHANISMS]
    unknown = [k for k in list(added) + deleted if k not in SCRAM_MECHANISMS
               and k not in QUOTA_KEYS]
    quota = any(k in QUOTA_KEYS for k in list(added) + deleted)
    head = types[0]
    if head == "clients" or len(types) == 2:
        if unknown or scram_add or scram_del:
            raise UsageError(f"Only quota configs can be added for 'clients' using "
                             f"--bootstrap-server. Unexpected config names: "
                             f"{unknown + list(scram_add) + scram_del}")
    else:
        if unknown:
            raise UsageError("Only quota and SCRAM credential configs can be added for "
                             f"'users' using --bootstrap-server. Unexpected config names: "
                             f"{unknown}")
        if scram_add or scram_del:
            if "" in names:
                raise UsageError("The use of --entity-default or --user-defaults is not "
                                 "allowed with User SCRAM Credentials using --bootstrap-server.")
            if quota:
                raise UsageError("Cannot alter both quota and SCRAM credential configs "
                                 "simultaneously for 'users' using --bootstrap-server.")
    if quota:
        _alter_quotas(client, types, names, added, deleted)
    else:
        _alter_scram(client, names[0], scram_add, scram_del)
    if names[0]:
        print(f"Completed updating config for {head[:-1]} {names[0]}.")
    else:
        print(f"Completed updating default config for {head} in the cluster.")
    return 0


def _alter_scram(client, user: str, added: dict[str, str], deleted: list[str]) -> None:
    from common.security.scram import random_nonce, salted_password

    upsertions = []
    for mech_name, text in added.items():
        m = _CREDENTIAL.fullmatch(text)
        if m is None:
            raise UsageError(f"Invalid credential property {mech_name}={text} (expected "
                             "[iterations=N,]password=P)")
        iterations = int(m.group(1)) if m.group(1) not in (None, "", "-1") \
            else DEFAULT_ITERATIONS
        salt = random_nonce().encode()
        upsertions.append({
            "name": user, "mechanism": SCRAM_MECHANISMS[mech_name].type_id,
            "iterations": iterations,
            "salt": salt, "salted_password": salted_password(
                SCRAM_MECHANISMS[mech_name], m.group(2), salt, max(1, iterations))})
    deletions = [{"name": user, "mechanism": SCRAM_MECHANISMS[k].type_id} for k in deleted]
    resp = client.request(ALTER_SCRAM, {"deletions": deletions, "upsertions": upsertions})
    for r in resp.results:
        check_error(r.error_code, r.error_message, f"cannot alter SCRAM credentials of {r.user}")


def _quota_entity(types, names) -> list[dict]:
    return [{"entity_type": ENTITY_KEY[t], "entity_name": n or None}
            for t, n in zip(types, names, strict=True)]


def _alter_quotas(client, types, names, added, deleted) -> None:
    ops = []
    for k, v in added.items():
        if k not in QUOTA_KEYS:
            continue
        try:
            value = float(v)
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {k}: {v}") from None
        ops.append({"key": k, "value": value, "remove": False})
    ops += [{"key": k, "value": 0.0, "remove": True} for k in deleted if k in QUOTA_KEYS]
    resp = client.request(ALTER_QUOTAS, {
        "entries": [{"entity": _quota_entity(types, names), "ops": ops}],
        "validate_only": False})
    for e in resp.entries:
        check_error(e.error_code, e.error_message, "cannot alter quotas")


def _describe(client, args) -> int:
    types, names = args.entity_types, args.entity_names
    components = []
    for i, t in enumerate(types):
        name = names[i] if i < len(names) else None
        if name is None:
            components.append({"entity_type": ENTITY_KEY[t], "match_type": 2, "match": None})
        elif name == "":
            components.append({"entity_type": ENTITY_KEY[t], "match_type": 1, "match": None})
        else:
            components.append({"entity_type": ENTITY_KEY[t], "match_type": 0, "match": name})
    if client.supports(DESCRIBE_QUOTAS):
        resp = client.request(DESCRIBE_QUOTAS, {"components": components, "strict": True})
        check_error(resp.error_code, resp.error_message, "cannot describe quotas")
        for e in resp.entries:
            parts = []
            for ent in e.entity:
                label = LABEL.get(ent.entity_type, ent.entity_type)
                parts.append(f"{label} '{ent.entity_name}'" if ent.entity_name is not None
                             else f"the default {label}")
            values = ", ".join(f"{v.key}={v.value}" for v in e.values)
            print(f"Quota configs for {', '.join(parts)} are {values}")
    if "clients" not in types and "" not in names:
        users = [n for n in names if n]
        resp = client.request(DESCRIBE_SCRAM, {
            "users": [{"name": u} for u in users] if users else None})
        check_error(resp.error_code, resp.error_message, "cannot describe SCRAM credentials")
        mech_names = {t: m.name for t, m in SCRAM_BY_TYPE.items()}
        for r in resp.results:
            if r.error_code:
                try:
                    check_error(r.error_code, r.error_message, "")
                except ToolError as e:
                    print(f"Error retrieving SCRAM credential configs for user-principal "
                          f"'{r.user}': {e}")
                continue
            text = ", ".join(f"{mech_names.get(c.mechanism, c.mechanism)}="
                             f"iterations={c.iterations}" for c in r.credential_infos)
            print(f"SCRAM credential configs for user-principal '{r.user}' are {text}")
    return 0
