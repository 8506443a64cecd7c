"""Shared builders for the ReplicaManager / delayed-operation / handler unit tests."""

from __future__ import annotations

import uuid

from broker.purgatory import MockTimer
from broker.replica_manager import ReplicaManager
from protocol.messages import LeaderAndIsrRequest, StopReplicaRequest
from protocol.record_builder import RecordBatchBuilder
from storage.config import LogConfig
from storage.log_manager import LogManager

BROKER_ID = 1
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


class ManualClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now = now_ms

    def __call__(self) -> int:
        return self.now


class FakeMetadataCache:
    """Just what the ReplicaManager asks: is the partition known to the cluster?"""

    def __init__(self, known=()) -> None:
        self.known = set(known)

    def contains_partition(self, topic, partition) -> bool:
        return (topic, partition) in self.known


def batch(n=1, value=b"v" * 50, key=b"k", ts=1000, producer_id=-1, producer_epoch=-1,
          base_sequence=-1, compression_type=0) -> memoryview:
    b = RecordBatchBuilder(compression_type=compression_type, producer_id=producer_id,
                           producer_epoch=producer_epoch, base_sequence=base_sequence)
    for i in range(n):
        b.append(ts + i, key, value)
    return memoryview(bytearray(b.build()))


def leader_and_isr(topic="t", partitions=(0,), leader=BROKER_ID, leader_epoch=0,
                   isr=(BROKER_ID,), replicas=None, controller_epoch=1, type_=1,
                   topic_id=TOPIC_ID) -> LeaderAndIsrRequest:
    replicas = list(replicas if replicas is not None else isr)
    ps = [LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name=topic, partition_index=p, controller_epoch=controller_epoch, leader=leader,
        leader_epoch=leader_epoch, isr=list(isr), partition_epoch=0, replicas=replicas,
        adding_replicas=[], removing_replicas=[], is_new=True) for p in partitions]
    return LeaderAndIsrRequest(
        controller_id=BROKER_ID, controller_epoch=controller_epoch, broker_epoch=1, type=type_,
        topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name=topic, topic_id=topic_id, partition_states=ps)],
        live_leaders=[])


def stop_replica(topic="t", partitions=(0,), delete=True, controller_epoch=1):
    return StopReplicaRequest(
        controller_id=BROKER_ID, controller_epoch=controller_epoch, broker_epoch=1,
        topic_states=[StopReplicaRequest.StopReplicaTopicState(
            topic_name=topic, partition_states=[
                StopReplicaRequest.StopReplicaPartitionState(
                    partition_index=p, leader_epoch=-2 if delete else 0,
                    delete_partition=delete) for p in partitions])])


def make_replica_manager(tmp_path, known=(), config: LogConfig | None = None):
    clock = ManualClock()
    lm = LogManager([str(tmp_path / "logs")], config or LogConfig(), time_ms=clock)
    lm.load_all()
    timer = MockTimer()
    rm = ReplicaManager(None, BROKER_ID, lm, FakeMetadataCache(known), timer, time_ms=clock)
    return rm, timer, lm
