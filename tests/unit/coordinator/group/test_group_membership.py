"""GroupCoordinator membership on a MockTimer: KIP-394 joins, rebalances, DelayedJoin and
DelayedHeartbeat completion cases, static members (KIP-345), LeaveGroup, limits."""

from __future__ import annotations

from coordinator.group.group import GroupState
from coordinator.group.records import GroupRecord
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness

S = GroupState


async def form_group(h: Harness, n: int, group="g", **kw):
    """n members join (v4 flow) within one initial rebalance delay, the leader syncs;
    returns the JoinResults."""
    saved = h.coordinator.config.initial_rebalance_delay_ms
    h.coordinator.config.initial_rebalance_delay_ms = 100
    waits = [h.join_known(group, client_id=f"c{i}", **kw) for i in range(n)]
    for _ in range(20):  # InitialDelayedJoin waits again while members keep arriving
        if all(waits):
            break
        h.advance(100)
    h.coordinator.config.initial_rebalance_delay_ms = saved
    results = [w[0] for w in waits]
    assert all(r.error == E.NONE for r in results), results
    gen = results[0].generation_id
    leader = results[0].leader_id
    syncs = [h.sync(group, gen, r.member_id,
                    {x.member_id: f"assign-{x.member_id}".encode() for x in results}
                    if r.member_id == leader else None) for r in results]
    await h.settle()
    assert all(s and s[0].error == E.NONE for s in syncs), syncs
    return results


async def test_member_id_required_then_join_forms_generation():
    h = Harness()
    c = await h.start()
    first = h.join()
    assert first[0].error == E.MEMBER_ID_REQUIRED and first[0].member_id.startswith("client-")
    assert c.groups["g"].is_pending_member(first[0].member_id)
    second = h.join(member_id=first[0].member_id)
    r = second[0]
    assert (r.error, r.generation_id, r.leader_id, r.protocol_name) == \
        (E.NONE, 1, first[0].member_id, "range")
    assert r.members == [(r.member_id, None, b"m")]
    assert c.groups["g"].state is S.COMPLETING_REBALANCE


async def test_sync_propagates_assignment_and_stores_the_group():
    h = Harness()
    await h.start()
    results = await form_group(h, 3)
    g = h.coordinator.groups["g"]
    assert g.state is S.STABLE and g.generation_id == 1
    for r in results:
        assert g.get(r.member_id).assignment == f"assign-{r.member_id}".encode()
    stored = [rec for rec in h.store.records() if isinstance(rec, GroupRecord)]
    assert stored[-1].value.generation == 1
    assert {m.member_id: bytes(m.assignment) for m in stored[-1].value.members} == \
        {r.member_id: f"assign-{r.member_id}".encode() for r in results}
    # a follower syncing late (Stable) gets its assignment at once
    late = h.sync("g", 1, results[1].member_id)
    assert late[0].assignment == f"assign-{results[1].member_id}".encode()


async def test_follower_sync_waits_for_the_leader():
    h = Harness()
    await h.start()
    a = h.join_known(client_id="a")[0]
    b_wait = h.join_known(client_id="b")
    # b joined after a's generation formed: a rebalance is in progress, a must rejoin
    assert h.coordinator.groups["g"].state is S.PREPARING_REBALANCE
    assert h.coordinator.handle_heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
    a2 = h.join(member_id=a.member_id)
    assert a2[0].generation_id == 2 and b_wait[0].generation_id == 2
    follower = b_wait[0] if b_wait[0].leader_id != b_wait[0].member_id else a2[0]
    leader = a2[0] if follower is b_wait[0] else b_wait[0]
    assert leader.members and not follower.members
    fs = h.sync("g", 2, follower.member_id)
    assert fs == []  # parked until the leader's assignment arrives
    h.sync("g", 2, leader.member_id, {follower.member_id: b"F", leader.member_id: b"L"})
    await h.settle()
    assert fs[0].error == E.NONE and fs[0].assignment == b"F"


async def test_initial_rebalance_delay_collects_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    await h.start()
    w1 = h.join_known(client_id="a", rebalance_ms=10000)
    h.advance(2000)
    w2 = h.join_known(client_id="b", rebalance_ms=10000)
    assert w1 == [] and w2 == []
    h.advance(1000)  # first delay ends, a new member came: wait again
    assert w1 == []
    h.advance(3000)
    assert w1[0].generation_id == w2[0].generation_id == 1
    assert h.coordinator.groups["g"].size == 2


async def test_rebalance_timeout_removes_members_that_did_not_rejoin():
    h = Harness()
    await h.start()
    a, b = await form_group(h, 2, rebalance_ms=5000)
    h.join(member_id=a.member_id, rebalance_ms=5000)  # a rejoins (leader): rebalance
    g = h.coordinator.groups["g"]
    assert g.state is S.PREPARING_REBALANCE
    h.advance(4999)
    assert g.state is S.PREPARING_REBALANCE
    h.advance(1)  # DelayedJoin expires: b did not rejoin and is dropped
    assert g.state is S.COMPLETING_REBALANCE and list(g.members) == [a.member_id]


async def test_session_timeout_evicts_and_rebalances():
    h = Harness()
    await h.start()
    a, b = await form_group(h, 2, session_ms=3000)
    g = h.coordinator.groups["g"]
    for _ in range(4):  # a heartbeats, b is silent
        h.advance(1000)
        assert h.coordinator.handle_heartbeat("g", a.member_id, None, 1) in \
            (E.NONE, E.REBALANCE_IN_PROGRESS)
    assert b.member_id not in g
    assert g.state is S.PREPARING_REBALANCE
    assert h.coordinator.handle_heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
    assert h.coordinator.handle_heartbeat("g", b.member_id, None, 1) == E.UNKNOWN_MEMBER_ID
    rejoin = h.join(member_id=a.member_id, session_ms=3000)
    assert rejoin[0].generation_id == 2 and rejoin[0].members == [(a.member_id, None, b"m")]


async def test_heartbeat_errors():
    h = Harness()
    c = await h.start()
    a, = await form_group(h, 1)
    assert c.handle_heartbeat("g", a.member_id, None, 1) == E.NONE
    assert c.handle_heartbeat("g", a.member_id, None, 7) == E.ILLEGAL_GENERATION
    assert c.handle_heartbeat("g", "nobody", None, 1) == E.UNKNOWN_MEMBER_ID
    assert c.handle_heartbeat("missing", "x", None, 1) == E.UNKNOWN_MEMBER_ID
    c.owned.discard(c.partition_for("g"))
    assert c.handle_heartbeat("g", a.member_id, None, 1) == E.NOT_COORDINATOR


async def test_pending_member_expires_after_session_timeout():
    h = Harness()
    c = await h.start()
    first = h.join(session_ms=2000)
    mid = first[0].member_id
    h.advance(2000)
    assert not c.groups["g"].is_pending_member(mid)


async def test_static_member_rejoin_keeps_generation_and_fences_old_id():
    h = Harness()
    c = await h.start()
    w = h.join(instance_id="i-1", require_known=True)
    a = w[0]
    assert a.error == E.NONE  # static members do not need MEMBER_ID_REQUIRED
    h.sync("g", 1, a.member_id, {a.member_id: b"A"})
    await h.settle()
    rejoin = h.join(instance_id="i-1")
    await h.settle()
    r = rejoin[0]
    assert r.error == E.NONE and r.member_id != a.member_id
    assert r.generation_id == 1 and r.skip_assignment and r.leader_id == r.member_id
    g = c.groups["g"]
    assert g.state is S.STABLE and g.get(r.member_id).assignment == b"A"
    assert c.handle_heartbeat("g", a.member_id, "i-1", 1) == E.FENCED_INSTANCE_ID
    assert c.handle_heartbeat("g", r.member_id, "i-1", 1) == E.NONE
    assert h.sync("g", 1, a.member_id, instance_id="i-1")[0].error == E.FENCED_INSTANCE_ID
    assert c.rebalances == 1
    stored = [rec for rec in h.store.records() if isinstance(rec, GroupRecord)][-1]
    assert [m.member_id for m in stored.value.members] == [r.member_id]


async def test_static_member_with_new_protocols_triggers_rebalance():
    h = Harness()
    c = await h.start()
    a = h.join(instance_id="i-1")[0]
    h.sync("g", 1, a.member_id, {a.member_id: b"A"})
    await h.settle()
    # protocols must stay compatible with the group (Kafka checks before the replacement)
    assert h.join(instance_id="i-1", protocols=(("roundrobin", b"x"),))[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    w = h.join(instance_id="i-1", protocols=(("roundrobin", b"x"), ("range", b"m")))
    assert w[0].generation_id == 2 and w[0].protocol_name == "roundrobin"
    assert c.rebalances == 2


async def test_leave_group_batched_and_by_instance_id():
    h = Harness()
    c = await h.start()
    a = h.join(instance_id="i-a")[0]
    h.sync("g", 1, a.member_id, {a.member_id: b"A"})
    await h.settle()
    b = h.join_known(client_id="b")
    a2 = h.join(member_id=a.member_id, instance_id="i-a")
    assert a2[0].generation_id == b[0].generation_id == 2
    top, errors = c.handle_leave_group("g", [("", "i-a"), (b[0].member_id, None),
                                             ("ghost", None), ("", "i-unknown")])
    assert top == E.NONE
    assert errors == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID]
    await h.settle()
    assert c.groups["g"].state is S.EMPTY
    assert c.handle_leave_group("nope", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])


async def test_join_errors():
    h = Harness()
    c = await h.start()
    assert h.join(group="")[0].error == E.INVALID_GROUP_ID
    assert h.join(session_ms=999)[0].error == E.INVALID_SESSION_TIMEOUT
    assert h.join(session_ms=60001)[0].error == E.INVALID_SESSION_TIMEOUT
    assert h.join(member_id="unknown")[0].error == E.UNKNOWN_MEMBER_ID
    await form_group(h, 1)
    assert h.join(protocol_type="connect")[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join(protocols=(("other", b""),))[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    c.loading.add(c.partition_for("g"))
    assert h.join()[0].error == E.COORDINATOR_LOAD_IN_PROGRESS


async def test_sync_errors():
    h = Harness()
    c = await h.start()
    a, = await form_group(h, 1)
    assert h.sync("g", 2, a.member_id)[0].error == E.ILLEGAL_GENERATION
    assert h.sync("g", 1, "ghost")[0].error == E.UNKNOWN_MEMBER_ID
    assert h.sync("g", 1, a.member_id, protocol_type="connect")[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", 1, a.member_id, protocol_name="other")[0].error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", 1, a.member_id, protocol_type="consumer",
                  protocol_name="range")[0].error == E.NONE
    h.join_known(client_id="b")
    assert h.sync("g", 1, a.member_id)[0].error == E.REBALANCE_IN_PROGRESS
    c.loading.add(c.partition_for("g"))
    assert h.sync("g", 1, a.member_id)[0].error == E.REBALANCE_IN_PROGRESS


async def test_failed_assignment_write_answers_the_error_and_rebalances():
    h = Harness()
    c = await h.start()
    a = h.join_known()[0]
    h.store.error = E.NOT_COORDINATOR
    s = h.sync("g", 1, a.member_id, {a.member_id: b"A"})
    await h.settle()
    assert s[0].error == E.NOT_COORDINATOR
    assert c.groups["g"].state is S.PREPARING_REBALANCE


async def test_resignation_answers_waiters_not_coordinator():
    h = Harness(initial_rebalance_delay_ms=5000)
    c = await h.start()
    w = h.join_known()
    c.on_resignation(c.partition_for("g"))
    assert w[0].error == E.NOT_COORDINATOR
    assert "g" not in c.groups
    assert h.join()[0].error == E.NOT_COORDINATOR


async def test_group_max_size():
    h = Harness(max_size=2)
    await h.start()
    a, b = await form_group(h, 2)
    assert h.join(client_id="x")[0].error == E.GROUP_MAX_SIZE_REACHED
    # known members may always rejoin
    assert h.join(member_id=a.member_id) == []
    assert h.coordinator.groups["g"].state is S.PREPARING_REBALANCE
