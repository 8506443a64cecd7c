"""Share-group membership in the group coordinator (KIP-932): joins, assignments, epochs,
fencing, session expiry on the manual clock, the ShareGroup* records and their replay,
ListGroups/DeleteGroups of share groups, and the offsets admin over a fake persister."""

from __future__ import annotations

import uuid

import pytest

from coordinator.group.heartbeat_common import TopicView
from coordinator.group.share_group_records import ShareGroupReplay
from coordinator.group.share_groups import ShareGroupConfig, ShareGroupCoordinator
from coordinator.share.persister import ReadStateSummaryResult
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness, RawStore

T1, T2 = uuid.UUID(int=11), uuid.UUID(int=12)


class FakePersister:
    def __init__(self) -> None:
        self.states: dict[tuple, tuple[int, int]] = {}  # (group, tid, p) -> (epoch, start)
        self.calls: list = []

    async def read_state_summary(self, req):
        epoch, start = self.states.get((req.group_id, req.topic_id, req.partition), (0, -1))
        return ReadStateSummaryResult(E.NONE, None, epoch, 3, start)

    async def initialize_state(self, req):
        self.calls.append(("init", req))
        self.states[(req.group_id, req.topic_id, req.partition)] = (req.state_epoch,
                                                                    req.start_offset)
        return E.NONE

    async def delete_state(self, req):
        self.calls.append(("delete", req))
        self.states.pop((req.group_id, req.topic_id, req.partition), None)
        return E.NONE


@pytest.fixture
async def env():
    h = Harness()
    h.coordinator.store = RawStore(h.store)
    topics = {"a": (T1, 3), "b": (T2, 2)}
    h.persister = FakePersister()
    sc = ShareGroupCoordinator(h.coordinator, ShareGroupConfig(session_timeout_ms=45000,
                                                               heartbeat_interval_ms=5000,
                                                               max_size=3),
                               TopicView(topics=topics), h.persister)
    h.coordinator.share = sc
    await h.start()
    h.sc, h.topics = sc, topics
    return h


async def beat(h, member, epoch, topics=None, group="g"):
    return await h.sc.heartbeat(group, member, epoch, None, topics, "client", "/127.0.0.1")


async def test_every_member_gets_every_partition_and_epochs_follow(env):
    r1 = await beat(env, "m1", 0, ["a"])
    assert r1.error == E.NONE and r1.member_epoch == 1 and r1.heartbeat_interval_ms == 5000
    assert r1.assignment == {T1: frozenset({0, 1, 2})}
    r2 = await beat(env, "m2", 0, ["a", "b"])
    assert r2.member_epoch == 2 and r2.assignment == {T1: frozenset({0, 1, 2}),
                                                      T2: frozenset({0, 1})}
    r1 = await beat(env, "m1", 1)  # m1 moves to the new epoch; its assignment did not change
    assert r1.member_epoch == 2 and r1.assignment is None
    g = env.sc.groups["g"]
    assert (g.group_epoch, g.assignment_epoch, str(g.state)) == (2, 2, "Stable")
    assert g.initialized == {T1: ("a", frozenset({0, 1, 2})), T2: ("b", frozenset({0, 1}))}
    env.topics["b"] = (T2, 3)  # a partition added to a subscribed topic
    r2 = await beat(env, "m2", 2)
    assert r2.member_epoch == 3 and r2.assignment[T2] == frozenset({0, 1, 2})


async def test_bad_requests_and_fencing(env):
    assert (await beat(env, "m1", 0, [])).error == E.INVALID_REQUEST
    assert (await env.sc.heartbeat("", "m1", 0, None, ["a"])).error == E.INVALID_REQUEST
    assert (await env.sc.heartbeat("g", "m1", 0, "", ["a"])).error == E.INVALID_REQUEST
    assert (await beat(env, "", 3)).error == E.INVALID_REQUEST
    assert (await beat(env, "m1", -2)).error == E.INVALID_REQUEST
    r = await beat(env, "m1", 5, group="nope")
    assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Share group nope not found.")
    await beat(env, "m1", 0, ["a"])
    r = await beat(env, "ghost", 1)
    assert r.error == E.UNKNOWN_MEMBER_ID
    assert (await beat(env, "m1", 7)).error == E.FENCED_MEMBER_EPOCH
    await beat(env, "m2", 0, ["a"])  # group epoch 2: m1 is still at 1
    assert (await beat(env, "m1", 1)).member_epoch == 2
    assert (await beat(env, "m1", 1)).error == E.NONE  # previous epoch: response was lost
    await beat(env, "m3", 0, ["a"])
    r = await beat(env, "m4", 0, ["a"])
    assert r.error == E.GROUP_MAX_SIZE_REACHED and "maximum capacity of 3" in r.message


async def test_other_group_types_are_not_share_groups(env):
    env.join(group="classic")
    await env.coordinator.wait_idle()
    r = await beat(env, "m1", 0, ["a"], group="classic")
    assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Group classic is not a share group.")
    assert env.sc.describe("classic")[0] == E.GROUP_ID_NOT_FOUND


async def test_leave_and_session_expiry_bump_the_epoch(env):
    await beat(env, "m1", 0, ["a"])
    await beat(env, "m2", 0, ["a"])
    r = await beat(env, "m2", -1)
    assert (r.error, r.member_epoch) == (E.NONE, -1)
    g = env.sc.groups["g"]
    assert set(g.members) == {"m1"} and g.group_epoch == 3
    env.advance(44_999)
    await env.coordinator.wait_idle()
    assert "m1" in g.members
    env.advance(2)
    await env.coordinator.wait_idle()
    assert not g.members and str(g.state) == "Empty" and g.group_epoch == 4


async def test_records_replay_to_the_same_group_and_deletion(env):
    await beat(env, "m1", 0, ["a", "b"])
    await beat(env, "m2", 0, ["a"])
    await beat(env, "m1", 1)
    await beat(env, "m2", -1)
    await beat(env, "m3", 0, ["b"])
    replay = ShareGroupReplay()
    for k, v in env.coordinator.store.raw:
        replay.add(k, v)
    loaded = replay.groups()["g"]
    g = env.sc.groups["g"]
    assert (loaded.group_epoch, loaded.assignment_epoch, loaded.metadata_hash) == \
        (g.group_epoch, g.assignment_epoch, g.metadata_hash)
    assert set(loaded.members) == {"m1", "m3"}
    for mid, m in g.members.items():
        assert loaded.members[mid] == m
    assert loaded.target == {mid: a for mid, a in g.target.items()}
    assert loaded.initialized == g.initialized
    # load: sessions restart; listed with the share type
    err, listed = env.coordinator.handle_list_groups()
    assert err == E.NONE and [x.group_id for x in listed if x.is_share_group] == ["g"]
    assert (await env.coordinator.handle_delete_groups(["g"]))["g"] == E.NON_EMPTY_GROUP
    await beat(env, "m1", -1)
    await beat(env, "m3", -1)
    assert (await env.coordinator.handle_delete_groups(["g"]))["g"] == E.NONE
    deleted = {(c[1].topic_id, c[1].partition) for c in env.persister.calls if c[0] == "delete"}
    assert deleted == {(T1, 0), (T1, 1), (T1, 2), (T2, 0), (T2, 1)}
    replay = ShareGroupReplay()
    for k, v in env.coordinator.store.raw:
        replay.add(k, v)
    assert replay.groups() == {}
    assert "g" not in env.sc.groups


async def test_offsets_admin(env):
    await beat(env, "m1", 0, ["a"])
    env.persister.states[("g", T1, 0)] = (1, 40)
    err, _, topics = await env.sc.describe_offsets("g", None)
    assert err == E.NONE
    assert topics == [("a", T1, [(0, 40, 3, E.NONE, None), (1, -1, 3, E.NONE, None),
                                 (2, -1, 3, E.NONE, None)])]
    err, _, _ = await env.sc.alter_offsets("g", [("a", [(0, 5)])])
    assert err == E.NON_EMPTY_GROUP
    _, _, res = await env.sc.delete_offsets("g", ["a"])
    assert res == [("a", T1, E.GROUP_SUBSCRIBED_TO_TOPIC,
                    "The group has active consumers subscribed to the topic.")]
    await beat(env, "m1", -1)
    err, _, res = await env.sc.alter_offsets("g", [("a", [(0, 5), (9, 1)]), ("zz", [(0, 1)])])
    assert err == E.NONE
    assert res[0] == ("a", T1, [(0, E.NONE, None), (9, E.UNKNOWN_TOPIC_OR_PARTITION, None)])
    assert res[1][2][0][1] == E.UNKNOWN_TOPIC_OR_PARTITION
    assert env.persister.states[("g", T1, 0)] == (2, 5)  # a new state epoch fences the leader
    _, _, res = await env.sc.delete_offsets("g", ["a"])
    assert res == [("a", T1, E.NONE, None)]
    assert T1 not in env.sc.groups["g"].initialized
    assert (await env.sc.describe_offsets("nope", None))[0] == E.GROUP_ID_NOT_FOUND


async def test_classic_and_consumer_protocols_refuse_a_share_group_id(env):
    from coordinator.group.consumer_config import ConsumerGroupConfig
    from coordinator.group.consumer_coordinator import ConsumerGroupCoordinator
    await beat(env, "m1", 0, ["a"])
    out = env.join(group="g")
    await env.coordinator.wait_idle()
    assert out[0].error == E.GROUP_ID_NOT_FOUND
    env.coordinator.consumer = ConsumerGroupCoordinator(
        env.coordinator, ConsumerGroupConfig(), TopicView(topics=env.topics))
    r = await env.coordinator.consumer.heartbeat("g", "c1", 0, None, None, 30000, ["a"], None,
                                                 None, {}, "client", "/h")
    assert (r.error, r.message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
