"""ZkBroker: what one broker runs in ZooKeeper mode, and its :class:`controller.api.Controller`.

Startup, in Kafka's ``KafkaServer.startup`` order (``broker.server`` drives it):

1. ``connect()``: the ZooKeeper session (chroot created on first start; ZooKeeper
   unreachable for ``zookeeper.connection.timeout.ms`` -> ZkConnectionTimeoutError) and the
   persistent top-level znodes.
2. ``cluster_id(stored)``: ``/cluster/id`` created once; a ``meta.properties`` cluster id that
   differs -> :class:`InconsistentClusterIdError` (a broker pointed at another cluster's
   ZooKeeper refuses to start). ``generate_broker_id()``: ``/brokers/seqid`` version +
   ``reserved.broker.max.id`` (``broker.id.generation.enable``).
3. ``startup()`` (after the listeners are bound, ``broker_info`` set): endpoints must not be
   registered by another broker; ``/brokers/ids/<id>`` (ephemeral, v5 JSON; the broker epoch
   is its czxid; held by another live session -> BrokerIdAlreadyRegisteredError with
   Kafka's message); dynamic configs loaded and watched (:mod:`controller.config_change`);
   the :class:`~controller.kafka_controller.KafkaController` started (it may win the
   election). On a new ZooKeeper session the controller re-registers the broker (new epoch).

Controller requests received over the wire (``apply_leader_and_isr`` / ``apply_update_metadata``
/ ``apply_stop_replica``): a broker epoch older than this broker's -> STALE_BROKER_EPOCH; an
older controller epoch -> STALE_CONTROLLER_EPOCH (checked by the ReplicaManager / MetadataCache
through the BrokerMetadataListener, the same listener the embedded controller feeds). Topic
configs of partitions new to this broker are read from ZooKeeper before their logs are made.

``controlled_shutdown_before_exit()``: the SIGTERM path (``controlled.shutdown.enable``): ask
the controller to move this broker's leaderships, retried ``controlled.shutdown.max.retries``
times ``controlled.shutdown.retry.backoff.ms`` apart.

ZooKeeper unreachable after startup: the broker keeps serving with its last metadata; kazoo
reconnects (a new session re-registers the broker).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import replace
from typing import Any

from client.aio_connection import BrokerConnection
from controller import zk_data as zd
from controller.api import Controller
from controller.config_change import ConfigChangeManager
from controller.controller_core import ControllerConfig
from controller.kafka_controller import KafkaController
from controller.kafka_uuid import random_uuid, to_base64
from controller.kafka_zk_client import BrokerIdAlreadyRegisteredError, KafkaZkClient
from controller.zk_admin import ZkAdminManager
from controller.zk_client import ZkClient, ZkConnectionTimeoutError
from controller.zk_features import FinalizedFeatureCache
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import ControlledShutdownRequest

__all__ = ["BrokerIdAlreadyRegisteredError", "InconsistentClusterIdError", "ZkBroker",
           "ZkConnectionTimeoutError"]

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN_VERSION = 7, 3
# The features a ZooKeeper-mode Kafka 3.9 broker advertises in its registration (v5 JSON).
SUPPORTED_FEATURES = {"metadata.version": {"min_version": 1, "max_version": 21}}


class InconsistentClusterIdError(Exception):
    """meta.properties names another cluster than ZooKeeper's ``/cluster/id``."""


class ZkBroker(Controller):
    """``config`` is the broker's KafkaConfig, ``listener`` its BrokerMetadataListener,
    ``metadata_cache`` its MetadataCache (read for admin waits, like ZkAdminManager). The
    admin operations are ``self.admin``'s (:class:`~controller.zk_admin.ZkAdminManager`)."""

    def __init__(self, config: Any, listener: Any, metadata_cache: Any,
                 rng: random.Random | None = None,
                 auth_data: list[tuple[str, str]] | None = None) -> None:
        self.config = config
        self.listener = listener
        self._metadata_cache = metadata_cache
        self._rng = rng or random.Random()
        self.zk_client = ZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
            max_in_flight=config.get("zookeeper.max.in.flight.requests"),
            secure=bool(config.get("zookeeper.set.acl")), auth_data=auth_data)
        self.kzk = KafkaZkClient(self.zk_client)
        self.broker_id = config.broker_id
        self.broker_info: zd.BrokerInfo | None = None
        self.controller: KafkaController | None = None
        self.config_manager = ConfigChangeManager(self.kzk)
        self.config_manager.register("topics", self._on_topic_config)
        self.config_manager.register("brokers", self._on_broker_config)
        self.config_manager.register("groups", self._on_group_config)
        self.feature_cache = FinalizedFeatureCache(self.zk_client)  # KIP-584 /feature
        self._cluster_id = ""
        self._broker_epoch = -1
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self.admin = ZkAdminManager(config, self.kzk, metadata_cache, self._topic_configs,
                                    self._on_config_written, self._rng)
        self._control_lock = asyncio.Lock()
        self._started = False
        #: ``opener(host, port) -> async () -> (reader, writer)`` for TLS/SASL inter-broker
        #: listeners (set by the server; None = plain TCP)
        self.inter_broker_opener = None

    # ------------------------------------------------------------------ properties

    @property
    def metadata_cache(self) -> Any:
        return self._metadata_cache

    @metadata_cache.setter
    def metadata_cache(self, cache: Any) -> None:
        """The server sets the MetadataCache after construction; the admin reads it too."""
        self._metadata_cache = cache
        self.admin.metadata_cache = cache

    @property
    def controller_id(self) -> int:
        if self.controller is not None and self.controller.active_controller_id >= 0:
            return self.controller.active_controller_id
        cid = self.metadata_cache.controller_id
        return -1 if cid is None else cid

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_epoch(self) -> int:
        if self.controller is not None and self.controller.is_active:
            return self.controller.epoch
        return self.metadata_cache.controller_epoch

    @property
    def is_active(self) -> bool:
        return self.controller is not None and self.controller.is_active

    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    def _set_broker_epoch(self, epoch: int) -> None:
        log.info("broker %d epoch is now %d", self.broker_id, epoch)
        self._broker_epoch = epoch

    def security_store(self):
        """The ``controller.znode_store.ZNodeStore`` over this ZooKeeper session (issue 15:
        credentials, ACLs, quotas and delegation tokens in Kafka's znodes)."""
        from controller.security_store import ZkZNodeStore
        return ZkZNodeStore(self.zk_client)

    # ------------------------------------------------------------------ startup phases

    async def connect(self) -> None:
        await self.zk_client.start()
        await self.kzk.create_top_level_paths()

    async def cluster_id_for(self, stored: str | None) -> str:
        cid = await self.kzk.create_or_get_cluster_id(to_base64(random_uuid()))
        if stored is not None and stored != cid:
            raise InconsistentClusterIdError(
                f"The Cluster ID {cid} doesn't match stored clusterId Some({stored}) in "
                "meta.properties. The broker is trying to join the wrong cluster. Configured "
                "zookeeper.connect may be wrong.")
        self._cluster_id = cid
        return cid

    async def generate_broker_id(self) -> int:
        seq = await self.kzk.generate_broker_sequence_id()
        return seq + self.config.get("reserved.broker.max.id")

    async def startup(self) -> None:
        if self.broker_info is None:
            raise RuntimeError("broker_info must be set before startup")
        self.broker_id = self.broker_info.id
        self.broker_info = replace(self.broker_info, timestamp_ms=int(time.time() * 1000))
        await self._check_endpoints_unique(self.broker_info)
        self._broker_epoch = await self.kzk.register_broker(self.broker_info)
        await self.config_manager.startup()
        await self.feature_cache.startup()
        self.controller = KafkaController(
            self._controller_config(), self.kzk, self.broker_info, self._broker_epoch,
            on_broker_epoch=self._set_broker_epoch, opener=self.inter_broker_opener,
            leader_hint=lambda topic: self.metadata_cache.partition_leaders(topic))
        self.admin.controller = self.controller
        await self.controller.startup()
        self._started = True

    def _controller_config(self) -> ControllerConfig:
        c = self.config
        return ControllerConfig(
            broker_id=self.broker_id,
            inter_broker_listener_name=c.inter_broker_listener_name,
            delete_topic_enable=bool(c.get("delete.topic.enable")),
            auto_leader_rebalance_enable=bool(c.get("auto.leader.rebalance.enable")),
            leader_imbalance_check_interval_s=float(c.get("leader.imbalance.check.interval.seconds")),
            leader_imbalance_per_broker_percentage=int(c.get("leader.imbalance.per.broker.percentage")),
            unclean_leader_election_enable=bool(c.get("unclean.leader.election.enable")),
            controller_socket_timeout_ms=int(c.get("controller.socket.timeout.ms")))

    async def _check_endpoints_unique(self, info: zd.BrokerInfo) -> None:
        mine = {(e.host, e.port) for e in info.endpoints}
        for b, (other, _epoch) in (await self.kzk.get_all_brokers_and_epochs()).items():
            if b == info.id:
                continue
            common = mine & {(e.host, e.port) for e in other.endpoints}
            if common:
                raise BrokerIdAlreadyRegisteredError(
                    "Configured end points " + ",".join(f"{h}:{p}" for h, p in sorted(common))
                    + f" in advertised listeners are already registered by broker {b}")

    async def shutdown(self) -> None:
        await self.config_manager.shutdown()
        self.feature_cache.shutdown()
        if self.controller is not None:
            await self.controller.shutdown()
        await self.zk_client.close()

    # ------------------------------------------------------------------ features (KIP-584)

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return self.feature_cache.epoch, dict(self.feature_cache.features)

    async def update_features(self, levels: dict[str, int]) -> int:
        return await self.feature_cache.update(levels)

    # ------------------------------------------------------------------ config changes

    async def _on_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        before = self._topic_configs.get(topic)
        self._topic_configs[topic] = dict(configs)
        await self.listener.on_topic_config_change(topic, dict(configs))
        if configs.get("unclean.leader.election.enable", "").strip().lower() == "true" and \
                (before or {}).get("unclean.leader.election.enable") != \
                configs.get("unclean.leader.election.enable") and self.controller is not None:
            self.controller.leadership.enable_topic_unclean_leader_election(topic)

    async def _on_broker_config(self, entity: str, configs: dict[str, str]) -> None:
        self._broker_configs[entity] = dict(configs)
        hook = getattr(self.listener, "on_broker_config_change", None)
        if hook is not None:
            await hook(entity, dict(configs))
        if entity in ("<default>", str(self.broker_id)) and self.controller is not None and \
                configs.get("unclean.leader.election.enable", "").lower() == "true":
            self.controller.leadership.enable_default_unclean_leader_election()

    async def _on_group_config(self, group: str, configs: dict[str, str]) -> None:
        """``/config/groups/<group>`` (GROUP config resources, broker.group_configs)."""
        if configs:
            self._group_configs[group] = dict(configs)
        else:
            self._group_configs.pop(group, None)

    def topic_configs(self, name: str) -> dict[str, str] | None:
        if name in self._topic_configs:
            return dict(self._topic_configs[name])
        if self.metadata_cache.contains_topic(name):
            return {}
        return None

    def broker_configs(self, entity: str) -> dict[str, str]:
        return dict(self._broker_configs.get(entity, {}))

    def group_configs(self) -> dict[str, dict[str, str]]:
        return {g: dict(c) for g, c in self._group_configs.items()}

    async def _on_config_written(self, entity_type: str, name: str,
                                 configs: dict[str, str]) -> None:
        """A config this broker wrote (AlterConfigs), applied without waiting for the
        change notification."""
        handler = {"topics": self._on_topic_config, "brokers": self._on_broker_config,
                   "groups": self._on_group_config}[entity_type]
        await handler(name, configs)

    async def _ensure_topic_configs(self, request) -> None:
        """Read the configs of topics new to this broker before their logs are created
        (Kafka's LogManager reads them from ZooKeeper)."""
        wanted: dict[str, bool] = {}  # topic -> has a new partition
        for ts in request.topic_states:
            fresh = any(ps.is_new for ps in ts.partition_states)
            if ts.topic_name not in self._topic_configs or fresh:
                wanted[ts.topic_name] = wanted.get(ts.topic_name, False) or fresh
        if not wanted:
            return
        read = await self.kzk.get_entity_configs_many("topics", wanted)  # one pipelined read
        for topic, fresh in wanted.items():
            configs = read[topic]
            # a new topic's configs always reach the ReplicaManager: the broker that
            # handled CreateTopics already cached them, but its partitions are new
            if fresh or configs != self._topic_configs.get(topic) or \
                    topic not in self._topic_configs:
                self._topic_configs[topic] = configs
                await self.listener.on_topic_config_change(topic, dict(configs))

    # ------------------------------------------------------------------ controller requests

    def _stale_broker_epoch(self, request_epoch: int) -> bool:
        return request_epoch != -1 and request_epoch < self._broker_epoch

    async def apply_leader_and_isr(self, request):
        async with self._control_lock:
            if self._stale_broker_epoch(request.broker_epoch):
                log.info("Received LeaderAndIsr request with broker epoch %d smaller than the "
                         "current broker epoch %d", request.broker_epoch, self._broker_epoch)
                return int(ErrorCode.STALE_BROKER_EPOCH), {}
            if request.controller_epoch < self.metadata_cache.controller_epoch:
                return int(ErrorCode.STALE_CONTROLLER_EPOCH), {}
            await self._ensure_topic_configs(request)
            started = time.monotonic()
            try:
                results = await self.listener.on_leader_and_isr(request)
            except KafkaError as e:
                return int(e.code), {}
            _log_slow("LeaderAndIsr", request, started)
            return int(ErrorCode.NONE), dict(results or {})

    async def apply_update_metadata(self, request) -> int:
        async with self._control_lock:
            if self._stale_broker_epoch(request.broker_epoch):
                log.info("Received UpdateMetadata request with broker epoch %d smaller than the "
                         "current broker epoch %d", request.broker_epoch, self._broker_epoch)
                return int(ErrorCode.STALE_BROKER_EPOCH)
            started = time.monotonic()
            try:
                await self.listener.on_update_metadata(request)
            except KafkaError as e:
                return int(e.code)
            _log_slow("UpdateMetadata", request, started)
            for ts in request.topic_states:
                if any(ps.leader == zd.LEADER_DURING_DELETE for ps in ts.partition_states):
                    self._topic_configs.pop(ts.topic_name, None)
            self.admin.metadata_updated()
            return int(ErrorCode.NONE)

    async def apply_stop_replica(self, request):
        async with self._control_lock:
            if self._stale_broker_epoch(request.broker_epoch):
                return int(ErrorCode.STALE_BROKER_EPOCH), {}
            try:
                results = await self.listener.on_stop_replica(request)
            except KafkaError as e:
                return int(e.code), {}
            return int(ErrorCode.NONE), dict(results or {})

    async def propagate_log_dir_event(self) -> None:
        path = await self.kzk.propagate_log_dir_event(self.broker_id)
        log.info("log dir failure announced to the controller at %s", path)

    # ------------------------------------------------------------------ admin (ZkAdminManager)

    async def create_topics(self, topics, validate_only: bool = False,
                            timeout_ms: int | None = None):
        return await self.admin.create_topics(topics, validate_only, timeout_ms)

    async def auto_create_topics(self, topics):
        return await self.admin.auto_create_topics(topics)

    async def delete_topics(self, names=(), topic_ids=(), timeout_ms: int | None = None):
        return await self.admin.delete_topics(names, topic_ids, timeout_ms)

    async def create_partitions(self, topics, validate_only: bool = False,
                                timeout_ms: int | None = None):
        return await self.admin.create_partitions(topics, validate_only, timeout_ms)

    async def alter_topic_configs(self, name: str, configs, validate_only: bool = False):
        return await self.admin.alter_topic_configs(name, configs, validate_only)

    async def incremental_alter_topic_configs(self, name: str, ops,
                                              validate_only: bool = False):
        return await self.admin.incremental_alter_topic_configs(name, ops, validate_only)

    async def alter_broker_configs(self, entity: str, configs, validate_only: bool = False):
        return await self.admin.alter_broker_configs(entity, configs, validate_only)

    async def incremental_alter_broker_configs(self, entity: str, ops,
                                               validate_only: bool = False):
        return await self.admin.incremental_alter_broker_configs(entity, ops, validate_only)

    async def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        await self.admin.set_group_configs(group, configs)

    async def elect_leaders(self, election_type: int, partitions):
        return await self.admin.elect_leaders(election_type, partitions)

    async def allocate_producer_ids(self, broker_id: int):
        return await self.admin.allocate_producer_ids(broker_id)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int):
        return await self.admin.controlled_shutdown(broker_id, broker_epoch)

    async def alter_partition(self, request, version: int):
        return await self.admin.alter_partition(request, version)

    async def alter_partition_reassignments(self, reassignments):
        return await self.admin.alter_partition_reassignments(reassignments)

    async def list_partition_reassignments(self, partitions):
        return await self.admin.list_partition_reassignments(partitions)

    # ------------------------------------------------------------------ SIGTERM path

    async def controlled_shutdown_before_exit(self) -> bool:
        """Kafka's KafkaServer.controlledShutdown: True once the controller answered with no
        partition left to move."""
        c = self.config
        retries = max(1, int(c.get("controlled.shutdown.max.retries")))
        backoff_s = int(c.get("controlled.shutdown.retry.backoff.ms")) / 1000.0
        timeout_s = int(c.get("controller.socket.timeout.ms")) / 1000.0
        listener = c.inter_broker_listener_name
        log.info("Starting controlled shutdown")
        for attempt in range(retries):
            node = None
            cid = self.metadata_cache.controller_id
            if cid is not None and cid >= 0:
                node = self.metadata_cache.alive_broker_node(cid, listener)
            if node is None:
                log.info("No controller present in the metadata cache")
            else:
                try:
                    conn = BrokerConnection(
                        node.host, node.port, f"broker-{self.broker_id}", timeout_s=timeout_s,
                        opener=self.inter_broker_opener(node.host, node.port)
                        if self.inter_broker_opener else None)
                    try:
                        await conn.connect()
                        _v, resp = await conn.request(
                            CONTROLLED_SHUTDOWN,
                            ControlledShutdownRequest(broker_id=self.broker_id,
                                                      broker_epoch=self._broker_epoch),
                            CONTROLLED_SHUTDOWN_VERSION, timeout_s)
                    finally:
                        await conn.close()
                    if resp.error_code:
                        log.info("Controlled shutdown request returned with error %s",
                                 ErrorCode(resp.error_code).name)
                    elif not resp.remaining_partitions:
                        log.info("Controlled shutdown request returned successfully")
                        return True
                    else:
                        log.info("Controlled shutdown request returned with %d partitions "
                                 "remaining to move", len(resp.remaining_partitions))
                except (OSError, ConnectionError, TimeoutError) as e:
                    log.warning("Error during controlled shutdown, possibly because leader "
                                "movement took longer than the configured "
                                "controller.socket.timeout.ms: %s", e)
            if attempt + 1 < retries:
                await asyncio.sleep(backoff_s)
                log.info("Retrying controlled shutdown (%d retries remaining)",
                         retries - attempt - 1)
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown "
                    "attempts failed")
        return False


SLOW_APPLY_MS = 200


def _log_slow(kind: str, request: Any, started: float) -> None:
    took = (time.monotonic() - started) * 1000
    if took >= SLOW_APPLY_MS:
        n = sum(len(ts.partition_states) for ts in request.topic_states)
        log.info("applied %s for %d partitions in %.0f ms", kind, n, took)
