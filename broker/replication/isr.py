"""Leader-side ISR changes (Kafka's Partition.maybeExpandIsr / maybeShrinkIsr /
submitAlterPartition), mixed into `broker.partition.Partition`.

An ISR change is proposed to the controller through `Partition.alter_partition` (the
AlterPartitionManager) with the current leader epoch and partition epoch; only one change
is in flight at a time (`pending_isr`). The controller's answer:
- success with our leader epoch and a partition epoch not older than ours: the proposed ISR
  is committed (new partition epoch), the HW may move;
- OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA: not applied, the committed ISR stays and a
  later check may propose again; a replica whose addition was refused (a broker shutting
  down that still fetches, say) is proposed again only after a back-off doubling from
  `EXPAND_BACKOFF_MS[0]` to `EXPAND_BACKOFF_MS[1]`, and only the first refusal is logged
  at INFO (Kafka proposes it again on every fetch);
- UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION,
  INVALID_REQUEST, NEW_LEADER_ELECTED: our state is stale; the change stays pending until
  the controller's next LeaderAndIsr replaces the partition state (the controller sends one
  whenever it changed the state itself), after which ISR changes are proposed afresh;
- anything else: sent again.
A LeaderAndIsr of the same epochs replaces a pending change (Kafka's makeLeader); if that
change's answer then arrives committed at our leader epoch with a newer partition epoch, it
is adopted (ZooKeeper mode sends no other news of it; see `_adopt_newer_commit`).
"""

from __future__ import annotations

import logging

from broker import metrics
from broker.replication.batched_log import isr_change_log
from broker.replication.replica_state import (
    FollowerState,
    LeaderAndIsr,
    PendingIsrChange,
    shared_ids,
)
from protocol.errors import ErrorCode

__all__ = ["LeaderIsrMixin"]

ISR_SHRINKS = metrics.meter("kafka.server:type=ReplicaManager,name=IsrShrinksPerSec")
ISR_EXPANDS = metrics.meter("kafka.server:type=ReplicaManager,name=IsrExpandsPerSec")
log = logging.getLogger("broker.partition")

# AlterPartition errors after which the partition stays pending until the next LeaderAndIsr
# (Kafka's handleAlterPartitionError); OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA restore the
# committed ISR; anything else is retried.
_AWAIT_METADATA = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION, ErrorCode.INVALID_REQUEST,
    ErrorCode.NEW_LEADER_ELECTED})
_NOT_APPLIED = frozenset({ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA})
#: (first, longest) wait in ms before proposing again a replica the controller refused
EXPAND_BACKOFF_MS = (500, 5000)



class LeaderIsrMixin:
    """ISR expansion and shrink for a leader Partition (see the module docstring)."""

    __slots__ = ()  # the state lives in Partition's slots

    # --- ISR changes (leader) ----------------------------------------------------------------
    def maybe_expand_isr(self, f: FollowerState) -> None:
        """Propose adding `f` to the ISR once its LEO reaches the HW and the start of the
        current leader epoch (Kafka's maybeExpandIsr); one change in flight at a time."""
        if self.pending_isr is not None or self.alter_partition is None or \
                f.broker_id in self.isr or not self.is_leader:
            return
        start = self.leader_epoch_start_offset
        if start is None or f.log_end_offset < self.log.high_watermark or \
                f.log_end_offset < start:
            return
        if not self.is_replica_isr_eligible(f.broker_id):
            return
        refused_adds = self.refused_isr_adds
        refused = refused_adds.get(f.broker_id) if refused_adds else None
        if refused is not None and self.time_ms() < refused[0]:
            return
        if refused:
            log.debug("%s-%d: expanding ISR from %s to %s", self.topic, self.partition,
                      list(self.isr), list(self.isr) + [f.broker_id])
        else:
            isr_change_log.add("expanding ISR", f"{self.topic}-{self.partition}: expanding "
                               f"ISR from {list(self.isr)} to {list(self.isr) + [f.broker_id]}")
        self._submit_isr_change("expand", self.isr + (f.broker_id,), frozenset((f.broker_id,)))

    def out_of_sync_replicas(self, now_ms: int | None = None) -> set[int]:
        """ISR followers not caught up within replica.lag.time.max.ms (none while an ISR
        change is in flight)."""
        if self.pending_isr is not None or not self.is_leader:
            return set()
        now = self.time_ms() if now_ms is None else now_ms
        leo = self.log.log_end_offset
        out = set()
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            f = self.followers.get(r)
            if f is None or not f.is_caught_up(leo, now, self.replica_lag_time_max_ms):
                out.add(r)
        return out

    def maybe_shrink_isr(self, now_ms: int | None = None) -> bool:
        """Propose removing out-of-sync followers from the ISR (Kafka's maybeShrinkIsr).
        True if a change was submitted."""
        if self.alter_partition is None:
            return False
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return False
        new_isr = tuple(r for r in self.isr if r not in out)
        details = ", ".join(
            f"{r} (LEO {self.followers[r].log_end_offset}, last caught up "
            f"{self.followers[r].last_caught_up_ms})" if r in self.followers else str(r)
            for r in sorted(out))
        isr_change_log.add("shrinking ISR", f"{self.topic}-{self.partition}: shrinking ISR "
                           f"from {list(self.isr)} to {list(new_isr)} (HW "
                           f"{self.log.high_watermark}, LEO {self.log.log_end_offset}); out of "
                           f"sync: {details}")
        self._submit_isr_change("shrink", new_isr, frozenset(out))
        return True

    def _submit_isr_change(self, kind: str, isr: tuple[int, ...], changed: frozenset[int]
                           ) -> None:
        proposed = LeaderAndIsr(self.local_broker_id, self.leader_epoch, isr,
                                self.partition_epoch, self.leader_recovery_state)
        pending = PendingIsrChange(kind, proposed, self.isr, changed)
        self.pending_isr = pending
        self._send_isr_change(pending)

    def _send_isr_change(self, pending: PendingIsrChange) -> None:
        fut = self.alter_partition(self, pending.proposed)
        fut.add_done_callback(lambda f: self._on_isr_change_answer(pending, f))

    def _adopt_newer_commit(self, result: LeaderAndIsr) -> None:
        """A change that a LeaderAndIsr of the same epochs replaced (a controller batch built
        before the change was committed) was committed after all: its answer, at our leader
        epoch with a newer partition epoch, is the controller's latest state. Kafka ignores it
        and waits for metadata; in ZooKeeper mode none comes, so the leader would stay one
        partition epoch behind, every later change refused with INVALID_UPDATE_VERSION (seen
        at 100,000 partitions, issue 22). A change proposed since, from the older epoch, is
        dropped (its answer is ignored) and proposed afresh by the next check."""
        if not self.is_leader or result.leader_epoch != self.leader_epoch or \
                result.partition_epoch <= self.partition_epoch:
            return
        log.info("%s-%d: adopting the committed ISR %s (partition epoch %d) of an earlier "
                 "AlterPartition", self.topic, self.partition, list(result.isr),
                 result.partition_epoch)
        self.isr = shared_ids(result.isr)
        self.partition_epoch = result.partition_epoch
        self.leader_recovery_state = result.leader_recovery_state
        self.pending_isr = None
        if self.maybe_increment_high_watermark():
            self.on_delayed_wake()

    def _on_isr_change_answer(self, pending: PendingIsrChange, fut) -> None:
        """Kafka's submitAlterPartition completion: apply the controller's answer unless the
        partition state moved on meanwhile (a LeaderAndIsr replaced it)."""
        if fut.cancelled():
            return
        exc = fut.exception()  # retrieved even when the answer is ignored
        if self.deleted:
            return
        if self.pending_isr is not pending:
            if exc is None:
                self._adopt_newer_commit(fut.result())
            return
        if exc is None:
            result: LeaderAndIsr = fut.result()
            if result.leader_epoch != self.leader_epoch or \
                    result.partition_epoch < self.partition_epoch:
                log.info("%s-%d: ignoring AlterPartition answer %s (leader epoch %d, partition "
                         "epoch %d)", self.topic, self.partition, result, self.leader_epoch,
                         self.partition_epoch)
                return
            self.isr = shared_ids(result.isr)
            self.partition_epoch = result.partition_epoch
            self.leader_recovery_state = result.leader_recovery_state
            self.pending_isr = None
            refused_adds = self.refused_isr_adds
            if refused_adds:
                for b in pending.changed:
                    refused_adds.pop(b, None)
            (ISR_SHRINKS if pending.kind == "shrink" else ISR_EXPANDS).mark()
            isr_change_log.add("ISR updated", f"{self.topic}-{self.partition}: ISR updated to "
                               f"{list(self.isr)}"
                               f"{' (under-min-isr)' if self.is_under_min_isr else ''} and "
                               f"partition epoch to {self.partition_epoch}")
            if self.maybe_increment_high_watermark():
                self.on_delayed_wake()
            elif pending.kind == "shrink":
                self.on_delayed_wake()  # parked acks=-1 produces re-check min.insync.replicas
            return
        code = getattr(exc, "code", ErrorCode.UNKNOWN_SERVER_ERROR)
        if code in _NOT_APPLIED:
            self.pending_isr = None
            first = True
            if pending.kind == "expand":
                if self.refused_isr_adds is None:
                    self.refused_isr_adds = {}
                for b in pending.changed:
                    before = self.refused_isr_adds.get(b)
                    first = first and before is None
                    wait = EXPAND_BACKOFF_MS[0] if before is None else \
                        min(2 * before[1], EXPAND_BACKOFF_MS[1])
                    self.refused_isr_adds[b] = (self.time_ms() + wait, wait)
            line = (f"{self.topic}-{self.partition}: AlterPartition {pending.proposed} "
                    f"rejected ({ErrorCode(code).name}); ISR stays {list(self.isr)}"
                    f"{'; proposing it again after a back-off' if pending.kind == 'expand' else ''}")
            if first:
                isr_change_log.add("AlterPartition rejected", line)
            else:
                log.debug("%s", line)
            if self.maybe_increment_high_watermark():  # a rejected expansion held the HW
                self.on_delayed_wake()
        elif code in _AWAIT_METADATA:
            isr_change_log.add("AlterPartition failed", f"{self.topic}-{self.partition}: "
                               f"AlterPartition {pending.proposed} failed "
                               f"({ErrorCode(code).name}); awaiting new leader and ISR state")
        else:
            log.warning("%s-%d: AlterPartition %s failed (%s); retrying", self.topic,
                        self.partition, pending.proposed, exc)
            self._send_isr_change(pending)

