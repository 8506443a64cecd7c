"""`TransactionMarkerChannelManager`: the coordinator's WriteTxnMarkers sender (Kafka's
TransactionMarkerChannelManager + TransactionMarkerRequestCompletionHandler, KIP-98).

`add_txn_markers_to_send(coordinator_epoch, commit, metadata, complete_transit)` is called
once a PrepareCommit/PrepareAbort is in `__transaction_state`. The transaction's partitions
are grouped by their leader (the metadata cache; a partition whose topic is gone is dropped
from the transaction, one without a live leader waits in the "unknown broker" queue and is
looked up again every `RETRY_BACKOFF_MS`). One sender task per destination broker drains its
queue into WriteTxnMarkers requests (every queued marker of that broker in one request);
to this broker itself the markers go through `marker_writer.write_txn_markers` directly (the
same code the WriteTxnMarkers handler runs), to others over an inter-broker connection.

Answers, per partition (the completion handler): NONE -> the partition leaves the
transaction; UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_
APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR -> queued again (leader looked up again);
INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED -> give up (a newer producer or
coordinator owns it); UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION -> the partition
leaves the transaction. A lost connection queues the markers again. Markers whose
coordinator epoch is no longer this coordinator's are dropped. Retries never stop while this
broker coordinates the transaction ("retried until written").

Once every partition is marked, the CompleteCommit/CompleteAbort record is appended
(`write_txn_completion`); COORDINATOR_NOT_AVAILABLE is retried after `RETRY_BACKOFF_MS`,
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS end it (the new coordinator resends).
Event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from coordinator.runtime import CoordinatorRuntime
from coordinator.transaction.metadata import TransactionMetadata, TxnTransitMetadata
from coordinator.transaction.tasks import TaskSet
from protocol.errors import ErrorCode
from protocol.messages import WriteTxnMarkersRequest

__all__ = ["TransactionMarkerChannelManager", "PendingCompleteTxn"]

log = logging.getLogger(__name__)
E = ErrorCode
RETRY_BACKOFF_MS = 100
WRITE_TXN_MARKERS = 27
UNKNOWN_BROKER = -1
_RETRY = frozenset({E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_LEADER_OR_FOLLOWER,
                    E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                    E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR})
_GIVE_UP = frozenset({E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED})
_DONE_WITHOUT_MARKER = frozenset({E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION})


@dataclasses.dataclass(eq=False)
class PendingCompleteTxn:
    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransitMetadata  # the CompleteCommit/CompleteAbort to write at the end
    commit: bool


@dataclasses.dataclass(eq=False)
class _MarkerEntry:
    pending: PendingCompleteTxn
    producer_id: int
    producer_epoch: int
    txn_partition: int
    partitions: set[tuple[str, int]]


class TransactionMarkerChannelManager:
    """See the module docstring. `state_manager`: the TransactionStateManager; `runtime`: the
    coordinator runtime (partition leaders, inter-broker requests, this broker's markers)."""

    def __init__(self, broker_id: int, state_manager, runtime: CoordinatorRuntime) -> None:
        self.broker_id = broker_id
        self.state_manager = state_manager
        self.runtime = runtime
        self.pending: dict[str, PendingCompleteTxn] = {}
        self.queues: dict[int, list[_MarkerEntry]] = {}
        self.in_flight: set[int] = set()
        self.links = runtime.inter_broker(f"broker-{broker_id}-txn-markers")
        self._wakeup = asyncio.Event()
        self._tasks = TaskSet()
        self.requests_sent = 0

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.spawn(self._run(), name="txn-marker-channel")

    async def shutdown(self) -> None:
        # connections first: requests in flight fail into their (still waiting) senders
        await self.links.close()
        await self._tasks.cancel_all()

    def _spawn(self, coro) -> None:
        self._tasks.spawn(coro)

    @property
    def num_txns_with_pending_markers(self) -> int:
        return len(self.pending)

    # --- queueing ----------------------------------------------------------------------------
    def add_txn_markers_to_send(self, coordinator_epoch: int, commit: bool,
                                md: TransactionMetadata, transit: TxnTransitMetadata) -> None:
        pending = PendingCompleteTxn(md.transactional_id, coordinator_epoch, md, transit, commit)
        prev = self.pending.get(md.transactional_id)
        if prev is not None:
            log.info("replacing the pending completion %s of %s", prev, md.transactional_id)
        self.pending[md.transactional_id] = pending
        self.add_markers_to_broker_queue(md.producer_id, md.producer_epoch, pending,
                                         set(md.topic_partitions))
        self.maybe_write_txn_completion(md.transactional_id)

    def add_markers_to_broker_queue(self, producer_id: int, producer_epoch: int,
                                    pending: PendingCompleteTxn,
                                    partitions: set[tuple[str, int]]) -> None:
        by_broker: dict[int, set[tuple[str, int]]] = {}
        gone: set[tuple[str, int]] = set()
        for tp in partitions:
            leader = self.runtime.partition_leader(*tp)
            if leader is None:
                gone.add(tp)
            else:  # -1 (no live leader) is UNKNOWN_BROKER
                by_broker.setdefault(leader, set()).add(tp)
        txn_partition = self.state_manager.partition_for(pending.transactional_id)
        for broker, tps in by_broker.items():
            self.queues.setdefault(broker, []).append(
                _MarkerEntry(pending, producer_id, producer_epoch, txn_partition, tps))
        if gone:
            err, cur = self.state_manager.get_transaction_state(pending.transactional_id)
            if err != E.NONE or cur is None or \
                    cur.coordinator_epoch != pending.coordinator_epoch:
                self.remove_markers_for_txn(pending)
            else:
                log.info("partitions %s of %s are gone; no markers for them", sorted(gone),
                         pending.transactional_id)
                for tp in gone:
                    cur.metadata.remove_partition(tp)
                self.maybe_write_txn_completion(pending.transactional_id)
        self._wakeup.set()

    def remove_markers_for_txn_partition(self, txn_partition: int) -> None:
        """Resigned (or re-elected) for a `__transaction_state` partition: forget its work."""
        for broker, entries in self.queues.items():
            keep = []
            for e in entries:
                if e.txn_partition == txn_partition:
                    self.remove_markers_for_txn(e.pending)
                else:
                    keep.append(e)
            self.queues[broker] = keep
        for tid, p in list(self.pending.items()):
            if self.state_manager.partition_for(tid) == txn_partition:
                self.remove_markers_for_txn(p)

    def remove_markers_for_txn(self, pending: PendingCompleteTxn) -> None:
        if self.pending.get(pending.transactional_id) is pending:
            del self.pending[pending.transactional_id]

    def _current(self, pending: PendingCompleteTxn):
        """The metadata entry if this coordinator still owns `pending` at its epoch; else
        drops the pending work and returns None."""
        err, cur = self.state_manager.get_transaction_state(pending.transactional_id)
        if err != E.NONE or cur is None or cur.coordinator_epoch != pending.coordinator_epoch \
                or self.pending.get(pending.transactional_id) is not pending:
            log.info("no longer sending markers for %s (%s)", pending.transactional_id,
                     err.name if err != E.NONE else "coordinator epoch changed")
            self.remove_markers_for_txn(pending)
            return None
        return cur

    # --- sending -----------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            if any(self.queues.values()):  # markers waiting (a leader unknown, a broker busy)
                try:
                    await asyncio.wait_for(self._wakeup.wait(), RETRY_BACKOFF_MS / 1000)
                except TimeoutError:
                    pass
            else:  # nothing queued: queueing and every answer wake it (no idle polling)
                await self._wakeup.wait()
            self._wakeup.clear()
            try:
                self._drain()
            except Exception:  # noqa: BLE001 - the loop must survive a bug in one pass
                log.exception("transaction marker channel pass failed")

    def _drain(self) -> None:
        unknown = self.queues.pop(UNKNOWN_BROKER, [])
        for e in unknown:  # look the leaders up again
            if self._current(e.pending) is not None:
                self.add_markers_to_broker_queue(e.producer_id, e.producer_epoch, e.pending,
                                                 e.partitions)
        for broker in list(self.queues):
            if broker == UNKNOWN_BROKER or broker in self.in_flight:
                continue
            entries = [e for e in self.queues.pop(broker) if
                       self.pending.get(e.pending.transactional_id) is e.pending]
            if not entries:
                continue
            self.in_flight.add(broker)
            self._spawn(self._send(broker, entries))

    def _request(self, entries: list[_MarkerEntry]) -> WriteTxnMarkersRequest:
        markers = []
        for e in entries:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(e.partitions):
                by_topic.setdefault(t, []).append(p)
            markers.append(WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                transaction_result=e.pending.commit,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in by_topic.items()],
                coordinator_epoch=e.pending.coordinator_epoch))
        return WriteTxnMarkersRequest(markers=markers)

    async def _send(self, broker: int, entries: list[_MarkerEntry]) -> None:
        request = self._request(entries)
        try:
            self.requests_sent += 1
            if broker == self.broker_id:
                results = await self.runtime.write_txn_markers(request.markers)
            else:
                results = await self._send_remote(broker, request)
        except (TimeoutError, ConnectionError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed (%s); queueing its markers again",
                     broker, e)
            results = None
        except Exception:  # noqa: BLE001 - never lose markers to a bug
            log.exception("WriteTxnMarkers to broker %d failed", broker)
            results = None
        finally:
            self.in_flight.discard(broker)
        if results is None:
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
            for e in entries:
                if self._current(e.pending) is not None:
                    self.add_markers_to_broker_queue(e.producer_id, e.producer_epoch,
                                                     e.pending, e.partitions)
        else:
            for e in entries:
                self._on_marker_result(e, results.get(e.producer_id))
        self._wakeup.set()

    async def _send_remote(self, broker: int, request: WriteTxnMarkersRequest
                           ) -> dict[int, dict[tuple[str, int], ErrorCode]]:
        resp = await self.links.request(broker, WRITE_TXN_MARKERS, request)
        out: dict[int, dict[tuple[str, int], ErrorCode]] = {}
        for m in resp.markers:
            d = out.setdefault(m.producer_id, {})
            for t in m.topics:
                for p in t.partitions:
                    d[(t.name, p.partition_index)] = ErrorCode(p.error_code)
        return out

    def _on_marker_result(self, e: _MarkerEntry,
                          errors: dict[tuple[str, int], ErrorCode] | None) -> None:
        cur = self._current(e.pending)
        if cur is None:
            return
        if errors is None:
            log.error("WriteTxnMarkers answer lacks producer %d; queueing again", e.producer_id)
            self.add_markers_to_broker_queue(e.producer_id, e.producer_epoch, e.pending,
                                             e.partitions)
            return
        md = cur.metadata
        retry: set[tuple[str, int]] = set()
        for tp in e.partitions:
            error = errors.get(tp, E.UNKNOWN_SERVER_ERROR)
            if error == E.NONE or error in _DONE_WITHOUT_MARKER:
                md.remove_partition(tp)
            elif error in _GIVE_UP:
                log.info("marker for %s-%d of %s failed permanently with %s; no more markers",
                         tp[0], tp[1], e.pending.transactional_id, error.name)
                self.remove_markers_for_txn(e.pending)
                return
            else:
                if error not in _RETRY:
                    log.warning("unexpected %s writing the marker of %s to %s-%d; retrying",
                                error.name, e.pending.transactional_id, tp[0], tp[1])
                retry.add(tp)
        if retry:
            self.add_markers_to_broker_queue(e.producer_id, e.producer_epoch, e.pending, retry)
        else:
            self.maybe_write_txn_completion(e.pending.transactional_id)

    # --- completion --------------------------------------------------------------------------
    def maybe_write_txn_completion(self, transactional_id: str) -> None:
        pending = self.pending.get(transactional_id)
        if pending is None or pending.metadata.topic_partitions:
            return
        del self.pending[transactional_id]
        self._spawn(self.write_txn_completion(pending))

    async def write_txn_completion(self, pending: PendingCompleteTxn) -> None:
        while True:
            err, cur = self.state_manager.get_transaction_state(pending.transactional_id)
            if err != E.NONE or cur is None or cur.coordinator_epoch != pending.coordinator_epoch:
                log.info("not completing %s: %s", pending.transactional_id,
                         err.name if err != E.NONE else "coordinator epoch changed")
                return
            error = await self.state_manager.append_transaction_to_log(
                pending.transactional_id, pending.coordinator_epoch, pending.transit,
                retry_on_error=lambda e: e == E.COORDINATOR_NOT_AVAILABLE)
            if error == E.NONE:
                return
            if error != E.COORDINATOR_NOT_AVAILABLE:
                log.info("completing %s stopped: %s (the next coordinator finishes it)",
                         pending.transactional_id, error.name)
                return
            await asyncio.sleep(RETRY_BACKOFF_MS / 1000)
