"""The broker process: wires every component together, runs until SIGTERM/SIGINT, shuts down.

Kafka's ``KafkaServer.startup`` order, on one asyncio loop (``BrokerServer.startup``):

1. config: ``zookeeper.connect`` absent = embedded mode (single node, the embedded
   controller); set = ZooKeeper mode (``controller.zk_broker.ZkBroker``): after step 2 the
   ZooKeeper session is opened (unreachable for ``zookeeper.connection.timeout.ms`` -> fatal),
   ``/cluster/id`` is read or created and checked against ``meta.properties``, and a
   generated broker id comes from ``/brokers/seqid``.
2. log dirs: each is created if missing and locked with ``fcntl.flock`` on ``<dir>/.lock``
   (Kafka's ``FileLock``; a second broker on the same dir stops with "Failed to acquire lock
   on file .lock in <dir>"); ``meta.properties`` of every dir is read: the dirs must agree on
   ``broker.id``/``cluster.id`` and a configured ``broker.id`` must match the stored one
   (Kafka's ``InconsistentBrokerIdException``). ``broker.id=-1`` with
   ``broker.id.generation.enable`` takes the stored id, else generates
   ``reserved.broker.max.id + 1`` (Kafka's first ZooKeeper sequence id, 1001 by default).
3. ``LogManager.startup``: loads and recovers every partition log (recovery when
   ``.kafka_cleanshutdown`` is absent) and starts its background tasks: retention every
   ``log.retention.check.interval.ms``, the flush scheduler every
   ``log.flush.scheduler.interval.ms``, recovery-point and log-start-offset checkpoints every
   ``log.flush.offset.checkpoint.interval.ms`` / ``log.flush.start.offset.checkpoint.interval.ms``.
4. ``SystemTimer`` (purgatories), ``MetadataCache``, ``ReplicaManager`` (INTERFACES.md, broker
   core), the ``BrokerMetadataListener``.
5. the SocketServer binds every ``listeners`` endpoint (port 0 = ephemeral) and logs Kafka's
   ``Awaiting socket connections on host:port.``; requests that arrive before step 8 wait (the
   kernel backlog plus a gate in front of the dispatcher), as Kafka binds before it registers
   and enables request processing last.
6. ``EmbeddedController.open(log.dirs[0], BrokerInfo(advertised.listeners with the bound
   ports))`` + ``startup()``: the first FULL LeaderAndIsr/UpdateMetadata decisions reach the
   ReplicaManager/MetadataCache through the listener. ZooKeeper mode: the broker registers
   ``/brokers/ids/<id>`` and starts its KafkaController (decisions arrive over the wire).
7. ``meta.properties`` (version=0, broker.id, cluster.id) written in every dir; a stored
   cluster.id other than the controller's stops startup (Kafka's
   ``InconsistentClusterIdException``).
8. the gate opens: requests from and to the controller (and ApiVersions) are dispatched;
   the others once the controller's first UpdateMetadata reached the MetadataCache (at
   once in embedded mode; ZooKeeper mode: at most ``METADATA_WAIT_S``), so no client is
   told "no controller, no brokers" by a broker that accepts its connection.

Shutdown (signal, or ``BrokerServer.shutdown``) runs in reverse (ZooKeeper mode first asks the
controller to move this broker's leaderships, ``controlled.shutdown.enable``): stop accepting and close
connections, drain the IO workers, ReplicaManager, controller, timer, ``LogManager.shutdown``
(flush, checkpoints, ``.kafka_cleanshutdown``), dir locks released. A fatal startup error (bad
value, dir locked/unwritable, inconsistent or corrupt metadata) is logged as one clear line,
whatever had started is stopped, and the process exits with status 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.config import Endpoint, KafkaConfig
from broker.dispatcher import ApiDispatcher
from broker.handlers import load_all
from broker.log_dir_setup import (
    DirLock,
    FatalStartupError,
    describe_error,
    lock_log_dirs,
    read_broker_metadata,
)
from broker.metadata_cache import MetadataCache
from broker.metadata_listener import BrokerMetadataListener
from broker.network import SocketServer
from broker.purgatory import SystemTimer
from broker.startup_gate import StartupGate
from common.config_error import ConfigError
from controller.api import Controller
from protocol.errors import KafkaError
from storage.checkpoints import CheckpointError, read_meta_properties, write_meta_properties
from storage.cleaner import CleanerConfig
from storage.config import LogConfig
from storage.descriptor_cache import EMERGENCY_RELEASE, descriptor_cache
from storage.descriptor_cache import configure_for_limit as configure_descriptor_cache
from storage.log_manager import LogManager

__all__ = ["BrokerServer", "BrokerServices", "FatalStartupError", "run_server"]

log = logging.getLogger(__name__)

#: longest a started ZooKeeper-mode broker holds client requests for the controller's first
#: UpdateMetadata (seconds; clients' request timeouts are 30 s and more)
METADATA_WAIT_S = 10.0
#: Longest background-task period handed to asyncio (Kafka's Long.MaxValue defaults = never).
MAX_INTERVAL_MS = 2**31 - 1


@dataclass
class BrokerServices:
    """What handlers reach through ``ctx.broker`` (INTERFACES.md, "broker core")."""

    config: KafkaConfig
    broker_id: int
    metadata_cache: MetadataCache
    controller: Controller | None
    replica_manager: Any
    log_manager: LogManager
    timer: Any
    producer_id_manager: Any = None
    fetch_session_cache: Any = None
    group_coordinator: Any = None
    dynamic_config: Any = None  # broker.dynamic_config.DynamicBrokerConfig (KIP-226)
    client_metrics: Any = None  # broker.client_metrics.ClientMetricsManager (KIP-714)
    group_configs: Any = None  # broker.group_configs.GroupConfigManager (GROUP resources)
    log_dir_mover: Any = None  # broker.alter_log_dirs.ReplicaAlterLogDirsManager (KIP-113)
    transaction_coordinator: Any = None  # issue 14: coordinator.transaction
    transaction_verifier: Any = None
    #: issue 28 (share groups): coordinator.share.share_coordinator.ShareCoordinator,
    #: broker.share.partition_manager.SharePartitionManager, broker.share.persister
    share_coordinator: Any = None
    share_partitions: Any = None
    share_persister: Any = None
    #: broker.security.manager.SecurityManager (listeners, credentials, authorizer, quotas)
    security: Any = None
    #: advertised endpoints (bound ports filled in), by listener name
    advertised: dict[str, Endpoint] = field(default_factory=dict)
    #: Kafka's BrokerState metric: 1 STARTING, 3 RUNNING, 6 PENDING_CONTROLLED_SHUTDOWN,
    #: 7 SHUTTING_DOWN (the console shows brokers in controlled shutdown from it)
    broker_state: int = 1

    def listener_name(self, listener: str) -> str:
        """The listener name a request arrived on, as the MetadataCache keys endpoints."""
        return listener.upper()


class BrokerServer:
    """One broker: ``await startup()``, ``await shutdown()`` (idempotent, also after a failed
    startup). ``services`` is set once startup got past the LogManager."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.services: BrokerServices | None = None
        self.socket_server: SocketServer | None = None
        self.log_manager: LogManager | None = None
        self.timer: SystemTimer | None = None
        self.metadata_cache: MetadataCache | None = None
        self.replica_manager: Any = None
        self.controller: Controller | None = None
        self.zk_broker: Any = None  # controller.zk_broker.ZkBroker in ZooKeeper mode
        self.advertised: list[Endpoint] = []
        self.security: Any = None
        self._locks: list[DirLock] = []
        self._gate: StartupGate | None = None
        self._metadata_wait: asyncio.Task | None = None
        self.metrics: Any = None  # broker.metrics.wiring.BrokerMetrics
        self._stored_cluster_id: str | None = None
        self._started = False
        self._log_manager_started = False
        self._shutdown_done = False
        self._offline_at_start: dict[str, str] = {}  # log dir -> why it cannot be used
        self.log_dir_failures: Any = None  # broker.log_dir_failure.LogDirFailureHandler
        #: set by run_server: stopping the broker from inside (every log dir failed)
        self.stop_event: asyncio.Event | None = None
        self.exit_code = 0

    # ----- startup --------------------------------------------------------------------------
    async def startup(self) -> None:
        cfg = self.config
        log.info("starting (broker.id=%s, log.dirs=%s)", cfg.broker_id, ",".join(cfg.log_dirs))
        # loading 100,000 logs makes millions of objects: with the default thresholds the
        # full collections over that growing heap were a third of the load (issue 22)
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            default_log_config = LogConfig.from_props(cfg.topic_config_defaults())
        except KafkaError as e:
            raise FatalStartupError(f"Invalid log configuration: {e.message}") from None
        from broker.security.manager import SecurityManager
        self.security = SecurityManager(cfg)  # ConfigError naming the key stops startup
        await self._lock_log_dirs()
        self._read_meta_properties()
        if not cfg.embedded_mode:
            await self._connect_zookeeper()

        capacity = configure_descriptor_cache()
        log.info("keeping at most %d segment files open (open files limit minus a reserve "
                 "for connections, ZooKeeper and log rolls)", capacity)
        self.log_manager = LogManager(
            cfg.log_dirs, default_log_config, broker_id=self.broker_id,
            cluster_id=self._stored_cluster_id,
            retention_check_interval_ms=_interval(cfg.log_retention_check_interval_ms),
            flush_check_interval_ms=_interval(cfg.get("log.flush.scheduler.interval.ms")),
            recovery_point_checkpoint_interval_ms=_interval(
                cfg.log_flush_offset_checkpoint_interval_ms),
            log_start_offset_checkpoint_interval_ms=_interval(
                cfg.get("log.flush.start.offset.checkpoint.interval.ms")),
            replication_checkpoint_interval_ms=_interval(
                cfg.get("replica.high.watermark.checkpoint.interval.ms")),
            cleaner_config=CleanerConfig.from_kafka_config(cfg.get),
            producer_id_expiration_ms=cfg.get("producer.id.expiration.ms"),
            producer_id_expiration_check_interval_ms=_interval(
                cfg.get("producer.id.expiration.check.interval.ms")))
        for d, why in self._offline_at_start.items():
            self.log_manager.failure_channel.maybe_add_offline_log_dir(os.path.abspath(d), why)
        try:
            await self.log_manager.startup()
            self._log_manager_started = True
        except (KafkaError, CheckpointError, OSError) as e:
            raise FatalStartupError(f"Log directory startup failed: {describe_error(e)}") from None
        log.info("loaded %d partition logs", len(self.log_manager.all_logs()))

        self.timer = SystemTimer("purgatory")
        self.metadata_cache = MetadataCache(self.broker_id)
        if self.zk_broker is not None:
            self.metadata_cache.set_cluster_id(self.zk_broker.cluster_id)
        self.replica_manager = self._make_replica_manager()
        if self.replica_manager is not None:
            from broker.replication.wiring import attach_replication  # issue 12
            attach_replication(self.replica_manager, cfg, self.metadata_cache,
                               lambda: getattr(self.controller, "broker_epoch", -1))
            await self.replica_manager.startup()
        listener = BrokerMetadataListener(self.metadata_cache, self.replica_manager)

        self.services = BrokerServices(cfg, self.broker_id, self.metadata_cache, None,
                                       self.replica_manager, self.log_manager, self.timer,
                                       security=self.security)
        from broker.coordinator_wiring import attach_group_coordinator
        attach_group_coordinator(self.services, listener)
        from broker.dynamic_config import DynamicBrokerConfig  # issue 16: KIP-226
        self.services.dynamic_config = listener.dynamic_config = \
            DynamicBrokerConfig(self.services, self)
        self.security.attach_dynamic_config(self.services.dynamic_config)  # listener TLS stores
        if self.replica_manager is not None:  # issue 12: live throttles / fetcher count
            from broker.replication.wiring import replication_reconfigurable
            self.services.dynamic_config.listeners.append(
                replication_reconfigurable(self.replica_manager, cfg))
        from broker.coordinator_wiring import attach_transaction_coordinator
        attach_transaction_coordinator(self.services, listener)
        from broker.share.wiring import attach_share_groups  # issue 28: KIP-932
        attach_share_groups(self.services, listener)
        load_all()
        self._gate = StartupGate(ApiDispatcher(self.services))
        await self._start_socket_server()
        await self._start_metrics()

        self.controller = await self._open_controller(listener)
        self.services.controller = self.controller
        from broker.alter_log_dirs import ReplicaAlterLogDirsManager  # issue 16: KIP-113
        self.services.log_dir_mover = ReplicaAlterLogDirsManager(self.replica_manager,
                                                                 self.log_manager)
        if self.replica_manager is not None:  # issue 26: KIP-112 failed log dirs
            from broker.log_dir_failure import LogDirFailureHandler
            self.log_dir_failures = LogDirFailureHandler(
                self.replica_manager, self.log_manager, self.controller.propagate_log_dir_event,
                self._on_all_log_dirs_offline, self.services.log_dir_mover)
            self.log_dir_failures.start()
        from broker.client_metrics import ClientMetricsManager  # issue 16: KIP-714
        self.services.client_metrics = ClientMetricsManager(
            self.controller, cfg.get("telemetry.max.bytes"))
        from broker.group_configs import GroupConfigManager
        self.services.group_configs = GroupConfigManager(self.controller, cfg)
        self._make_data_path_services()
        self.metadata_cache.set_cluster_id(self.controller.cluster_id)
        await self._write_meta_properties(self.controller.cluster_id)
        await self.security.start(self.controller.security_store())

        self._gate.open.set()
        self._started = True
        self.services.broker_state = 3  # RUNNING
        if self.metadata_cache.controller_id is None or \
                not self.metadata_cache.is_alive(self.broker_id):  # ZooKeeper mode
            self._metadata_wait = asyncio.get_running_loop().create_task(
                self._open_for_clients(), name="await-first-update-metadata")
        else:
            self._gate.metadata_ready.set()
        _tune_gc_once()
        log.info("[KafkaServer id=%d] started (cluster id %s, controller epoch %d)",
                 self.broker_id, self.controller.cluster_id, self.controller.controller_epoch)

    async def _open_for_clients(self) -> None:
        """Serve clients once an UpdateMetadata from the controller listed this broker as
        live (the controller knows it; Kafka's brokers know the controller by the time they
        answer clients), at most ``METADATA_WAIT_S``."""
        started = time.monotonic()
        cache = self.metadata_cache
        while cache.controller_id is None or not cache.is_alive(self.broker_id):
            if time.monotonic() - started > METADATA_WAIT_S:
                log.warning("no UpdateMetadata from a controller within %.0f s of startup; "
                            "serving clients without a known controller", METADATA_WAIT_S)
                break
            await asyncio.sleep(0.005)
        else:
            log.info("first UpdateMetadata from controller %d after %.0f ms; serving clients",
                     self.metadata_cache.controller_id, (time.monotonic() - started) * 1000)
        self._gate.metadata_ready.set()

    async def serving_clients(self) -> None:
        """Return once client requests are dispatched: after ``startup()``, when the first
        UpdateMetadata listed this broker (or ``METADATA_WAIT_S`` passed; at once in
        embedded mode)."""
        await self._gate.metadata_ready.wait()

    def _on_all_log_dirs_offline(self) -> None:
        self.exit_code = 1
        if self.stop_event is not None:
            self.stop_event.set()

    async def _lock_log_dirs(self) -> None:
        """Create and lock every log dir (`broker.log_dir_setup`): one that cannot be
        created or written starts offline (KIP-112); startup fails only when none can."""
        self._locks, self._offline_at_start = lock_log_dirs(self.config.log_dirs)

    def _read_meta_properties(self) -> None:
        """Agree on broker.id and cluster.id across the dirs (Kafka's
        BrokerMetadataCheckpoint checks); pick the broker id."""
        cfg = self.config
        stored, self._stored_cluster_id = read_broker_metadata(
            [d for d in cfg.log_dirs if d not in self._offline_at_start])
        configured = cfg.broker_id
        if configured >= 0:
            if stored is not None and stored != configured:
                raise FatalStartupError(
                    f"Configured broker.id {configured} doesn't match stored broker.id "
                    f"{stored} in meta.properties. If you moved your data, make sure your "
                    "configured broker.id matches. If you intend to create a new broker, you "
                    "should remove all data in your data directories (log.dirs).")
            self.broker_id = configured
        elif stored is not None:
            self.broker_id = stored
        elif cfg.get("broker.id.generation.enable") and not cfg.embedded_mode:
            self.broker_id = -1  # generated from /brokers/seqid once ZooKeeper is reachable
        elif cfg.get("broker.id.generation.enable"):
            self.broker_id = cfg.get("reserved.broker.max.id") + 1
            log.info("generated broker.id %d (reserved.broker.max.id + 1)", self.broker_id)
        else:
            raise FatalStartupError(
                "broker.id is -1 and broker.id.generation.enable is false: set broker.id")

    async def _connect_zookeeper(self) -> None:
        """ZooKeeper mode, before the logs load: session, cluster id, generated broker id."""
        from controller.zk_auth import ZkAuthError, zookeeper_auth_data
        from controller.zk_broker import (
            InconsistentClusterIdError,
            ZkBroker,
            ZkConnectionTimeoutError,
        )

        try:
            auth = zookeeper_auth_data(os.environ)
        except ZkAuthError as e:
            raise FatalStartupError(str(e)) from None
        if self.config.get("zookeeper.set.acl") and auth is None:
            raise FatalStartupError(
                "zookeeper.set.acl is true, but the verification of the JAAS login file failed "
                "(no java.security.auth.login.config in KAFKA_OPTS with a Client section)")
        zk = ZkBroker(self.config, None, None, auth_data=auth)
        self.zk_broker = zk
        try:
            await zk.connect()
            await zk.cluster_id_for(self._stored_cluster_id)
            if self.broker_id < 0:
                self.broker_id = await zk.generate_broker_id()
                log.info("generated broker.id %d from /brokers/seqid", self.broker_id)
        except ZkConnectionTimeoutError as e:
            raise FatalStartupError(str(e)) from None
        except InconsistentClusterIdError as e:
            raise FatalStartupError(str(e)) from None
        zk.broker_id = self.broker_id

    def _make_replica_manager(self) -> Any:
        try:
            from broker.replica_manager import ReplicaManager
        except ModuleNotFoundError as e:
            if e.name != "broker.replica_manager":
                raise
            log.warning("broker.replica_manager is not available: partitions will not be "
                        "served (metadata only)")
            return None
        return ReplicaManager(self.config, self.broker_id, self.log_manager,
                              self.metadata_cache, self.timer)

    def _make_data_path_services(self) -> None:
        """InitProducerId's id blocks and the KIP-227 fetch session cache, when built in."""
        try:
            from broker.producer_id_manager import ProducerIdManager
            self.services.producer_id_manager = ProducerIdManager(self.broker_id,
                                                                  self.controller)
        except ModuleNotFoundError as e:
            if e.name != "broker.producer_id_manager":
                raise
        try:
            from broker.fetch_session import FetchSessionCache
            self.services.fetch_session_cache = FetchSessionCache(
                max_entries=self.config.get("max.incremental.fetch.session.cache.slots"))
            if self.replica_manager is not None:  # issue 21: partition changes reach sessions
                self.replica_manager.fetch_session_cache = self.services.fetch_session_cache
        except ModuleNotFoundError as e:
            if e.name != "broker.fetch_session":
                raise

    async def _start_socket_server(self) -> None:
        cfg = self.config
        self.socket_server = SocketServer(
            cfg.listeners, self._gate,
            socket_request_max_bytes=cfg.socket_request_max_bytes,
            num_io_threads=cfg.num_io_threads,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            listen_backlog=cfg.get("socket.listen.backlog.size"),
            queued_max_requests=cfg.queued_max_requests,
            socket_send_buffer_bytes=cfg.socket_send_buffer_bytes,
            socket_receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
            max_connections=cfg.get("max.connections"),
            max_connections_per_ip=cfg.get("max.connections.per.ip"),
            queued_max_request_bytes=cfg.get("queued.max.request.bytes"),
            security=self.security)
        # accept() out of descriptors: give back idle segment descriptors (reopened on use)
        self.socket_server.accept_errors.on_failure = functools.partial(
            descriptor_cache().release_idle, EMERGENCY_RELEASE)
        try:
            await self.socket_server.start()
        except OSError as e:
            raise FatalStartupError(
                "Socket server failed to bind to "
                + ",".join(ep.connection_string() for ep in cfg.listeners)
                + f": {describe_error(e)}") from None
        bound: dict[str, int] = {}
        for acceptor in self.socket_server.acceptors:
            ep = acceptor.endpoint
            bound[ep.listener_name] = acceptor.port
            host = ep.host or "0.0.0.0"
            log.info("Awaiting socket connections on %s:%d.",
                     f"[{host}]" if ":" in host else host, acceptor.port)
        self.advertised = cfg.advertised_endpoints(bound)
        self.services.advertised = {e.listener_name: e for e in self.advertised}

    async def _start_metrics(self) -> None:
        """RequestMetrics, broker gauges and the Prometheus endpoint (broker.metrics)."""
        from broker.metrics.wiring import BrokerMetrics

        self.metrics = BrokerMetrics(self.config)  # ConfigError for a bad prometheus.listener
        try:
            await self.metrics.start(self.services, self.socket_server)
        except OSError as e:
            raise FatalStartupError(f"Cannot bind prometheus.listener="
                                    f"{self.config.get('prometheus.listener')}: "
                                    f"{describe_error(e)}") from None

    async def _open_controller(self, listener: BrokerMetadataListener) -> Controller:
        if self.zk_broker is not None:
            return await self._start_zk_broker(listener)
        from controller.embedded import EmbeddedController
        from controller.metadata_store import MetadataStoreCorruptError
        from controller.zk_data import BrokerInfo

        cfg = self.config
        info = BrokerInfo(self.broker_id, tuple(self.advertised), rack=cfg.broker_rack)
        try:
            controller = await EmbeddedController.open(
                cfg.log_dirs[0], info, listener,
                default_num_partitions=cfg.num_partitions,
                default_replication_factor=cfg.default_replication_factor)
        except MetadataStoreCorruptError as e:
            raise FatalStartupError(f"Corrupt embedded metadata store: {e}") from None
        except OSError as e:
            raise FatalStartupError(f"Cannot open the embedded metadata store in "
                                    f"{cfg.log_dirs[0]}: {describe_error(e)}") from None
        self.controller = controller
        await controller.startup()
        return controller

    async def _start_zk_broker(self, listener: BrokerMetadataListener) -> Controller:
        from controller.zk_broker import SUPPORTED_FEATURES, BrokerIdAlreadyRegisteredError
        from controller.zk_data import BrokerInfo

        zk = self.zk_broker
        zk.listener = listener
        zk.metadata_cache = self.metadata_cache
        zk.inter_broker_opener = self._inter_broker_opener()
        for entity_type in ("users", "clients", "ips"):  # SCRAM, quotas (issue 15)
            zk.config_manager.register(entity_type, self.security.entity_handler(entity_type))
        zk.broker_info = BrokerInfo(self.broker_id, tuple(self.advertised),
                                    rack=self.config.broker_rack,
                                    features=dict(SUPPORTED_FEATURES))
        self.controller = zk
        try:
            await zk.startup()
        except BrokerIdAlreadyRegisteredError as e:
            raise FatalStartupError(str(e)) from None
        return zk

    def _inter_broker_opener(self):
        """``opener(host, port)`` for the controller's and controlled shutdown's connections
        when the inter-broker listener uses TLS or SASL (None: plain TCP)."""
        from broker.security.inter_broker import inter_broker_connect, inter_broker_security

        if inter_broker_security(self.config).get("security.protocol", "PLAINTEXT") == \
                "PLAINTEXT":
            return None

        def opener(host: str, port: int):
            return lambda: inter_broker_connect(self.config, host, port)
        return opener

    async def _write_meta_properties(self, cluster_id: str) -> None:
        stored = self._stored_cluster_id
        if stored is not None and stored != cluster_id:
            raise FatalStartupError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored} in "
                "meta.properties. The broker is trying to join the wrong cluster (the "
                f"embedded metadata store in {self.config.log_dirs[0]} belongs to another "
                "cluster, or meta.properties was copied from one).")

        def write() -> None:
            for d in self.config.log_dirs:
                props = read_meta_properties(d) or {}
                if (props.get("cluster.id") != cluster_id
                        or props.get("broker.id") != str(self.broker_id)
                        or props.get("version") != "0"):
                    write_meta_properties(d, self.broker_id, cluster_id)

        try:
            await asyncio.get_running_loop().run_in_executor(None, write)
        except (OSError, CheckpointError) as e:
            raise FatalStartupError(f"Cannot write meta.properties: {describe_error(e)}") from None

    # ----- shutdown -------------------------------------------------------------------------
    async def shutdown(self) -> None:
        """Reverse order of startup; every step runs even if an earlier one failed."""
        if self._shutdown_done:
            return
        self._shutdown_done = True
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        if self.services is not None:
            self.services.broker_state = 7  # SHUTTING_DOWN
        if self.log_dir_failures is not None:
            self.log_dir_failures.stopping = True
        if self._started and self.zk_broker is not None and \
                self.config.get("controlled.shutdown.enable"):
            self.services.broker_state = 6  # PENDING_CONTROLLED_SHUTDOWN
            try:
                if await self.zk_broker.controlled_shutdown_before_exit() and \
                        self.replica_manager is not None:
                    await self.replica_manager.stop_fetchers()
            except Exception:
                log.exception("controlled shutdown failed")
            self.services.broker_state = 7
        steps: list[tuple[str, Any]] = []
        if self._metadata_wait is not None:
            self._metadata_wait.cancel()
        if self._gate is not None and not self._started:
            self._gate.abort()
        if self.metrics is not None:
            steps.append(("metrics", self.metrics.stop))
        if self.socket_server is not None:
            steps.append(("socket server", self.socket_server.stop))
        pid_manager = self.services.producer_id_manager if self.services else None
        if pid_manager is not None:
            steps.append(("producer id manager", pid_manager.shutdown))
        if self.services is not None and self.services.transaction_coordinator is not None:
            from broker.coordinator_wiring import shutdown_transaction_coordinator
            steps.append(("transaction coordinator",
                          functools.partial(shutdown_transaction_coordinator, self.services)))
        if self.services is not None and self.services.share_partitions is not None:
            from broker.share.wiring import shutdown_share_groups
            steps.append(("share groups", functools.partial(shutdown_share_groups,
                                                            self.services)))
        coordinator = self.services.group_coordinator if self.services else None
        if coordinator is not None:
            steps.append(("group coordinator", coordinator.shutdown))
        mover = self.services.log_dir_mover if self.services else None
        if mover is not None:
            steps.append(("log dir mover", mover.shutdown))
        if self.security is not None:
            steps.append(("security manager", self.security.shutdown))
        if self.replica_manager is not None:
            steps.append(("replica manager", self.replica_manager.shutdown))
        if self.controller is not None:
            steps.append(("controller", self.controller.shutdown))
        elif self.zk_broker is not None:
            steps.append(("ZooKeeper client", self.zk_broker.shutdown))
        if self.timer is not None:
            steps.append(("timer", self.timer.shutdown))
        if self._log_manager_started:
            steps.append(("log manager", self.log_manager.shutdown))
        for name, fn in steps:
            try:
                result = fn()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("error shutting down the %s", name)
        for lock in self._locks:
            lock.release()
        self._locks.clear()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)


def _interval(ms: int | None) -> int:
    """A background period in ms for asyncio: at least 1, at most ~24.8 days."""
    if ms is None:
        return MAX_INTERVAL_MS
    return max(1, min(int(ms), MAX_INTERVAL_MS))


async def run_server(config: KafkaConfig,
                     on_started: Callable[[BrokerServer], None] | None = None) -> None:
    """Run a broker until SIGTERM/SIGINT, then shut down cleanly (``broker.cli`` calls this).

    ``on_started(server)`` runs once startup has finished and clients are served (the
    controller's first UpdateMetadata listed this broker, or ``METADATA_WAIT_S`` passed);
    ``josef server --daemon`` uses it to release the waiting terminal. A fatal startup error
    is logged as one line and ends the process with status 1 (``SystemExit``); a
    ``ConfigError`` propagates (the CLI exits 2)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, _on_signal, sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests): the caller stops us
    server = BrokerServer(config)
    server.stop_event = stop
    try:
        startup = asyncio.ensure_future(server.startup())
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait({startup, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not startup.done():
            log.info("signal received during startup; stopping once startup is done")
            with contextlib.suppress(Exception):
                await startup
        waiter.cancel()
        exc = startup.exception()
        if exc is not None:
            if isinstance(exc, FatalStartupError):
                log.error("Fatal error during startup: %s", exc)
                await server.shutdown()
                raise SystemExit(1)
            if isinstance(exc, ConfigError):
                await server.shutdown()
                raise exc
            log.error("Fatal error during startup", exc_info=exc)
            await server.shutdown()
            raise SystemExit(1)
        if on_started is not None:
            serving = asyncio.ensure_future(server.serving_clients())
            waiter = asyncio.ensure_future(stop.wait())
            await asyncio.wait({serving, waiter}, return_when=asyncio.FIRST_COMPLETED)
            serving.cancel()
            waiter.cancel()
            if not stop.is_set():
                on_started(server)
        await stop.wait()
        await server.shutdown()
        if server.exit_code:
            raise SystemExit(server.exit_code)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def _on_signal(sig: int, stop: asyncio.Event) -> None:
    log.info("received %s; shutting down", signal.Signals(sig).name)
    stop.set()


_GC_TUNED = False
GC_THRESHOLDS = (50_000, 20, 100)  # generation 0 every 50,000 net allocations


def _tune_gc_once() -> None:
    """After the first startup in this process: move every object alive now (modules, schemas,
    config, loaded logs) to the permanent generation (`gc.freeze()`, after one collection so no
    garbage is kept) and collect generation 0 every 50 000 net allocations instead of 700.

    Why: the cyclic GC's cost grows with the number of tracked objects, and the purgatories
    keep up to ~1M pending operations/timer tasks alive. Measured (micro-benchmark on
    benchmarks/bench_purgatory.py's workloads, best of 3, kops/s, default -> tuned, GC off):
    timer add+cancel at 100k pending 780-930 -> 1055-1100 (1204), at 1M 610-630 -> 1080-1090
    (1189); park+complete ops unchanged within noise (550-650 either way). Cyclic garbage is
    found later (50k allocations), which costs at most a few MB.
    """
    global _GC_TUNED
    if _GC_TUNED:
        return
    _GC_TUNED = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
