"""Replacing segments by their cleaned copy, and finishing an interrupted replacement.

The protocol (Kafka's `LocalLog.replaceSegments` and `LogLoader`'s swap handling)::

    1. the cleaner writes   <base>.log.cleaned  (+ .index.cleaned, .timeindex.cleaned and
                            .txnindex.cleaned when it keeps aborted transactions), fsyncs
    2. rename               *.cleaned -> *.swap          (the copy is now complete and chosen)
    3. rename old segments  <b>.log -> <b>.log.deleted   (unlinked after file.delete.delay.ms)
    4. rename               *.swap -> plain names        (the new segment is live)

A crash before 2 leaves `.cleaned` files: loading deletes them (the old segments are intact).
A crash after 2 leaves `.swap` files: loading deletes every plain segment whose base offset
lies in [swap base offset, swap next offset) (`.deleted` files go anyway) and renames the
`.swap` files to their plain names, completing the replacement. As with Kafka, an old segment
of the group whose batches were all removed, placed after the swap's next offset, survives
such a crash (its records are older duplicates, not lost data).

`replace_segments` runs on the thread that owns the `Log` (the event loop); the renames are
metadata operations only (the data was fsynced by the cleaner).
"""

from __future__ import annotations

import os
from typing import Protocol

from protocol.record_format import BATCH_HEADER, BATCH_HEADER_SIZE, LOG_OVERHEAD
from storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from storage.transaction_index import TXN_INDEX_SUFFIX

__all__ = ["SegmentOwner", "complete_interrupted_swaps", "replace_segments",
           "segments_unchanged"]


class SegmentOwner(Protocol):
    """What the swap uses of the `storage.log.Log` whose segments it replaces (the log is
    passed in; this module never imports it): its segment list (base offset order), the
    active (last) segment, and the Log's own segment list edits: `_add_segment`,
    `_remove_segments` (from the list only) and `_delete_segment_files` (rename to
    `.deleted`, unlinked after `file.delete.delay.ms`)."""

    segments: list[LogSegment]

    @property
    def active_segment(self) -> LogSegment: ...

    def _add_segment(self, seg: LogSegment) -> None: ...

    def _remove_segments(self, segs: list[LogSegment]) -> None: ...

    def _delete_segment_files(self, segs: list[LogSegment]) -> None: ...


def segments_unchanged(log: SegmentOwner, segments: list[LogSegment], sizes: list[int]
                       ) -> bool:
    """True when `segments` are still all the log's, none active, their sizes unchanged (no
    truncation, retention or DeleteRecords since the cleaner measured them)."""
    present = {id(s) for s in log.segments}
    return not (any(id(s) not in present for s in segments) or log.active_segment in segments
                or any(s.size != n for s, n in zip(segments, sizes, strict=True)))


def replace_segments(log: SegmentOwner, new: LogSegment, old: list[LogSegment],
                     old_sizes: list[int]) -> bool:
    """Swap `new` (files `*.cleaned`) in for `old` if `segments_unchanged(log, old,
    old_sizes)`; returns False (nothing changed) otherwise."""
    if not segments_unchanged(log, old, old_sizes):
        return False
    new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
    log._remove_segments(old)
    log._delete_segment_files(old)  # renamed .deleted now, unlinked after the delay
    new.change_suffix(SWAP_SUFFIX, "")
    log._add_segment(new)
    return True


def _next_offset(path: str, base: int) -> int:
    """Offset after the last whole batch of a `.log` file (`base` when empty)."""
    nxt = base
    with open(path, "rb") as f:
        pos, size = 0, os.fstat(f.fileno()).st_size
        while pos + BATCH_HEADER_SIZE <= size:
            head = os.pread(f.fileno(), BATCH_HEADER_SIZE, pos)
            fields = BATCH_HEADER.unpack(head)
            length, lod = fields[1], fields[6]
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + length + LOG_OVERHEAD > size:
                break
            nxt = fields[0] + lod + 1
            pos += length + LOG_OVERHEAD
    return nxt


def complete_interrupted_swaps(dir_path: str, names: list[str] | None = None) -> int:
    """Finish every replacement that reached step 2 (see the module docstring): blocking,
    called by the loader before it removes leftovers (`names`: the dir's listing, when the
    caller has one). Returns the number of swaps done."""
    if names is None:
        names = os.listdir(dir_path)
    swaps = sorted(int(n[:20]) for n in names
                   if n.endswith(LOG_SUFFIX + SWAP_SUFFIX) and n[:20].isdigit() and len(n) == 29)
    for base in swaps:
        prefix = os.path.join(dir_path, f"{base:020d}")
        end = _next_offset(prefix + LOG_SUFFIX + SWAP_SUFFIX, base)
        for name in os.listdir(dir_path):
            stem, ext = os.path.splitext(name)
            if ext == LOG_SUFFIX and len(stem) == 20 and stem.isdigit() \
                    and base <= int(stem) < max(end, base + 1):
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    try:
                        os.unlink(os.path.join(dir_path, stem + suffix))
                    except FileNotFoundError:
                        pass
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):  # .log last
            src = prefix + suffix + SWAP_SUFFIX
            if os.path.exists(src):
                os.replace(src, prefix + suffix)
            elif suffix != LOG_SUFFIX:
                try:  # a stale index of the replaced segment: rebuilt from the .log
                    os.unlink(prefix + suffix)
                except FileNotFoundError:
                    pass
    return len(swaps)
