"""``MemoryPool``: the broker-wide bound on request bytes held, ``queued.max.request.bytes``.

Kafka's ``SimpleMemoryPool`` as the SocketServer uses it (non-strict; Kafka docs, broker config
``queued.max.request.bytes``: "the number of queued bytes allowed before no more requests are
read"; -1 or 0 = no bound, Kafka's default). What it counts here: every byte the connections
hold for requests, i.e. the buffers of frames being received (which grow with the bytes that
arrive, see ``protocol.frames``) and complete request frames until their handler has returned.

Semantics:

* ``try_allocate(n, owner)`` succeeds while memory is available (> 0), even when ``n`` is more
  than what is left (non-strict: the pool may go below zero by one allocation, as Kafka's
  does); it fails while the pool is out of memory (``available <= 0``).
* A connection refused memory is muted (stops reading) and waits (``wait``); when released
  memory makes the pool available again, every waiter is called back
  (``owner.memory_available()``), oldest first, while memory stays available.
* Progress: buffers grow while bytes arrive, so partial frames could take all the memory and
  none of them complete. When the pool is out of memory and no complete request holds any
  (nothing will be released by a handler), the oldest waiter becomes the *privileged* owner:
  its allocations succeed until its frame completes (``frame_completed``) or it goes away
  (``forget``). The overshoot is therefore at most one request (``socket.request.max.bytes``),
  which is Kafka's bound for a non-strict pool too.
* ``allocate(n)`` charges bytes that were already taken (a read that completed small frames
  from the scratch buffer); ``to_requests(n)`` marks ``n`` charged bytes as held by complete
  requests, ``release_requests(n)`` frees them when the handler returned, ``release(n)`` frees
  partial-frame bytes (connection closed).

Single-threaded: all calls come from the event loop.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

__all__ = ["MemoryPool", "PoolOwner"]


class PoolOwner(Protocol):
    closed: bool

    def memory_available(self) -> None: ...


class MemoryPool:
    """Bounded (``capacity`` > 0 bytes) or unbounded (``capacity`` <= 0) request memory."""

    def __init__(self, capacity: int = -1) -> None:
        self.capacity = capacity
        self.bounded = capacity > 0
        self.used = 0  # bytes charged (partial frames + complete requests)
        self.request_bytes = 0  # of which complete requests whose handler has not returned
        self.peak_used = 0
        self.denied_total = 0  # try_allocate refusals (a connection muted)
        self.privileged: PoolOwner | None = None
        self._waiters: deque[PoolOwner] = deque()

    @property
    def available(self) -> int:
        """Bytes left before the pool is out of memory (negative after an overshoot);
        ``capacity`` minus ``used``, or a very large number when unbounded."""
        return self.capacity - self.used if self.bounded else 2**63 - 1

    @property
    def out_of_memory(self) -> bool:
        return self.bounded and self.used >= self.capacity

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _charge(self, nbytes: int) -> None:
        self.used += nbytes
        if self.used > self.peak_used:
            self.peak_used = self.used

    def try_allocate(self, nbytes: int, owner: PoolOwner | None = None) -> bool:
        """Charge ``nbytes`` unless the pool is out of memory (and ``owner`` not privileged)."""
        if self.bounded and self.used >= self.capacity and (
                owner is None or owner is not self.privileged):
            self.denied_total += 1
            return False
        self._charge(nbytes)
        return True

    def allocate(self, nbytes: int) -> None:
        """Charge ``nbytes`` already taken (never refused)."""
        self._charge(nbytes)

    def to_requests(self, nbytes: int) -> None:
        """``nbytes`` of what is charged now belong to complete request frames."""
        self.request_bytes += nbytes

    def frame_completed(self, owner: PoolOwner) -> None:
        """``owner`` completed the frame it was receiving (ends its privilege)."""
        if owner is self.privileged:
            self.privileged = None
            self._ensure_progress()

    def release_requests(self, nbytes: int) -> None:
        """Complete request frames of ``nbytes`` are no longer held (handler returned)."""
        self.request_bytes -= nbytes
        self.release(nbytes)

    def release(self, nbytes: int) -> None:
        """Free ``nbytes`` of charged memory; wake waiters if memory is available again."""
        self.used -= nbytes
        if self._waiters:
            if not self.out_of_memory:
                self._wake()
            else:
                self._ensure_progress()

    def wait(self, owner: PoolOwner) -> None:
        """Call ``owner.memory_available()`` once memory is available (FIFO among waiters)."""
        self._waiters.append(owner)
        self._ensure_progress()

    def forget(self, owner: PoolOwner) -> None:
        """``owner`` went away (connection closed): drop its wait and privilege."""
        try:
            self._waiters.remove(owner)
        except ValueError:
            pass
        if owner is self.privileged:
            self.privileged = None
            self._ensure_progress()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters and not self.out_of_memory:
            owner = waiters.popleft()
            if not owner.closed:
                owner.memory_available()

    def _ensure_progress(self) -> None:
        """Out of memory with nothing a handler will release: let the oldest waiter finish."""
        if (self.privileged is None and self._waiters and self.out_of_memory
                and self.request_bytes <= 0):
            while self._waiters:
                owner = self._waiters.popleft()
                if not owner.closed:
                    self.privileged = owner
                    owner.memory_available()
                    return
