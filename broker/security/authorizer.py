"""``AclAuthorizer``: Kafka's ZooKeeper-era ACL authorizer (``kafka.security.authorizer
.AclAuthorizer``), over the znode store.

Configuration: ``authorizer.class.name`` = ``kafka.security.authorizer.AclAuthorizer`` (or
the older ``kafka.security.auth.SimpleAclAuthorizer``; ``org.apache.kafka.metadata
.authorizer.StandardAuthorizer`` is accepted with the same rules), ``super.users``
(``User:a;User:b``), ``allow.everyone.if.no.acl.found``.

Decision for (principal, host, operation, resource type, name), as Kafka's
``authorizeAction``:

1. a super user is allowed;
2. the matching ACLs are the literal ones of the name, the literal wildcard ``*`` of the
   type and every prefixed ACL whose name is a prefix of it;
3. none -> ``allow.everyone.if.no.acl.found``;
4. a matching DENY (principal equal or ``User:*``, host equal or ``*``, operation equal or
   ALL) denies; otherwise a matching ALLOW allows, where DESCRIBE is implied by READ, WRITE,
   DELETE or ALTER and DESCRIBE_CONFIGS by ALTER_CONFIGS; otherwise denied.

``authorize_by_resource_type`` is KIP-679's check (any resource of the type allowed; a
prefixed or literal DENY "dominates" the allows it covers). Every decision that was asked
for is logged on ``kafka.authorizer.logger`` as Kafka does: denials at INFO ("Principal =
User:bob is Denied Operation = Read from host = 127.0.0.1 on resource =
Topic:LITERAL:orders for request = Fetch with resourceRefCount = 1"), allowed ones at
DEBUG, the rest (authorized-operations probes, filters) at TRACE. Decisions are cached per
(principal, host, operation, resource) until the ACLs change.

ACLs live in ``/kafka-acl/<Type>/<name>`` and ``/kafka-acl-extended/prefixed/<Type>/<name>``
(``broker.security.acl``); every change writes an ``acl_changes_`` notification that every
broker (this one included) processes by re-reading that resource, through the shared
``controller.change_listener.ChangeNotificationListener`` (no change is dropped while
an earlier one is being processed; notifications are deleted 15 minutes after a broker first
saw them).
"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.security import acl as A
from broker.security.principal import KafkaPrincipal, parse_principal
from common.acl import (
    WILDCARD,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from controller.change_listener import ChangeNotificationListener
from controller.znode_store import ZNodeBadVersion, ZNodeExists, ZNodeStore, ensure_path

__all__ = ["ACL_AUTHORIZER_CLASSES", "AclAuthorizer", "AuthorizerError"]

log = logging.getLogger("broker.security.authorizer")
audit = logging.getLogger("kafka.authorizer.logger")
TRACE = 5

ACL_AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                          "kafka.security.auth.SimpleAclAuthorizer",
                          "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
_IMPLIED = {AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ,
                                   AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER),
            AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS,
                                            AclOperation.ALTER_CONFIGS)}
_CACHE_MAX = 100_000


class AuthorizerError(Exception):
    """An ACL could not be created/deleted (``code`` is the Kafka error for it)."""

    def __init__(self, code, message: str) -> None:
        super().__init__(message)
        self.code = code


class AclAuthorizer:
    def __init__(self, super_users: str | None = None, allow_everyone_if_no_acl_found: bool
                 = False, *, clock_ms=lambda: int(time.time() * 1000)) -> None:
        self.super_users: set[KafkaPrincipal] = set()
        for item in (super_users or "").split(";"):
            if item.strip():
                self.super_users.add(parse_principal(item.strip()))
        self.allow_everyone = allow_everyone_if_no_acl_found
        self.clock_ms = clock_ms
        self.store: ZNodeStore | None = None
        # pattern -> (entries, znode version)
        self._acls: dict[ResourcePattern, tuple[frozenset[AclEntry], int]] = {}
        # (resource type, pattern type) -> {name: entries}, for matching
        self._index: dict[tuple[ResourceType, PatternType], dict[str, frozenset[AclEntry]]] = {}
        self._decisions: dict[tuple, bool] = {}
        self._lock = asyncio.Lock()
        self._listeners: list[ChangeNotificationListener] = []

    @classmethod
    def from_config(cls, config) -> AclAuthorizer | None:
        """The configured authorizer, None when ``authorizer.class.name`` is empty; a class
        other than Kafka's ACL authorizers is a ConfigError."""
        from common.config_error import ConfigError

        name = (config.get("authorizer.class.name") or "").strip()
        if not name:
            return None
        if name not in ACL_AUTHORIZER_CLASSES:
            raise ConfigError("authorizer.class.name", name, ", ".join(ACL_AUTHORIZER_CLASSES),
                              "only Kafka's ACL authorizer is available")
        try:
            return cls(config.get("super.users"), config.get("allow.everyone.if.no.acl.found"))
        except ValueError as e:
            raise ConfigError("super.users", config.get("super.users"),
                              "User:<name>[;User:<name>...]", str(e)) from None

    # ---- lifecycle -----------------------------------------------------------------------------
    async def start(self, store: ZNodeStore) -> None:
        """Load every ACL, then follow the change notifications."""
        self.store = store
        for path in (A.ACL_ROOT, f"{A.EXTENDED_ACL_ROOT}/prefixed"):  # Kafka's createAclPaths
            await ensure_path(store, path)
        self._listeners = [
            ChangeNotificationListener(store, root, A.CHANGE_PREFIX,
                                       lambda path, data, literal=(root == A.LITERAL_CHANGES):
                                       self._process_change(literal, path, data),
                                       clock_ms=self.clock_ms)
            for root in (A.LITERAL_CHANGES, A.EXTENDED_CHANGES)]
        for listener in self._listeners:  # watch first: a change during the load is seen
            await listener.start(skip_existing=True)
        for rtype_name in await store.get_children(A.ACL_ROOT):
            for name in await store.get_children(f"{A.ACL_ROOT}/{rtype_name}"):
                await self._load(A.ACL_ROOT, rtype_name, name, PatternType.LITERAL)
        for ptype in await store.get_children(A.EXTENDED_ACL_ROOT):
            root = f"{A.EXTENDED_ACL_ROOT}/{ptype}"
            for rtype_name in await store.get_children(root):
                for name in await store.get_children(f"{root}/{rtype_name}"):
                    try:
                        pattern_type = PatternType.parse(ptype)
                    except KeyError:
                        log.error("skipping ACLs under %s: unknown pattern type", root)
                        break
                    await self._load(root, rtype_name, name, pattern_type)

    async def shutdown(self) -> None:
        for listener in self._listeners:
            await listener.shutdown()

    async def _load(self, root: str, rtype_name: str, name: str, ptype: PatternType) -> None:
        try:
            rtype = ResourceType.parse(rtype_name)
        except ValueError:
            log.error("skipping ACL znode %s/%s/%s: unknown resource type", root, rtype_name,
                      name)
            return
        await self._refresh(ResourcePattern(rtype, name, ptype))

    async def _refresh(self, pattern: ResourcePattern) -> None:
        path = A.resource_znode(pattern)
        node = await self.store.get(path)
        entries = frozenset(A.decode_acls(path, node[0] if node else None))
        self._set(pattern, entries, node[1] if node else -1)

    def _set(self, pattern: ResourcePattern, entries: frozenset[AclEntry], version: int) -> None:
        key = (pattern.resource_type, pattern.pattern_type)
        if entries:
            self._acls[pattern] = (entries, version)
            self._index.setdefault(key, {})[pattern.name] = entries
        else:
            self._acls.pop(pattern, None)
            self._index.get(key, {}).pop(pattern.name, None)
        self._decisions.clear()

    async def _process_change(self, literal: bool, path: str, data: bytes | None) -> None:
        """One ``acl_changes_`` notification: re-read the resource it names."""
        try:
            pattern = A.decode_acl_change(literal, data)
        except (ValueError, KeyError) as e:
            log.error("skipping ACL change notification %s: %s", path, e)
            return
        log.info("Processing Acl change notification for %s", pattern)
        await self._refresh(pattern)

    # ---- decisions -----------------------------------------------------------------------------
    def authorize(self, ctx, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  log_if_denied: bool = True, log_if_allowed: bool = True) -> bool:
        principal = ctx.principal
        host = _host(ctx)
        key = (principal.principal_type, principal.name, host, operation, resource_type, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            allowed = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= _CACHE_MAX:
                self._decisions.clear()
            self._decisions[key] = allowed
        self._audit(ctx, principal, host, operation,
                    f"{resource_type.znode_name}:LITERAL:{name}", allowed,
                    log_if_allowed if allowed else log_if_denied)
        return allowed

    def _decide(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> bool:
        p = KafkaPrincipal(principal.principal_type, principal.name)
        if p in self.super_users:
            audit.debug("principal = %s is a super user, allowing operation without checking "
                        "acls.", p)
            return True
        acls = self._matching(resource_type, name)
        if not acls:
            audit.debug("No acl found for resource %s, authorized = %s",
                        ResourcePattern(resource_type, name, PatternType.LITERAL),
                        str(self.allow_everyone).lower())
            return self.allow_everyone
        principal_str = str(p)
        if _exists(acls, principal_str, host, (operation,), AclPermissionType.DENY):
            return False
        return _exists(acls, principal_str, host, _IMPLIED.get(operation, (operation,)),
                       AclPermissionType.ALLOW)

    def _matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AclEntry]]:
        out = []
        literal = self._index.get((resource_type, PatternType.LITERAL), {})
        for n in (name, WILDCARD):
            entries = literal.get(n)
            if entries:
                out.append(entries)
        prefixed = self._index.get((resource_type, PatternType.PREFIXED))
        if prefixed:
            for i in range(1, len(name) + 1):
                entries = prefixed.get(name[:i])
                if entries:
                    out.append(entries)
        return out

    def authorize_by_resource_type(self, ctx, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """KIP-679: may the principal perform ``operation`` on some resource of the type?"""
        principal = KafkaPrincipal(ctx.principal.principal_type, ctx.principal.name)
        host = _host(ctx)
        if principal in self.super_users:
            return True

        def names(permission: AclPermissionType, ptype: PatternType) -> set[str]:
            out = set()
            for n, entries in self._index.get((resource_type, ptype), {}).items():
                if _exists([entries], str(principal), host, (operation,), permission):
                    out.add(n)
            return out

        deny_literal = names(AclPermissionType.DENY, PatternType.LITERAL)
        resource = f"{resource_type.znode_name}:UNKNOWN:NONE"
        if WILDCARD in deny_literal:
            self._audit(ctx, principal, host, operation, resource, False, True)
            return False
        if self.allow_everyone:
            self._audit(ctx, principal, host, operation, resource, True, True)
            return True
        deny_prefix = names(AclPermissionType.DENY, PatternType.PREFIXED)
        allow_literal = names(AclPermissionType.ALLOW, PatternType.LITERAL)
        allow_prefix = names(AclPermissionType.ALLOW, PatternType.PREFIXED)

        def dominated(name: str) -> bool:
            return any(name[:i] in deny_prefix for i in range(1, len(name) + 1))

        allowed = (any(not dominated(p) for p in allow_prefix)
                   or any(n == WILDCARD or (n not in deny_literal and not dominated(n))
                          for n in allow_literal))
        self._audit(ctx, principal, host, operation, resource, allowed, True)
        return allowed

    def _audit(self, ctx, principal, host: str, operation: AclOperation, resource: str,
               allowed: bool, explicit: bool) -> None:
        level = (logging.DEBUG if allowed else logging.INFO) if explicit else TRACE
        if not audit.isEnabledFor(level):
            return
        api = _api_name(ctx)
        audit.log(level, "Principal = %s is %s Operation = %s from host = %s on resource = %s "
                  "for request = %s with resourceRefCount = 1", principal,
                  "Allowed" if allowed else "Denied", operation.znode_name, host, resource, api)

    # ---- ACL management ------------------------------------------------------------------------
    def acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        out = []
        for pattern, (entries, _) in sorted(self._acls.items(), key=lambda kv: (
                kv[0].resource_type, kv[0].pattern_type, kv[0].name)):
            if not flt.matches_pattern(pattern):
                continue
            for e in sorted(entries, key=lambda e: (e.principal, e.host, e.operation,
                                                    e.permission_type)):
                if flt.matches_entry(e):
                    out.append(AclBinding(pattern, e))
        return out

    async def create_acls(self, bindings: list[AclBinding]) -> list[Exception | None]:
        """Add ACLs; one result per binding (None = created, or an exception)."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            by_pattern.setdefault(b.pattern, []).append(i)
        async with self._lock:
            for pattern, idx in by_pattern.items():
                try:
                    await self._update(pattern, lambda cur, idx=idx: cur | {bindings[i].entry
                                                                             for i in idx})
                except Exception as e:  # noqa: BLE001 - reported per binding
                    for i in idx:
                        results[i] = e
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Remove every ACL matching each filter; per filter the deleted bindings (each with
        None, or the exception that kept it)."""
        out: list[list[tuple[AclBinding, Exception | None]]] = [[] for _ in filters]
        async with self._lock:
            patterns = set(self._acls)
            for f in filters:  # exact patterns not cached yet (another broker's new ACLs)
                if f.name is not None and f.resource_type not in (ResourceType.ANY,) \
                        and f.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                    patterns.add(ResourcePattern(f.resource_type, f.name, f.pattern_type))
            for pattern in sorted(patterns, key=lambda p: (p.resource_type, p.pattern_type,
                                                           p.name)):
                matching = [(i, f) for i, f in enumerate(filters) if f.matches_pattern(pattern)]
                if not matching:
                    continue
                removed: dict[AclEntry, int] = {}

                def change(cur, matching=matching, removed=removed):
                    for e in cur:
                        for i, f in matching:
                            if f.matches_entry(e):
                                removed.setdefault(e, i)
                    return cur - set(removed)

                try:
                    await self._update(pattern, change)
                    error = None
                except Exception as e:  # noqa: BLE001
                    error = e
                for entry, i in removed.items():
                    out[i].append((AclBinding(pattern, entry), error))
        return out

    async def _update(self, pattern: ResourcePattern, change) -> None:
        """Kafka's ``updateResourceAcls``: conditional writes, retried on a concurrent
        change; the notification is written when the ACLs really changed."""
        store = self.store
        path = A.resource_znode(pattern)
        cached = self._acls.get(pattern)
        if cached is not None:
            current, version = cached
        else:
            node = await store.get(path)
            current = frozenset(A.decode_acls(path, node[0] if node else None))
            version = node[1] if node else -1
        for _ in range(10):
            new = frozenset(change(set(current)))
            try:
                if new:
                    if version >= 0:
                        new_version = await store.set(path, A.encode_acls(new), version)
                    else:
                        await store.create(path, A.encode_acls(new))
                        new_version = 0
                elif version >= 0:
                    await store.delete(path, version)
                    new_version = -1
                else:
                    new_version = -1
                break
            except (ZNodeBadVersion, ZNodeExists):
                await asyncio.sleep(0.1)
                node = await store.get(path)
                current = frozenset(A.decode_acls(path, node[0] if node else None))
                version = node[1] if node else -1
        else:
            raise OSError(f"Failed to update ACLs for {pattern} after 10 tries")
        if new != current:
            log.info("Updated ACLs for %s with new version %d", pattern, new_version)
            self._set(pattern, new, new_version)
            prefix, data = A.acl_change_node(pattern)
            await store.create(prefix, data, sequential=True)
        else:
            self._set(pattern, new, new_version)


def _exists(acls, principal: str, host: str, operations, permission: AclPermissionType) -> bool:
    for entries in acls:
        for e in entries:
            if (e.permission_type is permission
                    and (e.principal == principal or e.principal == "User:*")
                    and (e.operation in operations or e.operation is AclOperation.ALL)
                    and (e.host == host or e.host == WILDCARD_HOST)):
                return True
    return False


def _host(ctx) -> str:
    session = getattr(ctx, "session", None)
    if session is not None:
        return session.client_host
    a = getattr(ctx, "client_address", None)
    return str(a[0]) if isinstance(a, tuple) and a else str(a)


def _api_name(ctx) -> str:
    from protocol import api

    header = getattr(ctx, "header", None)
    spec = api.API_KEYS.get(header.api_key) if header is not None else None
    return spec.name if spec is not None else str(getattr(header, "api_key", "?"))
