"""ControllerContext: the ZooKeeper controller's in-memory view of the cluster (Kafka's
``ControllerContext``), and the partition / replica states with their valid previous states.

Only the controller's event-queue task touches it. Contents: controller epoch and its znode
version, live brokers with their broker epochs (``/brokers/ids/<id>`` czxid), brokers in
controlled shutdown, topics with topic IDs and replica assignments, partition leadership
(``LeaderIsrAndControllerEpoch`` with the partition epoch), partition and replica states,
topics queued for deletion, partitions being reassigned.

Partition states (PartitionStateMachine) and their valid previous states::

  NewPartition          <- NonExistentPartition
  OnlinePartition       <- NewPartition, OnlinePartition, OfflinePartition
  OfflinePartition      <- NewPartition, OnlinePartition, OfflinePartition
  NonExistentPartition  <- OfflinePartition

Replica states (ReplicaStateMachine)::

  NewReplica                 <- NonExistentReplica
  OnlineReplica              <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
  OfflineReplica             <- NewReplica, OnlineReplica, OfflineReplica, ReplicaDeletionIneligible
  ReplicaDeletionStarted     <- OfflineReplica
  ReplicaDeletionSuccessful  <- ReplicaDeletionStarted
  ReplicaDeletionIneligible  <- OfflineReplica, ReplicaDeletionStarted
  NonExistentReplica         <- ReplicaDeletionSuccessful
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable

from controller.zk_data import BrokerInfo, LeaderIsrAndControllerEpoch, ReplicaAssignment

__all__ = ["ControllerContext", "PartitionReplica", "PartitionState", "ReplicaState",
           "TopicPartition", "origin_replicas", "reassign_to", "remove_replica",
           "target_replicas"]

TopicPartition = tuple[str, int]
PartitionReplica = tuple[TopicPartition, int]
State = LeaderIsrAndControllerEpoch


class PartitionState(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"

    __hash__ = object.__hash__  # members are singletons: identity, in C (Enum's is Python)

    def __str__(self) -> str:
        return self.value


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    __hash__ = object.__hash__  # members are singletons: identity, in C (Enum's is Python)

    def __str__(self) -> str:
        return self.value


_P, _R = PartitionState, ReplicaState
VALID_PREVIOUS_PARTITION_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    _P.NEW: frozenset({_P.NON_EXISTENT}),
    _P.ONLINE: frozenset({_P.NEW, _P.ONLINE, _P.OFFLINE}),
    _P.OFFLINE: frozenset({_P.NEW, _P.ONLINE, _P.OFFLINE}),
    _P.NON_EXISTENT: frozenset({_P.OFFLINE}),
}
VALID_PREVIOUS_REPLICA_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}

EMPTY_ASSIGNMENT = ReplicaAssignment(())


# --------------------------------------------------------------------- ReplicaAssignment helpers
# (Kafka's ReplicaAssignment: replicas = origin + adding during a reassignment, KIP-455)

def origin_replicas(a: ReplicaAssignment) -> tuple[int, ...]:
    return tuple(r for r in a.replicas if r not in a.adding_replicas)


def target_replicas(a: ReplicaAssignment) -> tuple[int, ...]:
    return tuple(r for r in a.replicas if r not in a.removing_replicas)


def is_being_reassigned(a: ReplicaAssignment) -> bool:
    return bool(a.adding_replicas or a.removing_replicas)


def reassign_to(a: ReplicaAssignment, target: Iterable[int]) -> ReplicaAssignment:
    """RS = (target ++ origin) distinct, AR = RS - origin, RR = RS - target."""
    target = list(target)
    origin = origin_replicas(a)
    full: list[int] = []
    for r in [*target, *origin]:
        if r not in full:
            full.append(r)
    return ReplicaAssignment(tuple(full), tuple(r for r in full if r not in origin),
                             tuple(r for r in full if r not in target))


def remove_replica(a: ReplicaAssignment, replica: int) -> ReplicaAssignment:
    return ReplicaAssignment(tuple(r for r in a.replicas if r != replica),
                             tuple(r for r in a.adding_replicas if r != replica),
                             tuple(r for r in a.removing_replicas if r != replica))


class ControllerContext:
    def __init__(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = -1
        self.reset()

    def reset(self) -> None:
        """Forget everything but the epoch (Kafka's resetContext on resignation)."""
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.live_broker_epochs: dict[int, int] = {}
        self.shutting_down_broker_ids: set[int] = set()
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self.leadership: dict[TopicPartition, State] = {}
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.replica_states: dict[PartitionReplica, ReplicaState] = {}
        self.topics_to_be_deleted: set[str] = set()
        self.topics_with_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()
        self.partitions_being_reassigned: set[TopicPartition] = set()
        #: broker -> its replicas in failed log dirs (KIP-112: answered KAFKA_STORAGE_ERROR)
        self.replicas_on_offline_dirs: dict[int, set[TopicPartition]] = {}

    # ------------------------------------------------------------------ brokers

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    def live_or_shutting_down_brokers(self) -> list[BrokerInfo]:
        return [self.live_brokers[b] for b in sorted(self.live_brokers)]

    def is_live_broker(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers and broker_id not in self.shutting_down_broker_ids

    def add_live_brokers(self, brokers: dict[int, tuple[BrokerInfo, int]]) -> None:
        for b, (info, epoch) in brokers.items():
            self.live_brokers[b] = info
            self.live_broker_epochs[b] = epoch

    def remove_live_brokers(self, ids: Iterable[int]) -> None:
        for b in ids:
            self.live_brokers.pop(b, None)
            self.live_broker_epochs.pop(b, None)

    def is_replica_online(self, broker_id: int, tp: TopicPartition,
                          include_shutting_down: bool = False) -> bool:
        """The broker is live (or shutting down, if included) and the replica is not in
        one of its failed log dirs (called once per replica at failover: kept tight)."""
        if broker_id not in self.live_brokers or (
                not include_shutting_down and broker_id in self.shutting_down_broker_ids):
            return False
        offline = self.replicas_on_offline_dirs
        return not offline or tp not in offline.get(broker_id, ())

    # ------------------------------------------------------------------ topics and assignment

    def add_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def partition_full_replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.assignments.get(tp[0], {}).get(tp[1], EMPTY_ASSIGNMENT)

    def partition_replica_assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.partition_full_replica_assignment(tp).replicas

    def update_partition_full_replica_assignment(self, tp: TopicPartition,
                                                 assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp[0], {})[tp[1]] = assignment

    def partition_assignments_for_topic(self, topic: str) -> dict[int, ReplicaAssignment]:
        return self.assignments.get(topic, {})

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, ps in self.assignments.items() for p in ps]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [(t, p) for t, ps in self.assignments.items() for p, a in ps.items()
                if broker_id in a.replicas]

    def replicas_on_brokers(self, broker_ids: set[int]) -> list[PartitionReplica]:
        return [((t, p), r) for t, ps in self.assignments.items() for p, a in ps.items()
                for r in a.replicas if r in broker_ids]

    def replicas_for_partitions(self, tps: Iterable[TopicPartition]) -> list[PartitionReplica]:
        return [(tp, r) for tp in tps for r in self.partition_replica_assignment(tp)]

    def replicas_for_topic(self, topic: str) -> list[PartitionReplica]:
        return [((topic, p), r) for p, a in self.assignments.get(topic, {}).items()
                for r in a.replicas]

    def remove_topic(self, topic: str) -> None:
        for p, a in self.assignments.pop(topic, {}).items():
            tp = (topic, p)
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.partitions_being_reassigned.discard(tp)
            for r in a.replicas:  # its replicas only, not a scan of every replica state
                self.replica_states.pop((tp, r), None)
        self.all_topics.discard(topic)
        tid = self.topic_ids.pop(topic, None)
        if tid is not None:
            self.topic_names.pop(tid, None)
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    # ------------------------------------------------------------------ leadership

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {tp for tp, s in self.leadership.items()
                if s.leader == broker_id and not self.is_topic_queued_up_for_deletion(tp[0])}

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return [tp for tp, s in self.leadership.items()
                if not self.is_replica_online(s.leader, tp)
                and not self.is_topic_queued_up_for_deletion(tp[0])]

    def partitions_with_leaders(self) -> list[TopicPartition]:
        return [tp for tp in self.leadership if not self.is_topic_queued_up_for_deletion(tp[0])]

    # ------------------------------------------------------------------ states

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.partition_states.get(tp, PartitionState.NON_EXISTENT)

    def partitions_in_states(self, states: set[PartitionState], topic: str | None = None
                             ) -> list[TopicPartition]:
        return [tp for tp, s in self.partition_states.items()
                if s in states and (topic is None or tp[0] == topic)]

    def check_valid_partition_state_change(self, tps: Iterable[TopicPartition],
                                           target: PartitionState
                                           ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        valid, invalid = [], []
        allowed = VALID_PREVIOUS_PARTITION_STATES[target]
        for tp in tps:
            (valid if self.partition_state(tp) in allowed else invalid).append(tp)
        return valid, invalid

    def replica_state(self, replica: PartitionReplica) -> ReplicaState:
        return self.replica_states.get(replica, ReplicaState.NON_EXISTENT)

    def check_valid_replica_state_change(self, replicas: Iterable[PartitionReplica],
                                         target: ReplicaState
                                         ) -> tuple[list[PartitionReplica], list[PartitionReplica]]:
        valid, invalid = [], []
        allowed = VALID_PREVIOUS_REPLICA_STATES[target]
        for r in replicas:
            (valid if self.replica_state(r) in allowed else invalid).append(r)
        return valid, invalid

    def online_and_offline_replicas(self) -> tuple[list[PartitionReplica], list[PartitionReplica]]:
        online, offline = [], []
        for t, ps in self.assignments.items():
            for p, a in ps.items():
                for r in a.replicas:
                    if self.is_replica_online(r, (t, p)):
                        online.append(((t, p), r))
                    else:
                        offline.append(((t, p), r))
        return online, offline

    def replicas_in_state(self, topic: str, state: ReplicaState) -> list[PartitionReplica]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_state(r) == state]

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_state(r) == state for r in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_state(r) == state for r in self.replicas_for_topic(topic))

    # ------------------------------------------------------------------ deletion

    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_to_be_deleted.update(topics)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return self.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED)

    # ------------------------------------------------------------------ metrics

    def offline_partition_count(self) -> int:
        return sum(1 for tp, s in self.partition_states.items()
                   if s == PartitionState.OFFLINE and
                   not self.is_topic_queued_up_for_deletion(tp[0]))

    def preferred_replica_imbalance_count(self) -> int:
        count = 0
        for tp, s in self.leadership.items():
            replicas = self.partition_replica_assignment(tp)
            if replicas and s.leader != replicas[0] and \
                    not self.is_topic_queued_up_for_deletion(tp[0]):
                count += 1
        return count
