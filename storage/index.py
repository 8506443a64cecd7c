"""Sparse, memory-mapped segment indexes: `OffsetIndex` (.index) and `TimeIndex` (.timeindex).

On-disk formats (big-endian, no header, Kafka's exactly):

    .index      8-byte entries:  relative offset int32 | position int32
    .timeindex 12-byte entries:  timestamp int64 (ms)  | relative offset int32

`relative offset` = absolute offset - segment base offset; `position` is the byte position of
a batch in the `.log` file. An entry is added at most once per `index.interval.bytes` of log
(the caller, `LogSegment`, decides when). Entries are strictly increasing in offset (and, for
the time index, in timestamp), so lookups are binary searches over the mmap.

While the segment is active the file is preallocated to `segment.index.bytes` (rounded down to
a whole entry) and mmap'd read-write; when the segment rolls or closes the file is trimmed to
its entries (`trim_to_valid_size`). Only the owning `LogSegment` (hence the owning `Log`) may
call mutating methods; none of this is thread-safe.
"""

from __future__ import annotations

import mmap
import os
import struct

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the loader rebuilds it from the .log."""


class IndexOffsetOverflowError(Exception):
    """An offset does not fit the index's 32-bit relative offset (the segment must roll)."""


class AbstractIndex:
    """Common mmap/resize/binary-search machinery; subclasses fix the entry layout."""

    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_index_size = max_index_size
        existed = os.path.exists(path) and os.path.getsize(path) > 0
        self._file = open(path, "r+b" if os.path.exists(path) else "w+b", buffering=0)
        length = os.fstat(self._file.fileno()).st_size
        self._corrupt_length = length % self.entry_size != 0
        self._entries = length // self.entry_size if existed else 0
        self._mm: mmap.mmap | None = None
        size = self._round(max_index_size) if writable else self._entries * self.entry_size
        self._map(max(size, self._entries * self.entry_size))

    # --- mapping -------------------------------------------------------------------------
    def _round(self, n: int) -> int:
        return n - n % self.entry_size

    def _map(self, size: int) -> None:
        fd = self._file.fileno()
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        self._mm = mmap.mmap(fd, size) if size > 0 else None
        self._capacity = size // self.entry_size

    def _unmap(self) -> None:
        # no msync here: unmapping keeps the dirty pages in the page cache; durability is
        # `flush()`'s job (called from Log.flush in an executor)
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def resize(self, new_size: int) -> bool:
        """Set the file (and mapping) to `new_size` rounded down to an entry, never below
        the current entries. Returns True if the size changed."""
        size = max(self._round(new_size), self._entries * self.entry_size)
        on_disk = os.fstat(self._file.fileno()).st_size
        if size == self._capacity * self.entry_size and on_disk == size:
            return False
        self._unmap()
        self._map(size)
        return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (on roll / close)."""
        self.resize(self._entries * self.entry_size)

    # --- state ---------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._capacity

    @property
    def is_full(self) -> bool:
        return self._entries >= self._capacity

    def size_in_bytes(self) -> int:
        return self._entries * self.entry_size

    def entry(self, n: int) -> tuple[int, int]:
        """Entry n in absolute terms (see subclass `_decode`)."""
        if not 0 <= n < self._entries:
            raise IndexError(f"{self.path}: entry {n} out of range [0, {self._entries})")
        return self._decode(self.ENTRY.unpack_from(self._mm, n * self.entry_size))

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        raise NotImplementedError

    def _key(self, n: int, key_pos: int) -> int:
        return self.ENTRY.unpack_from(self._mm, n * self.entry_size)[key_pos]

    def _largest_lower_bound(self, target: int, key_pos: int) -> int:
        """Index of the last entry whose raw key <= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0 or self._key(0, key_pos) > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._key(mid, key_pos) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound(self, target: int, key_pos: int) -> int:
        """Index of the first entry whose raw key >= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0 or self._key(hi, key_pos) < target:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mid, key_pos) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _write_entry(self, raw: tuple[int, int]) -> None:
        if self._entries >= self._capacity:
            raise IndexError(f"{self.path}: index is full ({self._entries} entries)")
        self.ENTRY.pack_into(self._mm, self._entries * self.entry_size, *raw)
        self._entries += 1

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a relative offset from {self.base_offset}")
        return rel

    def truncate_entries(self, n: int) -> None:
        """Keep only the first n entries (the bytes beyond read as zeros). The tail is cut off
        the file and the file extended again (`ftruncate` twice) rather than zero-filled
        through the map: after an unclean shutdown the whole preallocated file counts as
        entries, and writing zeros over it would make a sparse 10 MiB index dense."""
        n = max(0, min(n, self._entries))
        if self._mm is not None and n < self._entries:
            size = self._capacity * self.entry_size
            self._unmap()
            os.ftruncate(self._file.fileno(), n * self.entry_size)
            self._map(size)
        self._entries = n

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self.truncate_entries(0)

    # --- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """Make the entries durable (blocking; runs in an executor). Uses fsync on the file,
        which also writes pages dirtied through the map, rather than `mmap.flush()`: msync
        holds the GIL in CPython 3.11 and would stall the event loop thread."""
        f = self._file
        try:
            os.fsync(f.fileno())
        except (ValueError, OSError):  # closed concurrently (segment deleted/truncated)
            if not f.closed:
                raise

    def close(self) -> None:
        """Trim to valid size and close."""
        if self._file.closed:
            return
        self.trim_to_valid_size()
        self._unmap()
        self._file.close()

    def close_handler(self) -> None:
        """Close without trimming (used before deleting)."""
        self._unmap()
        self._file.close()

    def rename_to(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        if not self._file.closed:
            self.close_handler()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(AbstractIndex):
    """`.index`: maps offsets to `.log` positions; `lookup(offset)` gives the last entry at or
    before `offset`, from which the reader scans forward batch by batch."""

    ENTRY = _OFFSET_ENTRY

    def _decode(self, raw):
        return self.base_offset + raw[0], raw[1]

    @property
    def last_offset(self) -> int:
        return self.entry(self._entries - 1)[0] if self._entries else self.base_offset

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must strictly increase (ValueError otherwise)."""
        if self._entries and offset <= self.last_offset:
            raise ValueError(f"{self.path}: offset {offset} not after {self.last_offset}")
        self._write_entry((self._relative(offset), position))

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= target, else (base, 0)."""
        i = self._largest_lower_bound(target_offset - self.base_offset, 0)
        return (self.base_offset, 0) if i < 0 else self.entry(i)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """Last entry with position <= `position`, else (base, 0)."""
        i = self._largest_lower_bound(position, 1)
        return (self.base_offset, 0) if i < 0 else self.entry(i)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        i = self._smallest_upper_bound(offset - self.base_offset, 0)
        if i >= 0:
            self.truncate_entries(i)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError on a partial entry, non-increasing first/last entries or a
        position beyond the log (cheap O(1) checks as Kafka's)."""
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length not a multiple of {self.entry_size}")
        if self._entries:
            first, last = self.entry(0), self.entry(self._entries - 1)
            if first[0] < self.base_offset or (self._entries > 1 and last[0] <= first[0]):
                raise CorruptIndexError(f"{self.path}: entries not increasing")
            if last[1] >= max(log_size, 1) or (self._entries > 1 and last[1] <= first[1]):
                raise CorruptIndexError(f"{self.path}: position beyond log size {log_size}")


class TimeIndex(AbstractIndex):
    """`.timeindex`: (max timestamp so far, offset of the batch holding it), appended only when
    the timestamp grows. One slot is kept free for the entry written when the segment rolls,
    so `is_full` is `entries >= max_entries - 1` (as Kafka's TimeIndex)."""

    ENTRY = _TIME_ENTRY

    def _decode(self, raw):
        return raw[0], self.base_offset + raw[1]

    @property
    def is_full(self) -> bool:
        return self._entries >= self._capacity - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        return self.entry(self._entries - 1) if self._entries else (-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append if `timestamp` is larger than the last entry's (and offset not smaller)."""
        if not skip_full_check and self.is_full:
            raise IndexError(f"{self.path}: time index is full")
        last_ts, last_off = self.last_entry
        if self._entries and offset < last_off:
            raise ValueError(f"{self.path}: offset {offset} before last entry {last_off}")
        if timestamp > last_ts:
            if self._entries >= self._capacity:
                self.resize((self._capacity + 1) * self.entry_size)
            self._write_entry((timestamp, self._relative(offset)))

    def lookup(self, target_ts: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else
        (-1, base_offset)."""
        i = self._largest_lower_bound(target_ts, 0)
        return (-1, self.base_offset) if i < 0 else self.entry(i)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        i = self._smallest_upper_bound(offset - self.base_offset, 1)
        if i >= 0:
            self.truncate_entries(i)

    def sanity_check(self, log_size: int) -> None:
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length not a multiple of {self.entry_size}")
        if self._entries:
            first, last = self.entry(0), self.entry(self._entries - 1)
            if first[1] < self.base_offset or last[1] < first[1]:
                raise CorruptIndexError(f"{self.path}: offsets not increasing")
            if self._entries > 1 and last[0] <= first[0]:
                raise CorruptIndexError(f"{self.path}: timestamps not increasing")
