"""Sparse segment indexes: `OffsetIndex` (.index) and `TimeIndex` (.timeindex).

On-disk formats (big-endian, no header, Kafka's exactly):

    .index      8-byte entries:  relative offset int32 | position int32
    .timeindex 12-byte entries:  timestamp int64 (ms)  | relative offset int32

`relative offset` = absolute offset - segment base offset; `position` is the byte position of
a batch in the `.log` file. An entry is added at most once per `index.interval.bytes` of log
(the caller, `LogSegment`, decides when). Entries are strictly increasing in offset (and, for
the time index, in timestamp), so lookups are binary searches over the entries.

While the segment is active the file is preallocated to `segment.index.bytes` (rounded down to
a whole entry) and the entries are kept in memory, written to the file on flush; when the
segment rolls or closes the file is trimmed to its entries (`trim_to_valid_size`) and later
lookups map it read-only (see `AbstractIndex`). Only the owning `LogSegment` (hence the owning
`Log`) may call mutating methods; reads may come from the cleaner thread and `flush` from the
executor (both guarded by the index's lock).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable

from storage.descriptor_cache import open_with_retry

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the loader rebuilds it from the .log."""


class IndexOffsetOverflowError(Exception):
    """An offset does not fit the index's 32-bit relative offset (the segment must roll)."""


class _BufferEntries:
    """An active index's entries in memory."""

    __slots__ = ("buf", "entry")

    def __init__(self, buf: bytearray, entry: struct.Struct) -> None:
        self.buf, self.entry = buf, entry

    def raw(self, n: int) -> tuple[int, int]:
        return self.entry.unpack_from(self.buf, n * self.entry.size)


class _FileEntries:
    """A non-active index file, read one entry per `os.pread`."""

    __slots__ = ("fd", "entry")

    def __init__(self, fd: int, entry: struct.Struct) -> None:
        self.fd, self.entry = fd, entry

    def raw(self, n: int) -> tuple[int, int]:
        size = self.entry.size
        data = os.pread(self.fd, size, n * size)
        if len(data) < size:
            raise CorruptIndexError(f"index entry {n} is past the end of the file")
        return self.entry.unpack(data)


class AbstractIndex:
    """Common buffer/file/binary-search machinery; subclasses fix the entry layout.

    Two modes, neither holding a descriptor or a mapping between calls (Kafka maps its
    indexes and a Java mapping holds no descriptor; CPython's `mmap` keeps one open, so a
    mapped index would triple a segment's descriptors):

    - active (writable; the active segment's index, or one being rebuilt): the entries live
      in a `bytearray` read from the file on first use, and reach the file (`os.pwrite`) when
      it is flushed (`flush()`, in an executor), trimmed on roll (`trim_to_valid_size`) or
      closed. The file is still preallocated to `max_index_size` on disk (sparse), as Kafka's.
      After a crash an index may lack entries appended since the last flush: the loader
      recovers every segment from the one holding the recovery point, rebuilding its indexes,
      and a flush writes the entries of everything below the recovery point. No mapping, so
      100,000 active segments cost neither descriptors nor `vm.max_map_count` slots.
    - non-active (read-only, exactly its entries; Kafka's LazyIndex, KIP-263): construction
      only `stat`s the file; a lookup opens it, binary-searches with `os.pread` (one 8- or
      12-byte read per probe, from the page cache) and closes it again.

    A write (`append`, `truncate_entries`, `resize` beyond the entries) turns a non-active
    index active; `trim_to_valid_size` turns an active one non-active.
    """

    ENTRY: struct.Struct

    # one per segment, so slots; the file's path is `path + suffix`, kept as two shared
    # strings (the segment's prefix and a constant) and joined on use
    __slots__ = ("_path", "_suffix", "base_offset", "entry_size", "max_index_size", "_lock",
                 "_buf", "_writable", "_flushed", "_closed", "_dirty", "_verify", "created",
                 "_disk_size", "_corrupt_length", "_entries", "_file_size", "_capacity")

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool = True,
                 *, suffix: str = "", lock: threading.RLock | None = None,
                 exists: bool | None = None):
        """The index file `path + suffix`. `lock` (an RLock) may be shared with the other
        index of the same segment; by default the index has its own. `exists`: False when
        the caller's directory listing shows the file is absent (no `stat`: a clean restart
        of 100,000 partitions whose segments never needed an entry saves two syscalls per
        partition); None to look."""
        self._path = path
        self._suffix = suffix
        path = path + suffix
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_index_size = max_index_size
        # guards mode changes and writes to the file
        self._lock = threading.RLock() if lock is None else lock
        self._buf: bytearray | None = None  # active: the entries, once read
        self._writable = False
        self._flushed = 0  # active: entries already written to the file
        self._closed = False
        self._dirty = False  # the file changed since the last fsync
        self._verify: tuple[int, Callable[[CorruptIndexError], None] | None] | None = None  # deferred check
        #: the file did not exist (a new segment's, or a lost index: the loader recovers a
        #: segment bigger than `index.interval.bytes` whose index is missing, as Kafka's
        #: LogSegment.sanityCheck does)
        self.created = False
        self._disk_size: int | None = None  # the file's length; None: not created
        length = 0
        if exists is False:
            self.created = True
        else:
            try:
                length = self._disk_size = os.stat(path).st_size
            except FileNotFoundError:  # created on the first write-out (a new segment's)
                self.created = True
        self._corrupt_length = length % self.entry_size != 0
        self._entries = length // self.entry_size
        self._file_size = length
        self._capacity = self._entries
        if writable:
            self._activate(max(self._round(max_index_size), self._entries * self.entry_size))

    @property
    def path(self) -> str:
        """The index file's path."""
        return self._path + self._suffix

    # --- modes ---------------------------------------------------------------------------
    def _round(self, n: int) -> int:
        return n - n % self.entry_size

    @property
    def is_loaded(self) -> bool:
        """True once an active index's entries are in memory (nothing else is ever kept)."""
        return self._buf is not None

    @property
    def writable(self) -> bool:
        """True for an active index (entries in memory, written out on flush/trim)."""
        return self._writable

    def _activate(self, size: int) -> None:
        """Become (or stay) active with the file sized to `size` bytes (>= the entries)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: index is closed")
            if not self._writable:
                self._writable = True
                self._buf = None  # read on first use
                self._flushed = self._entries
            if self._file_size != size:
                if self._disk_size is not None and size < self._disk_size:
                    if self._buf is None and self._entries * self.entry_size > size:
                        self._materialize_locked()
                    self._size_file_locked(size)
                self._file_size = size  # growing the file waits for the first write-out
            self._capacity = size // self.entry_size

    def _size_file_locked(self, size: int) -> None:
        """Give the file exactly `size` bytes, creating it if needed. A new segment's
        indexes reach the disk on their first write-out and a loaded active index is
        preallocated then too, not at creation or load (a new partition costs two fewer
        file creations, a restart two fewer truncations per partition)."""
        if self._disk_size == size:
            return
        if self._disk_size is None:
            fd = open_with_retry(self.path, os.O_RDWR | os.O_CREAT)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        else:
            os.truncate(self.path, size)
        self._disk_size = size
        self._dirty = True

    def _materialize_locked(self) -> bytearray:
        n = self._entries * self.entry_size
        data = b""
        if n:
            fd = open_with_retry(self.path, os.O_RDONLY)
            try:
                data = os.pread(fd, n, 0)
            finally:
                os.close(fd)
        buf = bytearray(data)
        if len(buf) < n:
            buf.extend(bytes(n - len(buf)))
        self._buf = buf
        return buf

    def _load(self) -> None:
        """Make the entries readable (an active index's are read into memory) and run a
        deferred sanity check on the first use (see `defer_sanity_check`)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: index is closed")
            if self._writable and self._buf is None:
                self._materialize_locked()
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
        """Read an active index's entries, run a pending check, before reading entries."""
        if (self._writable and self._buf is None) or self._verify is not None:
            self._load()

    @contextlib.contextmanager
    def _view(self):
        """The entries for one operation: an active index's buffer, or the file of a
        non-active one opened for the operation (closed again after it)."""
        self._ensure_loaded()
        buf = self._buf
        if buf is not None and self._writable:
            yield _BufferEntries(buf, self.ENTRY)
            return
        fd = open_with_retry(self.path, os.O_RDONLY)
        try:
            yield _FileEntries(fd, self.ENTRY)
        finally:
            os.close(fd)

    def defer_sanity_check(self, log_size: int,
                           on_corrupt: Callable[[CorruptIndexError], None] | None) -> None:
        """Run `sanity_check(log_size)` when the index is first loaded (now, if it already
        is), calling `on_corrupt(error)` instead of raising if it fails (the segment rebuilds
        its indexes from the .log). The O(1) length check is done at once."""
        if self._corrupt_length:
            raise CorruptIndexError(f"{self.path}: length not a multiple of {self.entry_size}")
        if not self._entries:
            return  # nothing to check
        self._verify = (log_size, on_corrupt)
        if self._buf is not None:
            self._load()

    def cancel_deferred_check(self) -> None:
        self._verify = None

    def resize(self, new_size: int) -> bool:
        """Set the file's length to `new_size` rounded down to an entry, never below the
        current entries (an index given room for more entries becomes active). Returns True
        if the size changed."""
        size = max(self._round(new_size), self._entries * self.entry_size)
        if size == self._capacity * self.entry_size and self._file_size == size:
            return False
        self._activate(size)
        return True

    def create_file(self) -> None:
        """Make sure the file exists (an index that never had an entry is otherwise not
        created; `LogSegment.close` keeps one for a segment big enough to need entries)."""
        with self._lock:
            if self._disk_size is None:
                self._size_file_locked(self._entries * self.entry_size if not self._writable
                                       else self._file_size)

    def trim_to_valid_size(self) -> None:
        """Write out the entries, shrink the file to exactly them and become non-active (on
        roll / close / after recovery)."""
        with self._lock:
            if self._writable:
                self._write_pending()
                self._writable = False
                self._buf = None
            if self._disk_size is not None or self._entries:
                self._size_file_locked(self._entries * self.entry_size)
            # else: an index that never had an entry is not created at all (100,000 new,
            # idle partitions closed at once cost 200,000 file creations otherwise); the
            # loader treats a missing index as empty, Kafka's rebuilds it
            self._capacity = self._entries
            self._file_size = self._entries * self.entry_size
            self._dirty = True

    def _write_pending(self, fd: int | None = None) -> None:
        """Write the entries not yet in the file (lock held)."""
        buf = self._buf
        if buf is None or self._flushed >= self._entries:
            return
        start, end = self._flushed * self.entry_size, self._entries * self.entry_size
        data = bytes(buf[start:end])
        own = fd is None
        if own:
            self._size_file_locked(self._file_size)
            fd = open_with_retry(self.path, os.O_WRONLY)
        try:
            view, pos = memoryview(data), start
            while view:
                n = os.pwrite(fd, view, pos)
                pos += n
                view = view[n:]
        finally:
            if own:
                os.close(fd)
        self._flushed = end // self.entry_size
        self._dirty = True

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
        with self._view() as v:
            return self._decode(v.raw(n))

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        raise NotImplementedError

    def _largest_lower_bound(self, target: int, key_pos: int) -> int:
        """Index of the last entry whose raw key <= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        with self._view() as v:
            if v.raw(0)[key_pos] > target:
                return -1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if v.raw(mid)[key_pos] <= target:
                    lo = mid
                else:
                    hi = mid - 1
        return lo

    def _smallest_upper_bound(self, target: int, key_pos: int) -> int:
        """Index of the first entry whose raw key >= target, or -1."""
        lo, hi = 0, self._entries - 1
        if hi < 0:
            return -1
        with self._view() as v:
            if v.raw(hi)[key_pos] < target:
                return -1
            while lo < hi:
                mid = (lo + hi) // 2
                if v.raw(mid)[key_pos] >= target:
                    hi = mid
                else:
                    lo = mid + 1
        return lo

    def _write_entry(self, raw: tuple[int, int]) -> None:
        if self._entries >= self._capacity:
            raise IndexError(f"{self.path}: index is full ({self._entries} entries)")
        self._ensure_loaded()  # active: capacity > entries only while writable
        self._buf.extend(self.ENTRY.pack(*raw))
        self._entries += 1

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit a relative offset from {self.base_offset}")
        return rel

    def truncate_entries(self, n: int) -> None:
        """Keep only the first n entries (the index becomes active). Entries already in the
        file are cut off it and the file extended again (`ftruncate` twice) rather than
        zero-filled: after an unclean shutdown the whole preallocated file counts as
        entries, and writing zeros over it would make a sparse 10 MiB index dense."""
        n = max(0, min(n, self._entries))
        if n >= self._entries:
            return
        if not self._writable:
            self._activate(self._file_size)
        with self._lock:
            if self._buf is not None:
                del self._buf[n * self.entry_size:]
            if self._flushed > n:
                self._size_file_locked(n * self.entry_size)  # grown again on write-out
                self._flushed = n
            self._entries = n

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self.truncate_entries(0)

    # --- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """Make the entries durable (blocking; runs in an executor): write an active index's
        pending entries and fsync the file, reopened for the call. Does nothing when nothing
        changed since the last flush."""
        if not self._dirty and not (self._writable and self._flushed < self._entries):
            return
        with self._lock:
            if self._writable:
                self._size_file_locked(self._file_size)  # preallocated, as Kafka's
            elif self._disk_size is None:
                return
        path = self.path
        try:
            fd = open_with_retry(path, os.O_WRONLY)
        except FileNotFoundError:  # deleted or renamed concurrently
            if self._closed:
                return
            if self.path == path:
                raise
            fd = open_with_retry(self.path, os.O_WRONLY)
        try:
            with self._lock:
                if self._writable:
                    self._write_pending(fd)
                self._dirty = False
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
            self._closed = True

    def close_handler(self) -> None:
        """Close without trimming or writing (used before deleting)."""
        self._verify = None
        with self._lock:
            self._buf = None
            self._closed = True

    def rename_to(self, new_path: str) -> None:
        with self._lock:
            if self._disk_size is not None:
                os.replace(self.path, new_path)
            self._path, self._suffix = new_path, ""

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

    __slots__ = ()
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

    __slots__ = ()
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
