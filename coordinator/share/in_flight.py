"""The in-flight record cache of a share-partition (Kafka's cachedState of InFlightBatch).

Layout: an `InFlightCache` holds `InFlightBatch`es sorted by first offset, disjoint, all
within [SPSO - k, SPEO) (a batch may straddle the SPSO while part of it is still in flight).
A batch tracks one `InFlightState` for all its offsets while they move together (a whole
fetched batch acquired and acknowledged as one), and switches to one state per offset
(`split()`) the first time an operation touches only part of it — never back.

Timeouts: an acquisition lock or a redelivery backoff is one `RangeTimeout` per operation
(one acquire, one commit), shared by every state it covers (`state.lock is rt`); `holders`
counts those states, and when the last one lets go the wheel entry is cancelled. Splitting a
batch adds holders instead of scheduling new timers (Kafka schedules one timer per offset).

Who may call: `coordinator.share.share_partition` only; single-threaded (event loop).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from coordinator.share.state import RecordState
from coordinator.share.timer import ScheduledTimeout

__all__ = ["InFlightBatch", "InFlightCache", "InFlightState", "RangeTimeout"]


class RangeTimeout:
    """One wheel entry covering the states of [first_offset, last_offset] that point at it."""

    __slots__ = ("first_offset", "last_offset", "holders", "handle")

    def __init__(self, first_offset: int, last_offset: int) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.holders = 0
        self.handle: ScheduledTimeout | None = None

    def release(self) -> None:
        """One state no longer waits on this timeout; cancel the entry with the last one."""
        self.holders -= 1
        if self.holders <= 0 and self.handle is not None:
            self.handle.cancel()
            self.handle = None


class InFlightState:
    """State of one offset, or of a whole batch, while in flight.

    `delivery_count` counts acquisitions (int16 on the wire). `member_id` is the holder while
    ACQUIRED. `lock` is the acquisition-lock timeout, `backoff` the redelivery timeout while
    DELAYED. `pending` marks a state a persister write is about to change (acquisition, other
    acknowledgements and lock expiry leave it alone); `expired` records that its lock expired
    meanwhile, to be honoured if that write fails.
    """

    __slots__ = ("state", "delivery_count", "member_id", "lock", "backoff", "pending", "expired")

    def __init__(self, state: RecordState, delivery_count: int, member_id: str | None = None) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock: RangeTimeout | None = None
        self.backoff: RangeTimeout | None = None
        self.pending = False
        self.expired = False

    def copy(self) -> InFlightState:
        other = InFlightState(self.state, self.delivery_count, self.member_id)
        other.lock = self.lock
        other.backoff = self.backoff
        other.pending = self.pending
        other.expired = self.expired
        if self.lock is not None:
            self.lock.holders += 1
        if self.backoff is not None:
            self.backoff.holders += 1
        return other

    def drop_lock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def drop_backoff(self) -> None:
        if self.backoff is not None:
            self.backoff.release()
            self.backoff = None

    def __repr__(self) -> str:
        return (f"InFlightState({self.state.name}, dc={self.delivery_count}, "
                f"member={self.member_id!r}{', pending' if self.pending else ''})")


class InFlightBatch:
    """Offsets [first_offset, last_offset] with one state, or one state per offset."""

    __slots__ = ("first_offset", "last_offset", "batch_state", "offset_states")

    def __init__(self, first_offset: int, last_offset: int, state: InFlightState) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.batch_state: InFlightState | None = state
        self.offset_states: list[InFlightState] | None = None

    def split(self) -> list[InFlightState]:
        """Switch to per-offset states (copies of the batch state, sharing its timeouts)."""
        if self.offset_states is None:
            base = self.batch_state
            assert base is not None
            states = [base]
            states.extend(base.copy() for _ in range(self.last_offset - self.first_offset))
            self.offset_states = states
            self.batch_state = None
        return self.offset_states

    def state_at(self, offset: int) -> InFlightState:
        if self.offset_states is None:
            assert self.batch_state is not None
            return self.batch_state
        return self.offset_states[offset - self.first_offset]

    def states(self, first: int, last: int) -> Iterator[tuple[int, int, InFlightState]]:
        """(lo, hi, state) runs of this batch within [first, last]; a batch-level state is
        yielded once with the whole batch range (its state moves as one)."""
        if self.offset_states is None:
            assert self.batch_state is not None
            if first <= self.last_offset and last >= self.first_offset:
                yield self.first_offset, self.last_offset, self.batch_state
            return
        lo = max(first, self.first_offset)
        hi = min(last, self.last_offset)
        base = self.first_offset
        states = self.offset_states
        for off in range(lo, hi + 1):
            yield off, off, states[off - base]

    def all_states(self) -> Iterator[tuple[int, int, InFlightState]]:
        return self.states(self.first_offset, self.last_offset)

    def __repr__(self) -> str:
        inner = self.batch_state if self.offset_states is None else f"{len(self.offset_states)} offsets"
        return f"InFlightBatch({self.first_offset}-{self.last_offset}, {inner})"


class InFlightCache:
    """Disjoint `InFlightBatch`es sorted by first offset; floor lookup by bisect."""

    __slots__ = ("_firsts", "_batches")

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._batches: list[InFlightBatch] = []

    def add(self, batch: InFlightBatch) -> None:
        i = bisect.bisect_left(self._firsts, batch.first_offset)
        self._firsts.insert(i, batch.first_offset)
        self._batches.insert(i, batch)

    def overlapping(self, first: int, last: int) -> list[InFlightBatch]:
        """Batches with an offset in [first, last], in offset order."""
        if first > last or not self._batches:
            return []
        i = max(bisect.bisect_right(self._firsts, first) - 1, 0)
        j = bisect.bisect_right(self._firsts, last)
        return [b for b in self._batches[i:j] if b.last_offset >= first]

    def drop_below(self, offset: int) -> list[InFlightBatch]:
        """Remove and return the batches whose last offset is below `offset`."""
        n = 0
        for b in self._batches:
            if b.last_offset >= offset:
                break
            n += 1
        dropped = self._batches[:n]
        del self._batches[:n]
        del self._firsts[:n]
        return dropped

    def clear(self) -> list[InFlightBatch]:
        dropped = self._batches
        self._batches = []
        self._firsts = []
        return dropped

    @property
    def last(self) -> InFlightBatch | None:
        return self._batches[-1] if self._batches else None

    def __iter__(self) -> Iterator[InFlightBatch]:
        return iter(list(self._batches))

    def __len__(self) -> int:
        return len(self._batches)

    def __bool__(self) -> bool:
        return bool(self._batches)
