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

import errno
import mmap
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
#: blocks of an active index are allocated this many bytes at a time before the map writes
#: into them (see AbstractIndex._reserve)
RESERVE_BYTES = 64 * 1024


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the loader rebuilds it from the .log."""


class IndexOffsetOverflowError(Exception):
    """An offset does not fit the index's 32-bit relative offset (the segment must roll)."""


class MappedIndexLimit:
    """Bounds how many full (non-active) indexes stay mapped, each holding one descriptor:
    past `limit`, the least recently used is released (second-chance order: an index read
    since the last pass is skipped once). Active (writable) indexes do not count. Kafka
    has no such bound (a Java mapping holds no descriptor); it stands in for KIP-263's
    closing of idle indexes. Thread-safe."""

    def __init__(self, limit: int = 2048):
        self.limit = limit
        self._lru: OrderedDict[int, AbstractIndex] = OrderedDict()
        self._lock = threading.Lock()
        self.released = 0  # indexes released by the limit so far

    def add(self, idx: AbstractIndex) -> None:
        with self._lock:
            self._lru[id(idx)] = idx
            self._lru.move_to_end(id(idx))
            budget = 2 * len(self._lru)
            while len(self._lru) > self.limit and budget > 0:
                budget -= 1
                key, victim = self._lru.popitem(last=False)
                if victim is idx or (victim._used and victim._mm is not None):
                    victim._used = False
                    self._lru[key] = victim
                    continue
                if victim.release(blocking=False):
                    self.released += 1
                elif victim._mm is not None and victim._capacity == victim._entries:
                    self._lru[key] = victim  # busy on another thread: try again later

    def discard(self, idx: AbstractIndex) -> None:
        with self._lock:
            self._lru.pop(id(idx), None)

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for i in self._lru.values() if i._mm is not None)


_MAPPED = MappedIndexLimit()


def mapped_index_limit() -> MappedIndexLimit:
    """The process-wide `MappedIndexLimit` (set `.limit` to change the bound)."""
    return _MAPPED


class AbstractIndex:
    """Common mmap/resize/binary-search machinery; subclasses fix the entry layout.

    File descriptors (Kafka keeps none open per index: its RandomAccessFile is closed once
    mapped): the file object is closed as soon as the mmap exists, so a mapped index costs the
    one descriptor CPython's `mmap` keeps (a dup of the file's); resizing, trimming and
    `flush()` reopen the file by path for the call. An index built with `writable=False`
    (a non-active segment's) is lazy, like Kafka's LazyIndex (KIP-263): construction only
    `stat`s the file (for `entries`) and nothing is opened or mapped until the first lookup,
    append, resize or `sanity_check`; `release()` unmaps it again (no descriptor) until the
    next use. A writable (active) index is mapped at once, preallocated to `max_index_size`.
    """

    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool = True):
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_index_size = max_index_size
        self._lock = threading.RLock()  # guards load/unload (the cleaner thread reads too)
        self._mm: mmap.mmap | None = None
        self._closed = False
        self._dirty = False  # written through the map since the last flush()
        self._used = False  # read since the mapped-index limit last looked (second chance)
        self._verify: tuple[int, Callable[[CorruptIndexError], None] | None] | None = None  # deferred check
        self._reserved = 0  # bytes of the file known to be allocated (see _reserve)
        #: the file did not exist and was created empty (a lost index: the loader rebuilds
        #: it, as Kafka's LogSegment.sanityCheck does for a newly created index file)
        self.created = False
        try:
            length = os.stat(path).st_size
        except FileNotFoundError:
            length = 0
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # every segment has its files
            os.close(fd)
            self.created = True
        self._corrupt_length = length % self.entry_size != 0
        self._entries = length // self.entry_size
        self._file_size = length
        self._capacity = self._entries
        if writable:
            self._load(max(self._round(max_index_size), self._entries * self.entry_size))

    # --- mapping -------------------------------------------------------------------------
    def _round(self, n: int) -> int:
        return n - n % self.entry_size

    @property
    def is_loaded(self) -> bool:
        """True while the file is mapped (holding one descriptor)."""
        return self._mm is not None

    def _load(self, size: int | None = None) -> None:
        """Map the file (resized to `size` bytes first if given and different). Runs a
        deferred sanity check on the first load (see `defer_sanity_check`)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: index is closed")
            if size is None:
                size = self._capacity * self.entry_size
                if self._mm is not None:
                    return
            self._unmap()
            self._map(size)
            verify, self._verify = self._verify, None
        if verify is not None:
            log_size, on_corrupt = verify
            try:
                self.sanity_check(log_size)
            except CorruptIndexError as e:
                if on_corrupt is None:
                    raise
                on_corrupt(e)

    def _ensure_loaded(self) -> None:
        """Map a lazy index before reading its entries (an empty one needs no map)."""
        if self._mm is None and (self._entries or self._verify is not None):
            self._load()

    def _mapped(self) -> mmap.mmap:
        """The map, loading it if needed. Readers keep this reference for the whole
        operation, so a concurrent `release()` (which only drops the index's reference)
        never unmaps pages under them."""
        mm = self._mm
        if mm is None:
            self._load()
            mm = self._mm
            if mm is None:
                raise ValueError(f"{self.path}: index has no entries mapped")
        self._used = True
        return mm

    def _map(self, size: int) -> None:
        with open(self.path, "r+b", buffering=0) as f:  # closed again once mapped
            fd = f.fileno()
            if os.fstat(fd).st_size != size:
                os.ftruncate(fd, size)
                self._dirty = True
            self._mm = mmap.mmap(fd, size) if size > 0 else None
        self._file_size = size
        self._capacity = size // self.entry_size
        # bytes known to have blocks (entries were written there); see _reserve
        self._reserved = min(self._reserved, self._entries * self.entry_size)
        self._used = True
        if self._mm is not None and self._capacity == self._entries:
            _MAPPED.add(self)  # a full (non-active) index: subject to the mapped-index limit

    def _unmap(self) -> None:
        # no msync here: unmapping keeps the dirty pages in the page cache; durability is
        # `flush()`'s job (called from Log.flush in an executor)
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def release(self, blocking: bool = True) -> bool:
        """Unmap a loaded index holding exactly its entries (a non-active segment's), freeing
        its descriptor; the next use maps it again. Returns True if it was unmapped. A
        writable (preallocated) index is left alone. Only the index's reference to the map
        is dropped: a reader on another thread still holding it keeps it valid until done
        (CPython unmaps when the last reference goes). `blocking=False` gives up if another
        thread is loading or resizing this index."""
        if not self._lock.acquire(blocking):
            return False
        try:
            if self._mm is None or self._capacity != self._entries or self._verify is not None:
                return False
            self._mm = None
            return True
        finally:
            self._lock.release()

    def defer_sanity_check(self, log_size: int,
                           on_corrupt: Callable[[CorruptIndexError], None] | None) -> None:
        """Run `sanity_check(log_size)` when the index is first mapped (now, if it already
        is), calling `on_corrupt(error)` instead of raising if it fails (the segment rebuilds
        its indexes from the .log). The O(1) length check is done at once."""
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length not a multiple of {self.entry_size}")
        if self._mm is None and not self._entries:
            return  # nothing to check
        self._verify = (log_size, on_corrupt)
        if self._mm is not None:
            self._load(self._file_size)

    def cancel_deferred_check(self) -> None:
        self._verify = None

    def resize(self, new_size: int) -> bool:
        """Set the file (and mapping) to `new_size` rounded down to an entry, never below
        the current entries. Returns True if the size changed."""
        size = max(self._round(new_size), self._entries * self.entry_size)
        if size == self._capacity * self.entry_size and self._file_size == size:
            return False
        self._load(size)
        return True

    def trim_to_valid_size(self) -> None:
        """Shrink the file to exactly its entries (on roll / close). A never-mapped index
        already is (unless its length is not a whole number of entries)."""
        if self._mm is None and self._file_size == self._entries * self.entry_size:
            return
        self.resize(self._entries * self.entry_size)

    # --- state ---------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        if self._verify is not None:  # a pending check may rebuild the index
            self._load()
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
        return self._decode(self.ENTRY.unpack_from(self._mapped(), n * self.entry_size))

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        raise NotImplementedError

    def _key(self, mm: mmap.mmap, n: int, key_pos: int) -> int:
        return self.ENTRY.unpack_from(mm, n * self.entry_size)[key_pos]

    def _largest_lower_bound(self, target: int, key_pos: int) -> int:
        """Index of the last entry whose raw key <= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        mm = self._mapped()
        if self._key(mm, 0, key_pos) > target:
            return -1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._key(mm, mid, key_pos) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound(self, target: int, key_pos: int) -> int:
        """Index of the first entry whose raw key >= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        mm = self._mapped()
        if self._key(mm, hi, key_pos) < target:
            return -1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(mm, mid, key_pos) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _write_entry(self, raw: tuple[int, int]) -> None:
        if self._entries >= self._capacity:
            raise IndexError(f"{self.path}: index is full ({self._entries} entries)")
        mm = self._mapped()
        if (self._entries + 1) * self.entry_size > self._reserved:
            self._reserve((self._entries + 1) * self.entry_size)
        self._dirty = True
        self.ENTRY.pack_into(mm, self._entries * self.entry_size, *raw)
        self._entries += 1

    def _reserve(self, end: int) -> None:
        """Allocate the file's blocks up to `end` (and `RESERVE_BYTES` beyond) before the
        map writes there. The preallocated file is sparse: a store through the map into a
        hole on a full filesystem raises SIGBUS and kills the process; `posix_fallocate`
        raises ENOSPC instead, which takes the log dir offline like any write error."""
        start = self._reserved - self._reserved % RESERVE_BYTES
        stop = min(self._file_size, end + RESERVE_BYTES - end % RESERVE_BYTES)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, stop - start)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            stop = self._file_size  # the filesystem cannot preallocate: nothing to gain
        finally:
            os.close(fd)
        self._reserved = stop

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
        if n < self._entries:
            self._ensure_loaded()
            with self._lock:
                size = self._capacity * self.entry_size
                self._unmap()
                os.truncate(self.path, n * self.entry_size)
                self._map(size)
                self._dirty = True
        self._entries = n

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self.truncate_entries(0)

    # --- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """Make the entries durable (blocking; runs in an executor). Reopens the file and
        fsyncs it, which also writes pages dirtied through the map (or before a `release()`),
        rather than `mmap.flush()`: msync holds the GIL in CPython 3.11 and would stall the
        event loop thread. Does nothing when nothing was written since the last flush."""
        if not self._dirty:
            return
        self._dirty = False
        path = self.path
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # deleted or renamed concurrently
            if self._closed:
                return
            if self.path == path:
                raise
            fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError:
            self._dirty = True
            raise
        finally:
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Trim to valid size and close."""
        if self._closed:
            return
        self._verify = None
        self.trim_to_valid_size()
        with self._lock:
            self._unmap()
            self._closed = True
        _MAPPED.discard(self)

    def close_handler(self) -> None:
        """Close without trimming (used before deleting)."""
        self._verify = None
        with self._lock:
            self._unmap()
            self._closed = True
        _MAPPED.discard(self)

    def rename_to(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        if not self._closed:
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
