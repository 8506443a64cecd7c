"""DelayedProduce / DelayedFetch completion cases on the MockTimer, with stand-in partitions."""

from __future__ import annotations

from broker.purgatory import DelayedOperationPurgatory, MockTimer, TopicPartitionKey
from broker.purgatory.delayed_fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartitionStatus,
    PartitionFetchInfo,
)
from broker.purgatory.delayed_produce import (
    DelayedProduce,
    ProducePartitionResult,
    ProducePartitionStatus,
)
from protocol.errors import ErrorCode

KEY = TopicPartitionKey("t", 0)


class _Log:
    def __init__(self) -> None:
        self.log_end_offset = 0


class StubPartition:
    """The attributes the delayed operations read from a Partition."""

    def __init__(self) -> None:
        self.is_leader = True
        self.deleted = False
        self.leader_epoch = 0
        self.high_watermark = 0
        self.isr = (1,)
        self.min_insync_replicas = 1
        self.hw_bytes = 0
        self.end_bytes = 0
        self.log = _Log()

    def append(self, n_bytes: int, hw_too: bool = True) -> None:
        self.log.log_end_offset += 1
        self.end_bytes += n_bytes
        if hw_too:
            self.high_watermark = self.log.log_end_offset
            self.hw_bytes = self.end_bytes

    def check_enough_replicas_reached_offset(self, required):
        if not self.is_leader:
            return True, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark >= required:
            return True, ErrorCode.NONE
        return False, ErrorCode.NONE


class Harness:
    def __init__(self) -> None:
        self.timer = MockTimer()
        self.purgatory = DelayedOperationPurgatory("test", self.timer)
        self.partitions = {("t", 0): StubPartition()}
        self.completions: list = []
        self.reads = 0

    def get(self, topic, p):
        return self.partitions.get((topic, p))

    def read(self, params, infos):
        self.reads += 1
        return {"read": self.reads}

    def fetch(self, min_bytes=10, max_wait=100, replica_id=-1, epoch=-1, start=None):
        part = self.partitions[("t", 0)]
        counter = part.end_bytes if replica_id >= 0 else part.hw_bytes
        st = FetchPartitionStatus("t", 0, PartitionFetchInfo(0, 1000, epoch), part,
                                  counter if start is None else start)
        op = DelayedFetch(max_wait, FetchParams(replica_id=replica_id, max_wait_ms=max_wait,
                                                min_bytes=min_bytes), [st], [], self.get,
                          self.read, self.completions.append)
        self.purgatory.try_complete_else_watch(op, [KEY])
        return op

    def produce(self, required=1, timeout=100):
        statuses = {("t", 0): ProducePartitionStatus(required, ProducePartitionResult(0, 0, 0))}
        op = DelayedProduce(timeout, statuses, self.get, self.completions.append)
        self.purgatory.try_complete_else_watch(op, [KEY])
        return op


def test_fetch_case_e_min_bytes_reached_by_hw_bytes():
    h = Harness()
    op = h.fetch(min_bytes=10)
    part = h.partitions[("t", 0)]
    part.append(6)
    h.purgatory.check_and_complete(KEY)
    assert not op.is_completed
    part.append(4, hw_too=False)  # appended but not below the HW: consumers wait
    h.purgatory.check_and_complete(KEY)
    assert not op.is_completed
    part.high_watermark, part.hw_bytes = part.log.log_end_offset, part.end_bytes
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed and h.completions == [{"read": 1}]


def test_fetch_follower_counts_log_end_bytes():
    h = Harness()
    op = h.fetch(min_bytes=5, replica_id=2)
    h.partitions[("t", 0)].append(5, hw_too=False)
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed


def test_fetch_case_a_leadership_moved():
    h = Harness()
    op = h.fetch()
    h.partitions[("t", 0)].is_leader = False
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed


def test_fetch_case_b_deleted_or_recreated():
    h = Harness()
    op = h.fetch()
    del h.partitions[("t", 0)]
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed
    h.partitions[("t", 0)] = StubPartition()
    op = h.fetch()
    h.partitions[("t", 0)] = StubPartition()  # same name, a new partition object
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed


def test_fetch_case_c_log_truncated():
    h = Harness()
    part = h.partitions[("t", 0)]
    part.append(100)
    op = h.fetch(min_bytes=1000)
    part.hw_bytes = 10  # counters went backwards: the log was rebuilt
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed


def test_fetch_case_d_leader_epoch_changed():
    h = Harness()
    op = h.fetch(epoch=0)
    h.partitions[("t", 0)].leader_epoch = 1
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed


def test_fetch_expires_at_max_wait_exactly_once():
    h = Harness()
    op = h.fetch(max_wait=50)
    h.timer.advance(49)
    assert not op.is_completed
    h.timer.advance(1)
    assert op.is_completed and op.expired and h.reads == 1
    assert not op.force_complete()
    h.partitions[("t", 0)].append(100)
    h.purgatory.check_and_complete(KEY)
    assert h.reads == 1 and len(h.completions) == 1


def test_fetch_already_satisfied_completes_without_parking():
    h = Harness()
    op = h.fetch(min_bytes=5, start=-10)
    assert op.is_completed and h.purgatory.delayed == 0


def test_produce_completes_when_hw_reaches_required_offset():
    h = Harness()
    op = h.produce(required=2)
    part = h.partitions[("t", 0)]
    part.append(1)
    h.purgatory.check_and_complete(KEY)
    assert not op.is_completed
    part.append(1)
    h.purgatory.check_and_complete(KEY)
    assert op.is_completed
    assert h.completions[0][("t", 0)].error == ErrorCode.NONE


def test_produce_times_out_with_request_timed_out():
    h = Harness()
    op = h.produce(required=5, timeout=30)
    h.timer.advance(30)
    assert op.is_completed
    assert h.completions[0][("t", 0)].error == ErrorCode.REQUEST_TIMED_OUT


def test_produce_leader_change_and_deletion():
    h = Harness()
    h.produce(required=5)
    h.partitions[("t", 0)].is_leader = False
    h.purgatory.check_and_complete(KEY)
    assert h.completions[0][("t", 0)].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    h.partitions[("t", 0)] = StubPartition()
    h.produce(required=5)
    del h.partitions[("t", 0)]
    h.purgatory.check_and_complete(KEY)
    assert h.completions[1][("t", 0)].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_failed_partitions_are_not_waited_for():
    h = Harness()
    statuses = {("t", 0): ProducePartitionStatus(
        1, ProducePartitionResult(ErrorCode.CORRUPT_MESSAGE))}
    op = DelayedProduce(100, statuses, h.get, h.completions.append)
    assert h.purgatory.try_complete_else_watch(op, [KEY])
    assert h.completions[0][("t", 0)].error == ErrorCode.CORRUPT_MESSAGE


def test_fetch_takes_in_each_changed_session_partition_once():
    """A session partition that changes while the fetch waits joins it once (a set: a
    leadership move wakes tens of thousands at once); the ones it already reads do not."""
    from types import SimpleNamespace
    h = Harness()
    op = h.fetch(min_bytes=10**6)
    cached = SimpleNamespace(fetch_info=lambda: PartitionFetchInfo(0, 1000, -1), hosted=None,
                             end_bytes=0)
    op.add_partition(("t", 0), cached)  # already read
    for i in range(1, 2001):
        op.add_partition(("t", i), cached)
        op.add_partition(("t", i), cached)
    assert [(s.topic, s.partition) for s in op.statuses] == [("t", i) for i in range(2001)]
    assert len(op.fetch_infos) == 2000
