"""Behaviours checked against Kafka's GroupCoordinator (classic protocol) where the first
implementation differed; MockTimer throughout."""

from __future__ import annotations

from coordinator.group.group import GroupState
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness

S = GroupState
P1 = (("range", b"m"),)
P2 = (("range", b"changed"),)


async def static_group(h: Harness, *instances: str, rebalance_ms=5000, session_ms=30000):
    """Static members join within one initial delay; the leader syncs. Returns the
    JoinResults in ``instances`` order."""
    h.coordinator.config.initial_rebalance_delay_ms = 100
    waits = [h.join(instance_id=i, client_id=i, rebalance_ms=rebalance_ms,
                    session_ms=session_ms) for i in instances]
    for _ in range(20):
        if all(waits):
            break
        h.advance(100)
    h.coordinator.config.initial_rebalance_delay_ms = 0
    results = [w[0] for w in waits]
    assert all(r.error == E.NONE for r in results)
    leader = next(r for r in results if r.leader_id == r.member_id)
    h.sync("g", leader.generation_id, leader.member_id, {r.member_id: b"x" for r in results},
           instance_id=next(i for i, r in zip(instances, results, strict=True)
                                     if r is leader))
    await h.settle()
    assert h.coordinator.groups["g"].state is S.STABLE
    return results


async def test_a_joined_member_becomes_leader_when_the_static_leader_did_not_rejoin():
    """Kafka's maybeElectNewJoinedLeader: the generation's leader must be a member that
    rejoined, else nobody would compute the assignment."""
    h = Harness()
    c = await h.start()
    a, b = await static_group(h, "a", "b")
    assert a.leader_id == a.member_id
    # b rejoins with new metadata (rebalance); the static leader a stays silent
    w = h.join(member_id=b.member_id, instance_id="b", protocols=P2, rebalance_ms=5000,
               session_ms=30000)
    h.advance(5000)
    r = w[0]
    assert r.error == E.NONE and r.generation_id == 2
    assert r.leader_id == b.member_id
    assert {m[0] for m in r.members} == {a.member_id, b.member_id}
    assert c.groups["g"].leader_id == b.member_id


async def test_rebalance_waits_again_when_no_member_rejoined():
    """Kafka: if only static members remain and none rejoined, the join phase is postponed
    (another DelayedJoin) instead of forming a generation nobody knows about."""
    h = Harness()
    c = await h.start()
    a, b = await static_group(h, "a", "b")
    c._maybe_prepare_rebalance(c.groups["g"], "test")
    g = c.groups["g"]
    h.advance(5000)
    assert g.state is S.PREPARING_REBALANCE and g.generation_id == 1
    w = h.join(member_id=a.member_id, instance_id="a", rebalance_ms=5000, session_ms=30000)
    h.advance(5000)
    assert w[0].generation_id == 2 and w[0].leader_id == a.member_id
    assert g.state is S.COMPLETING_REBALANCE


async def test_static_leader_rejoining_before_join_group_v9_is_not_told_it_leads():
    """KIP-814 only from JoinGroup v9: older clients get the old leader id and no members,
    so the rejoining static leader does not run a (discarded) assignment."""
    h = Harness()
    c = await h.start()
    a, = await static_group(h, "a")
    out: list = []
    c.handle_join_group("g", "", "a", True, "a", "/h", 5000, 30000, "consumer", list(P1),
                        out.append, support_skip_assignment=False)
    await h.settle()
    r = out[0]
    assert r.error == E.NONE and r.member_id != a.member_id and r.generation_id == 1
    assert r.leader_id == a.member_id and r.members == [] and not r.skip_assignment
    assert c.groups["g"].leader_id == r.member_id and c.rebalances == 1
    # v9+: told it leads, with the members, and to skip the assignment
    out9: list = []
    c.handle_join_group("g", "", "a", True, "a", "/h", 5000, 30000, "consumer", list(P1),
                        out9.append)
    await h.settle()
    assert out9[0].leader_id == out9[0].member_id and out9[0].skip_assignment
    assert out9[0].members == [(out9[0].member_id, "a", b"m")]


async def test_an_unknown_group_instance_id_is_an_unknown_member():
    """Kafka's validateCurrentMember: a request naming a group.instance.id the group does
    not know is UNKNOWN_MEMBER_ID even when the member id exists (join, sync, heartbeat,
    leave, commit); the member stays."""
    from coordinator.group.group import OffsetAndMetadata
    h = Harness()
    c = await h.start()
    a, = await static_group(h, "a")
    mid = a.member_id
    assert c.handle_heartbeat("g", mid, "nope", 1) == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", 1, mid, instance_id="nope")[0].error == E.UNKNOWN_MEMBER_ID
    assert h.join(member_id=mid, instance_id="nope")[0].error == E.UNKNOWN_MEMBER_ID
    assert await c.handle_commit_offsets("g", mid, "nope", 1, {("t", 0): OffsetAndMetadata(1)}) \
        == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert c.handle_leave_group("g", [(mid, "nope")]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])
    assert mid in c.groups["g"] and c.groups["g"].state is S.STABLE
    # the right instance id still works; another member's id is FENCED_INSTANCE_ID
    assert c.handle_heartbeat("g", mid, "a", 1) == E.NONE
    assert c.handle_heartbeat("g", "someone-else", "a", 1) == E.FENCED_INSTANCE_ID


async def test_commit_checks_member_and_generation_before_the_rebalance_state():
    """Kafka's validateOffsetCommit runs before the state check: in CompletingRebalance a
    stale generation is ILLEGAL_GENERATION and a stranger UNKNOWN_MEMBER_ID; only a valid
    member of the new generation gets REBALANCE_IN_PROGRESS."""
    from coordinator.group.group import OffsetAndMetadata
    h = Harness()
    c = await h.start()
    a, = await static_group(h, "a")
    h.join(member_id=a.member_id, instance_id="a", protocols=P2, rebalance_ms=5000,
           session_ms=30000)
    g = c.groups["g"]
    assert g.state is S.COMPLETING_REBALANCE and g.generation_id == 2
    tp = {("t", 0): OffsetAndMetadata(1)}
    assert await c.handle_commit_offsets("g", a.member_id, "a", 1, tp) == \
        {("t", 0): E.ILLEGAL_GENERATION}
    assert await c.handle_commit_offsets("g", "ghost", None, 2, tp) == \
        {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert await c.handle_commit_offsets("g", a.member_id, "a", 2, tp) == \
        {("t", 0): E.REBALANCE_IN_PROGRESS}
    # an admin commit (generation -1, no member) to a non-empty group
    assert await c.handle_commit_offsets("g", "", None, -1, tp) == \
        {("t", 0): E.UNKNOWN_MEMBER_ID}


async def _three_dynamic_members(h: Harness):
    h.coordinator.config.initial_rebalance_delay_ms = 100
    waits = [h.join_known(client_id=f"c{i}", rebalance_ms=5000) for i in range(3)]
    for _ in range(20):
        if all(waits):
            break
        h.advance(100)
    h.coordinator.config.initial_rebalance_delay_ms = 0
    results = [w[0] for w in waits]
    leader = next(r for r in results if r.leader_id == r.member_id)
    h.sync("g", 1, leader.member_id, {r.member_id: b"x" for r in results})
    await h.settle()
    return leader, [r for r in results if r is not leader]


async def test_over_capacity_rejoin_is_removed_so_the_rebalance_completes():
    """Kafka's handleJoinGroup: a member refused with GROUP_MAX_SIZE_REACHED is removed
    from the group (the rebalance then need not wait for it)."""
    h = Harness(max_size=3)
    c = await h.start()
    leader, (b, d) = await _three_dynamic_members(h)
    c.config.max_size = 2  # lowered (e.g. a broker restarted with a smaller group.max.size)
    wl = h.join(member_id=leader.member_id, rebalance_ms=5000)
    wb = h.join(member_id=b.member_id, rebalance_ms=5000)
    wd = h.join(member_id=d.member_id, rebalance_ms=5000)
    assert wd[0].error == E.GROUP_MAX_SIZE_REACHED
    g = c.groups["g"]
    assert d.member_id not in g
    assert wl[0].generation_id == wb[0].generation_id == 2 and g.size == 2


async def test_a_loaded_group_over_capacity_rebalances():
    """Kafka's onGroupLoaded: a group loaded with more members than group.max.size
    rebalances at once."""
    from coordinator.group.records import decode_record, group_from_value, group_metadata_record
    h = Harness(max_size=3)
    c = await h.start()
    await _three_dynamic_members(h)
    stored = decode_record(*group_metadata_record(c.groups["g"])).value
    h2 = Harness(max_size=2)
    h2.store.loaded[h2.store.partition_for("g")] = {
        "g": group_from_value("g", stored, h2.time.milliseconds)}
    c2 = await h2.start()
    assert c2.groups["g"].state is S.PREPARING_REBALANCE


async def test_a_new_member_timing_out_in_join_is_answered_without_its_member_id():
    """Kafka's removeMemberAndUpdateGroup answers the parked JoinGroup with UNKNOWN_MEMBER_ID
    and member id "" (the client resets it and joins again)."""
    from coordinator.group.group_membership import NEW_MEMBER_JOIN_TIMEOUT_MS
    h = Harness()
    c = await h.start()
    a, b = await static_group(h, "a", "b", rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS,
                              session_ms=60000)
    w = h.join_known(client_id="new", rebalance_ms=10 * NEW_MEMBER_JOIN_TIMEOUT_MS)
    assert w == [] and c.groups["g"].state is S.PREPARING_REBALANCE
    for _ in range(NEW_MEMBER_JOIN_TIMEOUT_MS // 30000):  # a and b keep their sessions
        h.advance(30000)
        for r, i in ((a, "a"), (b, "b")):
            c.handle_heartbeat("g", r.member_id, i, 1)
    assert w[0].error == E.UNKNOWN_MEMBER_ID and w[0].member_id == ""
