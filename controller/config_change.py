"""ConfigChangeManager: dynamic configs from ZooKeeper on every broker (Kafka's
DynamicConfigManager + ZkNodeChangeNotificationListener).

Entity configs live in ``/config/<type>/<name>`` (``{"version":1,"config":{...}}``); a
change is announced by a sequential ``/config/changes/config_change_<seq>`` holding
``{"version":2,"entity_path":"<type>/<name>"}``. Each broker follows ``/config/changes``
with the shared :class:`controller.change_listener.ChangeNotificationListener` (the
same pending-flag discipline as the ACL and delegation-token notifications): every
notification it has not seen yet, in sequence order, re-reads the entity's current configs
(so repeated or coalesced notifications converge); notifications older than
``change_expiration_ms`` (Kafka: 15 minutes) are deleted. At startup every entity of every
registered type is loaded once.

Handlers are registered per entity type (``register(entity_type, handler)``); a handler is
``async handler(entity_name, configs: dict[str, str])``. Josef registers ``topics`` (the
broker's topic config overrides) and ``brokers`` (KIP-226 dynamic broker configs, delivered to
``BrokerMetadataListener.on_broker_config_change``); users/clients/ips quotas and SCRAM
credentials plug in the same way. Notifications for an entity type nobody registered, and
malformed notifications or config znodes, are logged (with the path) and skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from controller import zk_data as zd
from controller.change_listener import ChangeNotificationListener
from controller.kafka_zk_client import KafkaZkClient
from controller.security_store import ZkZNodeStore

__all__ = ["ConfigChangeManager", "ConfigHandler"]

log = logging.getLogger(__name__)

ConfigHandler = Callable[[str, dict[str, str]], Awaitable[None]]
PREFIX = zd.ConfigEntityChangeNotificationSequenceZNode.SEQUENCE_PREFIX
CHANGES_PATH = zd.ConfigEntityChangeNotificationZNode.path


class ConfigChangeManager:
    path = CHANGES_PATH

    def __init__(self, zk: KafkaZkClient, change_expiration_ms: int = 15 * 60 * 1000,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.zk = zk
        self.handlers: dict[str, ConfigHandler] = {}
        self.listener = ChangeNotificationListener(
            ZkZNodeStore(zk.zk), self.path, PREFIX, self._process_notification,
            expiration_ms=change_expiration_ms, clock_ms=clock_ms)

    @property
    def processed(self) -> int:
        return self.listener.processed

    def register(self, entity_type: str, handler: ConfigHandler) -> None:
        self.handlers[entity_type] = handler

    async def startup(self) -> None:
        """Load every entity's configs, then watch and process notifications."""
        for entity_type, handler in list(self.handlers.items()):
            for name in await self.zk.get_all_entities_with_config(entity_type):
                await self._apply(entity_type, name, handler)
        await self.listener.start()

    async def shutdown(self) -> None:
        await self.listener.shutdown()

    async def _process_notification(self, path: str, data: bytes | None) -> None:
        try:
            entity_path = zd.ConfigEntityChangeNotificationSequenceZNode.decode(data)
        except zd.ZkDataError as e:
            log.error("skipping malformed config change notification %s: %s", path, e)
            return
        entity_type, _, name = entity_path.partition("/")
        handler = self.handlers.get(entity_type)
        if not name:
            log.error("skipping config change notification %s: bad entity path %r", path,
                      entity_path)
            return
        if handler is None:
            log.debug("no handler for config change of %s (%s)", entity_path, path)
            return
        log.info("Processing override for entityPath: %s", entity_path)
        await self._apply(entity_type, name, handler)

    async def _apply(self, entity_type: str, name: str, handler: ConfigHandler) -> None:
        configs = await self.zk.get_entity_configs(entity_type, name)  # store errors: retried
        try:
            await handler(name, configs)
        except Exception:
            log.exception("applying the %s config of %s failed", entity_type, name)
