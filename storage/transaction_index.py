"""`TransactionIndex`: a segment's `.txnindex`, the aborted transactions whose ABORT marker
lies in that segment (Kafka's TransactionIndex / AbortedTxn, KIP-98).

File `<20-digit base offset>.txnindex`, created on the first entry (a segment without aborted
transactions has none). A sequence of fixed 34-byte big-endian entries, in increasing
`last_offset` order, never preallocated::

    version            int16   0
    producer_id        int64   the aborting producer
    first_offset       int64   offset of the producer's first batch in the transaction
    last_offset        int64   offset of the ABORT marker (in this segment)
    last_stable_offset int64   the partition's LSO right after the marker: the first offset
                               of the next still-open transaction, else last_offset + 1

A READ_COMMITTED fetch starting at `o` collects, from the segment holding `o` onwards, every
entry with `last_offset >= o` and `first_offset < upper bound`; it stops at the first entry
whose `last_stable_offset >= upper bound` (no earlier open transaction can reach further).

Only the owning `LogSegment` / `Log` call it (loop thread; `flush` may run in an executor).
Entries are read once (lazily) and kept in memory; appends go to both. A partial trailing
entry (a torn write) is ignored and cut at the next append; `sanity_check` raises
`CorruptIndexError` for an unknown version or an entry before the segment's base offset, so
the loader rebuilds the index from the `.log`.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from storage.index import CorruptIndexError

__all__ = ["AbortedTxn", "TransactionIndex", "TXN_INDEX_SUFFIX", "ENTRY", "read_entries"]

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
ENTRY_SIZE = ENTRY.size  # 34
CURRENT_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def encode(self) -> bytes:
        return ENTRY.pack(self.version, self.producer_id, self.first_offset,
                          self.last_offset, self.last_stable_offset)


def read_entries(data: bytes) -> list[AbortedTxn]:
    """Decode whole entries of a `.txnindex` image (a partial tail is ignored)."""
    n = len(data) // ENTRY_SIZE
    out = []
    for i in range(n):
        version, pid, first, last, lso = ENTRY.unpack_from(data, i * ENTRY_SIZE)
        out.append(AbortedTxn(pid, first, last, lso, version))
    return out


class TransactionIndex:
    """The aborted-transaction index of the segment starting at `start_offset`."""

    __slots__ = ("_path", "_suffix", "start_offset", "_entries", "_size")

    def __init__(self, path: str, start_offset: int, *, suffix: str = "") -> None:
        """The index file `path + suffix` (two shared strings, joined on use)."""
        self._path = path
        self._suffix = suffix
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self._size = 0  # bytes of whole entries on disk (once loaded)

    @property
    def path(self) -> str:
        """The index file's path."""
        return self._path + self._suffix

    # --- reading ---------------------------------------------------------------------------
    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._entries = read_entries(data)
            self._size = len(self._entries) * ENTRY_SIZE
        return self._entries

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in order (a copy)."""
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    @property
    def last_offset(self) -> int | None:
        e = self._load()
        return e[-1].last_offset if e else None

    def collect(self, fetch_offset: int, upper_bound_offset: int
                ) -> tuple[list[AbortedTxn], bool]:
        """(entries overlapping [fetch_offset, upper_bound_offset), search complete?)."""
        found = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """CorruptIndexError for an unknown entry version or an entry whose marker offset is
        below the segment's base offset (Kafka's check), or offsets going backwards."""
        prev = None
        for txn in self._load():
            if txn.version != CURRENT_VERSION:
                raise CorruptIndexError(f"unknown aborted transaction version {txn.version} "
                                        f"in {self.path}")
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(f"last offset {txn.last_offset} of an aborted "
                                        f"transaction in {self.path} is below the start offset "
                                        f"{self.start_offset}")
            if prev is not None and txn.last_offset <= prev:
                raise CorruptIndexError(f"aborted transaction offsets go backwards in {self.path}")
            prev = txn.last_offset

    # --- writing ---------------------------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its `last_offset` must exceed the previous one's (ValueError)."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"aborted transaction at {txn.last_offset} is not after "
                             f"{entries[-1].last_offset} in {self.path}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, txn.encode(), self._size)
            if os.fstat(fd).st_size > self._size + ENTRY_SIZE:
                os.ftruncate(fd, self._size + ENTRY_SIZE)  # drop a torn tail
        finally:
            os.close(fd)
        self._size += ENTRY_SIZE
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset`."""
        entries = self._load()
        keep = 0
        while keep < len(entries) and entries[keep].last_offset < offset:
            keep += 1
        if keep == len(entries):
            return
        del entries[keep:]
        self._size = keep * ENTRY_SIZE
        self._truncate_file(self._size)

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them)."""
        self._entries = []
        self._size = 0
        self._truncate_file(0)

    def _truncate_file(self, size: int) -> None:
        try:
            os.truncate(self.path, size)
        except FileNotFoundError:
            pass

    def flush(self) -> None:
        """fsync the file if it exists (blocking)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename_to(self, path: str) -> None:
        try:
            os.replace(self.path, path)
        except FileNotFoundError:
            pass
        self._path, self._suffix = path, ""

    def delete_if_exists(self) -> bool:
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path}, entries={len(self._entries or ())})"
