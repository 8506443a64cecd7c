"""DelayedJoin, InitialDelayedJoin and DelayedHeartbeat completion cases in a purgatory on a
MockTimer (the coordinator is a recorder: these tests check when the operations fire)."""

from __future__ import annotations

from broker.coordinator_runtime import WheelTimer
from broker.purgatory import MockTimer
from coordinator.group.delayed_heartbeat import DelayedHeartbeat
from coordinator.group.delayed_join import DelayedJoin, InitialDelayedJoin
from coordinator.group.group import GroupMetadata, GroupState, MemberMetadata
from coordinator.keys import GroupKey, MemberKey


class Recorder:
    def __init__(self) -> None:
        self.joins: list[GroupMetadata] = []
        self.expired: list[tuple[str, bool]] = []

    def on_complete_join(self, group) -> None:
        self.joins.append(group)

    def on_expire_heartbeat(self, group, member_id, is_pending) -> None:
        self.expired.append((member_id, is_pending))


def member(mid: str) -> MemberMetadata:
    return MemberMetadata(mid, None, "c", "/h", 1000, 1000, "consumer", [("range", b"")])


def setup():
    timer = MockTimer()
    return timer, WheelTimer(timer).purgatory("Rebalance"), Recorder()


def test_delayed_join_case_a_all_members_rejoined():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    g.add(member("a"), callback=lambda r: None)
    g.add(member("b"))  # has not rejoined yet
    assert not purgatory.try_complete_else_watch(DelayedJoin(rec, g, 5000), [GroupKey("g")])
    assert purgatory.check_and_complete(GroupKey("g")) == 0
    g.update_member(g.get("b"), [("range", b"")], 1000, 1000, lambda r: None)
    assert purgatory.check_and_complete(GroupKey("g")) == 1
    assert rec.joins == [g]
    timer.advance(5000)
    assert rec.joins == [g]  # completes once


def test_delayed_join_case_b_no_members_left_and_pending_blocks():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    g.add(member("a"))
    g.add_pending_member("p")
    purgatory.try_complete_else_watch(DelayedJoin(rec, g, 5000), [GroupKey("g")])
    g.remove("a")
    assert purgatory.check_and_complete(GroupKey("g")) == 0  # a pending member is expected
    g.remove_pending_member("p")
    assert purgatory.check_and_complete(GroupKey("g")) == 1


def test_delayed_join_case_c_rebalance_timeout():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    g.add(member("a"))
    purgatory.try_complete_else_watch(DelayedJoin(rec, g, 3000), [GroupKey("g")])
    timer.advance(2999)
    assert rec.joins == []
    timer.advance(1)
    assert rec.joins == [g]


def test_initial_delayed_join_waits_again_for_new_members_within_the_rebalance_timeout():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    g.add(member("a"), callback=lambda r: None)
    op = InitialDelayedJoin(rec, purgatory, g, 1000, 1000, 2500)
    purgatory.try_complete_else_watch(op, [GroupKey("g")])
    assert purgatory.check_and_complete(GroupKey("g")) == 0  # never completes early
    for _ in range(5):  # a new member arrives during every delay
        g.new_member_added = True
        timer.advance(1000)
    # 1000 + 1000 + 1000 (capped by what remains of 2500 + the first delay) then done
    assert rec.joins == [g]
    assert timer.now_ms() <= 5000


def test_initial_delayed_join_without_new_members_completes_after_one_delay():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    purgatory.try_complete_else_watch(InitialDelayedJoin(rec, purgatory, g, 300, 300, 10000),
                                      [GroupKey("g")])
    timer.advance(299)
    assert rec.joins == []
    timer.advance(1)
    assert rec.joins == [g]


def heartbeat(purgatory, rec, g, mid, pending=False, delay=1000) -> bool:
    """Park a DelayedHeartbeat; True if it completed at once."""
    op = DelayedHeartbeat(rec, g, mid, pending, delay)
    return purgatory.try_complete_else_watch(op, [MemberKey("g", mid)])


def test_delayed_heartbeat_cases():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.STABLE)
    g.add(member("a"))
    g.add(member("b"))
    g.add_pending_member("p")
    heartbeat(purgatory, rec, g, "a")
    heartbeat(purgatory, rec, g, "b")
    heartbeat(purgatory, rec, g, "p", pending=True)
    # Case B: a heartbeated
    g.get("a").heartbeat_satisfied = True
    assert purgatory.check_and_complete(MemberKey("g", "a")) == 1
    # Case A: the pending member joined
    g.add(member("p"))
    assert purgatory.check_and_complete(MemberKey("g", "p")) == 1
    # Case D: b stays silent past its session timeout
    timer.advance(1000)
    assert rec.expired == [("b", False)]


def test_delayed_heartbeat_case_c_member_gone_and_new_member_rule():
    timer, purgatory, rec = setup()
    g = GroupMetadata("g", GroupState.PREPARING_REBALANCE)
    g.add(member("gone"))
    heartbeat(purgatory, rec, g, "gone")
    g.remove("gone")
    assert purgatory.check_and_complete(MemberKey("g", "gone")) == 1
    # a new member waiting in JoinGroup still expires (Kafka's rule); an old one does not
    new, old = member("new"), member("old")
    new.is_new = True
    g.add(new, callback=lambda r: None)
    g.add(old, callback=lambda r: None)
    new_completed = heartbeat(purgatory, rec, g, "new")
    old_completed = heartbeat(purgatory, rec, g, "old")
    assert old_completed and not new_completed
    timer.advance(1000)
    assert rec.expired == [("new", False)]
