"""SystemTimer on a real event loop: timers fire roughly on time (generous bounds)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from broker.purgatory import SystemTimer, Timer, TimerTask

pytestmark = pytest.mark.timeout(30)


class Stamp(TimerTask):
    __slots__ = ("name", "fired", "loop", "fail")

    def __init__(self, delay_ms, name, fired, fail=False):
        super().__init__(delay_ms)
        self.name = name
        self.fired = fired
        self.loop = asyncio.get_running_loop()
        self.fail = fail

    def run(self):
        self.fired.append((self.name, self.loop.time()))
        if self.fail:
            raise RuntimeError("task failed on purpose")


async def wait_for_count(fired, n, timeout=5.0):
    async def poll():
        while len(fired) < n:
            await asyncio.sleep(0.002)

    await asyncio.wait_for(poll(), timeout)


async def test_timers_fire_roughly_on_time_and_in_order():
    timer = SystemTimer("t")
    assert isinstance(timer, Timer)
    loop = asyncio.get_running_loop()
    fired = []
    start = loop.time()
    delays = {"a": 60, "b": 5, "c": 25, "d": 450}
    for name, d in delays.items():
        timer.add(Stamp(d, name, fired))
    assert timer.size == 4
    await wait_for_count(fired, 4)
    assert [n for n, _ in fired] == ["b", "c", "a", "d"]
    for name, at in fired:
        elapsed_ms = (at - start) * 1000
        # never more than one tick early; late only by scheduling noise (loaded CI machines)
        assert delays[name] - 1.5 <= elapsed_ms <= delays[name] + 400, (name, elapsed_ms)
    assert timer.size == 0
    timer.shutdown()
    await asyncio.sleep(0)


async def test_earlier_bucket_wakes_the_driver():
    timer = SystemTimer("t")
    loop = asyncio.get_running_loop()
    fired = []
    timer.add(Stamp(5_000, "late", fired))
    await asyncio.sleep(0.01)  # driver now sleeps until the 5 s bucket
    start = loop.time()
    timer.add(Stamp(10, "early", fired))
    await wait_for_count(fired, 1, timeout=2.0)
    assert fired[0][0] == "early" and (fired[0][1] - start) < 1.0
    assert timer.size == 1
    timer.shutdown()
    await asyncio.sleep(0)
    assert timer.size == 0


async def test_cancelled_timer_does_not_fire():
    timer = SystemTimer("t")
    fired = []
    dropped = Stamp(10, "dropped", fired)
    timer.add(dropped)
    timer.add(Stamp(30, "kept", fired))
    assert dropped.cancel()
    await wait_for_count(fired, 1)
    await asyncio.sleep(0.03)
    assert [n for n, _ in fired] == ["kept"]
    timer.shutdown()
    await asyncio.sleep(0)


async def test_expired_on_add_runs_on_next_iteration_not_inside_add():
    timer = SystemTimer("t")
    fired = []
    task = Stamp(0, "now", fired)
    cancelled = Stamp(-3, "cancelled", fired)
    timer.add(task)
    timer.add(cancelled)
    assert fired == [] and timer.size == 2
    cancelled.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [n for n, _ in fired] == ["now"]
    timer.shutdown()
    await asyncio.sleep(0)


async def test_failing_task_is_logged_and_others_still_run(caplog):
    timer = SystemTimer("t")
    fired = []
    timer.add(Stamp(3, "bad", fired, fail=True))
    timer.add(Stamp(3, "good", fired))
    timer.add(Stamp(20, "later", fired))
    with caplog.at_level(logging.ERROR, logger="broker.purgatory.timer"):
        await wait_for_count(fired, 3)
    assert [n for n, _ in fired] == ["bad", "good", "later"]
    assert "task failed on purpose" in caplog.text
    timer.shutdown()
    await asyncio.sleep(0)


async def test_shutdown_stops_driver_and_drops_tasks():
    timer = SystemTimer("t")
    fired = []
    timer.add(Stamp(20, "x", fired))
    timer.shutdown()
    await asyncio.sleep(0.05)
    assert fired == [] and timer.size == 0 and timer._driver.done()
    with pytest.raises(RuntimeError):
        timer.add(Stamp(1, "y", fired))


async def test_many_timers_all_fire():
    timer = SystemTimer("t")
    fired = []
    for i in range(2_000):
        timer.add(Stamp(1 + i % 97, i, fired))
    await wait_for_count(fired, 2_000)
    assert sorted(n for n, _ in fired) == list(range(2_000))
    timer.shutdown()
    await asyncio.sleep(0)
