"""``SecurityManager`` (``services.security``): everything security the broker holds.

* ``listeners``: a :class:`~broker.security.listeners.ListenerSecurity` per listener (TLS
  context, SASL mechanisms); ``new_session`` gives each connection its ``Session``.
* SCRAM credentials of every user (from ``/config/users/<user>``), kept in memory for the
  authenticators (Kafka's ``CredentialCache``); client configs (quotas) per entity path.
* ``authorizer`` (None = every request allowed), ``quotas``, ``connection_quotas``,
  ``tokens`` (delegation tokens): set up by their own modules.

Startup: ``SecurityManager(config)`` validates the listener settings (``ConfigError`` naming
the key); ``await start(store)`` loads credentials and client configs from the znode store
(see ``controller.znode_store``) and sets ``ready`` - authenticators wait for it, so a
client connecting during startup is authenticated against loaded credentials.
Changes: :meth:`alter_entity` writes ``/config/<entity path>`` and a ``/config/changes``
notification, then applies the change locally; :meth:`config_changed` is what the ZooKeeper
mode's config-change listener calls for entity types ``users`` and ``clients``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from broker.security import znodes
from broker.security.listeners import ListenerSecurity, Session
from common.security.scram import MECHANISMS, ScramCredential
from controller.znode_store import ZNodeBadVersion, ZNodeExists, ZNodeStore, upsert

__all__ = ["SecurityManager"]

log = logging.getLogger("broker.security")


def _wall_ms() -> float:
    return time.time() * 1000


class SecurityManager:
    def __init__(self, config, *, time_ms: Callable[[], float] = _wall_ms) -> None:
        self.config = config
        self.time_ms = time_ms
        self.listeners: dict[str, ListenerSecurity] = {
            e.listener_name: ListenerSecurity.from_config(config, e) for e in config.listeners}
        self.failed_authentication_delay_ms = config.get(
            "connection.failed.authentication.delay.ms")
        self._max_receive = {name: config.listener_get(name, "sasl.server.max.receive.size")
                             for name in self.listeners}
        self.store: ZNodeStore | None = None
        #: entity path ("users/alice", "clients/c1", "users/alice/clients/c1") -> config
        self.entity_configs: dict[str, dict[str, str]] = {}
        self._scram: dict[str, dict[str, ScramCredential]] = {m: {} for m in MECHANISMS}
        from broker.security.authorizer import AclAuthorizer
        self.authorizer: Any = AclAuthorizer.from_config(config)  # None: no authorization
        from broker.security.quotas import QuotaManagers
        self.quotas: Any = QuotaManagers(lambda: self.entity_configs, config)
        from broker.security.connection_quotas import ConnectionQuotas
        self.connection_quotas: Any = ConnectionQuotas(config,
                                                       ip_quotas=lambda: self.entity_configs)
        from broker.security.delegation_tokens import DelegationTokenManager
        self.tokens: Any = DelegationTokenManager(config)
        self._entity_listeners: list[Callable[[str, dict[str, str]], None]] = [
            self.quotas.on_entity_change]
        self.ready = asyncio.Event()

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self, store: ZNodeStore) -> None:
        """Load credentials and client configs from ``store``; then ``ready`` is set."""
        self.store = store
        for entity_type in ("users", "clients", "ips"):
            for name in await store.get_children(f"{znodes.CONFIG_ROOT}/{entity_type}"):
                await self._load_entity(f"{entity_type}/{name}")
                if entity_type == "users":
                    base = f"{znodes.CONFIG_ROOT}/users/{name}/clients"
                    for client in await store.get_children(base):
                        await self._load_entity(f"users/{name}/clients/{client}")
        for component in (self.tokens, self.authorizer):
            if component is not None:
                await component.start(store)
        self.ready.set()

    async def shutdown(self) -> None:
        for component in (self.tokens, self.authorizer):
            if component is not None:
                await component.shutdown()

    # ---- KIP-226: listener TLS stores changed through AlterConfigs ----------------------------
    def attach_dynamic_config(self, dynamic) -> None:
        """Validate (``dynamic.validators``) and apply (``dynamic.listeners``) changes of
        ``ssl.*`` / ``listener.name.<l>.ssl.*`` broker configs: the new keystore must load
        and keep the certificate's DN and SANs (unless ``ssl.allow.dn.changes`` /
        ``ssl.allow.san.changes``); new connections use the new context."""
        dynamic.validators.append(self._validate_ssl_update)
        dynamic.listeners.append(self._apply_ssl_update)

    def _ssl_listeners(self, names) -> list[ListenerSecurity]:
        touched = set()
        for n in names:
            if n.startswith("ssl."):
                return [sec for sec in self.listeners.values() if sec.uses_ssl]
            if n.startswith("listener.name.") and ".ssl." in n:
                touched.add(n.split(".")[2].upper())
        return [sec for name, sec in self.listeners.items() if name in touched and sec.uses_ssl]

    def _validate_ssl_update(self, entity: str, configs: dict) -> None:
        from common.security.ssl_factory import SslConfigError
        from protocol.errors import ErrorCode, KafkaError

        for sec in self._ssl_listeners(configs):
            def get(key: str, sec=sec):
                scoped = f"listener.name.{sec.name.lower()}.{key}"
                for name in (scoped, key):
                    if configs.get(name) is not None:
                        value = configs[name]
                        if key in ("ssl.enabled.protocols", "ssl.cipher.suites"):
                            return [v.strip() for v in value.split(",") if v.strip()]
                        if key in ("ssl.allow.dn.changes", "ssl.allow.san.changes"):
                            return str(value).lower() == "true"
                        return value
                return self.config.listener_get(sec.name, key)
            try:
                sec.check_ssl(get)
            except (SslConfigError, ValueError) as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Validation of dynamic config update of SSLFactory failed "
                                 f"for listener {sec.name}: {e}") from None

    def _apply_ssl_update(self, changed: set[str]) -> None:
        for sec in self._ssl_listeners(changed):
            sec.reload_ssl(lambda key, sec=sec: self.config.listener_get(sec.name, key))
            log.info("listener %s: reloaded its SSL key and trust stores (KIP-226)", sec.name)

    # ---- connections -------------------------------------------------------------------------
    def sasl_max_receive_size(self, listener: str) -> int:
        """``sasl.server.max.receive.size`` of the listener: largest frame before a SASL
        connection authenticated."""
        return self._max_receive.get(listener.upper(), 524288)

    def listener(self, name: str) -> ListenerSecurity | None:
        return self.listeners.get(name.upper())

    def new_session(self, listener: str, client_address: Any) -> Session | None:
        sec = self.listeners.get(listener.upper())
        if sec is None:
            return None
        return sec.new_session(client_address, self, self.time_ms)

    # ---- CredentialSource (broker.security.sasl) ---------------------------------------------
    def plain_password_ok(self, listener: str, username: str, password: str) -> bool:
        sec = self.listeners.get(listener.upper())
        return sec is not None and sec.plain_password_ok(username, password)

    def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        return self._scram.get(mechanism, {}).get(username)

    def token_credential(self, mechanism: str, token_id: str):
        if self.tokens is None:
            return None
        return self.tokens.scram_credential(mechanism, token_id)

    def oauth_options(self, listener: str) -> dict[str, str]:
        sec = self.listeners.get(listener.upper())
        return sec.oauth_options() if sec is not None else {}

    # ---- client configs: /config/users, /config/clients --------------------------------------
    def add_entity_listener(self, fn: Callable[[str, dict[str, str]], None]) -> None:
        """``fn(entity_path, config)`` after every change of a client entity (quotas)."""
        self._entity_listeners.append(fn)

    async def _load_entity(self, entity_path: str) -> dict[str, str]:
        assert self.store is not None
        path = znodes.entity_znode(entity_path)
        node = await self.store.get(path)
        config = znodes.decode_config(path, node[0] if node else None)
        self._apply(entity_path, config)
        return config

    def _apply(self, entity_path: str, config: dict[str, str]) -> None:
        if config:
            self.entity_configs[entity_path] = config
        else:
            self.entity_configs.pop(entity_path, None)
        parts = entity_path.split("/")
        if len(parts) == 2 and parts[0] == "users":
            user = znodes.desanitize(parts[1])
            for mech, creds in self._scram.items():
                text = config.get(mech)
                if text is None:
                    creds.pop(user, None)
                    continue
                try:
                    creds[user] = ScramCredential.from_config(text)
                except ValueError as e:
                    log.error("skipping %s credential of user %s in %s: %s", mech, user,
                              znodes.entity_znode(entity_path), e)
                    creds.pop(user, None)
        for fn in self._entity_listeners:
            try:
                fn(entity_path, config)
            except Exception:  # noqa: BLE001
                log.exception("client config listener failed for %s", entity_path)

    def entity_handler(self, entity_type: str):
        """``async handler(entity_name, configs)`` for the ZooKeeper config-change manager
        (``controller.config_change``): entity type ``users`` or ``clients``."""
        async def handler(name: str, configs: dict[str, str]) -> None:
            self._apply(f"{entity_type}/{name}", dict(configs))
        return handler

    async def config_changed(self, entity_path: str) -> None:
        """A change notification for ``users/...`` or ``clients/...``: re-read the entity."""
        if self.store is not None:
            await self._load_entity(entity_path)

    async def alter_entity(self, entity_path: str, updates: dict[str, str | None]) -> None:
        """Set (value) or remove (None) keys of an entity's config, write a change
        notification, apply locally. Retries on a concurrent change. OSError when the
        store cannot be written."""
        assert self.store is not None
        path = znodes.entity_znode(entity_path)
        for _ in range(10):
            node = await self.store.get(path)
            config = znodes.decode_config(path, node[0] if node else None)
            for k, v in updates.items():
                if v is None:
                    config.pop(k, None)
                else:
                    config[k] = v
            try:
                await upsert(self.store, path, znodes.encode_config(config),
                             node[1] if node else -2)
                break
            except (ZNodeBadVersion, ZNodeExists):
                continue
        else:
            raise OSError(f"{path} changed concurrently too often")
        await self.store.create(f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}",
                                znodes.encode_change(entity_path), sequential=True)
        self._apply(entity_path, config)

    def scram_users(self) -> dict[str, dict[str, ScramCredential]]:
        """user -> {mechanism: credential} for DescribeUserScramCredentials."""
        out: dict[str, dict[str, ScramCredential]] = {}
        for mech, creds in self._scram.items():
            for user, cred in creds.items():
                out.setdefault(user, {})[mech] = cred
        return out
