"""Partition leader election algorithms (Kafka's PartitionLeaderElectionAlgorithms), pure.

Each function takes the partition's replica assignment, its current state (None if it has
none yet), the live broker ids and the current controller epoch, and returns the new
state. Every election bumps the leader epoch by one and the partition epoch (the state
znode's version) by one; a partition's first state has leader epoch 0, partition epoch 0.
"""

from __future__ import annotations

from collections.abc import Collection

from controller.zk_data import INITIAL_LEADER_EPOCH, LeaderIsrAndControllerEpoch
from protocol.errors import ErrorCode

State = LeaderIsrAndControllerEpoch


def next_state(state: State | None, leader: int, isr: tuple[int, ...],
               controller_epoch: int) -> State:
    """The state after electing ``leader`` with ``isr``."""
    if state is None:
        return State(leader, INITIAL_LEADER_EPOCH, isr, controller_epoch, 0)
    return State(leader, state.leader_epoch + 1, isr, controller_epoch, state.partition_epoch + 1)


def offline_election(replicas: tuple[int, ...], state: State | None, live: Collection[int],
                     allow_unclean: bool, controller_epoch: int) -> State | None:
    """OfflinePartitionLeaderElectionStrategy: the first live replica (assignment order)
    that is in the ISR, ISR shrunk to live members; else, if ``allow_unclean``, the first
    live replica with ISR = [it]. None when no replica is eligible."""
    isr = state.isr if state is not None else tuple(replicas)
    clean = [r for r in replicas if r in live and r in isr]
    if clean:
        return next_state(state, clean[0], tuple(r for r in isr if r in live), controller_epoch)
    if allow_unclean:
        for r in replicas:
            if r in live:
                return next_state(state, r, (r,), controller_epoch)
    return None


def preferred_election(replicas: tuple[int, ...], state: State | None, live: Collection[int],
                       controller_epoch: int) -> tuple[ErrorCode, State | None]:
    """PreferredReplicaPartitionLeaderElectionStrategy: ELECTION_NOT_NEEDED when the first
    replica already leads; PREFERRED_LEADER_NOT_AVAILABLE when it is not live or not in the
    ISR; else NONE with the new state."""
    preferred = replicas[0]
    if state is not None and state.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    if preferred not in live or state is None or preferred not in state.isr:
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None
    return ErrorCode.NONE, next_state(state, preferred, state.isr, controller_epoch)


# --------------------------------------------------------------------------- ZooKeeper mode
# Kafka's PartitionLeaderElectionAlgorithms: pick the new leader only; the controller's
# partition state machine builds the new state and writes it conditionally.

def offline_partition_leader(assignment: tuple[int, ...], isr: Collection[int],
                             live: Collection[int], unclean_enabled: bool) -> int | None:
    """The first live replica (assignment order) in the ISR; else, if unclean election is
    enabled, the first live replica."""
    for r in assignment:
        if r in live and r in isr:
            return r
    if unclean_enabled:
        for r in assignment:
            if r in live:
                return r
    return None


def reassign_partition_leader(reassignment: tuple[int, ...], isr: Collection[int],
                              live: Collection[int]) -> int | None:
    """The first live target replica in the ISR."""
    return next((r for r in reassignment if r in live and r in isr), None)


def preferred_replica_partition_leader(assignment: tuple[int, ...], isr: Collection[int],
                                       live: Collection[int]) -> int | None:
    """The first replica of the assignment, when it is live and in the ISR."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader(assignment: tuple[int, ...], isr: Collection[int],
                                         live: Collection[int],
                                         shutting_down: Collection[int]) -> int | None:
    """The first live ISR replica that is not shutting down."""
    return next((r for r in assignment if r in live and r in isr and r not in shutting_down),
                None)
