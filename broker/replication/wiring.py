"""Wiring replication into a broker: the ReplicaManager gets its ReplicaFetcherManager and
AlterPartitionManager, configured from the replica.* keys.

Brokers reach each other on the inter-broker listener (`inter.broker.listener.name`, else
the listener named like `security.inter.broker.protocol`), looked up in the metadata cache
(UpdateMetadata's live brokers) at connect time; TLS / SASL listeners connect through
`broker.security.inter_broker.opener_for`. AlterPartition goes to the controller the
metadata cache names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from broker.replication.alter_partition_manager import AlterPartitionManager
from broker.replication.fetcher import FetcherConfig
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.replica_selector import selector_for
from broker.security.inter_broker import opener_for
from client.aio_connection import BrokerConnection

__all__ = ["attach_replication", "inter_broker_listener", "truncation_on_fetch_supported"]

log = logging.getLogger(__name__)


def inter_broker_listener(config) -> str:
    return config.inter_broker_listener_name


def truncation_on_fetch_supported(ibp: str | None) -> bool:
    """inter.broker.protocol.version >= 2.7 (Kafka's isTruncationOnFetchSupported)."""
    try:
        major, minor = (int(x) for x in (ibp or "3.9").split("-")[0].split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (2, 7)


def attach_replication(replica_manager, config, metadata_cache,
                       broker_epoch: Callable[[], int] = lambda: -1) -> None:
    """Give `replica_manager` (before its startup) a fetcher manager and an
    AlterPartitionManager. `config` is the broker's KafkaConfig."""
    listener = inter_broker_listener(config)
    try:
        replica_manager.replica_selector = selector_for(config.get("replica.selector.class"))
    except ValueError as e:
        from common.config_error import ConfigError
        raise ConfigError("replica.selector.class", config.get("replica.selector.class"),
                          "org.apache.kafka.common.replica.RackAwareReplicaSelector or "
                          "LeaderSelector", str(e)) from None

    def endpoint_of(broker_id: int) -> tuple[str, int] | None:
        node = metadata_cache.alive_broker_node(broker_id, listener)
        return (node.host, node.port) if node is not None else None

    def controller_endpoint() -> tuple[int, str, int] | None:
        cid = metadata_cache.controller_id
        if cid is None or cid < 0:
            return None
        address = endpoint_of(cid)
        return (cid, *address) if address is not None else None

    fc = FetcherConfig(
        broker_id=replica_manager.broker_id,
        fetch_max_bytes=config.get("replica.fetch.max.bytes"),
        fetch_response_max_bytes=config.get("replica.fetch.response.max.bytes"),
        fetch_wait_max_ms=config.get("replica.fetch.wait.max.ms"),
        fetch_min_bytes=config.get("replica.fetch.min.bytes"),
        fetch_backoff_ms=config.get("replica.fetch.backoff.ms"),
        socket_timeout_ms=config.get("replica.socket.timeout.ms"),
        socket_receive_buffer_bytes=config.get("replica.socket.receive.buffer.bytes"),
        truncate_on_fetch=truncation_on_fetch_supported(
            config.get("inter.broker.protocol.version")),
        rack=config.get("broker.rack") or "",
        opener_for=lambda host, port: opener_for(config, host, port))  # TLS/SASL (issue 15)
    replica_manager.truncate_on_fetch = fc.truncate_on_fetch
    replica_manager.broker_epoch_supplier = broker_epoch
    replica_manager.fetcher_manager = ReplicaFetcherManager(
        replica_manager, fc, config.get("num.replica.fetchers"), endpoint_of,
        replica_manager.follower_quota)
    timeout_s = config.get("controller.socket.timeout.ms") / 1000
    replica_manager.alter_partition_manager = AlterPartitionManager(
        replica_manager.broker_id, controller_endpoint, broker_epoch,
        request_timeout_ms=config.get("controller.socket.timeout.ms"),
        connection_factory=lambda host, port: BrokerConnection(
            host, port, f"broker-{replica_manager.broker_id}-alter-partition",
            timeout_s=timeout_s, opener=opener_for(config, host, port)))


def replication_reconfigurable(replica_manager, config):
    """A KIP-226 reconfigure hook (DynamicBrokerConfig.listeners): the replication throttles
    (`leader|follower.replication.throttled.rate`, dynamic only in Kafka) and
    `num.replica.fetchers` take effect live."""
    import asyncio

    def apply(changed: set[str]) -> None:
        if "leader.replication.throttled.rate" in changed:
            replica_manager.leader_quota.update_quota(
                config.get("leader.replication.throttled.rate"))
        if "follower.replication.throttled.rate" in changed:
            replica_manager.follower_quota.update_quota(
                config.get("follower.replication.throttled.rate"))
        manager = replica_manager.fetcher_manager
        if manager is not None and "num.replica.fetchers" in changed:
            asyncio.ensure_future(manager.resize(config.get("num.replica.fetchers")))
    return apply
