"""`common.loop_slice.gather_staggered`: chunk tasks start one turn of the loop apart."""

from __future__ import annotations

import asyncio

import pytest

from common.loop_slice import gather_staggered


async def _chunk(i: int, events: list, fail: bool = False) -> int:
    events.append(f"start {i}")  # the synchronous first step (e.g. building a multi)
    await asyncio.sleep(0.01)  # the wait (e.g. ZooKeeper's answer)
    if fail:
        raise ValueError(i)
    return i * 10


async def _turns(events: list, stop: asyncio.Event) -> None:
    while not stop.is_set():
        events.append("turn")
        await asyncio.sleep(0)


async def _starts_and_turns(gather) -> list:
    events: list = []
    stop = asyncio.Event()
    turner = asyncio.ensure_future(_turns(events, stop))
    await asyncio.sleep(0)
    got = await gather(_chunk(i, events) for i in range(4))
    stop.set()
    await turner
    assert got == [0, 10, 20, 30]
    return [e for e in events if e.startswith("start") or e == "turn"]


async def test_the_loop_turns_between_the_starts():
    events = await _starts_and_turns(gather_staggered)
    starts = [i for i, e in enumerate(events) if e.startswith("start")]
    assert [events[i] for i in starts] == [f"start {i}" for i in range(4)]
    for a, b in zip(starts, starts[1:]):
        assert "turn" in events[a + 1:b]  # another task ran between two starts


async def test_plain_gather_starts_every_chunk_in_one_turn():
    """The contrast the helper exists for (this is what the test above would see)."""
    events = await _starts_and_turns(lambda aws: asyncio.gather(*aws))
    starts = [i for i, e in enumerate(events) if e.startswith("start")]
    assert starts == list(range(starts[0], starts[0] + 4))


async def test_exceptions_returned_or_raised():
    events: list = []
    got = await gather_staggered((_chunk(i, events, fail=i == 1) for i in range(3)),
                                 return_exceptions=True)
    assert got[0] == 0 and isinstance(got[1], ValueError) and got[2] == 20
    with pytest.raises(ValueError):
        await gather_staggered(_chunk(i, events, fail=i == 2) for i in range(3))


async def test_cancelled_while_starting_cancels_the_started_tasks():
    started: list[asyncio.Future] = []

    async def forever(i: int) -> None:
        started.append(asyncio.current_task())
        await asyncio.sleep(3600)

    def endless():
        i = 0
        while True:
            yield forever(i)
            i += 1
    outer = asyncio.ensure_future(gather_staggered(endless()))
    for _ in range(5):
        await asyncio.sleep(0)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    await asyncio.sleep(0)
    assert started and all(t.cancelled() or t.done() for t in started)
