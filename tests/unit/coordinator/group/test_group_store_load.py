"""GroupStore against a real ReplicaManager and logs: Kafka's record formats, the partition
mapping, and groups/offsets reloaded by a new coordinator (what a broker restart does)."""

from __future__ import annotations

import pytest

from broker.coordinator_runtime import WheelTimer
from coordinator.group.group import GroupState, OffsetAndMetadata
from coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from coordinator.group.group_store import (
    GROUP_METADATA_TOPIC,
    GroupStore,
    java_string_hashcode,
    partition_for,
)
from coordinator.group.records import (
    decode_record,
    group_tombstone,
    offset_commit_record,
)
from protocol.errors import ErrorCode as E
from protocol.records import iter_batches
from storage.config import LogConfig
from tests.unit.broker.dataplane_helpers import leader_and_isr, make_replica_manager
from tests.unit.coordinator.group.coordinator_helpers import runtime_over

NUM = 4


@pytest.mark.parametrize("s, expected", [
    ("", 0), ("hello", 99162322), ("console-consumer-12345", None), ("é€", 0xE9 * 31 + 0x20AC),
])
def test_java_string_hashcode(s, expected):
    h = java_string_hashcode(s)
    assert -2**31 <= h < 2**31
    if expected is not None:
        assert h == expected


def test_partition_mapping_matches_kafka():
    assert partition_for("hello", 50) == 99162322 % 50
    neg = "polygenelubricants"  # Java hashCode is Integer.MIN_VALUE for this string
    assert java_string_hashcode(neg) == -2**31
    assert partition_for(neg, 50) == 0


def test_record_bytes_follow_kafka_layout():
    k, v = offset_commit_record("g", "t", 3, OffsetAndMetadata(42, 5, "m", 1000))
    # key: int16 version 1 | string group | string topic | int32 partition
    assert k == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    # value v3: offset int64 | leader epoch int32 | metadata string | commit ts int64
    assert v == (b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big") + b"\x00\x01m"
                 + (1000).to_bytes(8, "big"))
    k1, v1 = offset_commit_record("g", "t", 3, OffsetAndMetadata(42, 5, "m", 1000, 2000))
    assert v1[:2] == b"\x00\x01" and v1.endswith((2000).to_bytes(8, "big"))
    rec = decode_record(k1, v1)
    assert (rec.value.offset, rec.value.expire_timestamp, rec.value.leader_epoch) == (42, 2000, -1)


@pytest.fixture
async def env(tmp_path):
    rm, timer, lm = make_replica_manager(tmp_path, config=LogConfig())
    await rm.become_leader_or_follower(leader_and_isr(GROUP_METADATA_TOPIC, range(NUM)))
    yield rm, timer
    await rm.shutdown()
    lm.close_all()


def coordinator(rm, timer) -> GroupCoordinator:
    store = GroupStore(runtime_over(rm, timer, load_buffer_size=2048), NUM)
    c = GroupCoordinator(1, GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0,
                                        num_partitions=NUM), store, WheelTimer(timer))
    c.startup(run_expiry=False)
    return c


async def elect_all(c):
    for p in range(NUM):
        c.on_election(p, 0)
    await c.wait_idle()


async def test_groups_and_offsets_survive_a_reload(env):
    rm, timer = env
    c = coordinator(rm, timer)
    await elect_all(c)
    joined = []
    c.handle_join_group("grp", "", "inst-1", True, "cli", "/h", 5000, 5000, "consumer",
                        [("range", b"sub")], joined.append)
    mid = joined[0].member_id
    synced = []
    c.handle_sync_group("grp", 1, mid, None, None, "inst-1", {mid: b"assignment"}, synced.append)
    await c.wait_idle()
    assert synced[0].error == E.NONE
    for i in range(50):  # enough batches to need several load chunks
        res = await c.handle_commit_offsets("grp", mid, "inst-1", 1,
                                            {("t", i % 3): OffsetAndMetadata(i, 2, f"m{i}", 7)})
        assert res == {("t", i % 3): E.NONE}
    await c.handle_commit_offsets("simple", "", None, -1, {("x", 0): OffsetAndMetadata(9)})
    await c.handle_commit_offsets("gone", "", None, -1, {("x", 0): OffsetAndMetadata(1)})
    assert await c.handle_delete_groups(["gone"]) == {"gone": E.NONE}
    await c.shutdown()

    # what is in the log: Kafka key versions 1 (offsets) and 2 (group)
    part = rm.get_partition(GROUP_METADATA_TOPIC, partition_for("grp", NUM))
    data = part.log.read(0, 1 << 20).records.read_bytes()
    versions = {bytes(r.key[:2]) for b in iter_batches(data) for r in b}
    assert versions >= {b"\x00\x01", b"\x00\x02"}

    c2 = coordinator(rm, timer)
    await elect_all(c2)
    g = c2.groups["grp"]
    assert g.state is GroupState.STABLE and g.generation_id == 1
    assert g.leader_id == mid and g.static_members == {"inst-1": mid}
    assert g.get(mid).assignment == b"assignment" and g.protocol_name == "range"
    assert {tp: (o.offset, o.metadata, o.leader_epoch) for tp, o in g.offsets.items()} == {
        ("t", 0): (48, "m48", 2), ("t", 1): (49, "m49", 2), ("t", 2): (47, "m47", 2)}
    assert c2.groups["simple"].offsets[("x", 0)].offset == 9
    assert c2.groups["simple"].state is GroupState.EMPTY
    assert "gone" not in c2.groups
    # the loaded member heartbeats with its old generation
    assert c2.handle_heartbeat("grp", mid, "inst-1", 1) == E.NONE
    # and expires after its session timeout when it does not
    timer.advance(5000)
    assert mid not in c2.groups["grp"]
    await c2.shutdown()


async def test_resignation_then_reelection_reloads(env):
    rm, timer = env
    c = coordinator(rm, timer)
    await elect_all(c)
    await c.handle_commit_offsets("s", "", None, -1, {("x", 0): OffsetAndMetadata(3)})
    p = c.partition_for("s")
    c.on_resignation(p)
    assert c.handle_fetch_offsets("s", [("x", 0)])[0] == E.NOT_COORDINATOR
    task = c.on_election(p, 1)
    assert c.handle_fetch_offsets("s", [("x", 0)])[0] == E.COORDINATOR_LOAD_IN_PROGRESS
    await task
    assert c.handle_fetch_offsets("s", [("x", 0)])[1][("x", 0)][0].offset == 3
    await c.shutdown()


async def test_append_to_a_partition_not_led_maps_to_coordinator_errors(env):
    rm, timer = env
    store = GroupStore(runtime_over(rm, timer), NUM)
    k, v = group_tombstone("g")
    assert await store.append(NUM + 5, [(k, v)]) == E.COORDINATOR_NOT_AVAILABLE
    await rm.become_leader_or_follower(leader_and_isr(GROUP_METADATA_TOPIC, [0], leader=2,
                                                      leader_epoch=1))
    assert await store.append(0, [(k, v)]) == E.NOT_COORDINATOR
