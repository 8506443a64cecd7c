"""SyncGroup (issue 27 point 6): the leader hears its answer first, inside the callback of
the ``__consumer_offsets`` append, before the group is Stable; a follower asking after that
cannot overtake it (aiokafka's ``test_kip_345_disabled`` checks the leader's assignment as
soon as the follower's ``start()`` returns). ``Deferred`` is the response type that makes
"inside the callback" hold end to end: no loop turn between completion and delivery."""

from __future__ import annotations

import asyncio

import pytest

from broker.request_channel import Deferred
from coordinator.group.group import GroupState
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness


async def _two_members(h: Harness):
    """a (leader) and b in generation 2, both told by JoinGroup; nobody synced yet."""
    a = h.join_known(client_id="a")
    await h.settle()
    leader = a[0]
    h.sync("g", leader.generation_id, leader.member_id, {leader.member_id: b"a"})
    await h.settle()
    b = h.join_known(client_id="b")  # rebalance: a must rejoin
    a2 = h.join(member_id=leader.member_id, client_id="a")
    await h.settle()
    return a2[0], b[0]


async def test_leader_answered_first_and_before_stable():
    h = Harness()
    c = await h.start()
    a, b = await _two_members(h)
    assert a.leader_id == a.member_id and a.generation_id == 2
    group = c.groups["g"]
    order: list[tuple[str, GroupState]] = []
    # the follower asks first and waits; the leader's SyncGroup starts the append
    c.handle_sync_group("g", 2, b.member_id, None, None, None, {},
                        lambda r: order.append(("b", group.state)))
    h.store.gate = asyncio.Event()
    c.handle_sync_group("g", 2, a.member_id, None, None, None,
                        {a.member_id: b"A", b.member_id: b"B"},
                        lambda r: order.append(("a", group.state)))
    await asyncio.sleep(0)
    assert order == []
    h.store.gate.set()
    await h.settle()
    assert order == [("a", GroupState.COMPLETING_REBALANCE),
                     ("b", GroupState.COMPLETING_REBALANCE)]
    assert group.state is GroupState.STABLE
    # a follower asking once Stable is answered at once, after the leader
    late: list = []
    c.handle_sync_group("g", 2, b.member_id, None, None, None, {}, late.append)
    assert late[0].error == E.NONE and late[0].assignment == b"B"


async def test_handler_response_is_delivered_in_the_completing_call():
    """The groups handler's Deferred is done when the coordinator's callback returns: the
    dispatcher and RequestChannel pass it on synchronously (no loop turn)."""
    from broker.handlers.groups import _future_and_callback

    delivered: list = []
    fut, callback = _future_and_callback(lambda r: ("response", r))
    fut.add_done_callback(lambda d: delivered.append(d.result()))
    callback("sync-result")
    assert delivered == [("response", "sync-result")]
    callback("late")  # a second answer is ignored
    assert delivered == [("response", "sync-result")]


async def test_deferred_semantics():
    d = Deferred()
    seen: list = []
    d.add_done_callback(lambda x: seen.append(("first", x.result())))
    assert not d.done()
    d.set_result(7)
    assert seen == [("first", 7)] and d.done() and await d == 7
    d.add_done_callback(lambda x: seen.append(("late", x.result())))
    assert seen[-1] == ("late", 7)
    with pytest.raises(asyncio.InvalidStateError):
        d.set_result(8)
    e = Deferred()
    waiter = asyncio.ensure_future(_await(e))
    await asyncio.sleep(0)
    e.set_exception(ValueError("x"))
    with pytest.raises(ValueError):
        await waiter
    f = Deferred()
    assert f.cancel() and f.cancelled() and not f.cancel()


async def _await(d: Deferred):
    return await d
