"""Offset expiration (Kafka's GroupMetadata.removeExpiredOffsets): KIP-211 for Empty groups,
KIP-496 for Stable consumer groups (offsets of topics no member subscribes to expire
``offsets.retention.minutes`` after their commit), simple groups by commit time."""

from __future__ import annotations

import asyncio
import struct

import pytest

from coordinator.group.group import OffsetAndMetadata, consumer_subscribed_topics
from coordinator.group.records import OffsetRecord
from protocol.errors import ErrorCode as E
from protocol.messages import MESSAGES
from tests.unit.coordinator.group.coordinator_helpers import Harness

Subscription = MESSAGES["ConsumerProtocolSubscription"]
RETENTION = 60_000


def subscription(*topics: str, version: int = 1) -> bytes:
    """The JoinGroup metadata of a consumer: int16 version + the schema of that version
    (a version beyond the schema gets the newest body plus a field we do not know)."""
    body = Subscription(topics=list(topics)).encode(min(version, Subscription.max_version))
    if version > Subscription.max_version:
        body += b"\x00\x00\x00\x07"
    return struct.pack(">h", version) + body


def om(offset: int, ts: int) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, -1, "", ts)


async def consumer_group(h: Harness, *topics: str, group="g"):
    """A Stable consumer-protocol group with one member subscribed to ``topics``."""
    meta = subscription(*topics)
    first = h.join(group, protocols=(("range", meta),))
    r = h.join(group, member_id=first[0].member_id, protocols=(("range", meta),))[0]
    h.sync(group, r.generation_id, r.member_id, {r.member_id: b"A"})
    await h.settle()
    return r


def test_subscription_parsed_with_the_consumer_protocol_schema():
    for version in range(4):
        assert consumer_subscribed_topics(subscription("a", "b", version=version)) == {"a", "b"}
    # a newer version than we know: read with the newest schema (fields are only appended)
    assert consumer_subscribed_topics(subscription("a", version=9)) == {"a"}
    for bad in (b"", b"\x00", struct.pack(">hi", 0, 5), struct.pack(">h", -1)):
        with pytest.raises(ValueError):
            consumer_subscribed_topics(bad)


async def test_stable_consumer_group_expires_offsets_of_unsubscribed_topics():
    h = Harness(offsets_retention_ms=RETENTION)
    c = await h.start()
    r = await consumer_group(h, "t")
    now = h.time.milliseconds()
    assert await c.handle_commit_offsets("g", r.member_id, None, 1, {
        ("t", 0): om(1, now), ("old", 0): om(2, now), ("old", 1): om(3, now)}) == \
        {("t", 0): E.NONE, ("old", 0): E.NONE, ("old", 1): E.NONE}
    h.time.sleep(RETENTION - 1)
    c.handle_heartbeat("g", r.member_id, None, 1)
    assert await c.expire_offsets() == 0
    h.time.sleep(1)
    c.handle_heartbeat("g", r.member_id, None, 1)
    assert await c.expire_offsets() == 2
    g = c.groups["g"]
    assert set(g.offsets) == {("t", 0)}  # the subscribed topic keeps its offset
    tail = h.store.appended[-1][1]
    assert sorted(tail, key=lambda r: r.partition) == \
        [OffsetRecord("g", "old", 0, None), OffsetRecord("g", "old", 1, None)]


async def test_stable_group_keeps_offsets_with_a_commit_in_flight():
    h = Harness(offsets_retention_ms=RETENTION)
    c = await h.start()
    r = await consumer_group(h, "t")
    now = h.time.milliseconds()
    await c.handle_commit_offsets("g", r.member_id, None, 1, {("old", 0): om(1, now)})
    h.time.sleep(RETENTION)
    c.handle_heartbeat("g", r.member_id, None, 1)
    h.store.gate = asyncio.Event()
    commit = asyncio.ensure_future(c.handle_commit_offsets(
        "g", r.member_id, None, 1, {("old", 0): om(5, h.time.milliseconds())}))
    await asyncio.sleep(0)
    assert await c.expire_offsets() == 0
    h.store.gate.set()
    await commit
    assert c.groups["g"].offsets[("old", 0)].offset == 5


async def test_rebalancing_or_non_consumer_groups_keep_offsets():
    h = Harness(offsets_retention_ms=RETENTION)
    c = await h.start()
    r = await consumer_group(h, "t")
    now = h.time.milliseconds()
    await c.handle_commit_offsets("g", r.member_id, None, 1, {("old", 0): om(1, now)})
    h.join(member_id=r.member_id, protocols=(("range", subscription("t")),))  # leader rejoins
    assert c.groups["g"].state.value == "CompletingRebalance"
    h.time.sleep(RETENTION)
    assert await c.expire_offsets() == 0
    # a connect-protocol group never expires offsets while it has members
    first = h.join("w", protocol_type="connect")
    w = h.join("w", member_id=first[0].member_id, protocol_type="connect")[0]
    h.sync("w", 1, w.member_id, {w.member_id: b""})
    await h.settle()
    await c.handle_commit_offsets("w", w.member_id, None, 1, {("x", 0): om(1, 0)})
    assert await c.expire_offsets() == 0


async def test_empty_consumer_group_expires_from_when_it_became_empty():
    """Kafka bases an Empty group's expiry on the state change, not on later commits (an
    admin commit to an Empty group does not restart the clock)."""
    h = Harness(offsets_retention_ms=RETENTION)
    c = await h.start()
    r = await consumer_group(h, "t")
    assert c.handle_leave_group("g", [(r.member_id, None)])[1] == [E.NONE]
    await h.settle()
    assert c.groups["g"].state.value == "Empty"
    h.time.sleep(RETENTION // 2)
    await c.handle_commit_offsets("g", "", None, -1, {("t", 0): om(9, h.time.milliseconds())})
    h.time.sleep(RETENTION // 2 - 1)
    assert await c.expire_offsets() == 0
    h.time.sleep(1)
    assert await c.expire_offsets() == 1
    assert "g" not in c.groups


async def test_simple_group_offsets_expire_by_commit_time():
    h = Harness(offsets_retention_ms=RETENTION)
    c = await h.start()
    start = h.time.milliseconds()
    await c.handle_commit_offsets("s", "", None, -1, {("t", 0): om(1, start)})
    h.time.sleep(RETENTION // 2)
    await c.handle_commit_offsets("s", "", None, -1, {("t", 1): om(1, h.time.milliseconds())})
    h.time.sleep(RETENTION // 2)
    assert await c.expire_offsets() == 1
    assert set(c.groups["s"].offsets) == {("t", 1)}
