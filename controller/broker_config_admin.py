"""Dynamic broker configs, finalized features and client-metrics subscriptions of the
embedded controller (a mixin of :class:`controller.embedded.EmbeddedController`).

Stored as Kafka's ZooKeeper documents in the embedded metadata store:

- ``/config/brokers/<id>`` and ``/config/brokers/<default>``: ``{"version":1,"config":{..}}``
  (KIP-226; Kafka's ZooKeeper layout), delivered to the broker through
  ``BrokerMetadataListener.on_broker_config_change`` at startup and on every change;
- ``/feature``: ``{"version":2,"status":1,"features":{"<name>":{"max_version_level":N}}}``
  (Kafka's FeatureZNode v2; the finalized features epoch is the document's version);
- ``/config/client-metrics/<name>``: ``{"version":1,"config":{..}}`` (KIP-714
  subscriptions; Kafka keeps them in KRaft metadata, this is their ZooKeeper-style home);
- ``/config/groups/<group>``: the same document for per-group configs (GROUP resources,
  ``broker.group_configs``).

Validation of keys and values is the broker's (``broker.dynamic_config``,
``broker.features``, ``broker.client_metrics``, ``broker.group_configs``); the controller
stores what it is given.
"""

from __future__ import annotations

import json
import logging

from controller.api import TopicResult
from controller.metadata_store import Create, Delete, SetData
from controller.zk_data import ConfigEntityZNode
from protocol.errors import ErrorCode, KafkaError

__all__ = ["BrokerConfigAdmin", "FeatureZNode", "apply_incremental_ops", "broker_list_default",
           "list_op"]

log = logging.getLogger(__name__)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class FeatureZNode:
    """``/feature`` (Kafka's FeatureZNode, version 2: only max levels).

    ``BOOTSTRAP``: the levels a new cluster starts with, written when ``/feature`` does not
    exist yet (Kafka 4.0 bootstraps new clusters at the latest production levels of what
    Josef serves): ``group.version`` 1, the KIP-848 consumer protocol, and ``share.version`` 1,
    KIP-932 share groups (Kafka 4.2's default). ``transaction.version``
    stays 0 (not finalized): transactions v2 (KIP-890 part 2) is not served. A cluster whose
    ``/feature`` exists keeps what is finalized there."""

    path = "/feature"
    BOOTSTRAP: dict[str, int] = {"group.version": 1, "share.version": 1}

    @staticmethod
    def encode(features: dict[str, int], enabled: bool = True) -> bytes:
        return json.dumps({"version": 2, "status": 1 if enabled else 0, "features": {
            name: {"max_version_level": level} for name, level in sorted(features.items())}},
            separators=(",", ":")).encode()

    @staticmethod
    def apply(current: dict[str, int], levels: dict[str, int]) -> dict[str, int]:
        """``current`` with UpdateFeatures' ``levels`` applied: level > 0 sets, 0 removes."""
        new = dict(current)
        for name, level in levels.items():
            if level > 0:
                new[name] = level
            else:
                new.pop(name, None)
        return new

    @staticmethod
    def decode(data: bytes | None) -> dict[str, int]:
        if not data:
            return {}
        doc = json.loads(data)
        out = {}
        for name, levels in (doc.get("features") or {}).items():
            if isinstance(levels, dict) and isinstance(levels.get("max_version_level"), int):
                out[name] = levels["max_version_level"]
        return out


def list_op(stored: str | None, default: str, op: int, value: str | None) -> str:
    """One IncrementalAlterConfigs APPEND (2) / SUBTRACT (3) on a LIST config (Kafka's
    ``ConfigAdminManager.prepareIncrementalConfigs``): it starts from the value stored at that
    level, else from the key's default (Kafka's, not the broker's effective value: APPEND
    ``compact`` to an unset ``log.cleanup.policy`` gives ``delete,compact``). APPEND adds the
    given items not present yet; SUBTRACT removes them. Items are comma-separated; the result
    may be "" (an empty list)."""
    items = [v.strip() for v in (default if stored is None else stored).split(",") if v.strip()]
    given = [v.strip() for v in (value or "").split(",") if v.strip()]
    if op == OP_APPEND:
        items += [v for v in dict.fromkeys(given) if v not in items]
    else:
        items = [v for v in items if v not in given]
    return ",".join(items)


def broker_list_default(name: str) -> str | None:
    """The default of a LIST broker config as a comma-separated string (listener-prefixed
    names by their key); None when ``name`` is not a known LIST key."""
    from common.config_keys import BROKER_CONFIG_KEYS, ConfigType, listener_key

    lk = listener_key(name)
    key = lk[2] if lk is not None else BROKER_CONFIG_KEYS.get(name)
    if key is None or key.type is not ConfigType.LIST:
        return None
    return ",".join(str(v) for v in (key.default or []))


def apply_incremental_ops(current: dict[str, str], ops, list_default=broker_list_default
                          ) -> dict[str, str]:
    """IncrementalAlterConfigs ops (key, op, value) on one resource's stored configs: SET,
    DELETE, APPEND / SUBTRACT (:func:`list_op`; ``list_default(name)`` gives a LIST key's
    default, None for other keys). APPEND/SUBTRACT on a key that is not a list, or an
    unknown op -> INVALID_REQUEST; SET without a value -> INVALID_CONFIG."""
    out = dict(current)
    for key, op, value in ops:
        if op == OP_SET:
            if value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Null value not supported for config key: {key}")
            out[key] = value
        elif op == OP_DELETE:
            out.pop(key, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            default = list_default(key)
            if default is None:
                verb = "append" if op == OP_APPEND else "subtract"
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Config value {verb} is not allowed for config key: {key}")
            out[key] = list_op(out.get(key), default, op, value)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
    return out


class BrokerConfigAdmin:
    """The mixin (uses ``_store``, ``_lock``, ``_channel``, ``_broker``)."""

    _BROKERS = "brokers"
    _CLIENT_METRICS = "client-metrics"
    _GROUPS = "groups"

    # --- KIP-226 ----------------------------------------------------------------------------
    def broker_configs(self, entity: str) -> dict[str, str]:
        try:
            return ConfigEntityZNode.decode(
                self._store.get_data(ConfigEntityZNode.path(self._BROKERS, entity)))
        except Exception as e:  # noqa: BLE001 - bad stored data is logged and skipped
            log.error("unreadable %s: %s", ConfigEntityZNode.path(self._BROKERS, entity), e)
            return {}

    async def alter_broker_configs(self, entity: str, configs, validate_only: bool = False
                                   ) -> TopicResult:
        new = {k: v for k, v in configs.items() if v is not None}
        return await self._set_broker_configs(entity, lambda _cur: new, validate_only)

    async def incremental_alter_broker_configs(self, entity: str, ops,
                                               validate_only: bool = False) -> TopicResult:
        return await self._set_broker_configs(
            entity, lambda cur: apply_incremental_ops(cur, ops), validate_only)

    async def _set_broker_configs(self, entity: str, compute, validate_only: bool
                                  ) -> TopicResult:
        async with self._lock:
            try:
                new = compute(self.broker_configs(entity))
            except KafkaError as e:
                return TopicResult(entity, int(e.code), e.message)
            if not validate_only and new != self.broker_configs(entity):
                await self._write_entity(self._BROKERS, entity, new)
                await self._deliver_broker_config(entity, new)
            return TopicResult(entity, int(ErrorCode.NONE))

    async def _write_entity(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        path = ConfigEntityZNode.path(entity_type, name)
        exists = self._store.exists(path) is not None
        if not configs and entity_type in (self._CLIENT_METRICS, self._GROUPS):
            if exists:
                await self._store.multi([Delete(path)])
            return
        data = ConfigEntityZNode.encode(configs)
        op = SetData(path, data) if exists else Create(path, data, make_parents=True)
        await self._store.multi([op])

    async def _deliver_broker_config(self, entity: str, configs: dict[str, str]) -> None:
        listener = getattr(self._channel, "listener", None)
        hook = getattr(listener, "on_broker_config_change", None)
        if hook is None:
            return
        try:
            await hook(entity, dict(configs))
        except Exception:  # noqa: BLE001 - the broker's failure is its own (logged)
            log.exception("applying dynamic broker configs of %s failed", entity)

    async def _send_broker_configs_on_startup(self) -> None:
        for entity in ("<default>", str(self._broker.id)):
            configs = self.broker_configs(entity)
            if configs:
                await self._deliver_broker_config(entity, configs)

    # --- KIP-584 features ---------------------------------------------------------------------
    def finalized_features(self) -> tuple[int, dict[str, int]]:
        stat = self._store.exists(FeatureZNode.path)
        if stat is None:
            return -1, {}
        try:
            return stat.version, FeatureZNode.decode(self._store.get_data(FeatureZNode.path))
        except (ValueError, AttributeError) as e:
            log.error("unreadable %s: %s", FeatureZNode.path, e)
            return -1, {}

    async def _bootstrap_features(self) -> None:
        """A new cluster (no ``/feature``) starts with ``FeatureZNode.BOOTSTRAP``."""
        if self._store.exists(FeatureZNode.path) is None:
            await self._store.multi([Create(FeatureZNode.path,
                                            FeatureZNode.encode(FeatureZNode.BOOTSTRAP))])

    async def update_features(self, levels: dict[str, int]) -> int:
        async with self._lock:
            _, current = self.finalized_features()
            data = FeatureZNode.encode(FeatureZNode.apply(current, levels))
            exists = self._store.exists(FeatureZNode.path) is not None
            await self._store.multi([SetData(FeatureZNode.path, data) if exists
                                     else Create(FeatureZNode.path, data)])
            return self.finalized_features()[0]

    # --- KIP-714 client metrics ---------------------------------------------------------------
    def client_metrics_configs(self) -> dict[str, dict[str, str]]:
        return self._entities(self._CLIENT_METRICS)

    async def set_client_metrics_configs(self, name: str, configs: dict[str, str]) -> None:
        async with self._lock:
            await self._write_entity(self._CLIENT_METRICS, name, dict(configs))

    # --- group configs (GROUP resources) ------------------------------------------------------
    def group_configs(self) -> dict[str, dict[str, str]]:
        return self._entities(self._GROUPS)

    async def set_group_configs(self, name: str, configs: dict[str, str]) -> None:
        async with self._lock:
            await self._write_entity(self._GROUPS, name, dict(configs))

    def _entities(self, entity_type: str) -> dict[str, dict[str, str]]:
        """``{name: configs}`` of every ``/config/<entity_type>/<name>`` (unreadable ones are
        logged and skipped)."""
        base = ConfigEntityZNode.path(entity_type, "")[:-1]
        out = {}
        if self._store.exists(base) is None:
            return out
        for name in self._store.get_children(base):
            try:
                out[name] = ConfigEntityZNode.decode(
                    self._store.get_data(ConfigEntityZNode.path(entity_type, name)))
            except Exception as e:  # noqa: BLE001 - bad stored data is logged and skipped
                log.error("unreadable %s config %s: %s", entity_type, name, e)
        return out
