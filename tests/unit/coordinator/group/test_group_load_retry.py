"""Loading a ``__consumer_offsets`` partition that fails is retried with backoff while this
broker still leads it (COORDINATOR_LOAD_IN_PROGRESS meanwhile); resignation stops it; a new
election during a load still ends loaded. MockTimer drives the backoff."""

from __future__ import annotations

import asyncio
import logging

from coordinator.group.group import GroupMetadata, GroupState
from coordinator.group.partition_loading import LOAD_RETRY_BACKOFF_MS, LOAD_RETRY_MAX_BACKOFF_MS
from protocol.errors import ErrorCode as E
from tests.unit.coordinator.group.coordinator_helpers import Harness


async def elect(h: Harness, group="g", epoch=0):
    c = h.coordinator
    p = c.partition_for(group)
    c.on_election(p, epoch)
    await h.settle()
    return c, p


async def test_failed_load_is_retried_with_backoff_until_it_succeeds(caplog):
    h = Harness()
    c = await h.start(partitions=[])
    h.store.loaded[c.partition_for("g")] = {"g": GroupMetadata("g", GroupState.EMPTY)}
    h.store.load_failures = 2
    with caplog.at_level(logging.WARNING, logger="coordinator.group"):
        c, p = await elect(h)
    assert h.store.loads == 1
    assert c.coordinator_error("g") == E.COORDINATOR_LOAD_IN_PROGRESS
    assert f"__consumer_offsets-{p}" in caplog.text and "retrying in" in caplog.text
    h.advance(LOAD_RETRY_BACKOFF_MS - 1)
    await h.settle()
    assert h.store.loads == 1
    h.advance(1)
    await h.settle()
    assert h.store.loads == 2  # failed again: the backoff doubles
    assert c.coordinator_error("g") == E.COORDINATOR_LOAD_IN_PROGRESS
    h.advance(2 * LOAD_RETRY_BACKOFF_MS - 1)
    await h.settle()
    assert h.store.loads == 2
    h.advance(1)
    await h.settle()
    assert h.store.loads == 3
    assert c.coordinator_error("g") == E.NONE and "g" in c.groups


async def test_backoff_is_capped():
    h = Harness()
    await h.start(partitions=[])
    h.store.load_failures = 100
    await elect(h)
    while h.store.loads < 7:  # 1 s, 2 s, 4 s, ... until the cap
        h.advance(LOAD_RETRY_BACKOFF_MS)
        await h.settle()
    loads = h.store.loads
    h.advance(LOAD_RETRY_MAX_BACKOFF_MS - 1)
    await h.settle()
    assert h.store.loads == loads
    h.advance(1)
    await h.settle()
    assert h.store.loads == loads + 1


async def test_resignation_stops_the_retries():
    h = Harness()
    c = await h.start(partitions=[])
    h.store.load_failures = 1
    c, p = await elect(h)
    c.on_resignation(p)
    assert c.coordinator_error("g") == E.NOT_COORDINATOR
    h.advance(LOAD_RETRY_MAX_BACKOFF_MS * 2)
    await h.settle()
    assert h.store.loads == 1 and c.coordinator_error("g") == E.NOT_COORDINATOR


async def test_new_epoch_during_a_load_still_ends_loaded():
    h = Harness()
    c = await h.start(partitions=[])
    h.store.load_gate = asyncio.Event()
    p = c.partition_for("g")
    c.on_election(p, 1)
    await asyncio.sleep(0)
    c.on_election(p, 2)  # re-elected while the first load reads
    h.store.load_gate.set()
    await h.settle()
    assert c.coordinator_error("g") == E.NONE and c.epochs[p] == 2


async def test_shutdown_cancels_a_pending_retry():
    h = Harness()
    c = await h.start(partitions=[])
    h.store.load_failures = 1
    await elect(h)
    await c.shutdown()
    h.advance(LOAD_RETRY_MAX_BACKOFF_MS * 2)
    await h.settle()
    assert h.store.loads == 1
