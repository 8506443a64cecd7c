"""The storage layer's bounded set of open file descriptors (one process-wide instance).

Kafka holds one descriptor per segment and maps its indexes (a Java mapping keeps no
descriptor), so a broker needs `ulimit -n` above its segment count. Here the only descriptor
the log keeps between calls is a segment's open `.log` (`storage.segment.LogSegment`;
indexes keep none, see `storage.index`), and every one of them is an entry of the
`DescriptorCache`: past `capacity` the least recently used segment is asked to `release()`
it (second-chance order: a segment used since the eviction pass last looked at it is skipped
once), so a broker hosts any number of partitions within its RLIMIT_NOFILE; the next read
or write reopens the file.

The broker sizes the cache at start (`configure_for_limit`): the soft RLIMIT_NOFILE minus a
reserve kept free for connections, the acceptor, ZooKeeper, checkpoints and log rolls
(`reserve_for(limit)`: a quarter of the limit, at least 64 and at most 4,096). Opening a
file that fails with EMFILE/ENFILE releases a batch of idle segments' descriptors and
retries once (`open_with_retry`), so a burst of connections does not fail an append while
the cache holds descriptors it can give back.

A released descriptor closes when the last reference goes: a `FileHandle` that a fetch
response still holds (`FileRecords`, sent with `sendfile` later) stays open until it is
sent, so a descriptor number is never reused under a reader. Thread-safe (the log cleaner
and the flush executor use segments from other threads).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
#: holders released at once when an open() fails with EMFILE/ENFILE
EMERGENCY_RELEASE = 64


class Holder(Protocol):
    """Something holding descriptors: `release(blocking)` gives them back (True if it did),
    `holds_descriptor()` tells whether it still holds one; `_used` is set on each use (the
    second chance)."""

    _used: bool

    def release(self, blocking: bool = True) -> bool: ...

    def holds_descriptor(self) -> bool: ...


class FileHandle:
    """An open descriptor (`os.open`), closed by `close()` or when the last reference goes.
    `fileno()` raises ValueError once closed (as a closed file object does), so a late
    reader fails cleanly instead of touching a reused descriptor number."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str, flags: int = os.O_RDWR | os.O_CREAT) -> None:
        self.path = path
        self.fd = -1
        self.fd = open_with_retry(path, flags)

    def fileno(self) -> int:
        fd = self.fd
        if fd < 0:
            raise ValueError(f"I/O operation on closed file {self.path}")
        return fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"FileHandle({self.path!r}, fd={self.fd})"


class DescriptorCache:
    """LRU (second chance) of descriptor holders, bounded by `capacity` holders."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._lru: OrderedDict[int, Holder] = OrderedDict()
        self._lock = threading.Lock()
        self.released = 0  # holders released by the bound so far
        self.emergency_releases = 0  # open() calls that failed with EMFILE/ENFILE

    @property
    def limit(self) -> int:  # the older name of `capacity`
        return self.capacity

    @limit.setter
    def limit(self, value: int) -> None:
        self.capacity = value

    def add(self, holder: Holder) -> None:
        """`holder` now holds a descriptor: track it and release others past capacity."""
        with self._lock:
            self._lru[id(holder)] = holder
            self._lru.move_to_end(id(holder))
            self._shrink_locked(self.capacity, keep=holder)

    def discard(self, holder: Holder) -> None:
        with self._lock:
            self._lru.pop(id(holder), None)

    def release_idle(self, count: int) -> int:
        """Release up to `count` holders (least recently used first); returns how many."""
        with self._lock:
            return self._shrink_locked(max(0, len(self._lru) - count), keep=None)

    def _shrink_locked(self, target: int, keep: Holder | None) -> int:
        released = 0
        budget = 2 * len(self._lru)
        while len(self._lru) > target and budget > 0:
            budget -= 1
            key, victim = self._lru.popitem(last=False)
            if victim is keep or victim._used:
                victim._used = False
                self._lru[key] = victim
                continue
            if victim.release(blocking=False):
                released += 1
            elif victim.holds_descriptor():
                self._lru[key] = victim  # busy on another thread: try again later
        self.released += released
        return released

    def __len__(self) -> int:
        with self._lock:
            return len(self._lru)


_CACHE = DescriptorCache()


def descriptor_cache() -> DescriptorCache:
    """The process-wide cache (set `.capacity` to change the bound)."""
    return _CACHE


def reserve_for(limit: int) -> int:
    """Descriptors kept out of the cache for connections, ZooKeeper, the acceptor, rolls."""
    return min(4096, max(64, limit // 4))


def configure_for_limit(limit: int | None = None) -> int:
    """Size the cache from RLIMIT_NOFILE's soft limit (read now unless given); returns the
    capacity. An unlimited soft limit leaves 1,000,000."""
    if limit is None:
        try:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            if limit == resource.RLIM_INFINITY:
                limit = 1_000_000
        except (ImportError, ValueError, OSError):
            limit = 1024
    _CACHE.capacity = max(16, limit - reserve_for(limit))
    return _CACHE.capacity


def open_with_retry(path: str, flags: int, mode: int = 0o644) -> int:
    """`os.open` that, on EMFILE/ENFILE, releases a batch of idle cached descriptors and
    tries once more (then raises the OSError)."""
    flags |= getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, mode)
    except OSError as e:
        if e.errno not in _OUT_OF_DESCRIPTORS:
            raise
        _CACHE.emergency_releases += 1
        if not _CACHE.release_idle(EMERGENCY_RELEASE):
            raise
        return os.open(path, flags, mode)
