"""MemoryPool (queued.max.request.bytes): Kafka's non-strict SimpleMemoryPool semantics,
waking muted owners, and the progress rule for partial frames (see broker.memory_pool)."""

from broker.memory_pool import MemoryPool


class Owner:
    def __init__(self, pool: MemoryPool, name: str, want: int = 0) -> None:
        self.pool, self.name, self.want = pool, name, want
        self.closed = False
        self.woken = 0
        self.got = 0

    def memory_available(self) -> None:
        self.woken += 1
        if self.want and self.pool.try_allocate(self.want, self):
            self.got += self.want
        elif self.want:
            self.pool.wait(self)


def test_unbounded_pool_never_refuses_and_counts():
    pool = MemoryPool(-1)
    assert not pool.bounded and not pool.out_of_memory
    assert pool.try_allocate(10**12)
    assert pool.used == pool.peak_used == 10**12
    pool.release(10**12)
    assert pool.used == 0 and pool.peak_used == 10**12


def test_non_strict_allocation_may_overshoot_once_then_refuses():
    pool = MemoryPool(100)
    assert pool.try_allocate(60)
    assert pool.try_allocate(60)  # 40 were left: granted anyway (non-strict, as Kafka)
    assert pool.available == -20 and pool.out_of_memory
    assert not pool.try_allocate(1)
    assert pool.denied_total == 1


def test_release_wakes_waiters_oldest_first_while_memory_lasts():
    pool = MemoryPool(100)
    pool.allocate(100)
    pool.to_requests(100)
    a, b, c = (Owner(pool, n, want=30) for n in "abc")
    for o in (a, b, c):
        assert not pool.try_allocate(30, o)
        pool.wait(o)
    assert pool.waiting == 3 and pool.privileged is None  # requests will release memory
    pool.release_requests(50)  # 50 available: a takes 30, b takes 30 (overshoot), c waits
    assert (a.got, b.got, c.got) == (30, 30, 0)
    assert pool.waiting == 1 and pool.out_of_memory
    pool.release_requests(50)
    assert c.got == 30 and pool.waiting == 0


def test_closed_waiters_are_skipped_and_forgotten():
    pool = MemoryPool(10)
    pool.allocate(10)
    pool.to_requests(10)
    a, b = Owner(pool, "a", 5), Owner(pool, "b", 5)
    pool.wait(a)
    pool.wait(b)
    a.closed = True
    pool.forget(a)
    pool.release_requests(10)
    assert a.woken == 0 and b.got == 5


def test_partial_frames_holding_everything_get_one_privileged_owner():
    """Only partial frames hold memory: nothing will be released, so the oldest waiter may
    finish its frame; its allocations succeed until frame_completed, then the next one."""
    pool = MemoryPool(100)
    a, b = Owner(pool, "a"), Owner(pool, "b")
    assert pool.try_allocate(50, a) and pool.try_allocate(50, b)
    assert not pool.try_allocate(10, a)
    pool.wait(a)
    assert pool.privileged is a and a.woken == 1
    assert not pool.try_allocate(10, b)
    pool.wait(b)
    assert b.woken == 0  # a stays the only privileged owner
    assert pool.try_allocate(30, a) and pool.try_allocate(30, a)
    pool.to_requests(110)  # a's frame completed
    pool.frame_completed(a)
    assert pool.privileged is None and b.woken == 0  # a's request will release memory
    pool.release_requests(110)
    assert b.woken == 1


def test_privileged_owner_closing_passes_progress_on():
    pool = MemoryPool(100)
    a, b = Owner(pool, "a"), Owner(pool, "b")
    pool.try_allocate(60, a)
    pool.try_allocate(60, b)
    pool.wait(a)
    pool.wait(b)
    assert pool.privileged is a
    a.closed = True
    pool.release(60)  # a's partial frame freed; 100 - 60 = 40 available: b is woken
    pool.forget(a)
    assert b.woken == 1
