"""Members that join but never send SyncGroup (Kafka 3.0+, KAFKA-13054 "DelayedSync"): after a
generation forms, every member owes a SyncGroup; those that have not sent one within the
rebalance timeout are removed and the group rebalances. MockTimer throughout."""

from __future__ import annotations

from broker.coordinator_runtime import WheelTimer
from broker.purgatory import MockTimer
from coordinator.group.delayed_sync import DelayedSync
from coordinator.group.group import GroupMetadata, GroupState, MemberMetadata
from coordinator.keys import GroupKey
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness

S = GroupState


# --- the operation's completion cases (the coordinator is a recorder) --------------------------

class Recorder:
    def __init__(self) -> None:
        self.expired: list[tuple[GroupMetadata, int]] = []

    def on_expire_pending_sync(self, group, generation_id) -> None:
        self.expired.append((group, generation_id))


def _group_awaiting_sync(state=S.COMPLETING_REBALANCE) -> GroupMetadata:
    g = GroupMetadata("g", state)
    g.generation_id = 3
    for mid in ("a", "b"):
        g.add(MemberMetadata(mid, None, "c", "/h", 1000, 1000, "consumer", [("range", b"")]))
        g.add_pending_sync_member(mid)
    return g


def _watch(g: GroupMetadata, delay_ms=5000):
    timer = MockTimer()
    purgatory = WheelTimer(timer).purgatory("Sync")
    rec = Recorder()
    completed = purgatory.try_complete_else_watch(
        DelayedSync(rec, g, g.generation_id, delay_ms), [GroupKey("g")])
    return timer, purgatory, rec, completed


def test_delayed_sync_case_a_every_member_synced():
    g = _group_awaiting_sync()
    timer, purgatory, rec, completed = _watch(g)
    assert not completed
    g.remove_pending_sync_member("a")
    assert purgatory.check_and_complete(GroupKey("g")) == 0
    g.remove_pending_sync_member("b")
    assert purgatory.check_and_complete(GroupKey("g")) == 1
    timer.advance(10_000)
    assert rec.expired == []


def test_delayed_sync_case_b_new_generation_or_state_completes_without_effect():
    g = _group_awaiting_sync()
    timer, purgatory, rec, _ = _watch(g)
    g.generation_id += 1
    assert purgatory.check_and_complete(GroupKey("g")) == 1
    g2 = _group_awaiting_sync()
    timer2, purgatory2, rec2, _ = _watch(g2)
    g2.transition_to(S.PREPARING_REBALANCE)
    assert purgatory2.check_and_complete(GroupKey("g")) == 1
    timer.advance(10_000)
    timer2.advance(10_000)
    assert rec.expired == [] and rec2.expired == []


def test_delayed_sync_case_c_timeout_reports_the_generation():
    g = _group_awaiting_sync(S.STABLE)
    g.remove_pending_sync_member("a")
    timer, purgatory, rec, _ = _watch(g, 4000)
    timer.advance(3999)
    assert rec.expired == []
    timer.advance(1)
    assert rec.expired == [(g, 3)]


def test_removing_a_member_drops_its_pending_sync():
    g = _group_awaiting_sync()
    g.remove("a")
    g.remove("b")
    assert g.has_received_sync_from_all_members()


# --- the coordinator ---------------------------------------------------------------------------

async def _two_members_joined(h: Harness, rebalance_ms=5000, session_ms=10000):
    h.coordinator.config.initial_rebalance_delay_ms = 100
    wa = h.join_known(client_id="a", rebalance_ms=rebalance_ms, session_ms=session_ms)
    wb = h.join_known(client_id="b", rebalance_ms=rebalance_ms, session_ms=session_ms)
    for _ in range(10):  # InitialDelayedJoin waits again after a new member arrived
        if wa and wb:
            break
        h.advance(100)
    h.coordinator.config.initial_rebalance_delay_ms = 0
    a, b = wa[0], wb[0]
    assert a.error == b.error == E.NONE and a.generation_id == b.generation_id == 1
    leader = a if a.leader_id == a.member_id else b
    follower = b if leader is a else a
    return leader, follower


async def test_follower_that_never_syncs_is_removed_after_the_rebalance_timeout():
    h = Harness()
    c = await h.start()
    leader, follower = await _two_members_joined(h)
    h.sync("g", 1, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"})
    await h.settle()
    g = c.groups["g"]
    assert g.state is S.STABLE
    h.advance(4000)  # the follower keeps heartbeating but never syncs
    assert c.handle_heartbeat("g", follower.member_id, None, 1) == E.NONE
    assert c.handle_heartbeat("g", leader.member_id, None, 1) == E.NONE
    h.advance(999)
    assert follower.member_id in g and g.state is S.STABLE
    h.advance(1)
    assert follower.member_id not in g
    assert g.state is S.PREPARING_REBALANCE
    assert c.handle_heartbeat("g", follower.member_id, None, 1) == E.UNKNOWN_MEMBER_ID
    assert c.handle_heartbeat("g", leader.member_id, None, 1) == E.REBALANCE_IN_PROGRESS


async def test_leader_that_never_syncs_is_removed_and_waiting_followers_rejoin():
    h = Harness()
    c = await h.start()
    leader, follower = await _two_members_joined(h)
    parked = h.sync("g", 1, follower.member_id)
    assert parked == []
    h.advance(5000)
    g = c.groups["g"]
    assert leader.member_id not in g and follower.member_id in g
    assert parked[0].error == E.REBALANCE_IN_PROGRESS
    assert g.state is S.PREPARING_REBALANCE


async def test_members_that_all_sync_are_kept():
    h = Harness()
    c = await h.start()
    leader, follower = await _two_members_joined(h)
    h.sync("g", 1, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"})
    await h.settle()
    assert h.sync("g", 1, follower.member_id)[0].assignment == b"F"
    for _ in range(3):
        h.advance(3000)
        for m in (leader, follower):
            assert c.handle_heartbeat("g", m.member_id, None, 1) == E.NONE
    g = c.groups["g"]
    assert g.state is S.STABLE and g.size == 2 and c.rebalances == 1


async def test_a_new_rebalance_cancels_the_pending_sync_expiration():
    h = Harness()
    c = await h.start()
    leader, follower = await _two_members_joined(h, rebalance_ms=5000, session_ms=20000)
    # a third member arrives before anyone syncs: the group goes back to PreparingRebalance
    third = h.join_known(client_id="c", rebalance_ms=5000, session_ms=20000)
    g = c.groups["g"]
    assert g.state is S.PREPARING_REBALANCE and not g.pending_sync_members
    h.join(member_id=leader.member_id, rebalance_ms=5000, session_ms=20000)
    h.join(member_id=follower.member_id, rebalance_ms=5000, session_ms=20000)
    assert third[0].generation_id == 2
    assert g.size == 3 and g.pending_sync_members == set(g.members)
    for mid in g.members:
        h.sync("g", 2, mid, {m: b"x" for m in g.members} if g.is_leader(mid) else None)
    await h.settle()
    h.advance(5000)
    assert g.state is S.STABLE and g.size == 3 and g.generation_id == 2
