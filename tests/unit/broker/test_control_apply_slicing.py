"""Big controller decisions leave the event loop free while they apply (issue 22): a
LeaderAndIsr of thousands of partitions and an UpdateMetadata give way to other tasks, and
Metadata answers never see half an UpdateMetadata."""

from __future__ import annotations

import asyncio
import uuid

from broker.metadata_cache import MetadataCache
from broker.replication.fetcher import FetcherConfig
from broker.replication.fetcher_manager import ReplicaFetcherManager
from common.loop_slice import LoopSlice
from protocol.errors import ErrorCode
from protocol.messages import LeaderAndIsrRequest as LAI
from protocol.messages import UpdateMetadataRequest as UMR
from tests.unit.broker.dataplane_helpers import BROKER_ID, make_replica_manager

TOPIC_ID = uuid.UUID(int=7)


def _um(n: int, leader: int, epoch: int) -> UMR:
    states = [UMR.UpdateMetadataPartitionState(
        partition_index=p, controller_epoch=1, leader=leader, leader_epoch=epoch,
        isr=[1, 2], zk_version=epoch, replicas=[1, 2], offline_replicas=[])
        for p in range(n)]
    return UMR(controller_id=1, controller_epoch=1, broker_epoch=-1, type=0,
               topic_states=[UMR.UpdateMetadataTopicState(topic_name="t", topic_id=TOPIC_ID,
                                                          partition_states=states)],
               live_brokers=[UMR.UpdateMetadataBroker(id=b, rack=None, endpoints=[
                   UMR.UpdateMetadataEndpoint(host="h", port=b, listener="PLAINTEXT",
                                              security_protocol=0)]) for b in (1, 2)])


async def test_sliced_update_metadata_yields_and_applies_at_once():
    cache = MetadataCache(1)
    cache.update_metadata(_um(5000, leader=1, epoch=0))
    seen: list[set[int]] = []  # the leader epochs one Metadata read saw, at each turn
    done = False

    async def reader():
        while not done:
            seen.append({s.leader_epoch for s in cache._partitions["t"].values()})
            await asyncio.sleep(0)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    await cache.update_metadata_sliced(_um(5000, leader=2, epoch=1), LoopSlice(budget_ms=0))
    done = True
    await task
    assert len(seen) > 3, "the update never gave way to the loop"
    assert all(len(epochs) == 1 for epochs in seen), "a reader saw half an update"
    assert {s.leader for s in cache._partitions["t"].values()} == {2}
    assert cache.partition_state("t", 4999).leader_epoch == 1


async def test_sliced_update_metadata_same_result_as_update_metadata():
    """Deletions (leader -2), new topics and a topic split over slices."""
    reqs = [_um(1500, leader=1, epoch=0), _um(1500, leader=2, epoch=1)]
    deleting = _um(3, leader=-2, epoch=2)
    reqs.append(deleting)
    plain, sliced = MetadataCache(1), MetadataCache(1)
    for r in reqs:
        assert plain.update_metadata(r) == await sliced.update_metadata_sliced(
            r, LoopSlice(budget_ms=0))
    assert plain._partitions == sliced._partitions
    assert plain.topic_ids() == sliced.topic_ids() == {"t": TOPIC_ID}
    assert sliced.num_partitions("t") == 1497


def _lai(n: int, leader_of, epoch: int) -> LAI:
    states = [LAI.LeaderAndIsrPartitionState(
        topic_name="t", partition_index=p, controller_epoch=1, leader=leader_of(p),
        leader_epoch=epoch, isr=[1, 2], partition_epoch=epoch, replicas=[1, 2],
        adding_replicas=[], removing_replicas=[], is_new=epoch == 1) for p in range(n)]
    return LAI(controller_id=2, controller_epoch=1, broker_epoch=1, type=0,
               topic_states=[LAI.LeaderAndIsrTopicState(topic_name="t", topic_id=TOPIC_ID,
                                                        partition_states=states)],
               live_leaders=[])


async def test_big_leader_and_isr_gives_way_and_moves_fetchers(tmp_path):
    rm, _timer, lm = make_replica_manager(tmp_path)
    rm.fetcher_manager = ReplicaFetcherManager(rm, FetcherConfig(broker_id=BROKER_ID), 1,
                                               lambda _b: None)
    try:
        # 3,000 partitions: broker 1 leads the even ones, follows broker 2 on the odd ones
        results = await rm.become_leader_or_follower(_lai(3000, lambda p: 1 + p % 2, 1))
        assert set(results.values()) == {ErrorCode.NONE} and len(results) == 3000
        [fetcher] = rm.fetcher_manager.fetchers.values()
        assert fetcher.leader_id == 2 and len(fetcher.partitions) == 1500
        turns = 0
        done = False

        async def other_client():
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        # a failover: every leadership flips (no log to create, nothing to wait for)
        results = await rm.become_leader_or_follower(_lai(3000, lambda p: 2 - p % 2, 2))
        done = True
        await task
        assert turns > 2, "the LeaderAndIsr held the loop from start to end"
        assert set(results.values()) == {ErrorCode.NONE} and len(results) == 3000
        [fetcher] = rm.fetcher_manager.fetchers.values()
        assert fetcher.leader_id == 2 and len(fetcher.partitions) == 1500
        assert not any(p % 2 for _, p in fetcher.partitions)
        assert all(st.current_leader_epoch == 2 for st in fetcher.partitions.values())
        assert all(rm.get_partition("t", p).is_leader for p in range(1, 3000, 2))
        assert not any(rm.get_partition("t", p).is_leader for p in range(0, 3000, 2))
    finally:
        await rm.shutdown()
        lm.close_all()
