"""KIP-848 consumer groups on a manual clock: heartbeats, epochs, incremental
reconciliation, timeouts, static members, regex subscriptions, records and their replay,
assignors, and the classic <-> consumer migration."""

from __future__ import annotations

import struct
import uuid

import pytest

from coordinator.group.assignors import MemberSpec, RangeAssignor, UniformAssignor
from coordinator.group.consumer_config import ConsumerGroupConfig
from coordinator.group.consumer_coordinator import ConsumerGroupCoordinator
from coordinator.group.consumer_group import ConsumerGroupState
from coordinator.group.consumer_records import ConsumerGroupReplay
from coordinator.group.group import OffsetAndMetadata
from coordinator.group.heartbeat_common import TopicView
from protocol.errors import ErrorCode as E
from protocol.messages import ConsumerProtocolSubscription
from tests.unit.coordinator.group.coordinator_helpers import Harness, RawStore

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


@pytest.fixture
async def env():
    h = Harness()
    h.coordinator.store = RawStore(h.store)
    topics = {"a": (T1, 6), "b": (T2, 2)}
    cfg = ConsumerGroupConfig(session_timeout_ms=45000, heartbeat_interval_ms=5000, max_size=4)
    cc = ConsumerGroupCoordinator(h.coordinator, cfg, TopicView(topics=topics))
    h.coordinator.consumer = cc
    await h.start()
    h.cc, h.topics = cc, topics
    return h


class Client:
    """A consumer-protocol member as a client runs it: owns what it was last assigned."""

    def __init__(self, h, member_id, topics=("a",), regex=None, instance=None, group="g"):
        self.h, self.member_id, self.topics, self.regex = h, member_id, topics, regex
        self.instance, self.group = instance, group
        self.epoch = 0
        self.owned: dict = {}

    async def beat(self, full=False):
        first = self.epoch == 0
        r = await self.h.cc.heartbeat(
            self.group, self.member_id, self.epoch, self.instance, None,
            30000 if first or full else -1,
            list(self.topics) if (first or full) and self.regex is None else None,
            self.regex if first or full else None, None,
            {} if first else (dict(self.owned) if full or True else None))
        if r.error == E.NONE:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = dict(r.assignment)
        return r

    async def leave(self, epoch=-1):
        return await self.h.cc.heartbeat(self.group, self.member_id, epoch, self.instance,
                                         None, -1, None, None, None, None)


def overlap(clients) -> set:
    seen, dup = set(), set()
    for c in clients:
        for t, ps in c.owned.items():
            for p in ps:
                (dup if (t, p) in seen else seen).add((t, p))
    return dup


async def converge(clients, rounds=10):
    for _ in range(rounds):
        for c in clients:
            r = await c.beat()
            assert r.error == E.NONE, r
            assert not overlap(clients)
    return clients


async def test_members_join_one_at_a_time_and_partitions_are_never_shared(env):
    c1 = Client(env, "m1")
    r = await c1.beat()
    assert (r.error, r.member_epoch) == (E.NONE, 1)
    assert r.assignment == {T1: frozenset(range(6))}
    group = env.cc.groups["g"]
    assert group.state is ConsumerGroupState.STABLE
    c2 = Client(env, "m2")
    await c2.beat()
    assert env.cc.groups["g"].group_epoch == 2
    assert c2.owned == {}  # m1 must revoke first
    await converge([c1, c2])
    assert sorted(len(c.owned[T1]) for c in (c1, c2)) == [3, 3]
    c3 = Client(env, "m3")
    await c3.beat()
    await converge([c1, c2, c3])
    assert sorted(len(c.owned.get(T1, ())) for c in (c1, c2, c3)) == [2, 2, 2]
    assert group.state is ConsumerGroupState.STABLE
    assert {c.epoch for c in (c1, c2, c3)} == {3}
    # a leave hands the partitions back
    r = await c2.leave()
    assert (r.error, r.member_epoch) == (E.NONE, -1)
    await converge([c1, c3])
    assert sorted(len(c.owned[T1]) for c in (c1, c3)) == [3, 3]


async def test_group_config_overrides_session_timeout_and_heartbeat_interval(env):
    """consumer.session.timeout.ms / consumer.heartbeat.interval.ms of a GROUP config
    resource (broker.group_configs) apply to that group only."""
    env.cc.config.group_overrides = lambda g, s, h: (10000, 2000) if g == "short" else (s, h)
    c1, c2 = Client(env, "m1", group="short"), Client(env, "m2", group="g")
    assert (await c1.beat()).heartbeat_interval_ms == 2000
    assert (await c2.beat()).heartbeat_interval_ms == 5000
    env.advance(11000)  # both silent: past 10 s, within 45 s
    await env.settle()
    assert list(env.cc.groups["short"].members) == []
    assert list(env.cc.groups["g"].members) == ["m2"]


async def test_session_timeout_fences_a_silent_member(env):
    c1, c2 = Client(env, "m1"), Client(env, "m2")
    await c1.beat()
    await c2.beat()
    await converge([c1, c2])
    env.advance(30000)
    await c1.beat()
    env.advance(20000)  # m2 silent for 50 s > 45 s
    await env.settle()
    group = env.cc.groups["g"]
    assert list(group.members) == ["m1"]
    await converge([c1])
    assert c1.owned == {T1: frozenset(range(6))}
    r = await c2.beat()
    assert r.error == E.UNKNOWN_MEMBER_ID


async def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(env):
    c1 = Client(env, "m1")
    await c1.beat()
    c2 = Client(env, "m2")
    await c2.beat()
    r = await env.cc.heartbeat("g", "m1", c1.epoch, None, None, -1, None, None, None, None)
    assert r.error == E.NONE  # asked to revoke (owned unknown -> still owns)
    assert env.cc.groups["g"].members["m1"].state.name == "UNREVOKED_PARTITIONS"
    await c2.beat()
    env.advance(30001)
    await env.settle()
    assert "m1" not in env.cc.groups["g"].members


async def test_epoch_checks_and_bad_requests(env):
    c1 = Client(env, "m1")
    await c1.beat()
    cc = env.cc
    r = await cc.heartbeat("g", "m1", 5, None, None, -1, None, None, None, None)
    assert r.error == E.FENCED_MEMBER_EPOCH
    r = await cc.heartbeat("g", "nobody", 1, None, None, -1, None, None, None, None)
    assert r.error == E.UNKNOWN_MEMBER_ID
    r = await cc.heartbeat("", "m", 0, None, None, 1000, ["a"], None, None, {})
    assert r.error == E.INVALID_REQUEST
    r = await cc.heartbeat("g", "m9", 0, None, None, -1, ["a"], None, None, {})
    assert (r.error, r.message) == (E.INVALID_REQUEST,
                                    "RebalanceTimeoutMs must be provided in first request.")
    r = await cc.heartbeat("g", "m9", 0, None, None, 1000, ["a"], None, "nope", {})
    assert r.error == E.UNSUPPORTED_ASSIGNOR
    r = await cc.heartbeat("g", "m9", 0, None, None, 1000, None, "(", None, {})
    assert r.error == E.INVALID_REGULAR_EXPRESSION
    r = await cc.heartbeat("other", "m9", 3, None, None, -1, None, None, None, None)
    assert r.error == E.GROUP_ID_NOT_FOUND
    for i in range(3):
        assert (await Client(env, f"x{i}").beat()).error == E.NONE
    assert (await Client(env, "x9").beat()).error == E.GROUP_MAX_SIZE_REACHED


async def test_lost_response_previous_epoch_is_accepted(env):
    c1 = Client(env, "m1")
    await c1.beat()
    c2 = Client(env, "m2")
    await c2.beat()
    await converge([c1, c2])
    m1 = env.cc.groups["g"].members["m1"]
    # m1 heartbeats with its previous epoch, owning a subset of its assignment
    r = await env.cc.heartbeat("g", "m1", m1.previous_member_epoch, None, None, -1, None, None,
                               None, {})
    assert r.error == E.NONE


async def test_static_member_restart_keeps_its_assignment_without_a_rebalance(env):
    c1 = Client(env, "m1", instance="i1")
    c2 = Client(env, "m2", instance="i2")
    await c1.beat()
    await c2.beat()
    await converge([c1, c2])
    group = env.cc.groups["g"]
    epoch = group.group_epoch
    before = c2.owned
    r = await c2.leave(-2)
    assert (r.error, r.member_epoch) == (E.NONE, -2)
    # another process takes the instance id over with a new member id
    c2b = Client(env, "m2b", instance="i2")
    r = await c2b.beat()
    assert r.error == E.NONE and c2b.owned == before
    assert group.group_epoch == epoch and "m2" not in group.members
    # while i2 is held by a live member, another join with it is refused
    r = await Client(env, "m2c", instance="i2").beat()
    assert r.error == E.UNRELEASED_INSTANCE_ID


async def test_regex_subscription_picks_up_a_topic_created_later(env):
    c1 = Client(env, "m1", regex="r-.*")
    r = await c1.beat()
    assert r.error == E.NONE and c1.owned == {}
    env.topics["r-new"] = (T3, 3)
    await converge([c1], rounds=2)
    assert c1.owned == {T3: frozenset({0, 1, 2})}
    assert env.cc.groups["g"].members["m1"].subscribed_topic_regex == "r-.*"


async def test_records_replay_to_the_same_group(env):
    c1, c2 = Client(env, "m1", topics=("a", "b")), Client(env, "m2", topics=("a",))
    await c1.beat()
    await c2.beat()
    await converge([c1, c2])
    await c2.leave()
    c3 = Client(env, "m3", topics=("b",))
    await c3.beat()
    await converge([c1, c3])
    replay = ConsumerGroupReplay()
    for k, v in env.coordinator.store.raw:
        if struct.unpack_from(">h", k)[0] >= 3:
            replay.add(k, v)
    loaded = replay.groups()["g"]
    group = env.cc.groups["g"]
    assert (loaded.group_epoch, loaded.assignment_epoch) == (group.group_epoch,
                                                             group.assignment_epoch)
    assert set(loaded.members) == {"m1", "m3"}
    for mid, m in group.members.items():
        lm = loaded.members[mid]
        assert (lm.member_epoch, lm.state, lm.assigned, lm.subscribed_topic_names) == \
            (m.member_epoch, m.state, m.assigned, m.subscribed_topic_names)
    assert loaded.target == group.target
    assert loaded.subscription_metadata == group.subscription_metadata
    assert loaded.partition_epochs == group.partition_epochs
    # deleting the group leaves nothing to replay
    await c1.leave()
    await c3.leave()
    assert await env.cc.delete_group(group) == E.NONE
    replay = ConsumerGroupReplay()
    for k, v in env.coordinator.store.raw:
        if struct.unpack_from(">h", k)[0] >= 3:
            replay.add(k, v)
    assert replay.groups() == {}


async def test_offsets_of_a_consumer_group_are_validated_by_member_epoch(env):
    c1 = Client(env, "m1")
    await c1.beat()
    coord = env.coordinator
    om = OffsetAndMetadata(5, -1, "", 0, -1)
    res = await coord.handle_commit_offsets("g", "m1", None, c1.epoch, {("a", 0): om})
    assert res == {("a", 0): E.NONE}
    res = await coord.handle_commit_offsets("g", "m1", None, c1.epoch + 1, {("a", 0): om})
    assert res == {("a", 0): E.STALE_MEMBER_EPOCH}
    res = await coord.handle_commit_offsets("g", "", None, -1, {("a", 0): om})
    assert res == {("a", 0): E.UNKNOWN_MEMBER_ID}  # not empty: admin commits refused
    err, got = coord.handle_fetch_offsets("g", [("a", 0)])
    assert err == E.NONE and got[("a", 0)][0].offset == 5
    err, listed = coord.handle_list_groups()
    assert [(g.group_id, str(g.state)) for g in listed] == [("g", "Stable")]


def _subscription(topics, owned=()) -> bytes:
    S = ConsumerProtocolSubscription
    body = S(topics=list(topics), user_data=None,
             owned_partitions=[S.TopicPartition(topic=t, partitions=list(ps)) for t, ps in owned],
             generation_id=-1, rack_id=None).encode(3)
    return struct.pack(">h", 3) + body


async def test_classic_group_upgrades_online_and_downgrades_back(env):
    """A Stable classic group gets a consumer-protocol member: it becomes a consumer group,
    the classic member keeps its partitions until it rejoins; offsets stay. When the
    consumer-protocol member leaves, the group turns classic again."""
    from client.group_member import encode_assignment  # the tools' ConsumerProtocol codec

    coord = env.coordinator
    joined = env.join_known(protocols=(("range", _subscription(["a"])),))
    await env.settle()
    jr = joined[0]
    assert jr.error == E.NONE
    synced = env.sync("g", jr.generation_id, jr.member_id,
                      {jr.member_id: encode_assignment([("a", p) for p in range(6)])})
    await env.settle()
    assert synced[0].error == E.NONE
    om = OffsetAndMetadata(7, -1, "", 0, -1)
    await coord.handle_commit_offsets("g", jr.member_id, None, jr.generation_id,
                                      {("a", 1): om})
    # the consumer-protocol member arrives: online upgrade
    c = Client(env, "new")
    r = await c.beat()
    assert r.error == E.NONE
    group = env.cc.groups["g"]
    assert "g" not in coord.groups and set(group.members) == {jr.member_id, "new"}
    assert coord.handle_fetch_offsets("g", [("a", 1)])[1][("a", 1)][0].offset == 7
    # the classic member is told to rejoin, rejoins owning everything (cooperative)
    assert coord.handle_heartbeat("g", jr.member_id, None, jr.generation_id) == \
        E.REBALANCE_IN_PROGRESS
    owned = [("a", range(6))]
    for _ in range(4):
        rejoin = env.join(member_id=jr.member_id,
                          protocols=(("range", _subscription(["a"], owned)),))
        await env.settle()
        assert rejoin[0].error == E.NONE, rejoin
        sync = env.sync("g", rejoin[0].generation_id, jr.member_id)
        from client.group_member import decode_assignment
        mine = decode_assignment(sync[0].assignment)
        owned = [("a", [p for _, p in mine])] if mine else []
        await c.beat()
        if coord.handle_heartbeat("g", jr.member_id, None, rejoin[0].generation_id) == E.NONE:
            break
    mine_set = {p for _, ps in owned for p in ps}
    assert mine_set and not mine_set & set(c.owned.get(T1, ()))
    assert len(mine_set) + len(c.owned.get(T1, ())) == 6
    # the consumer-protocol member leaves: back to a classic group, rebalancing
    await c.leave()
    await env.settle()
    assert "g" not in env.cc.groups
    classic = coord.groups["g"]
    assert str(classic.state) == "PreparingRebalance"
    assert classic.offsets[("a", 1)].offset == 7


def test_uniform_assignor_is_balanced_and_sticky():
    a = UniformAssignor()
    parts = {T1: 7, T2: 3}
    both = frozenset({T1, T2})
    out = a.assign({"m1": MemberSpec(both, {}), "m2": MemberSpec(both, {})}, parts)
    counts = sorted(sum(len(p) for p in x.values()) for x in out.values())
    assert counts == [5, 5]
    out2 = a.assign({"m1": MemberSpec(both, out["m1"]), "m2": MemberSpec(both, out["m2"]),
                     "m3": MemberSpec(both, {})}, parts)
    counts = sorted(sum(len(p) for p in x.values()) for x in out2.values())
    assert counts == [3, 3, 4]
    for m in ("m1", "m2"):  # nothing moved between the two old members
        for t, ps in out2[m].items():
            assert ps <= out[m].get(t, frozenset())
    every = [(t, p) for x in out2.values() for t, ps in x.items() for p in ps]
    assert len(every) == len(set(every)) == 10


def test_range_assignor_gives_contiguous_ranges():
    out = RangeAssignor().assign({"b": MemberSpec(frozenset({T1}), {}),
                                  "a": MemberSpec(frozenset({T1, T2}), {})}, {T1: 5, T2: 2})
    assert out["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1})}
    assert out["b"] == {T1: frozenset({3, 4})}


def test_consumer_group_config_is_checked_at_startup():
    from broker.config import KafkaConfig
    from common.config_error import ConfigError

    cfg = ConsumerGroupConfig.from_kafka_config(KafkaConfig({}))
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.assignors) == \
        (45000, 5000, ("uniform", "range"))
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms"):
        ConsumerGroupConfig.from_kafka_config(
            KafkaConfig({"group.consumer.session.timeout.ms": "1000"}))
    with pytest.raises(ConfigError, match="group.consumer.assignors"):
        ConsumerGroupConfig.from_kafka_config(KafkaConfig({"group.consumer.assignors": "x"}))
    java = "org.apache.kafka.coordinator.group.assignor.RangeAssignor"
    assert ConsumerGroupConfig.from_kafka_config(
        KafkaConfig({"group.consumer.assignors": java})).assignors == ("range",)
