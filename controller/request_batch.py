"""ControllerBrokerRequestBatch: collects the controller's decisions of one state change and
sends them per broker (Kafka's AbstractControllerBrokerRequestBatch).

A state change calls ``new_batch()``, adds LeaderAndIsr / StopReplica / UpdateMetadata
entries, and ``send_requests_to_brokers(epoch)``: per broker one LeaderAndIsr (v7), then one
UpdateMetadata (v8) to every broker in the set, then one StopReplica (v4), each queued on
the channel manager. Adding a LeaderAndIsr also adds an UpdateMetadata of that partition for
every live or shutting-down broker. Requests to brokers that are no longer live are dropped.

Coalescing (``hold()`` / ``release()``, used through :meth:`ControllerCore.coalesced_requests`):
while held, ``new_batch`` and ``send_requests_to_brokers`` of the state machines' steps only
accumulate, and the last decision per partition and broker wins; one send at the end. A
controller failover (replica then partition state machine startup) and a broker failure
(elections then ISR shrinks) send each wave's final states, not one batch per step: at
100,000 partitions that is 100,000 partition states per broker instead of 233,000 (Kafka
sends one batch per step; the brokers end in the same state either way). A hold with
``flush_every`` (the elections) may send early, in parts: see :meth:`maybe_flush`.
Partition states are built when sent, once per partition for all its recipients.
A partition of a topic queued for deletion is announced with leader -2
(``LEADER_DURING_DELETE``). ``type`` is UNKNOWN (0): the ZooKeeper controller never sends
FULL requests (those are KRaft-migration only).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from controller.context import EMPTY_ASSIGNMENT, ControllerContext, TopicPartition
from controller.request_encoding import (
    LEADER_AND_ISR_VERSION,
    UPDATE_METADATA_VERSION,
    LeaderAndIsrBatch,
    UpdateMetadataBatch,
    lai_partition_state,
    um_partition_state,
)
from controller.zk_data import LEADER_DURING_DELETE, LeaderIsrAndControllerEpoch, ReplicaAssignment
from protocol.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

__all__ = ["ControllerBrokerRequestBatch", "LEADER_AND_ISR_VERSION", "STOP_REPLICA_VERSION",
           "UPDATE_METADATA_VERSION"]

log = logging.getLogger("state.change.logger")

LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA = 4, 5, 6
STOP_REPLICA_VERSION = 4
TYPE_UNKNOWN = 0
_ZERO_UUID = uuid.UUID(int=0)


_SrState = StopReplicaRequest.StopReplicaPartitionState


class ControllerBrokerRequestBatch:
    """``send(broker_id, api_key, version, request, callback)`` queues one request;
    ``on_leader_and_isr_response(response, broker_id)``,
    ``on_stop_replica_response(broker_id, response, partition_errors_for_deleted)`` are
    called (on the loop) with the responses."""

    def __init__(self, controller_id: int, context: ControllerContext, listener_name: str,
                 send: Callable[[int, int, int, Any, Callable[[Any], None] | None], None],
                 on_leader_and_isr_response: Callable[[Any, int], None] | None = None,
                 on_stop_replica_response: Callable[[int, Any, dict], None] | None = None
                 ) -> None:
        self.controller_id = controller_id
        self.context = context
        self.listener_name = listener_name
        self.send = send
        self.on_leader_and_isr_response = on_leader_and_isr_response
        self.on_stop_replica_response = on_stop_replica_response
        #: broker -> tp -> (state, assignment): the request's partition states are built at
        #: send time (a coalesced batch overwrites most entries before that); broker -> the
        #: partitions sent to it with is_new (sticks once set within the batch)
        self._lai: dict[int, dict[TopicPartition, tuple]] = {}
        self._lai_new: dict[int, set[TopicPartition]] = {}
        self._stop: dict[int, dict[TopicPartition, Any]] = {}
        self._um_brokers: set[int] = set()
        self._um_all_live = False  # UpdateMetadata goes to every live broker too
        self._um_partitions: dict[TopicPartition, None] = {}  # states built at send time
        self._held = 0  # > 0: coalescing (see the module docstring)
        self._flush_every = 0  # while held: send early once this many partitions are in

    def new_batch(self) -> None:
        if self._held:
            return
        if self._lai or self._stop or self._um_brokers or self._um_all_live:
            raise RuntimeError("Controller to broker state change requests batch is not empty "
                               "while creating a new one")

    def clear(self) -> None:
        self._lai.clear()
        self._lai_new.clear()
        self._stop.clear()
        self._um_brokers.clear()
        self._um_all_live = False
        self._um_partitions.clear()

    def hold(self, flush_every: int = 0) -> None:
        """Coalesce: ``send_requests_to_brokers`` accumulates until the matching release.
        ``flush_every`` > 0 (the outermost hold's): :meth:`maybe_flush` sends what has
        accumulated once it holds that many partitions."""
        self._held += 1
        if self._held == 1:
            self._flush_every = flush_every

    def release(self) -> bool:
        """End one ``hold``; True when nothing holds the batch any more (the caller sends)."""
        self._held -= 1
        if self._held == 0:
            self._flush_every = 0
        return self._held == 0

    def maybe_flush(self, controller_epoch: int) -> None:
        """While held with ``flush_every``: send the requests accumulated so far once their
        UpdateMetadata holds ``flush_every`` partitions, and go on holding. A failover's
        elections reach the brokers in parts of that size while the controller still works
        on (and ZooKeeper still writes) the rest; per broker the parts are queued in order,
        each LeaderAndIsr before its UpdateMetadata, so the brokers end as with one send."""
        if self._held and self._flush_every and len(self._um_partitions) >= self._flush_every:
            self._send_all(controller_epoch)

    # ------------------------------------------------------------------ adding

    def add_leader_and_isr(self, broker_ids: Iterable[int], tp: TopicPartition,
                           state: LeaderIsrAndControllerEpoch, assignment: ReplicaAssignment,
                           is_new: bool) -> None:
        """LeaderAndIsr of ``tp`` to ``broker_ids``. ``is_new`` sticks once set for a
        broker within the batch."""
        lai = self._lai
        entry = (state, assignment)
        for b in broker_ids:
            if b < 0:
                continue
            per = lai.get(b)
            if per is None:
                per = lai[b] = {}
            per[tp] = entry
            if is_new:
                self._lai_new.setdefault(b, set()).add(tp)
        self._um_all_live = True
        self._um_partitions[tp] = None

    def add_leader_and_isr_many(self, broker_id: int,
                                entries: dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch,
                                                                    ReplicaAssignment]]) -> None:
        """``add_leader_and_isr(broker_id, tp, state, assignment, is_new=False)`` for every
        ``tp: (state, assignment)`` of ``entries`` (a failover sends each live broker all
        its partitions: one dict update, not 100,000 calls)."""
        if broker_id < 0 or not entries:
            return
        per = self._lai.get(broker_id)
        if per is None:
            self._lai[broker_id] = dict(entries)
        else:
            per.update(entries)
        self._um_all_live = True
        self._um_partitions.update(dict.fromkeys(entries))

    def add_stop_replica(self, broker_ids: Iterable[int], tp: TopicPartition,
                         delete_partition: bool) -> None:
        """StopReplica of ``tp`` to ``broker_ids``; ``delete_partition`` sticks once set.
        The partition states are built at send time, for live brokers only (a failover
        stops every replica of a dead broker: 100,000 of them, all dropped)."""
        for b in broker_ids:
            self.add_stop_replica_many(b, (tp,), delete_partition)

    def add_stop_replica_many(self, broker_id: int, tps: Iterable[TopicPartition],
                              delete_partition: bool) -> None:
        """``add_stop_replica([broker_id], tp, delete_partition)`` for each of ``tps``.
        Nothing is kept for a broker that is not live: its requests are dropped at send
        (the live brokers do not change within one controller event)."""
        if broker_id not in self.context.live_brokers:
            return
        stop = self._stop.get(broker_id)
        if stop is None:
            stop = self._stop[broker_id] = {}
        leadership = self.context.leadership
        for tp in tps:
            state = leadership.get(tp)
            old = stop.get(tp)
            stop[tp] = (state.leader_epoch if state is not None else -1,
                        delete_partition or (old is not None and old[1]))

    def add_update_metadata(self, broker_ids: Iterable[int],
                            partitions: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata for ``partitions`` to ``broker_ids``; the partition states are
        read from the context when the batch is sent (once per partition, however many
        times it was added)."""
        self._um_brokers.update(b for b in broker_ids if b >= 0)
        for tp in partitions:
            self._um_partitions[tp] = None

    def _um_states(self) -> dict[str, tuple[list, list[bytes]]]:
        """The UpdateMetadata partition states from the context, per topic (in the order
        added): the state tuples and their encodings (see
        :mod:`controller.request_encoding`). The offline replicas are worked out once per
        replica list unless some log dir is offline: 100,000 partitions have a few hundred
        distinct lists."""
        ctx = self.context
        by_topic: dict[str, tuple[list, list[bytes]]] = {}
        deleting = ctx.topics_to_be_deleted
        leadership, assignments = ctx.leadership, ctx.assignments
        offline_of: dict[tuple, tuple] = {}
        per_partition = bool(ctx.replicas_on_offline_dirs)
        for tp in self._um_partitions:
            state = leadership.get(tp)
            if state is None:
                log.debug("Leader not yet assigned for partition %s-%d. Skip sending "
                          "UpdateMetadataRequest.", *tp)
                continue
            topic, p = tp
            replicas = assignments.get(topic, {}).get(p, EMPTY_ASSIGNMENT).replicas
            leader = LEADER_DURING_DELETE if deleting and topic in deleting else state.leader
            if per_partition:
                offline = tuple(r for r in replicas if not ctx.is_replica_online(r, tp))
            else:
                offline = offline_of.get(replicas)
                if offline is None:
                    offline = offline_of[replicas] = tuple(  # depends on tp only via log dirs
                        r for r in replicas if not ctx.is_replica_online(r, tp))
            entry = (p, state.controller_epoch, leader, state.leader_epoch, state.isr,
                     state.partition_epoch, replicas, offline)
            got = by_topic.get(topic)
            if got is None:
                got = by_topic[topic] = ([], [])
            got[0].append(entry)
            got[1].append(um_partition_state(*entry))
        return by_topic

    # ------------------------------------------------------------------ sending

    def send_requests_to_brokers(self, controller_epoch: int) -> None:
        if not self._held:
            self._send_all(controller_epoch)

    def _send_all(self, controller_epoch: int) -> None:
        try:
            self._send_leader_and_isr(controller_epoch)
            self._send_update_metadata(controller_epoch)
            self._send_stop_replica(controller_epoch)
        finally:
            self.clear()

    def _send_leader_and_isr(self, epoch: int) -> None:
        """One LeaderAndIsr per live broker; each partition state is encoded once for all
        the brokers that get it (see :mod:`controller.request_encoding`)."""
        ctx = self.context
        live = ctx.live_or_shutting_down_broker_ids
        built: dict[TopicPartition, tuple] = {}  # tp -> (entry, its encoding)
        for broker, entries in self._lai.items():
            if broker not in live:
                continue
            new = self._lai_new.get(broker, ())
            leaders: set[int] = set()
            n_lead = 0
            by_topic: dict[str, tuple[list[int], list[bytes]]] = {}
            current = None
            partitions: list[int] = []
            encodings: list[bytes] = []
            for tp, (state, assignment) in entries.items():  # by topic, in the order added
                is_new = tp in new
                got = built.get(tp)
                if got is not None and got[0] is state and got[1] is assignment \
                        and got[2] is is_new:
                    encoded = got[3]
                else:
                    encoded = lai_partition_state(tp[1], state, assignment, is_new)
                    built[tp] = (state, assignment, is_new, encoded)
                leader = state.leader
                leaders.add(leader)
                if leader == broker:
                    n_lead += 1
                if tp[0] != current:
                    current = tp[0]
                    group = by_topic.get(current)
                    if group is None:
                        group = by_topic[current] = ([], [])
                    partitions, encodings = group
                partitions.append(tp[1])
                encodings.append(encoded)
            log.info("Sending LeaderAndIsr request to broker %d with %d become-leader and %d "
                     "become-follower partitions", broker, n_lead, len(entries) - n_lead)
            live_leaders = []
            for b in ctx.live_or_shutting_down_brokers():
                if b.id in leaders:
                    ep = next((e for e in b.endpoints if e.listener_name == self.listener_name),
                              None)
                    if ep is not None:
                        live_leaders.append(LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                            broker_id=b.id, host_name=ep.host, port=ep.port))
            request = LeaderAndIsrBatch(
                [(t, ctx.topic_ids.get(t, _ZERO_UUID), parts, encoded)
                 for t, (parts, encoded) in by_topic.items()], entries, new,
                controller_id=self.controller_id, is_k_raft_controller=False,
                controller_epoch=epoch, broker_epoch=ctx.live_broker_epochs.get(broker, -1),
                type=TYPE_UNKNOWN, live_leaders=live_leaders)
            callback = None
            if self.on_leader_and_isr_response is not None:
                callback = functools.partial(_swap, self.on_leader_and_isr_response, broker)
            self.send(broker, LEADER_AND_ISR, LEADER_AND_ISR_VERSION, request, callback)

    def _send_update_metadata(self, epoch: int) -> None:
        ctx = self.context
        if self._um_all_live:
            self._um_brokers |= ctx.live_or_shutting_down_broker_ids
        if not self._um_brokers:
            return
        by_topic = self._um_states()
        log.info("Sending UpdateMetadata request to brokers %s for %d partitions",
                 sorted(self._um_brokers), sum(len(parts) for parts, _ in by_topic.values()))
        topics = [(t, ctx.topic_ids.get(t, _ZERO_UUID), parts, encoded)
                  for t, (parts, encoded) in by_topic.items()]
        live_brokers = [UpdateMetadataRequest.UpdateMetadataBroker(
            id=b.id, rack=b.rack, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
                port=e.port, host=e.host, listener=e.listener_name,
                security_protocol=e.security_protocol_id) for e in b.endpoints])
            for b in ctx.live_or_shutting_down_brokers()]
        shared: dict[int, bytes] = {}  # one encoding for every broker's copy
        for broker in sorted(self._um_brokers & ctx.live_or_shutting_down_broker_ids):
            request = UpdateMetadataBatch(
                topics, shared, controller_id=self.controller_id, is_k_raft_controller=False,
                type=TYPE_UNKNOWN, controller_epoch=epoch,
                broker_epoch=ctx.live_broker_epochs.get(broker, -1), live_brokers=live_brokers)
            self.send(broker, UPDATE_METADATA, UPDATE_METADATA_VERSION, request, None)

    def _send_stop_replica(self, epoch: int) -> None:
        ctx = self.context
        live = ctx.live_or_shutting_down_broker_ids
        for broker, states in self._stop.items():
            if broker not in live:
                continue
            by_topic: dict[str, list] = {}
            for (topic, p), (leader_epoch, delete) in states.items():  # by topic, as added
                by_topic.setdefault(topic, []).append(_SrState(
                    partition_index=p, leader_epoch=leader_epoch, delete_partition=delete))
            log.info("Sending StopReplica request for %d replicas to broker %d", len(states),
                     broker)
            request = StopReplicaRequest(
                controller_id=self.controller_id, is_k_raft_controller=False,
                controller_epoch=epoch, broker_epoch=ctx.live_broker_epochs.get(broker, -1),
                topic_states=[StopReplicaRequest.StopReplicaTopicState(
                    topic_name=t, partition_states=ps) for t, ps in by_topic.items()])
            deleted = {tp for tp, (_e, delete) in states.items() if delete}
            callback = None
            if self.on_stop_replica_response is not None:
                callback = functools.partial(self._stop_replica_done,
                                             self.on_stop_replica_response, broker,
                                             frozenset(deleted))
            self.send(broker, STOP_REPLICA, STOP_REPLICA_VERSION, request, callback)

    def _stop_replica_done(self, handler, broker: int, deleted: frozenset, response) -> None:
        """Report the errors of partitions whose deletion was asked for topics still being
        deleted (Kafka's responseCallback of sendStopReplicaRequests)."""
        errors: dict[TopicPartition, int] = {}
        for pe in response.partition_errors:
            tp = (pe.topic_name, pe.partition_index)
            if tp in deleted and self.context.is_topic_queued_up_for_deletion(tp[0]):
                errors[tp] = pe.error_code if not response.error_code else response.error_code
        if errors:
            handler(broker, response, errors)


def _swap(handler: Callable[[Any, int], None], broker: int, response: Any) -> None:
    handler(response, broker)

