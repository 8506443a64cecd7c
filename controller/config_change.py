"""ConfigChangeManager: dynamic configs from ZooKeeper on every broker (Kafka's
DynamicConfigManager + ZkNodeChangeNotificationListener).

Entity configs live in ``/config/<type>/<name>`` (``{"version":1,"config":{...}}``); a
change is announced by a sequential ``/config/changes/config_change_<seq>`` holding
``{"version":2,"entity_path":"<type>/<name>"}``. Each broker watches ``/config/changes``,
processes every notification it has not seen yet in sequence order (reading the entity's
current configs, so repeated or lost notifications converge), and deletes notifications
older than ``change_expiration_ms`` (Kafka: 15 minutes). At startup every entity of every
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
from controller.kafka_zk_client import KafkaZkClient
from controller.zk_client import NoNodeError, ZNodeChildChangeHandler

__all__ = ["ConfigChangeManager", "ConfigHandler"]

log = logging.getLogger(__name__)

ConfigHandler = Callable[[str, dict[str, str]], Awaitable[None]]
PREFIX = zd.ConfigEntityChangeNotificationSequenceZNode.SEQUENCE_PREFIX
CHANGES_PATH = zd.ConfigEntityChangeNotificationZNode.path


class ConfigChangeManager(ZNodeChildChangeHandler):
    path = CHANGES_PATH

    def __init__(self, zk: KafkaZkClient, change_expiration_ms: int = 15 * 60 * 1000,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        import asyncio

        self.zk = zk
        self.change_expiration_ms = change_expiration_ms
        self.clock_ms = clock_ms
        self.handlers: dict[str, ConfigHandler] = {}
        self.last_executed_change = -1
        self.processed = 0
        self._lock = asyncio.Lock()
        self._pending = False
        self._task = None

    def register(self, entity_type: str, handler: ConfigHandler) -> None:
        self.handlers[entity_type] = handler

    async def startup(self) -> None:
        """Load every entity's configs, then watch and process notifications."""
        for entity_type, handler in list(self.handlers.items()):
            for name in await self.zk.get_all_entities_with_config(entity_type):
                await self._apply(entity_type, name, handler)
        self.zk.zk.register_znode_child_change_handler(self)
        await self.process_notifications()

    def shutdown(self) -> None:
        self.zk.zk.unregister_znode_child_change_handler(self.path)
        if self._task is not None:
            self._task.cancel()

    def on_child_change(self) -> None:
        """Watch fired (event loop): process in a task, coalescing bursts."""
        import asyncio

        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.process_notifications())
        else:
            self._pending = True

    async def process_notifications(self) -> None:
        async with self._lock:
            while True:
                self._pending = False
                children = await self.zk.zk.get_children(self.path) or []
                await self._process(sorted(children))
                if not self._pending:
                    return

    async def _process(self, children: list[str]) -> None:
        now = self.clock_ms()
        for child in children:
            seq = _sequence(child)
            if seq is None:
                log.error("skipping %s/%s: not a config change notification", self.path, child)
                continue
            path = f"{self.path}/{child}"
            if seq > self.last_executed_change:
                got = await self.zk.zk.get_data(path)
                if got is not None:
                    await self._process_notification(path, got[0])
                self.last_executed_change = seq
            await self._purge_if_expired(path, now)

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
        self.processed += 1

    async def _apply(self, entity_type: str, name: str, handler: ConfigHandler) -> None:
        configs = await self.zk.get_entity_configs(entity_type, name)
        try:
            await handler(name, configs)
        except Exception:
            log.exception("applying the %s config of %s failed", entity_type, name)

    async def _purge_if_expired(self, path: str, now: int) -> None:
        stat = await self.zk.zk.exists(path)
        if stat is not None and now - stat.ctime > self.change_expiration_ms:
            try:
                await self.zk.zk.delete(path)
            except NoNodeError:
                pass


def _sequence(child: str) -> int | None:
    if not child.startswith(PREFIX):
        return None
    try:
        return int(child[len(PREFIX):])
    except ValueError:
        return None
