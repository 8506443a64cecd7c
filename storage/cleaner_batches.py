"""Record-level work of the log cleaner: the offset map and the rewriting of batches.

Kafka's SkimpyOffsetMap and `MemoryRecords.filterTo` (Kafka docs "Log Compaction", KIP-534
for the delete horizon, KIP-98 for producer state). Pure CPU work on bytes: callable from
any thread, no shared state.

`OffsetMap`: MD5(key) (16 bytes) -> last offset of that key in the dirty section. Its
capacity counts entries as Kafka does: `dedupe buffer bytes * load factor / 24` (16-byte hash
+ 8-byte offset); the Python dict uses several times that memory.

`CleanedTransactionMetadata` follows transactions through one cleaning pass (Kafka's class
of that name, KIP-98): fed the aborted transactions of the cleaned range (from the
`.txnindex` files) and every batch in offset order, it says whether a batch may be
discarded: a data batch of an aborted transaction always; an ABORT marker once none of its
transaction's batches is left (else the marker is kept and its entry goes to the cleaned
segment's `.txnindex`); a COMMIT marker once none of its transaction's batches is left.

`filter_batch` decides, per v2 batch, what a cleaned segment keeps:
- a data batch of an aborted transaction: no record (see the last rule for empty batches);
- a transaction marker: kept; once discardable (above) it gets a delete horizon (now +
  delete.retention.ms, like a tombstone) and is dropped at the first cleaning after it;
- committed transactional data is compacted like any data (its keys are in the offset map);
- a record without key: dropped (a compacted log cannot hold one; Kafka drops it too);
- a record whose offset is below the offset map's entry for its key: dropped;
- a tombstone (null value) that is its key's latest record: kept until the batch's delete
  horizon passes. The first cleaning that keeps a tombstone in a batch without a horizon
  rebuilds the batch with `DELETE_HORIZON` (attribute bit 6) set and baseTimestamp =
  now + delete.retention.ms (KIP-534); record timestamps stay the same (their deltas are
  re-based);
- a batch that keeps all its records and needs no horizon is copied byte for byte; else it
  is rebuilt with the same baseOffset, lastOffsetDelta (so the producer's last offset is
  unchanged), partition leader epoch, producer id/epoch, base sequence, timestamp type and
  compression codec;
- a batch left with no record is dropped, unless it is the last batch of a producer still in
  the producer state: then an empty batch (recordsCount 0, 61-byte header, no compression)
  keeps its offsets and sequence numbers (Kafka's `RETAIN_EMPTY` / `writeEmptyHeader`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import crc32c

from protocol import compression
from protocol.record_builder import encode_record
from protocol.record_format import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from protocol.record_format import UINT32 as _UINT32
from protocol.records import RecordBatch

BYTES_PER_ENTRY = 24  # Kafka's SkimpyOffsetMap: 16-byte MD5 of the key + 8-byte offset


class OffsetMap:
    """MD5(key) -> latest offset, holding at most `capacity` keys (Kafka's SkimpyOffsetMap).

    `put` on a full map with a new key raises `OffsetMapFullError`; callers check `is_full`
    at segment boundaries as Kafka's buildOffsetMap does."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"offset map capacity must be >= 1, not {capacity}")
        self.capacity = capacity
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    @classmethod
    def for_buffer(cls, buffer_bytes: int, load_factor: float = 0.9) -> OffsetMap:
        """Capacity as Kafka sizes it: `buffer_bytes * load_factor / 24` entries."""
        return cls(max(1, int(buffer_bytes * load_factor) // BYTES_PER_ENTRY))

    @staticmethod
    def hash_key(key) -> bytes:
        return hashlib.md5(key).digest()

    def put(self, key, offset: int) -> None:
        h = hashlib.md5(key).digest()
        m = self._map
        if h not in m and len(m) >= self.capacity:
            raise OffsetMapFullError(f"offset map full ({self.capacity} keys)")
        m[h] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def get(self, key) -> int:
        """Latest offset of `key`, or -1."""
        return self._map.get(hashlib.md5(key).digest(), -1)

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.capacity

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1


class OffsetMapFullError(Exception):
    """More distinct keys than the dedupe buffer holds."""


def iter_file_batches(fd: int, start: int, end: int, chunk_bytes: int
                      ) -> Iterator[tuple[int, RecordBatch]]:
    """(position, RecordBatch) of each whole v2 batch in `fd[start:end]`, read in chunks of
    `chunk_bytes` (log.cleaner.io.buffer.size; grown for a larger batch). Stops at a torn
    tail. CRCs are not checked (segments were validated when appended or recovered)."""
    pos = start
    chunk_bytes = max(chunk_bytes, BATCH_HEADER_SIZE)
    while pos + BATCH_HEADER_SIZE <= end:
        buf = os.pread(fd, min(chunk_bytes, end - pos), pos)
        rel = 0
        progressed = False
        while rel + BATCH_HEADER_SIZE <= len(buf):
            length = BATCH_HEADER.unpack_from(buf, rel)[1]
            size = length + LOG_OVERHEAD
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + rel + size > end:
                return
            if rel + size > len(buf):
                if rel == 0:  # one batch larger than the chunk: read it alone
                    buf = os.pread(fd, size, pos)
                    if len(buf) < size:
                        return
                    yield pos, RecordBatch(buf, 0)
                    rel = size
                    progressed = True
                break
            yield pos + rel, RecordBatch(buf, rel)
            rel += size
            progressed = True
        if not progressed:
            return
        pos += rel


def add_batch_to_map(batch: RecordBatch, offset_map: OffsetMap, start_offset: int) -> None:
    """Enter the keys of a data batch's records at or after `start_offset` (control
    batches are skipped; the caller skips batches of aborted transactions)."""
    if batch.attributes & CONTROL_MASK or batch.last_offset < start_offset:
        return
    for rec in batch.iter_records():
        if rec.key is not None and rec.offset >= start_offset:
            offset_map.put(rec.key, rec.offset)


def filter_batch(batch: RecordBatch, offset_map: OffsetMap, now_ms: int,
                 delete_retention_ms: int, retain_empty: bool, discard: bool = False):
    """What a cleaned segment keeps of `batch`: its original bytes (a memoryview), new
    bytes, or None (dropped). `discard`: `CleanedTransactionMetadata`'s verdict on the batch.
    Rules in the module docstring."""
    if batch.attributes & CONTROL_MASK:
        if not discard or batch.record_count == 0:
            return batch.buffer if batch.record_count or retain_empty else None
        if not batch.has_delete_horizon:  # start the marker's delete retention
            return build_retained_batch(batch, list(batch.iter_records()),
                                        now_ms + delete_retention_ms)
        if now_ms < batch.base_timestamp:
            return batch.buffer
        return build_empty_batch(batch) if retain_empty else None
    if discard:  # a batch of an aborted transaction
        if retain_empty:
            return batch.buffer if batch.record_count == 0 else build_empty_batch(batch)
        return None
    if batch.record_count == 0:  # left empty by an earlier cleaning
        return batch.buffer if retain_empty else None
    horizon = batch.base_timestamp if batch.has_delete_horizon else None
    retain_deletes = horizon is None or now_ms < horizon
    kept = []
    tombstones = False
    total = 0
    for rec in batch.iter_records():
        total += 1
        if rec.key is None or rec.offset < offset_map.get(rec.key):
            continue
        if rec.value is None:
            if not retain_deletes:
                continue
            tombstones = True
        kept.append(rec)
    if tombstones and horizon is None:
        horizon = now_ms + delete_retention_ms
    elif len(kept) == total:
        return batch.buffer
    if kept:
        return build_retained_batch(batch, kept, horizon)
    if retain_empty:
        return build_empty_batch(batch)
    return None


def _finish(out: bytearray) -> bytes:
    _UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def build_retained_batch(batch: RecordBatch, records: list, delete_horizon_ms: int | None
                         ) -> bytes:
    """A v2 batch holding `records` (a subset of `batch`'s, with their original offsets,
    timestamps, headers and attributes) with `batch`'s header fields and codec; with
    `delete_horizon_ms` the DELETE_HORIZON bit is set and baseTimestamp holds it."""
    log_append = batch.timestamp_type == LOG_APPEND_TIME
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    else:
        base_ts = records[0].timestamp
    max_ts = batch.max_timestamp if log_append else max(r.timestamp for r in records)
    body = bytearray()
    for r in records:
        body += encode_record(r.offset - batch.base_offset, r.timestamp - base_ts, r.key,
                              r.value, r.headers, r.attributes)
    codec = batch.compression_type
    payload = compression.compress(codec, body) if codec else body
    attributes = batch.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK
                                     | TRANSACTIONAL_MASK | CONTROL_MASK)
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    out = bytearray(BATCH_HEADER_SIZE + len(payload))
    BATCH_HEADER.pack_into(out, 0, batch.base_offset, len(out) - LOG_OVERHEAD,
                           batch.partition_leader_epoch, MAGIC_V2, 0, attributes,
                           batch.last_offset_delta, base_ts, max_ts, batch.producer_id,
                           batch.producer_epoch, batch.base_sequence, len(records))
    out[BATCH_HEADER_SIZE:] = payload
    return _finish(out)


def build_empty_batch(batch: RecordBatch) -> bytes:
    """A record-less batch keeping `batch`'s offsets, producer id/epoch and sequence range
    (61 bytes, uncompressed; timestamps = its max timestamp)."""
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    out = bytearray(BATCH_HEADER_SIZE)
    BATCH_HEADER.pack_into(out, 0, batch.base_offset, BATCH_HEADER_SIZE - LOG_OVERHEAD,
                           batch.partition_leader_epoch, MAGIC_V2, 0, attributes,
                           batch.last_offset_delta, batch.max_timestamp, batch.max_timestamp,
                           batch.producer_id, batch.producer_epoch, batch.base_sequence, 0)
    return _finish(out)


class CleanedTransactionMetadata:
    """Transactions across one cleaning pass (see the module docstring). `aborted`: the
    AbortedTxn entries (storage.transaction_index) of the cleaned range; feed every batch in
    offset order to `on_batch` / `on_control_batch`; `cleaned_index` is the TransactionIndex
    of the segment being written (ABORT markers kept re-enter it)."""

    def __init__(self, aborted=()) -> None:
        self.pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, data seen?]
        self.cleaned_index = None

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._next < len(self.pending) and self.pending[self._next].first_offset <= offset:
            txn = self.pending[self._next]
            self._next += 1
            self.ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, batch) -> bool:
        """A data batch: True if it belongs to an aborted transaction (discard it)."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.attributes & TRANSACTIONAL_MASK:
            return False
        aborted = self.ongoing_aborted.get(batch.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False

    def on_control_batch(self, batch) -> bool:
        """A marker: True if it may be discarded (its transaction has no batch left)."""
        self._consume_aborted_up_to(batch.last_offset)
        if batch.record_count == 0:
            return True
        try:
            marker = batch.control_record()
        except Exception:  # noqa: BLE001 - an unreadable marker is kept
            return False
        pid = batch.producer_id
        if not marker.is_commit:
            aborted = self.ongoing_aborted.pop(pid, None)
            if aborted is not None and aborted[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborted[0])
                return False
            return True
        if pid in self.ongoing_committed:
            self.ongoing_committed.discard(pid)
            return False
        return True

    def on(self, batch) -> bool:
        if batch.attributes & CONTROL_MASK:
            return self.on_control_batch(batch)
        return self.on_batch(batch)
