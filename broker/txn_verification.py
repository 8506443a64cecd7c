"""KIP-890 part 1 on partition leaders: before a transactional batch may start a transaction
on a partition, the leader asks the transaction coordinator whether the partition was added
to the producer's transaction (Kafka's AddPartitionsToTxnManager and ReplicaManager's
`appendRecordsWithTransactionVerification`; `transaction.partition.verification.enable`).

- `TransactionVerifier.verify(txn_id, pid, epoch, partitions, generic_errors)` ->
  {tp: error} of the partitions that failed. The coordinator is the leader of the id's
  `__transaction_state` partition: this broker's own coordinator is asked directly
  (`handle_verify_partitions`), another broker with AddPartitionsToTxn v4+ `verify_only`
  over the inter-broker listener. No coordinator -> COORDINATOR_NOT_AVAILABLE; a lost
  connection -> NETWORK_EXCEPTION; PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH;
  TRANSACTION_ABORTABLE -> INVALID_TXN_STATE unless `generic_errors` (Produce v11+,
  TxnOffsetCommit v4+).
- `verify_produce(services, transactional_id, entries, generic_errors)` -> (guards, failed):
  the produce path. For every partition whose batch is transactional and whose producer has
  no open transaction there, a `VerificationGuard` is created on the leader and the
  coordinator asked; failures map as Kafka's produce path does (INVALID_TXN_STATE stays,
  CONCURRENT_TRANSACTIONS / NETWORK_EXCEPTION / COORDINATOR_* / NOT_COORDINATOR become
  the retriable NOT_ENOUGH_REPLICAS). Batches of more than one producer id ->
  INVALID_PRODUCER_ID_MAPPING for every transactional partition.
- Transaction version 2 (KIP-890 part 2; `add=True` from Produce v12+ / TxnOffsetCommit v5+
  while `transaction.version` 2 is finalized): the same partitions are *added* to the
  transaction instead of verified (Kafka's AddPartitionsToTxnManager with the
  `addPartition` operation): the local coordinator's `handle_add_partitions` with
  transaction version 2, or AddPartitionsToTxn v5 with `verify_only` false to another
  broker. This happens whether or not `transaction.partition.verification.enable` is set
  (without it no partition would ever join the transaction); errors map as above.
"""

from __future__ import annotations

import logging

from coordinator.transaction.versions import TV_2
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import AddPartitionsToTxnRequest
from protocol.record_format import BATCH_HEADER

__all__ = ["TransactionVerifier", "verify_produce", "batch_producer_info"]

log = logging.getLogger(__name__)
E = ErrorCode
ADD_PARTITIONS_TO_TXN = 24
TRANSACTION_STATE_TOPIC = "__transaction_state"
_RETRIABLE_TO_NOT_ENOUGH_REPLICAS = frozenset({
    E.CONCURRENT_TRANSACTIONS, E.NETWORK_EXCEPTION, E.COORDINATOR_LOAD_IN_PROGRESS,
    E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})


def batch_producer_info(records) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of a transactional magic-2 first batch, else
    None."""
    if records is None or len(records) < BATCH_HEADER.size or records[16] != 2:
        return None
    (_, _, _, _, _, attributes, _, _, _, pid, epoch, seq, _) = BATCH_HEADER.unpack_from(records)
    if not attributes & 0x10 or attributes & 0x20 or pid < 0:
        return None
    return pid, epoch, seq


class TransactionVerifier:
    """See the module docstring. `services`: BrokerServices; `links`: requests to the other
    brokers over the inter-broker listener (`broker.broker_links.BrokerLinks`)."""

    def __init__(self, services, links, broker_id: int) -> None:
        self.services = services
        self.links = links
        self.broker_id = broker_id

    async def close(self) -> None:
        await self.links.close()

    def _coordinator_id(self, transactional_id: str) -> int | None:
        txn = getattr(self.services, "transaction_coordinator", None)
        cache = self.services.metadata_cache
        if txn is None or cache is None:
            return None
        state = cache.partition_state(TRANSACTION_STATE_TOPIC, txn.partition_for(transactional_id))
        if state is None or state.leader < 0 or not cache.is_alive(state.leader):
            return None
        return state.leader

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]], generic_errors: bool,
                     add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        """{tp: error} of the partitions that failed; `add`: add them (transaction
        version 2) instead of checking that they were added."""
        leader = self._coordinator_id(transactional_id)
        if leader is None:
            return {tp: E.COORDINATOR_NOT_AVAILABLE for tp in partitions}
        if leader == self.broker_id:
            txn = self.services.transaction_coordinator
            if add:
                error = await txn.handle_add_partitions(
                    transactional_id, producer_id, producer_epoch, set(partitions), TV_2)
                raw = {tp: error for tp in partitions}
            else:
                raw = txn.handle_verify_partitions(transactional_id, producer_id,
                                                   producer_epoch, set(partitions))
        else:
            try:
                raw = await self._remote(leader, transactional_id, producer_id,
                                         producer_epoch, partitions, add)
            except (ConnectionError, OSError, TimeoutError) as e:
                log.warning("verification of %s with broker %d failed: %s", transactional_id,
                            leader, e)
                return {tp: E.NETWORK_EXCEPTION for tp in partitions}
        out = {}
        for tp, error in raw.items():
            if error == E.NONE:
                continue
            if error == E.PRODUCER_FENCED:
                error = E.INVALID_PRODUCER_EPOCH
            elif error == E.TRANSACTION_ABORTABLE and not generic_errors:
                error = E.INVALID_TXN_STATE
            out[tp] = error
        return out

    async def _remote(self, broker: int, transactional_id: str, producer_id: int,
                      producer_epoch: int, partitions: list[tuple[str, int]],
                      add: bool = False) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        R = AddPartitionsToTxnRequest
        req = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=not add,
            topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])])
        resp = await self.links.request(broker, ADD_PARTITIONS_TO_TXN, req,
                                        min_version=5 if add else 4)
        if resp.error_code:
            code = E(resp.error_code)
            if code == E.CLUSTER_AUTHORIZATION_FAILED:
                code = E.INVALID_TXN_STATE
            return {tp: code for tp in partitions}
        out = {tp: E.NONE for tp in partitions}
        for result in resp.results_by_transaction:
            for t in result.topic_results:
                for p in t.results_by_partition:
                    out[(t.name, p.partition_index)] = E(p.partition_error_code)
        return out


async def verify_produce(services, transactional_id: str | None, entries: dict,
                         generic_errors: bool, add: bool = False
                         ) -> tuple[dict, dict[tuple[str, int], tuple]]:
    """(guards {tp: VerificationGuard}, failed {tp: (ErrorCode, message)}) for a produce
    request's partitions (see the module docstring); `add`: transaction version 2."""
    rm = services.replica_manager
    verifier = getattr(services, "transaction_verifier", None)
    if not transactional_id or rm is None or verifier is None or \
            not (add or rm.transaction_verification_enabled):
        return {}, {}
    infos = {}
    for tp, records in entries.items():
        info = batch_producer_info(records)
        if info is not None:
            infos[tp] = info
    if not infos:
        return {}, {}
    if len({(pid, epoch) for pid, epoch, _ in infos.values()}) > 1:
        msg = "Transactional records contained more than one producer ID"
        return {}, {tp: (E.INVALID_PRODUCER_ID_MAPPING, msg) for tp in infos}
    failed: dict[tuple[str, int], tuple] = {}
    guards = {}
    pid = epoch = None
    for tp, (pid, epoch, seq) in infos.items():
        try:
            guard = rm.get_partition_or_error(*tp).maybe_start_transaction_verification(
                pid, seq, epoch)
        except KafkaError as e:
            failed[tp] = (e.code, e.message)
            continue
        if guard is not None:
            guards[tp] = guard
    if not guards:
        return {}, failed
    errors = await verifier.verify(transactional_id, pid, epoch, list(guards), generic_errors,
                                   add)
    for tp, error in errors.items():
        guards.pop(tp, None)
        if error == E.INVALID_TXN_STATE:
            failed[tp] = (error, "Partition was not added to the transaction")
        elif error in _RETRIABLE_TO_NOT_ENOUGH_REPLICAS:
            failed[tp] = (E.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been "
                          f"added to the transaction. Underlying error: {error.name}")
        else:
            failed[tp] = (error, None)
    return guards, failed
