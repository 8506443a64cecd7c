"""TimerTaskList, TimingWheel and MockTimer: ordering, cancellation, overflow wheels, re-add."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.purgatory import MockTime, MockTimer, Timer, TimerTask, TimerTaskList


class Rec(TimerTask):
    """Records (clock at run, name) into a shared log."""

    __slots__ = ("name", "log", "timer", "action")

    def __init__(self, delay_ms, name, log, timer, action=None):
        super().__init__(delay_ms)
        self.name = name
        self.log = log
        self.timer = timer
        self.action = action

    def run(self):
        self.log.append((self.timer.now_ms(), self.name))
        if self.action is not None:
            self.action()


def make(timer, log, delay, name=None, action=None):
    task = Rec(delay, name if name is not None else delay, log, timer, action)
    timer.add(task)
    return task


# --- TimerTaskList -------------------------------------------------------------------------


def test_list_add_remove_flush_in_order():
    lst = TimerTaskList()
    log = []
    tasks = [Rec(1, i, log, None) for i in range(5)]
    for t in tasks:
        lst.add(t)
    assert len(lst) == 5 and list(lst) == tasks
    assert lst.remove(tasks[2]) and not lst.remove(tasks[2])
    assert tasks[0].cancel() and not tasks[0].is_pending
    assert list(lst) == [tasks[1], tasks[3], tasks[4]] and lst.size == 3
    assert lst.set_expiration(40) and not lst.set_expiration(40)
    seen = []
    lst.flush(seen.append)
    assert seen == [tasks[1], tasks[3], tasks[4]]
    assert lst.size == 0 and lst.expiration_ms == -1 and list(lst) == []
    assert not any(t.is_pending for t in tasks)


def test_list_add_moves_task_between_lists():
    a, b = TimerTaskList(), TimerTaskList()
    t = Rec(1, "t", [], None)
    a.add(t)
    b.add(t)
    assert a.size == 0 and list(a) == [] and list(b) == [t] and not a.remove(t)


def test_flush_callback_may_cancel_later_task_of_same_list():
    lst = TimerTaskList()
    t1, t2, t3 = (Rec(1, i, [], None) for i in range(3))
    for t in (t1, t2, t3):
        lst.add(t)
    seen = []

    def fn(task):
        seen.append(task)
        if task is t1:
            t2.cancel()

    lst.flush(fn)
    assert seen == [t1, t3]


def test_delay_must_be_int():
    with pytest.raises(TypeError):
        Rec(1.5, "x", [], None)


# --- MockTimer over the wheel ----------------------------------------------------------------


def test_mock_timer_is_a_timer():
    assert isinstance(MockTimer(), Timer)


def test_fires_exactly_at_expiration_in_order():
    timer = MockTimer()
    log = []
    for d in (5, 1, 3, 20, 19, 21, 2):
        make(timer, log, d)
    assert timer.size == 7
    for now in range(1, 25):
        timer.advance(1)
        assert all(t == d for t, d in log)  # each ran at its own expiration, not later
        assert [d for _, d in log] == sorted(d for d in (5, 1, 3, 20, 19, 21, 2) if d <= now)
    assert timer.size == 0


def test_same_bucket_runs_fifo():
    timer = MockTimer()
    log = []
    for name in "abcde":
        make(timer, log, 7, name)
    timer.advance(100)
    assert [n for _, n in log] == list("abcde")


def test_worked_example_450ms_hops_down_three_levels():
    timer = MockTimer()
    log = []
    task = make(timer, log, 450)
    wheels = timer._wheel.levels()
    assert len(wheels) == 3
    assert task._list is wheels[2].buckets[1] and task._list.expiration_ms == 400
    timer.advance(400)
    assert task._list is wheels[1].buckets[2] and task._list.expiration_ms == 440
    timer.advance(40)
    assert task._list is wheels[0].buckets[10] and task._list.expiration_ms == 450
    timer.advance(9)
    assert log == []
    timer.advance(1)
    assert log == [(450, 450)]


@pytest.mark.parametrize(
    "delay",
    [1, 2, 19, 20, 21, 399, 400, 401, 7_999, 8_000, 8_001, 159_999, 160_000, 3_599_999, 3_600_000],
)
def test_overflow_wheels_fire_on_time_from_1ms_to_1h(delay):
    timer = MockTimer(MockTime(start_ms=1_234_567))  # start not aligned on any tick
    log = []
    make(timer, log, delay)
    timer.advance(delay - 1)
    assert log == [] and timer.size == 1
    timer.advance(1)
    assert log == [(1_234_567 + delay, delay)] and timer.size == 0


def test_one_hour_timer_creates_six_levels_and_queue_stays_small():
    timer = MockTimer()
    rng = random.Random(7)
    log = []
    delays = [rng.randint(1, 3_600_000) for _ in range(5_000)]
    for d in delays:
        make(timer, log, d)
    assert timer.levels == 6  # 20 ms, 400 ms, 8 s, 160 s, 3200 s, 64000 s
    assert timer.scheduled_buckets <= 20 * timer.levels
    step = 0
    while timer.size:
        step += 1
        timer.advance(rng.randint(1, 120_000))
        assert timer.scheduled_buckets <= 20 * timer.levels
    assert sorted(d for _, d in log) == sorted(delays)
    assert [d for _, d in log] == sorted(d for _, d in log)  # expiration order


def test_cancel_prevents_run_and_updates_size():
    timer = MockTimer()
    log = []
    keep = make(timer, log, 10, "keep")
    drop = make(timer, log, 10, "drop")
    far = make(timer, log, 5_000, "far")
    assert drop.cancel() and far.cancel()
    assert not drop.cancel()
    assert timer.size == 1
    timer.advance(10_000)
    assert log == [(10_000, "keep")] and not keep.is_pending


def test_task_cancels_another_due_in_same_advance():
    timer = MockTimer()
    log = []
    victim = make(timer, log, 3, "victim")
    make(timer, log, 3, "killer-first", action=None)
    # killer expires at 2, before the victim
    make(timer, log, 2, "killer", action=victim.cancel)
    timer.advance(10)
    assert [n for _, n in log] == ["killer", "killer-first"]


def test_readd_moves_pending_task():
    timer = MockTimer()
    log = []
    task = make(timer, log, 100, "t")
    timer.advance(10)
    timer.add(task)  # now due at 10 + 100
    assert timer.size == 1
    timer.advance(95)
    assert log == []
    timer.add(Rec(0, "noop", log, timer))  # delay 0 runs at once in MockTimer
    timer.advance(5)
    assert log == [(105, "noop"), (110, "t")]
    timer.add(task)  # re-add after it ran: runs again, once
    assert task.expiration_ms == 210
    timer.advance(99)
    assert len(log) == 2
    timer.advance(1000)
    assert log[-1] == (1209, "t") and len(log) == 3


def test_readd_cancelled_task_and_moves_from_higher_level():
    timer = MockTimer()
    log = []
    task = make(timer, log, 3_000, "t")
    task.cancel()
    timer.add(task)
    task.delay_ms = 4
    timer.add(task)  # moves from a level-2 bucket to level 0
    assert timer.size == 1
    timer.advance(3)
    assert log == []
    timer.advance(1)
    assert log == [(4, "t")]
    timer.advance(5_000)
    assert log == [(4, "t")]


def test_task_added_from_callback_runs_in_the_same_advance_when_due():
    timer = MockTimer()
    log = []
    make(timer, log, 5, "first", action=lambda: make(timer, log, 3, "second"))
    timer.advance(100)
    # "second" was added at clock 100 (the clock moved first), so it is due at 103
    assert log == [(100, "first")]
    timer.advance(3)
    assert log == [(100, "first"), (103, "second")]


def test_exception_in_task_does_not_stop_others_and_is_reraised():
    timer = MockTimer()
    log = []

    def boom():
        raise RuntimeError("boom")

    make(timer, log, 1, "bad", action=boom)
    make(timer, log, 2, "good")
    with pytest.raises(RuntimeError, match="boom"):
        timer.advance(5)
    assert [n for _, n in log] == ["bad", "good"]
    make(timer, log, 1, "later")
    timer.advance(1)
    assert log[-1] == (6, "later")


def test_shutdown_drops_everything():
    timer = MockTimer()
    log = []
    for d in (1, 50, 5_000):
        make(timer, log, d)
    timer.shutdown()
    assert timer.size == 0 and timer.scheduled_buckets == 0
    timer.time.sleep(10_000)
    timer.advance_clock()
    assert log == []
    with pytest.raises(RuntimeError):
        timer.add(Rec(1, "x", log, timer))


def test_mock_time_rejects_backwards():
    with pytest.raises(ValueError):
        MockTime().sleep(-1)


@settings(max_examples=150, deadline=None)
@given(
    delays=st.lists(st.integers(min_value=-5, max_value=200_000), min_size=1, max_size=60),
    steps=st.lists(st.integers(min_value=0, max_value=30_000), min_size=1, max_size=40),
    cancel_mask=st.lists(st.booleans(), min_size=60, max_size=60),
)
def test_property_each_task_runs_once_at_the_first_advance_past_expiration(
    delays, steps, cancel_mask
):
    timer = MockTimer(MockTime(start_ms=977))
    log = []
    tasks = [make(timer, log, d, i) for i, d in enumerate(delays)]
    expected = {}
    for i, t in enumerate(tasks):
        if cancel_mask[i] and t.is_pending:
            t.cancel()
        elif t.delay_ms > 0:
            expected[i] = t.expiration_ms
    immediate = [(977, i) for i, d in enumerate(delays) if d <= 0]
    assert log == immediate
    del log[:]
    for step in steps:
        before = timer.now_ms()
        timer.advance(step)
        now = timer.now_ms()
        for ran_at, i in log:
            assert ran_at == now
            assert before < expected[i] <= now
        exps = [expected[i] for _, i in log]
        assert exps == sorted(exps)
        for i in [i for _, i in log]:
            del expected[i]
        del log[:]
        assert all(e > now for e in expected.values())
        assert timer.size == len(expected)


def test_idle_wheel_catches_up_so_short_timers_land_on_level_zero():
    timer = MockTimer()
    log = []
    make(timer, log, 5)
    timer.advance(100_000)  # processes the bucket, then the wheel catches up with the clock
    task = make(timer, log, 5, "short")
    assert task._list is timer._wheel.buckets[(100_000 + 5) % 20]
    timer.advance(5)
    assert log[-1] == (100_005, "short")
