"""GroupCoordinator offsets: commit checks, fetch, require_stable, deletion, expiry (KIP-211)."""

from __future__ import annotations

import asyncio

from coordinator.group.group import GroupState, OffsetAndMetadata
from coordinator.group.records import GroupRecord, OffsetRecord
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness

S = GroupState
TP0, TP1 = ("t", 0), ("t", 1)


def om(offset, metadata="", epoch=-1, ts=None):
    return OffsetAndMetadata(offset, epoch, metadata, ts if ts is not None else -1)


async def stable_group(h: Harness, group="g"):
    first = h.join(group)
    r = h.join(group, member_id=first[0].member_id)[0]
    h.sync(group, r.generation_id, r.member_id, {r.member_id: b"A"})
    await h.settle()
    return r


async def test_simple_consumer_commit_and_fetch_round_trip():
    h = Harness()
    c = await h.start()
    res = await c.handle_commit_offsets("simple", "", None, -1, {
        TP0: om(10, "meta-0", epoch=3, ts=h.time.milliseconds()), TP1: om(20)})
    assert res == {TP0: E.NONE, TP1: E.NONE}
    err, found = c.handle_fetch_offsets("simple", [TP0, TP1, ("t", 9)])
    assert err == E.NONE
    assert (found[TP0][0].offset, found[TP0][0].metadata, found[TP0][0].leader_epoch) == \
        (10, "meta-0", 3)
    assert found[("t", 9)] == (None, E.NONE)
    err, everything = c.handle_fetch_offsets("simple", None)
    assert set(everything) == {TP0, TP1}
    recs = [r for r in h.store.records() if isinstance(r, OffsetRecord)]
    assert {(r.topic, r.partition, r.value.offset) for r in recs} == {("t", 0, 10), ("t", 1, 20)}
    assert c.groups["simple"].state is S.EMPTY


async def test_commit_generation_and_member_checks():
    h = Harness()
    c = await h.start()
    assert await c.handle_commit_offsets("none", "m", None, 1, {TP0: om(1)}) == \
        {TP0: E.ILLEGAL_GENERATION}
    r = await stable_group(h)
    ok = await c.handle_commit_offsets("g", r.member_id, None, r.generation_id, {TP0: om(5)})
    assert ok == {TP0: E.NONE}
    assert await c.handle_commit_offsets("g", r.member_id, None, 9, {TP0: om(1)}) == \
        {TP0: E.ILLEGAL_GENERATION}
    assert await c.handle_commit_offsets("g", "ghost", None, 1, {TP0: om(1)}) == \
        {TP0: E.UNKNOWN_MEMBER_ID}
    # a non-empty group refuses simple (generation -1) commits
    assert await c.handle_commit_offsets("g", "", None, -1, {TP0: om(1)}) == \
        {TP0: E.UNKNOWN_MEMBER_ID}
    # during CompletingRebalance: REBALANCE_IN_PROGRESS
    h.join(member_id=r.member_id)
    assert c.groups["g"].state is S.COMPLETING_REBALANCE
    assert await c.handle_commit_offsets("g", r.member_id, None, 2, {TP0: om(1)}) == \
        {TP0: E.REBALANCE_IN_PROGRESS}
    assert c.handle_fetch_offsets("g", [TP0])[1][TP0][0].offset == 5


async def test_commit_fenced_static_member_and_metadata_limit():
    h = Harness(offset_metadata_max_bytes=4)
    c = await h.start()
    a = h.join(instance_id="i")[0]
    h.sync("g", 1, a.member_id, {a.member_id: b"A"})
    await h.settle()
    res = await c.handle_commit_offsets("g", "old-id", "i", 1, {TP0: om(1)})
    assert res == {TP0: E.FENCED_INSTANCE_ID}
    res = await c.handle_commit_offsets("g", a.member_id, "i", 1,
                                        {TP0: om(1, "12345"), TP1: om(2, "1234")})
    assert res == {TP0: E.OFFSET_METADATA_TOO_LARGE, TP1: E.NONE}


async def test_commit_append_errors_map():
    h = Harness()
    c = await h.start()
    h.store.error = E.RECORD_LIST_TOO_LARGE
    assert await c.handle_commit_offsets("s", "", None, -1, {TP0: om(1)}) == \
        {TP0: E.INVALID_COMMIT_OFFSET_SIZE}
    h.store.error = E.NOT_COORDINATOR
    assert await c.handle_commit_offsets("s", "", None, -1, {TP0: om(1)}) == \
        {TP0: E.NOT_COORDINATOR}
    assert c.handle_fetch_offsets("s", [TP0])[1][TP0] == (None, E.NONE)


async def test_require_stable_sees_commits_in_flight():
    h = Harness()
    c = await h.start()
    h.store.gate = asyncio.Event()
    commit = asyncio.ensure_future(c.handle_commit_offsets("s", "", None, -1, {TP0: om(7)}))
    await asyncio.sleep(0)
    assert c.handle_fetch_offsets("s", [TP0], require_stable=True)[1][TP0] == \
        (None, E.UNSTABLE_OFFSET_COMMIT)
    assert c.handle_fetch_offsets("s", [TP0], require_stable=False)[1][TP0] == (None, E.NONE)
    h.store.gate.set()
    assert await commit == {TP0: E.NONE}
    assert c.handle_fetch_offsets("s", [TP0], require_stable=True)[1][TP0][0].offset == 7


async def test_fetch_while_loading_and_not_owned():
    h = Harness()
    c = await h.start(partitions=[])
    assert c.handle_fetch_offsets("g", [TP0]) == (E.NOT_COORDINATOR, {})
    c.loading.add(c.partition_for("g"))
    assert c.handle_fetch_offsets("g", [TP0]) == (E.COORDINATOR_LOAD_IN_PROGRESS, {})


async def test_offsets_expire_for_empty_groups_only():
    h = Harness(offsets_retention_ms=60_000)
    c = await h.start()
    now = h.time.milliseconds()
    await c.handle_commit_offsets("simple", "", None, -1, {TP0: om(1, ts=now)})
    r = await stable_group(h, "active")
    await c.handle_commit_offsets("active", r.member_id, None, 1, {TP0: om(2, ts=now)})
    h.time.sleep(59_999)
    assert await c.expire_offsets() == 0
    h.time.sleep(1)
    for group_id in ("active",):  # keep the active member alive
        c.handle_heartbeat(group_id, r.member_id, None, 1)
    assert await c.expire_offsets() == 1
    assert "simple" not in c.groups  # empty group without offsets is removed
    assert c.groups["active"].offsets[TP0].offset == 2
    tail = h.store.appended[-1][1]
    assert OffsetRecord("simple", "t", 0, None) in tail and GroupRecord("simple", None) in tail


async def test_delete_groups_and_offsets():
    h = Harness()
    c = await h.start()
    await c.handle_commit_offsets("simple", "", None, -1, {TP0: om(1), TP1: om(2)})
    r = await stable_group(h, "busy")
    res = await c.handle_delete_groups(["simple", "busy", "missing", ""])
    assert res == {"simple": E.NONE, "busy": E.NON_EMPTY_GROUP,
                   "missing": E.GROUP_ID_NOT_FOUND, "": E.GROUP_ID_NOT_FOUND}
    assert "simple" not in c.groups
    tail = h.store.appended[-1][1]
    for rec in (OffsetRecord("simple", "t", 0, None), OffsetRecord("simple", "t", 1, None),
                GroupRecord("simple", None)):
        assert rec in tail
    assert c.handle_fetch_offsets("simple", [TP0])[1][TP0] == (None, E.NONE)
    # OffsetDelete on a consumer group: subscribed topics are refused
    import struct
    sub = struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
    c.groups["busy"].get(r.member_id).supported_protocols = [("range", sub)]
    await c.handle_commit_offsets("busy", r.member_id, None, 1, {TP0: om(3), ("u", 0): om(4)})
    err, per = await c.handle_delete_offsets("busy", [TP0, ("u", 0)])
    assert err == E.NONE and per == {TP0: E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE}
    assert ("u", 0) not in c.groups["busy"].offsets and TP0 in c.groups["busy"].offsets
    assert (await c.handle_delete_offsets("missing", [TP0]))[0] == E.GROUP_ID_NOT_FOUND


async def test_cleanup_removes_empty_groups_without_offsets():
    h = Harness()
    c = await h.start()
    h.join(group="left-over")  # MEMBER_ID_REQUIRED: Empty group with a pending member
    assert await c.expire_offsets() == 0
    assert "left-over" in c.groups
    h.advance(10_000)  # the pending member's session timeout
    await c.expire_offsets()
    assert "left-over" not in c.groups
    assert GroupRecord("left-over", None) in h.store.appended[-1][1]
