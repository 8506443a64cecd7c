"""How the broker runs the group and transaction coordinators (called once from ``broker.server``).

Each coordinator gets a ``broker.coordinator_runtime.BrokerCoordinatorRuntime`` (its only
view of the broker: appends to and reads of its internal topic, the timing wheel and its
purgatories, leadership callbacks, partition leaders, inter-broker requests) and is hooked
to the controller decisions that move its partitions (Kafka's ``onElection`` /
``onResignation``): LeaderAndIsr elects the ``__consumer_offsets`` / ``__transaction_state``
partitions this broker now leads (with the leader epoch as coordinator epoch) and resigns
the ones it follows (a FULL decision also the ones it does not list); StopReplica and
UpdateMetadata deleting partitions resign them.

- ``attach_group_coordinator(services, listener)``: the GroupCoordinator
  (``GroupConfig.from_kafka_config``) over a GroupStore (``group_store_from_config``:
  ConfigError for an unknown ``offsets.topic.compression.codec``), with the KIP-848
  consumer-group and KIP-932 share-group membership; sets ``services.group_coordinator``.
- ``attach_transaction_coordinator(services, listener)``: the TransactionStateManager
  (``TxnConfig.from_kafka_config``), the marker channel, the TransactionCoordinator and the
  KIP-890 TransactionVerifier; sets ``services.transaction_coordinator`` /
  ``services.transaction_verifier``. Producer ids come from ``services.producer_id_manager``
  (created after the controller). ``shutdown_transaction_coordinator(services)`` stops both.
"""

from __future__ import annotations

import logging

from broker.coordinator_runtime import BrokerCoordinatorRuntime
from broker.txn_verification import TransactionVerifier
from common.config_error import ConfigError
from coordinator.group.consumer_config import ConsumerGroupConfig
from coordinator.group.consumer_coordinator import ConsumerGroupCoordinator
from coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group_store import (
    COMPRESSION_CODECS,
    COMPRESSION_CODECS_ALLOWED,
    GROUP_METADATA_TOPIC,
    GroupStore,
)
from coordinator.group.heartbeat_common import TopicView
from coordinator.group.share_groups import ShareGroupConfig, ShareGroupCoordinator
from coordinator.runtime import CoordinatorRuntime
from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from coordinator.transaction.marker_channel import TransactionMarkerChannelManager
from coordinator.transaction.state_manager import TransactionStateManager, TxnConfig
from protocol.errors import ErrorCode, KafkaError

__all__ = ["attach_group_coordinator", "attach_transaction_coordinator",
           "group_store_from_config", "shutdown_transaction_coordinator"]

log = logging.getLogger(__name__)


# --- the group coordinator -----------------------------------------------------------------------
def group_store_from_config(config, runtime: CoordinatorRuntime | None) -> GroupStore:
    """The GroupStore of a broker config (``offsets.topic.num.partitions``,
    ``offsets.commit.timeout.ms``, ``offsets.topic.compression.codec``; an unknown codec
    raises ConfigError)."""
    codec = config.get("offsets.topic.compression.codec")
    if codec not in COMPRESSION_CODECS:
        raise ConfigError("offsets.topic.compression.codec", codec, COMPRESSION_CODECS_ALLOWED)
    return GroupStore(runtime, config.get("offsets.topic.num.partitions"),
                      commit_timeout_ms=config.get("offsets.commit.timeout.ms"),
                      compression_type=codec)


def _attach_share_groups(services, coordinator: GroupCoordinator) -> None:
    """Share-group membership (``coordinator.group.share_groups``); its persister (the
    share coordinator's client) is set later by ``broker.share.wiring``."""
    cfg = ShareGroupConfig.from_kafka_config(services.config)

    def share_timeouts(group_id: str) -> tuple[int, int]:
        manager = getattr(services, "group_configs", None)  # broker.group_configs
        if manager is None:
            return cfg.session_timeout_ms, cfg.heartbeat_interval_ms
        return manager.share_timeouts(group_id)

    cfg.group_overrides = share_timeouts
    coordinator.share = ShareGroupCoordinator(coordinator, cfg, TopicView(services.metadata_cache))


def attach_group_coordinator(services, listener) -> GroupCoordinator | None:
    if services.replica_manager is None:
        return None
    config = services.config
    runtime = BrokerCoordinatorRuntime(services, listener,
                                       config.get("offsets.load.buffer.size"))
    store = group_store_from_config(config, runtime)
    coordinator = GroupCoordinator(services.broker_id, GroupConfig.from_kafka_config(config),
                                   store, runtime.timer)
    # KIP-848 consumer groups share the partitions, store and offsets (issue 16)
    consumer_cfg = ConsumerGroupConfig.from_kafka_config(config)

    def group_overrides(group_id: str, session_ms: int, heartbeat_ms: int):
        manager = getattr(services, "group_configs", None)  # broker.group_configs
        if manager is None:
            return session_ms, heartbeat_ms
        return manager.consumer_timeouts(group_id, session_ms, heartbeat_ms)

    consumer_cfg.group_overrides = group_overrides
    coordinator.consumer = ConsumerGroupCoordinator(
        coordinator, consumer_cfg, TopicView(services.metadata_cache))
    _attach_share_groups(services, coordinator)  # KIP-932 (issue 28)
    coordinator.startup()
    services.group_coordinator = coordinator
    runtime.watch_leadership(GROUP_METADATA_TOPIC, coordinator)
    return coordinator


# --- the transaction coordinator -----------------------------------------------------------------
class _ProducerIds:
    """The broker's ProducerIdManager, looked up when an id is needed."""

    def __init__(self, services) -> None:
        self.services = services

    async def generate_producer_id(self) -> int:
        manager = self.services.producer_id_manager
        if manager is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no producer id manager yet")
        return await manager.generate_producer_id()


def attach_transaction_coordinator(services, listener) -> TransactionCoordinator | None:
    if services.replica_manager is None:
        return None
    txn_config = TxnConfig.from_kafka_config(services.config)
    runtime = BrokerCoordinatorRuntime(services, listener, txn_config.load_buffer_size)
    state = TransactionStateManager(services.broker_id, runtime, txn_config)
    channel = TransactionMarkerChannelManager(services.broker_id, state, runtime)
    coordinator = TransactionCoordinator(services.broker_id, state, channel,
                                         _ProducerIds(services))
    coordinator.startup()
    services.transaction_coordinator = coordinator
    services.transaction_verifier = TransactionVerifier(
        services, runtime.inter_broker(f"broker-{services.broker_id}-txn-verify"),
        services.broker_id)
    runtime.watch_leadership(TRANSACTION_STATE_TOPIC, coordinator)
    return coordinator


async def shutdown_transaction_coordinator(services) -> None:
    verifier = getattr(services, "transaction_verifier", None)
    if verifier is not None:
        await verifier.close()
    coordinator = getattr(services, "transaction_coordinator", None)
    if coordinator is not None:
        await coordinator.shutdown()
