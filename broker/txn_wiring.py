"""How the broker runs the transaction coordinator (called once from ``broker.server``).

``attach_transaction_coordinator(services, listener)`` builds the TransactionStateManager
(``TxnConfig.from_kafka_config``), the marker channel (inter-broker listener), the
TransactionCoordinator and the KIP-890 TransactionVerifier, sets
``services.transaction_coordinator`` / ``services.transaction_verifier``, and hooks the
controller decisions that move coordinator ownership (as the group coordinator's wiring):

- LeaderAndIsr: every ``__transaction_state`` partition this broker now leads is loaded with
  the leader epoch as coordinator epoch (after the ReplicaManager applied the decision); one
  it follows is unloaded; a FULL decision unloads partitions it does not list.
- StopReplica and UpdateMetadata deleting ``__transaction_state`` partitions unload them.

Producer ids come from ``services.producer_id_manager`` (created after the controller).
"""

from __future__ import annotations

import logging

from broker.coordinator_wiring import hook_coordinator_partitions
from broker.replication.wiring import inter_broker_listener
from broker.txn_verification import TransactionVerifier
from coordinator.transaction.coordinator import TransactionCoordinator
from coordinator.transaction.log_records import TRANSACTION_STATE_TOPIC
from coordinator.transaction.marker_channel import TransactionMarkerChannelManager
from coordinator.transaction.state_manager import TransactionStateManager, TxnConfig
from protocol.errors import ErrorCode, KafkaError

__all__ = ["attach_transaction_coordinator", "shutdown_transaction_coordinator"]

log = logging.getLogger(__name__)


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
    config = services.config
    state = TransactionStateManager(services.broker_id, services.replica_manager,
                                    TxnConfig.from_kafka_config(config))
    ib_listener = inter_broker_listener(config)
    channel = TransactionMarkerChannelManager(services.broker_id, state, services, ib_listener)
    coordinator = TransactionCoordinator(services.broker_id, state, channel,
                                         _ProducerIds(services))
    coordinator.startup()
    services.transaction_coordinator = coordinator
    services.transaction_verifier = TransactionVerifier(services, ib_listener,
                                                        services.broker_id)

    hook_coordinator_partitions(
        listener, TRANSACTION_STATE_TOPIC, services.broker_id, coordinator.on_election,
        coordinator.on_resignation,
        lambda: set(coordinator.state.cache) | set(coordinator.state.loading))
    return coordinator


async def shutdown_transaction_coordinator(services) -> None:
    verifier = getattr(services, "transaction_verifier", None)
    if verifier is not None:
        await verifier.close()
    coordinator = getattr(services, "transaction_coordinator", None)
    if coordinator is not None:
        await coordinator.shutdown()
