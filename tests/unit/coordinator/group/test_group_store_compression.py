"""``offsets.topic.compression.codec`` (Kafka's OffsetConfig.offsetsTopicCompressionType):
group and offset records are written to ``__consumer_offsets`` in batches of that codec and
read back by a reload. Real ReplicaManager and logs."""

from __future__ import annotations

import pytest

from broker.config import KafkaConfig
from broker.coordinator_runtime import WheelTimer
from broker.coordinator_wiring import group_store_from_config
from common.config_error import ConfigError
from coordinator.group.group import OffsetAndMetadata
from coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group_store import GROUP_METADATA_TOPIC, GroupStore, partition_for
from protocol.errors import ErrorCode as E
from protocol.records import iter_batches
from storage.config import LogConfig
from tests.unit.broker.dataplane_helpers import leader_and_isr, make_replica_manager
from tests.unit.coordinator.group.coordinator_helpers import runtime_over

NUM = 2


@pytest.fixture
async def rm_timer(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path, config=LogConfig())
    await rm.become_leader_or_follower(leader_and_isr(GROUP_METADATA_TOPIC, range(NUM)))
    yield rm, timer
    await rm.shutdown()
    lm.close_all()


def coordinator(store, timer) -> GroupCoordinator:
    c = GroupCoordinator(1, GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0,
                                        num_partitions=NUM), store, WheelTimer(timer))
    c.startup(run_expiry=False)
    return c


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
async def test_coordinator_batches_use_the_configured_codec(rm_timer, codec):
    rm, timer = rm_timer
    c = coordinator(GroupStore(runtime_over(rm, timer), NUM, compression_type=codec), timer)
    for p in range(NUM):
        c.on_election(p, 0)
    await c.wait_idle()
    offsets = {("t", i): OffsetAndMetadata(100 + i, 1, "x" * 50, 7) for i in range(20)}
    assert set((await c.handle_commit_offsets("s", "", None, -1, offsets)).values()) == {E.NONE}
    await c.shutdown()
    part = rm.get_partition(GROUP_METADATA_TOPIC, partition_for("s", NUM))
    batches = list(iter_batches(part.log.read(0, 1 << 20).records.read_bytes()))
    assert batches and {b.compression_type for b in batches} == {codec}
    c2 = coordinator(GroupStore(runtime_over(rm, timer), NUM), timer)
    for p in range(NUM):
        c2.on_election(p, 1)
    await c2.wait_idle()
    assert {tp: o.offset for tp, o in c2.groups["s"].offsets.items()} == \
        {tp: o.offset for tp, o in offsets.items()}
    await c2.shutdown()


def test_store_takes_the_codec_from_the_broker_config():
    store = group_store_from_config(KafkaConfig({"offsets.topic.compression.codec": "3"}), None)
    assert store.compression_type == 3
    assert group_store_from_config(KafkaConfig({}), None).compression_type == 0
    with pytest.raises(ConfigError) as e:
        group_store_from_config(KafkaConfig({"offsets.topic.compression.codec": "9"}), None)
    assert e.value.key == "offsets.topic.compression.codec"
