"""DelayedOperation and DelayedOperationPurgatory on a MockTimer."""

from __future__ import annotations

import random

import pytest

from broker.purgatory import (
    DelayedOperation,
    DelayedOperationPurgatory,
    MockTimer,
    TopicPartitionKey,
)
from coordinator.keys import GroupKey, MemberKey

TP0 = TopicPartitionKey("t", 0)
TP1 = TopicPartitionKey("t", 1)


class State:
    """Shared state the operations wait on (like a partition's high watermark)."""

    def __init__(self):
        self.value = 0


class CounterOp(DelayedOperation):
    """Completes when state.value >= threshold. Cases: A. threshold reached; B. deadline."""

    __slots__ = ("state", "threshold", "events", "name", "hook")

    def __init__(self, delay_ms, state, threshold, events, name="op", hook=None):
        super().__init__(delay_ms)
        self.state = state
        self.threshold = threshold
        self.events = events
        self.name = name
        self.hook = hook
        self.events.setdefault(name, [])

    def try_complete(self):
        self.events[self.name].append("try")
        if self.state.value >= self.threshold:
            return self.force_complete()
        return False

    def on_expiration(self):
        self.events[self.name].append("expired")

    def on_complete(self):
        self.events[self.name].append("complete")
        if self.hook is not None:
            self.hook(self)


def completes(events, name):
    return events[name].count("complete")


@pytest.fixture
def timer():
    return MockTimer()


@pytest.fixture
def purgatory(timer):
    return DelayedOperationPurgatory("Test", timer, purge_interval=5)


def test_keys_are_typed_and_hashable():
    assert str(TP0) == "t-0" and str(GroupKey("g")) == "g" and str(MemberKey("g", "m")) == "g-m"
    assert len({TP0, TopicPartitionKey("t", 0), TP1}) == 2


def test_completes_immediately_without_watching(purgatory, timer):
    state, events = State(), {}
    state.value = 5
    op = CounterOp(100, state, 1, events)
    assert purgatory.try_complete_else_watch(op, [TP0]) is True
    assert op.is_completed and events["op"] == ["try", "complete"]
    assert purgatory.watched == 0 and purgatory.delayed == 0 and timer.size == 0


def test_parked_then_completed_by_check_and_complete(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(100, state, 1, events)
    assert purgatory.try_complete_else_watch(op, [TP0]) is False
    assert events["op"] == ["try", "try"]  # tried before and after watching
    assert purgatory.watched == 1 and purgatory.delayed == 1 and timer.size == 1
    assert purgatory.check_and_complete(TP0) == 0
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 1
    assert completes(events, "op") == 1 and "expired" not in events["op"]
    assert purgatory.watched == 0 and purgatory.delayed == 0 and purgatory.num_keys == 0
    assert timer.size == 0 and not op.is_pending  # its timer task was cancelled
    timer.advance(1_000)
    assert completes(events, "op") == 1 and "expired" not in events["op"]
    assert purgatory.check_and_complete(TP0) == 0


def test_expiration_calls_on_expiration_then_on_complete(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(100, state, 1, events)
    purgatory.try_complete_else_watch(op, [TP0])
    timer.advance(99)
    assert not op.is_completed
    timer.advance(1)
    assert events["op"] == ["try", "try", "expired", "complete"]
    assert purgatory.delayed == 0 and purgatory.watched == 1  # still listed until dropped
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 0  # drops it, does not complete it again
    assert completes(events, "op") == 1 and purgatory.watched == 0 and purgatory.num_keys == 0
    assert op.force_complete() is False


def test_force_complete_returns_true_only_to_the_winner(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(100, state, 1, events)
    purgatory.try_complete_else_watch(op, [TP0])
    assert op.force_complete() is True
    assert op.force_complete() is False
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 0
    timer.advance(200)
    assert events["op"].count("complete") == 1 and "expired" not in events["op"]


def test_race_expiration_vs_check_and_complete_in_callbacks(purgatory, timer):
    """Two ops share a deadline. The first to expire makes the second completable and calls
    check_and_complete from its on_expiration; the second must complete exactly once, by
    check_and_complete, and then not expire, although its bucket is being flushed."""
    state, events = State(), {}
    second = CounterOp(50, state, 1, events, "second")

    def first_expires():
        state.value = 1
        assert purgatory.check_and_complete(TP1) == 1

    class ExpiringFirst(CounterOp):
        __slots__ = ()

        def on_expiration(self):
            super().on_expiration()
            first_expires()

    first = ExpiringFirst(50, state, 99, events, "first")
    purgatory.try_complete_else_watch(first, [TP0])
    purgatory.try_complete_else_watch(second, [TP1])
    timer.advance(50)
    assert completes(events, "first") == 1 and completes(events, "second") == 1
    assert "expired" not in events["second"]
    assert purgatory.delayed == 0 and timer.size == 0


def test_expiration_inside_on_complete_of_another_op_is_not_repeated(purgatory, timer):
    state, events = State(), {}
    late = CounterOp(10, state, 1, events, "late")

    def on_done(_op):
        timer.advance(100)  # the other op's deadline passes while we are in its callback
        assert late.force_complete() is False

    early = CounterOp(10, state, 1, events, "early", hook=on_done)
    purgatory.try_complete_else_watch(early, [TP0])
    purgatory.try_complete_else_watch(late, [TP0])
    timer.advance(5)
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 1  # early; late expired inside the callback
    assert completes(events, "late") == 1 and "expired" in events["late"]
    assert completes(events, "early") == 1
    assert purgatory.watched == 0 and purgatory.num_keys == 0


def test_reentrant_check_on_same_key_rescans(purgatory, timer):
    """op1's on_complete raises the state and checks the same key while the outer scan has
    already passed op0: the outer call scans again, so op0 is not left waiting."""
    state, events = State(), {}
    op0 = CounterOp(100, state, 2, events, "op0")

    def bump(_op):
        state.value = 2
        assert purgatory.check_and_complete(TP0) == 0  # re-entrant: deferred to the outer scan

    op1 = CounterOp(100, state, 1, events, "op1", hook=bump)
    purgatory.try_complete_else_watch(op0, [TP0])
    purgatory.try_complete_else_watch(op1, [TP0])
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 2
    assert completes(events, "op0") == 1 and completes(events, "op1") == 1
    assert purgatory.watched == 0 and purgatory.num_keys == 0


def test_maybe_try_complete_is_reentrancy_safe():
    state, events = State(), {}
    calls = []

    class Reentrant(CounterOp):
        __slots__ = ()

        def try_complete(self):
            calls.append(state.value)
            if state.value == 0:
                state.value = 1
                # a callback inside try_complete re-enters: must not recurse
                assert self.maybe_try_complete() is False
                return False
            return super().try_complete()

    op = Reentrant(100, state, 1, events)
    assert op.maybe_try_complete() is True  # the pending retry completed it
    assert calls == [0, 1] and completes(events, "op") == 1
    assert op.maybe_try_complete() is False and calls == [0, 1]


def test_multi_key_op_stays_in_other_list_until_purged(timer):
    purgatory = DelayedOperationPurgatory("Produce", timer, purge_interval=3)
    state, events = State(), {}
    ops = [CounterOp(1_000, state, 1, events, f"p{i}") for i in range(4)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(
            op, [TopicPartitionKey("a", i), TopicPartitionKey("b", i)]
        )
    assert purgatory.watched == 8 and purgatory.delayed == 4 and purgatory.num_keys == 8
    state.value = 1
    for i in range(3):
        assert purgatory.check_and_complete(TopicPartitionKey("a", i)) == 1
    # completed, still listed under their "b" key: 3 completed-but-watched, not > 3 yet
    assert purgatory.watched == 5 and purgatory.delayed == 1 and purgatory.num_keys == 5
    assert purgatory.check_and_complete(TopicPartitionKey("a", 3)) == 1
    # the 4th pushes the count past purge_interval: purge drops the "b" entries and lists
    assert purgatory.watched == 0 and purgatory.num_keys == 0 and purgatory.delayed == 0
    assert all(completes(events, f"p{i}") == 1 for i in range(4))


def test_purge_after_expirations(timer):
    purgatory = DelayedOperationPurgatory("Fetch", timer, purge_interval=10)
    state, events = State(), {}
    for i in range(25):
        purgatory.try_complete_else_watch(
            CounterOp(10 + i, state, 1, events, i), [TopicPartitionKey("t", i)]
        )
    timer.advance(10 + 10)  # 11 expire: 11 > 10 triggers a purge of all of them
    assert purgatory.delayed == 14 and purgatory.watched == 14 and purgatory.num_keys == 14
    assert purgatory.watchers_for(TopicPartitionKey("t", 0)) == []
    timer.advance(100)  # 14 more: the 11th triggers a purge, 3 stay listed
    assert purgatory.delayed == 0 and purgatory.watched == 3 and purgatory.num_keys == 3
    assert purgatory.purge_completed() == 3
    assert purgatory.watched == 0 and purgatory.num_keys == 0
    assert sum(completes(events, i) for i in range(25)) == 25


def test_purge_is_deferred_while_a_check_is_running(timer):
    purgatory = DelayedOperationPurgatory("Fetch", timer, purge_interval=1)
    state, events = State(), {}
    seen = []

    def look(_op):
        seen.append(purgatory.watched)

    for i in range(3):
        purgatory.try_complete_else_watch(
            CounterOp(100, state, 1, events, i, hook=look), [TP0, TopicPartitionKey("x", i)]
        )
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 3
    assert seen == [6, 6, 6]  # nothing purged while the scan of TP0 ran
    assert purgatory.watched == 0 and purgatory.num_keys == 0


def test_cancel_for_key(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(100, state, 1, events)
    done = CounterOp(100, state, 1, events, "done")
    purgatory.try_complete_else_watch(op, [TP0, TP1])
    purgatory.try_complete_else_watch(done, [TP0])
    done.force_complete()
    assert purgatory.cancel_for_key(TP0) == [op]
    assert not op.is_completed and not op.is_pending and timer.size == 0
    assert purgatory.delayed == 0 and purgatory.watched == 1
    assert purgatory.cancel_for_key(TP0) == []
    assert purgatory.cancel_for_key(TP1) == [op]
    assert purgatory.delayed == 0 and purgatory.watched == 0
    timer.advance(1_000)
    assert "expired" not in events["op"] and completes(events, "op") == 0


def test_shutdown(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(100, state, 1, events)
    purgatory.try_complete_else_watch(op, [TP0])
    purgatory.shutdown()
    assert timer.size == 0 and purgatory.watched == 0 and purgatory.delayed == 0
    timer.advance(1_000)
    assert completes(events, "op") == 0
    with pytest.raises(RuntimeError):
        purgatory.try_complete_else_watch(CounterOp(1, state, 1, events, "x"), [TP0])


def test_bad_arguments(purgatory):
    state, events = State(), {}
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(CounterOp(1, state, 1, events), [])
    op = CounterOp(1, state, 1, events)
    purgatory.try_complete_else_watch(op, [TP0, TP0])
    assert purgatory.watched == 1  # duplicate keys watched once
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(op, [TP1])
    with pytest.raises(TypeError):
        CounterOp(1.0, state, 1, events)
    with pytest.raises(ValueError):
        DelayedOperationPurgatory("x", MockTimer(), purge_interval=0)


def test_zero_delay_expires_at_once_with_mock_timer(purgatory, timer):
    state, events = State(), {}
    op = CounterOp(0, state, 1, events)
    assert purgatory.try_complete_else_watch(op, [TP0]) is False
    assert events["op"] == ["try", "try", "expired", "complete"]
    assert purgatory.delayed == 0


def test_random_interleavings_complete_each_op_exactly_once():
    rng = random.Random(5)
    for _round in range(20):
        timer = MockTimer()
        purgatory = DelayedOperationPurgatory("R", timer, purge_interval=rng.randint(1, 20))
        keys = [TopicPartitionKey("t", i) for i in range(5)]
        states = {k: State() for k in keys}
        events = {}
        ops = []
        for i in range(200):
            action = rng.random()
            if action < 0.5:
                key = rng.choice(keys)
                extra = [rng.choice(keys)] if rng.random() < 0.3 else []
                op = CounterOp(
                    rng.randint(1, 500),
                    states[key],
                    states[key].value + rng.randint(1, 3),
                    events,
                    i,
                )
                ops.append((op, timer.now_ms()))
                purgatory.try_complete_else_watch(op, [key, *extra])
            elif action < 0.8:
                key = rng.choice(keys)
                states[key].value += 1
                purgatory.check_and_complete(key)
            elif action < 0.9 and ops:
                rng.choice(ops)[0].force_complete()
            else:
                timer.advance(rng.randint(1, 100))
        timer.advance(1_000)
        for op, _added in ops:
            assert op.is_completed
            assert completes(events, op.name) == 1
            assert events[op.name].count("expired") <= 1
        for key in keys:
            purgatory.check_and_complete(key)
        purgatory.purge_completed()
        assert purgatory.watched == 0 and purgatory.delayed == 0 and purgatory.num_keys == 0
        assert timer.size == 0


def test_scan_completions_leave_no_purge_work(purgatory):
    state, events = State(), {}
    for i in range(20):
        purgatory.try_complete_else_watch(CounterOp(100, state, 1, events, i), [TP0])
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 20
    assert purgatory._completed_watched == [] and purgatory.watched == 0


def test_op_completed_behind_the_scan_is_left_for_the_purge(timer):
    purgatory = DelayedOperationPurgatory("Fetch", timer, purge_interval=1000)
    state, events = State(), {}
    a = CounterOp(100, state, 5, events, "a")
    b = CounterOp(100, state, 1, events, "b", hook=lambda _op: a.force_complete())
    purgatory.try_complete_else_watch(a, [TP0])
    purgatory.try_complete_else_watch(b, [TP0])
    state.value = 1
    assert purgatory.check_and_complete(TP0) == 1  # b; a was completed by b's callback
    assert completes(events, "a") == 1 and purgatory.delayed == 0
    assert purgatory.watched == 1 and purgatory.watchers_for(TP0) == [a]
    assert purgatory.purge_completed() == 1
    assert purgatory.watched == 0 and purgatory.num_keys == 0
