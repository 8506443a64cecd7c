"""`LogSegment`: one `.log` file with its `.index` and `.timeindex`, and `FileRecords`.

Files, named by the segment's base offset as 20 zero-padded digits (Kafka's layout)::

    00000000000000000000.log        record batches exactly as appended (v2, offsets assigned)
    00000000000000000000.index      OffsetIndex (see storage.index)
    00000000000000000000.timeindex  TimeIndex
    00000000000000000000.txnindex   TransactionIndex (aborted transactions; only if any)

Only the owning `Log` calls these methods (not thread-safe). Writes use `os.pwrite` at the
segment's current size; reads return `FileRecords` slices of the `.log`'s `FileHandle` so the
network layer can `sendfile` them without copying record bytes into Python. A segment holds
at most one descriptor (its `.log`; active indexes live in memory, non-active ones are mapped
on demand), and only while `storage.descriptor_cache` allows: an idle segment's descriptor is
released (least recently used first) and reopened on the next read or write.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Container, Iterator
from typing import NamedTuple

from protocol.record_format import BATCH_HEADER, BATCH_HEADER_SIZE, LOG_OVERHEAD
from protocol.records import RecordBatch
from storage.descriptor_cache import _CACHE, FileHandle
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

log = logging.getLogger(__name__)

_SCAN_CHUNK = 8 * 1024  # a few index intervals of headers per pread
_RECOVER_CHUNK = 16 * 1024 * 1024


def filename_prefix(offset: int) -> str:
    """20-digit zero-padded decimal, as Kafka names segment files."""
    return f"{offset:020d}"


class BatchHeader(NamedTuple):
    """Header fields of one batch in a `.log` file, read without the record bytes. Offers
    the properties `ProducerStateManager.update` needs, like a RecordBatch."""

    position: int
    base_offset: int
    size: int  # batch_length + 12
    last_offset_delta: int
    max_timestamp: int
    attributes: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


class FileRecords:
    """A fetch result: slices of segment files, never copied into Python until asked.

    `slices` is a list of `(file_object, position, length)`; `file_object.fileno()` is
    suitable for `os.sendfile`. `len()` is the total bytes. `read_bytes()` copies them
    (for transports without sendfile and for tests). A slice may end in a partial batch when
    `max_bytes` cuts it (consumers skip a partial trailing batch, as with Kafka).
    """

    __slots__ = ("slices", "_size")

    def __init__(self, slices: list | None = None):
        self.slices: list[tuple[object, int, int]] = slices or []
        self._size = sum(s[2] for s in self.slices)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def read_bytes(self) -> bytes:
        parts = []
        for f, pos, length in self.slices:
            fd = f if isinstance(f, int) else f.fileno()
            got = os.pread(fd, length, pos)
            parts.append(got)
        return b"".join(parts)

    def __repr__(self):
        return f"FileRecords({[(p, n) for _, p, n in self.slices]})"


class LogSegment:
    """One segment. `base_offset` is the first offset it may hold; `size` its byte length.

    At least one per hosted replica, so slots; its four file paths are one shared prefix
    (`dir/<base offset>`) and constant suffixes, joined on use."""

    __slots__ = ("dir", "base_offset", "index_interval_bytes", "max_index_size", "time_ms",
                 "_prefix", "_log_suffix", "_handle", "_used", "_closed", "size",
                 "offset_index", "time_index", "txn_index", "bytes_since_last_index_entry",
                 "_max_ts", "_offset_of_max_ts", "_rolling_ts", "_time_state_pending",
                 "created_ms", "last_modified_ms", "next_offset_hint", "tail_position",
                 "tail_min_offset")

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, time_ms: Callable[[], int], active: bool = True,
                 file_suffix: str = "", files: Container[str] | None = None,
                 now_ms: int | None = None):
        """`files`: the directory's file names when the caller just listed it (loading): an
        index not among them is known absent without a `stat`. `now_ms`: a
        clock reading to use instead of calling `time_ms` (loading reads it once per log)."""
        self.dir = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.time_ms = time_ms
        stem = filename_prefix(base_offset)
        self._prefix = prefix = dir_path + stem if dir_path.endswith("/") \
            else f"{dir_path}/{stem}"
        self._log_suffix = LOG_SUFFIX + file_suffix
        self._handle: FileHandle | None = None  # the open .log, while the cache allows
        self._used = False  # read or written since the descriptor cache last looked
        self._closed = False
        try:
            st = os.stat(self.log_path)
        except FileNotFoundError:
            self._handle = FileHandle(self.log_path, os.O_RDWR | os.O_CREAT)
            _CACHE.add(self)
            st = os.fstat(self._handle.fd)
        self.size = st.st_size
        mtime_ms = int(st.st_mtime * 1000)
        if files is None:
            has_index = has_time_index = None
        else:  # None: look (`stat`), False: known absent
            has_index = None if stem + INDEX_SUFFIX + file_suffix in files else False
            has_time_index = None if stem + TIME_INDEX_SUFFIX + file_suffix in files else False
        lock = threading.RLock()  # the two indexes' writes and mode changes
        self.offset_index = OffsetIndex(prefix, base_offset, max_index_size, writable=active,
                                        suffix=INDEX_SUFFIX + file_suffix, lock=lock,
                                        exists=has_index)
        self.time_index = TimeIndex(prefix, base_offset, max_index_size, writable=active,
                                    suffix=TIME_INDEX_SUFFIX + file_suffix, lock=lock,
                                    exists=has_time_index)
        self.txn_index = TransactionIndex(prefix, base_offset,
                                          suffix=TXN_INDEX_SUFFIX + file_suffix)
        self.bytes_since_last_index_entry = 0
        self._max_ts = -1  # max_timestamp_so_far
        self._offset_of_max_ts = base_offset
        # segment.ms rolls are measured from the first batch's max timestamp (Kafka's
        # rollingBasedTimestamp), else from when the segment was created
        self._rolling_ts: int | None = None
        self._time_state_pending = False  # load_time_state() deferred to first use
        self.created_ms = time_ms() if now_ms is None else now_ms
        # like Kafka, an existing file's mtime stands in when no batch carries a timestamp
        self.last_modified_ms = mtime_ms if self.size else self.created_ms
        self.next_offset_hint: int | None = None  # next offset if known (set by appends)
        # the last appended batch: its position, and an offset every earlier batch of this
        # segment ends below (the previous batch's last offset + 1); lets a read at the tail
        # skip the index lookup and scan (see translate_offset). None when unknown.
        self.tail_position: int | None = None
        self.tail_min_offset: int | None = None
        if self.size or self.time_index._entries:
            self._time_state_pending = True  # resolved on first use (no index read now)

    @property
    def log_path(self) -> str:
        """The `.log` file's path."""
        return self._prefix + self._log_suffix

    # --- the .log descriptor (bounded by storage.descriptor_cache) --------------------------
    @property
    def log_file(self) -> FileHandle:
        """The open `.log` (reopened if the descriptor cache released it). Callers keep the
        returned handle while they use its descriptor: the cache may release the segment's
        reference meanwhile, and the descriptor closes when the last reference goes."""
        h = self._handle
        if h is None or h.fd < 0:
            if self._closed:
                raise ValueError(f"I/O operation on closed segment {self.log_path}")
            h = FileHandle(self.log_path, os.O_RDWR)
            self._handle = h
            _CACHE.add(self)
        self._used = True
        return h

    def release(self, blocking: bool = True) -> bool:
        """Drop the `.log` descriptor until the next use (the descriptor cache's eviction);
        True if one was held."""
        h, self._handle = self._handle, None
        return h is not None

    def holds_descriptor(self) -> bool:
        return self._handle is not None

    # --- time state (loaded lazily, as Kafka's maxTimestampAndOffsetSoFar) -------------------
    @property
    def max_timestamp_so_far(self) -> int:
        """Largest batch max timestamp (ms) in the segment, -1 if none."""
        if self._time_state_pending:
            self._resolve_time_state()
        return self._max_ts

    @max_timestamp_so_far.setter
    def max_timestamp_so_far(self, value: int) -> None:
        if self._time_state_pending:
            self._resolve_time_state()
        self._max_ts = value

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the batch holding `max_timestamp_so_far`."""
        if self._time_state_pending:
            self._resolve_time_state()
        return self._offset_of_max_ts

    @offset_of_max_timestamp_so_far.setter
    def offset_of_max_timestamp_so_far(self, value: int) -> None:
        if self._time_state_pending:
            self._resolve_time_state()
        self._offset_of_max_ts = value

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp (ms) of the first batch (Kafka's rollingBasedTimestamp), or None."""
        if self._time_state_pending:
            self._resolve_time_state()
        return self._rolling_ts

    @rolling_based_timestamp.setter
    def rolling_based_timestamp(self, value: int | None) -> None:
        if self._time_state_pending:
            self._resolve_time_state()
        self._rolling_ts = value

    # --- appends ----------------------------------------------------------------------------
    def append(self, data, batches: list[tuple[int, int, int]], now_ms: int | None = None
               ) -> None:
        """Write `data` (one or more whole batches) at the end of the `.log`.

        `batches`: per batch `(last_offset, max_timestamp, size_in_bytes)` in order, used for
        the sparse index entries: an `.index` entry (batch last offset, batch position) and a
        `.timeindex` entry (max timestamp so far, its batch's last offset) whenever more than
        `index_interval_bytes` were written since the last entry. `now_ms`: the caller's
        clock reading (ms) for `last_modified_ms`, else `time_ms()` is read.
        """
        if self._time_state_pending:
            self._resolve_time_state()
        view = memoryview(data)
        pos = self.size
        handle = self.log_file  # held while its descriptor is used (see log_file)
        fd = handle.fd
        while view:
            n = os.pwrite(fd, view, pos)
            pos += n
            view = view[n:]
        position = self.size
        for last_offset, max_ts, size in batches:
            if max_ts > self._max_ts:
                self._max_ts = max_ts
                self._offset_of_max_ts = last_offset
            if self._rolling_ts is None:
                self._rolling_ts = max_ts
            if position == 0:
                self.tail_position, self.tail_min_offset = 0, self.base_offset
            elif self.next_offset_hint is not None:
                self.tail_position, self.tail_min_offset = position, self.next_offset_hint
            else:
                self.tail_position = self.tail_min_offset = None
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(self._max_ts, self._offset_of_max_ts)
                self.bytes_since_last_index_entry = 0
            position += size
            self.bytes_since_last_index_entry += size
            self.next_offset_hint = last_offset + 1
        self.size = position
        self.last_modified_ms = self.time_ms() if now_ms is None else now_ms

    # --- scanning ---------------------------------------------------------------------------
    def iter_headers(self, start_position: int = 0, end_position: int | None = None
                     ) -> Iterator[BatchHeader]:
        """Batch headers from `start_position` (must be a batch boundary); stops at a partial
        or malformed header (no CRC check here)."""
        end = self.size if end_position is None else end_position
        pos = start_position
        buf, buf_pos = b"", pos
        handle = None  # kept for the whole scan (see log_file)
        while pos + BATCH_HEADER_SIZE <= end:
            rel = pos - buf_pos
            if rel < 0 or rel + BATCH_HEADER_SIZE > len(buf):
                if handle is None:
                    handle = self.log_file
                buf = os.pread(handle.fd, min(_SCAN_CHUNK, end - pos), pos)
                buf_pos, rel = pos, 0
                if len(buf) < BATCH_HEADER_SIZE:
                    return
            (base, length, ple, magic, _crc, attr, lod, _bts, max_ts, pid, pepoch, bseq,
             _count) = BATCH_HEADER.unpack_from(buf, rel)
            size = length + LOG_OVERHEAD
            if magic != 2 or length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
                return
            yield BatchHeader(pos, base, size, lod, max_ts, attr, ple, pid, pepoch, bseq)
            pos += size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset >= `offset`, searching from the index entry at or
        before `offset` (or `starting_position` if later); None if there is none."""
        tail_min = self.tail_min_offset
        if tail_min is not None and offset >= tail_min:
            # fast path (a consumer at the log end): every batch before the last appended
            # one ends below `offset`, so the scan starts there without an index lookup
            pos = self.tail_position
        else:
            _, pos = self.offset_index.lookup(offset)
        for h in self.iter_headers(max(pos, starting_position)):
            if h.last_offset >= offset:
                return h
        return None

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> tuple[int, FileRecords] | None:
        """Slice from the batch holding `start_offset`: returns (batch base offset, records)
        or None when the segment has nothing at or after `start_offset`.

        At most `max_size` bytes and never past `max_position`; with `min_one_message` the
        first batch is returned whole even if larger than `max_size` (KIP-74).
        """
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        if first.position >= limit:
            return first.base_offset, FileRecords()
        size = max(max_size, first.size) if min_one_message else max_size
        length = min(limit - first.position, size)
        if length <= 0:
            return first.base_offset, FileRecords()
        return first.base_offset, FileRecords([(self.log_file, first.position, length)])

    def read_next_offset(self) -> int:
        """Offset after the last batch (base_offset when empty); scans from the last index
        entry."""
        if self.next_offset_hint is not None:
            return self.next_offset_hint
        _, pos = self.offset_index.lookup_position(self.size)
        nxt = self.base_offset
        for h in self.iter_headers(pos):
            nxt = h.last_offset + 1
        self.next_offset_hint = nxt
        return nxt

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` and offset >=
        `start_offset`, or None (Kafka's LogSegment.findOffsetByTimestamp)."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, start_offset))
        for h in self.iter_headers(pos):
            if h.max_timestamp >= timestamp and h.last_offset >= start_offset:
                batch = RecordBatch(self.read_at(h.position, h.size))
                for rec in batch:
                    if rec.timestamp >= timestamp and rec.offset >= start_offset:
                        return rec.offset, rec.timestamp
        return None

    def find_max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is the segment's largest
        (ListOffsets MAX_TIMESTAMP, KAFKA-16310: the record, not its batch's last offset), or
        None when no batch carries a timestamp. Scans from the index entry of the batch that
        holds `max_timestamp_so_far` (Kafka's UnifiedLog.fetchOffsetByTimestamp)."""
        max_ts = self.max_timestamp_so_far
        if max_ts < 0:
            return None
        _, pos = self.offset_index.lookup(self.offset_of_max_timestamp_so_far)
        for h in self.iter_headers(pos):
            if h.max_timestamp == max_ts:
                batch = RecordBatch(self.read_at(h.position, h.size))
                for rec in batch:
                    if rec.timestamp == max_ts:
                        return rec.offset, rec.timestamp
                return None
        return None

    # --- recovery ---------------------------------------------------------------------------
    def recover(self, max_batch_size: int,
                on_batch: Callable[[RecordBatch], None] | None = None) -> int:
        """Re-read the whole `.log`: CRC-check every batch, rebuild both indexes, call
        `on_batch` for each valid batch (producer state, leader epochs), and truncate at the
        first torn/corrupt/non-monotonic batch. Returns the number of bytes truncated."""
        self._time_state_pending = False
        self.offset_index.cancel_deferred_check()
        self.time_index.cancel_deferred_check()
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()  # rebuilt by `on_batch` (the Log's producer state replay)
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far = -1, self.base_offset
        self.rolling_based_timestamp = None
        handle = self.log_file
        fd = handle.fd
        file_size = os.fstat(fd).st_size
        valid = 0
        last_offset = self.base_offset - 1
        buf, buf_pos = b"", 0
        while valid + BATCH_HEADER_SIZE <= file_size:
            rel = valid - buf_pos
            if rel + BATCH_HEADER_SIZE > len(buf):
                buf = os.pread(fd, _RECOVER_CHUNK, valid)
                buf_pos, rel = valid, 0
            length = BATCH_HEADER.unpack_from(buf, rel)[1]
            size = length + LOG_OVERHEAD
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or size > max_batch_size \
                    or valid + size > file_size:
                break
            if rel + size > len(buf):
                buf = os.pread(fd, max(_RECOVER_CHUNK, size), valid)
                buf_pos, rel = valid, 0
                if len(buf) < size:
                    break
            try:
                batch = RecordBatch(buf, rel)
                batch.validate()
            except Exception:  # CorruptRecordError: bad magic, torn or bad CRC
                break
            if batch.base_offset <= last_offset or batch.base_offset < self.base_offset \
                    or batch.last_offset - self.base_offset > 0x7FFFFFFF:
                break
            last_offset = batch.last_offset
            self.size = valid
            self._index_batch(batch.last_offset, batch.max_timestamp, size, valid)
            if on_batch is not None:
                on_batch(batch)
            valid += size
        del buf
        truncated = file_size - valid
        if truncated:
            os.ftruncate(fd, valid)
        self.size = valid
        self.next_offset_hint = last_offset + 1 if last_offset >= self.base_offset \
            else self.base_offset
        self.tail_position = self.tail_min_offset = None
        return truncated

    def _index_batch(self, last_offset: int, max_ts: int, size: int, position: int) -> None:
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp_so_far = last_offset
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = max_ts
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            if self.offset_index.is_full:
                self.offset_index.resize(self.offset_index.max_entries * 8 + 8 * 1024)
            if self.time_index.is_full:
                self.time_index.resize(self.time_index.max_entries * 12 + 12 * 1024)
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def sanity_check(self, files: Container[str] | None = None) -> None:
        """Clean start: raise CorruptIndexError at once if an index file was missing (created
        empty) for a log of more than `index.interval.bytes`, or is not a whole number of
        entries (from `stat`, no file opened). An index that exists and is empty is valid: a
        log whose batches all start within `index.interval.bytes` of the last entry (one big
        batch, say) has no entry. The entry checks (`OffsetIndex.sanity_check`) run when the
        index is first mapped (lazy, as Kafka's LazyIndex); if they fail then, both indexes
        are rebuilt from the `.log` (`rebuild_indexes`). `files`: the directory's listing
        when the loader has it (the `.txnindex` is checked only if listed)."""
        for idx in (self.offset_index, self.time_index):
            if idx.created and self.size > self.index_interval_bytes:
                raise CorruptIndexError(f"{idx.path}: missing for a {self.size}-byte log")
        for idx in (self.offset_index, self.time_index):
            idx.defer_sanity_check(self.size, self._on_corrupt_index)
        txn_path = self.txn_index.path
        if os.path.basename(txn_path) in files if files is not None \
                else os.path.exists(txn_path):
            self.txn_index.sanity_check()

    def _on_corrupt_index(self, error: CorruptIndexError) -> None:
        log.warning("rebuilding the indexes of %s: %s", self.log_path, error)
        self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the `.log`'s batch headers (no CRC check: the log itself
        passed loading) and reset the time state from them."""
        for idx in (self.offset_index, self.time_index):
            idx.cancel_deferred_check()
        active = self.offset_index.writable
        self._reset_time_state()
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        for h in self.iter_headers(0):
            self._index_batch(h.last_offset, h.max_timestamp, h.size, h.position)
        self.bytes_since_last_index_entry = 0
        if not active:  # a rolled segment's indexes go back to the disk at once
            self.offset_index.trim_to_valid_size()
            self.time_index.trim_to_valid_size()

    def load_time_state(self) -> None:
        """Restore max timestamp / rolling timestamp after a clean load from the indexes
        and the batches after the last time-index entry. Deferred until one of them is
        first read (Kafka loads maxTimestampAndOffsetSoFar lazily too), so loading a log
        opens no index file."""
        self._time_state_pending = True
        self.bytes_since_last_index_entry = 0

    def _resolve_time_state(self) -> None:
        self._time_state_pending = False
        ts, off = self.time_index.last_entry
        _, pos = self.offset_index.lookup(off)
        if (ts, off) != self.time_index.last_entry:  # an index was rebuilt meanwhile
            return
        for h in self.iter_headers(pos):
            if h.max_timestamp > ts:
                ts, off = h.max_timestamp, h.last_offset
        self._max_ts, self._offset_of_max_ts = ts, off
        first = next(self.iter_headers(0), None)
        self._rolling_ts = first.max_timestamp if first else None

    # --- truncation / roll / lifecycle --------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose base offset >= `offset` (a batch containing `offset`
        stays whole unless it starts at it). Returns bytes removed."""
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        h = self.translate_offset(offset)
        if h is None:
            return 0
        cut = h.position if h.base_offset >= offset else h.position + h.size
        removed = self.size - cut
        handle = self.log_file
        os.ftruncate(handle.fd, cut)
        self.size = cut
        self.next_offset_hint = None
        self.tail_position = self.tail_min_offset = None
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        if self.time_index.entries or cut:
            self._resolve_time_state()
        else:
            self._reset_time_state()
        self.bytes_since_last_index_entry = 0
        return removed

    def _reset_time_state(self) -> None:
        self._time_state_pending = False
        self._max_ts, self._offset_of_max_ts = -1, self.base_offset
        self._rolling_ts = None

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry, then trim both indexes to their entries and
        unmap them (no descriptor held until the next read)."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def largest_timestamp(self) -> int:
        """Largest batch max timestamp, or last-modified time if none (retention.ms)."""
        return self.max_timestamp_so_far if self.max_timestamp_so_far >= 0 \
            else self.last_modified_ms

    def time_waited_for_roll(self, now: int, max_ts_in_append: int) -> int:
        """ms counted against segment.ms: the incoming batch's max timestamp minus the first
        batch's (Kafka's rollingBasedTimestamp), or wall time since creation without one."""
        base = self.rolling_based_timestamp
        if base is not None and base >= 0:
            return max_ts_in_append - base
        return now - self.created_ms

    def flush(self) -> None:
        """fsync the `.log` and flush the index maps (blocking: run in an executor)."""
        try:
            handle = self.log_file
            os.fsync(handle.fileno())
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except (OSError, ValueError):
            if not self._closed:
                raise

    def open_descriptors(self) -> int:
        """Descriptors this segment holds: its `.log` while cached, else none (indexes
        keep none)."""
        return int(self._handle is not None)

    def read_at(self, position: int, size: int) -> bytes:
        """`size` bytes of the `.log` from `position` (fewer at its end)."""
        handle = self.log_file
        return os.pread(handle.fd, size, position)

    def _close_log(self) -> None:
        self._closed = True
        h, self._handle = self._handle, None
        _CACHE.discard(self)
        if h is not None:
            h.close()

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        if self.size > self.index_interval_bytes:  # an empty index file of a segment this
            self.offset_index.create_file()  # big is valid (one big batch has no entry); a
            self.time_index.create_file()  # missing one makes the next load recover it
        self._close_log()

    def close_handlers(self) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._close_log()

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the segment's files (e.g. "" -> ".deleted")."""
        for holder in (self.offset_index, self.time_index, self.txn_index):
            holder.rename_to(holder.path[: len(holder.path) - len(old)] + new)
        new_log = self.log_path[: len(self.log_path) - len(old)] + new
        os.replace(self.log_path, new_log)
        self._prefix, self._log_suffix = new_log, ""

    def delete_files(self) -> None:
        if not self._closed:
            self.close_handlers()
        for p in (self.log_path, self.offset_index.path, self.time_index.path,
                  self.txn_index.path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def __repr__(self):
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
