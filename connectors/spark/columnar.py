"""Fetched record batches -> Arrow columns of the source schema, whole batches at a time.

A Fetch response carries a partition's records as the log stores them: record batches
(magic v2, Kafka docs "Record Batch"), each a 61-byte header and ``recordsCount`` records,
compressed as one block. Here each batch header is read once and each compressed block
decompressed once; the records of all batches of a response are then decoded together with
numpy, one vectorised step per field for every record at once, instead of one Python object
per record. A record (Kafka docs §5.3.2) is::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)*

(all varints zigzag-encoded, lengths -1 meaning null). Only the walk from one record to the
next is a Python loop (it follows each record's length); the fields are then read at all
record positions at once. Key, value and header byte strings are never copied one by one:
Arrow "binary view" arrays point into the decoded buffer, and one cast to ``binary`` copies
them into Spark's layout in C.

Transactions (KIP-98): with ``read_committed`` the batches of aborted transactions are
dropped using the response's ``aborted_transactions`` list, as Kafka's consumer does, and
control batches (commit/abort markers) never become rows. Magic v0/v1 message sets (topics
written by very old clients) are decoded record by record with
:func:`protocol.legacy_records.iter_legacy_messages`.

Errors: malformed batches or records raise :class:`protocol.records.CorruptRecordError`.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from protocol.record_format import (
    CONTROL_ABORT,
    LOG_APPEND_TIME,
    MAGIC_OFFSET,
    CorruptRecordError,
    read_varint,
)
from protocol.records import RecordBatch

_PAD = bytes(16)  # so that vectorised reads a few bytes past a record stay inside the buffer
_LEGACY_SIZE = struct.Struct(">qi")  # offset, message size (v0/v1 message set entry)
_MAX_REGION = (1 << 31) - 1 - len(_PAD)  # binary view offsets are int32
_TS = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


@dataclass
class Chunk:
    """What one fetched records blob gave: the rows (``None`` if no record is in range) and
    ``next_offset``, the offset after the last complete batch seen (the next fetch offset;
    may lie past records dropped as control, aborted or compacted)."""

    rows: pa.RecordBatch | None
    next_offset: int


class ColumnDecoder:
    """Decodes the record blobs of one topic-partition into Arrow record batches.

    ``read_committed`` drops aborted transactions (needs the response's aborted list);
    ``include_headers`` adds the ``headers`` column. One decoder per partition read: it
    keeps the set of producers whose transaction is being aborted across responses.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool,
                 read_committed: bool, schema: pa.Schema, check_crcs: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.read_committed = read_committed
        self.schema = schema
        self.check_crcs = check_crcs
        self._aborted_producers: set[int] = set()

    # -- batches ----------------------------------------------------------------------------
    def decode(self, blob, fetch_offset: int, until_offset: int,
               aborted: list[tuple[int, int]] | None = None) -> Chunk:
        """Rows with offsets in ``[fetch_offset, until_offset)`` from ``blob`` (a Fetch
        partition's ``records``; a partial batch at its end is ignored).

        ``aborted`` is the response's ``aborted_transactions`` as (producer id, first
        offset) pairs (read_committed only).
        """
        mv = blob if isinstance(blob, memoryview) else memoryview(blob)
        pending = sorted(aborted or [], key=lambda a: a[1])
        heapq.heapify(pending)
        payloads: list = []
        meta: list[tuple[int, int, int, int, int]] = []  # count, base off, base ts, type, max ts
        legacy: list = []
        next_offset = fetch_offset
        pos, end = 0, len(mv)
        while end - pos >= MAGIC_OFFSET + 1 and next_offset < until_offset:
            magic = mv[pos + MAGIC_OFFSET]
            if magic < 2:
                base, size = _LEGACY_SIZE.unpack_from(mv, pos)
                stop = pos + 12 + size
                if size < 0 or stop > end:
                    break  # partial message at the end of the response
                if payloads:
                    raise CorruptRecordError("v0/v1 messages mixed with v2 batches in one "
                                             "response")
                legacy.append(mv[pos:stop])
                pos = stop
                next_offset = max(next_offset, base + 1)
                continue
            if end - pos < 61:
                break
            (length,) = struct.unpack_from(">i", mv, pos + 8)
            if length >= 0 and pos + 12 + length > end:
                break  # partial batch: the next fetch starts with it
            batch = RecordBatch(mv, pos)
            pos += batch.size_in_bytes
            if self.check_crcs:
                batch.validate()
            last = batch.last_offset
            if last < fetch_offset:
                continue
            next_offset = last + 1
            if self.read_committed:
                while pending and pending[0][1] <= last:
                    self._aborted_producers.add(heapq.heappop(pending)[0])
                if batch.is_control:
                    if (batch.producer_id in self._aborted_producers
                            and batch.control_record().type == CONTROL_ABORT):
                        self._aborted_producers.discard(batch.producer_id)
                    continue
                if batch.is_transactional and batch.producer_id in self._aborted_producers:
                    continue
            if batch.is_control or batch.record_count <= 0:
                continue
            payloads.append(batch.records_payload())
            ts_type = 1 if batch.timestamp_type == LOG_APPEND_TIME else 0
            meta.append((batch.record_count, batch.base_offset, batch.base_timestamp, ts_type,
                         batch.max_timestamp))
        if legacy:
            return Chunk(self._legacy(legacy, fetch_offset, until_offset), next_offset)
        if not payloads:
            return Chunk(None, next_offset)
        return Chunk(self._records(payloads, meta, fetch_offset, until_offset), next_offset)

    # -- records ----------------------------------------------------------------------------
    def _records(self, payloads: list, meta: list, lo_offset: int,
                 hi_offset: int) -> pa.RecordBatch | None:
        region = b"".join(payloads)
        size = len(region)
        if size > _MAX_REGION:
            raise CorruptRecordError(f"{size} bytes of records in one response (max 2 GiB)")
        counts = np.array([m[0] for m in meta], np.int64)
        n = int(counts.sum())
        starts = record_starts(region, n)
        if starts[-1] != size:
            raise CorruptRecordError("record lengths do not add up to the batches' size")
        buf = _Bytes(region + _PAD)
        begin = starts[:-1]
        ends = starts[1:]
        length, body = _varints(buf, begin, 5)
        if not np.array_equal(body + length, ends) or (length <= 0).any():
            raise CorruptRecordError("record length does not match its fields")
        p = body + 1  # attributes (unused)
        ts_delta, p = _varints(buf, p, 10)
        off_delta, p = _varints(buf, p, 5)
        offsets = np.repeat(np.array([m[1] for m in meta], np.int64), counts) + off_delta
        # Records outside [lo, hi): the first batch may start before the fetch offset, the
        # last may run past the range's end. Offsets increase within a partition.
        lo = int(np.searchsorted(offsets, lo_offset, "left"))
        hi = int(np.searchsorted(offsets, hi_offset, "left"))
        if lo >= hi:
            return None
        sel = slice(lo, hi)
        p, ts_delta, offsets, ends = p[sel], ts_delta[sel], offsets[sel], ends[sel]
        rows = hi - lo
        key_len, p = _varints(buf, p, 5)
        key_pos = p
        p = p + np.maximum(key_len, 0)
        val_len, p = _varints(buf, p, 5)
        val_pos = p
        p = p + np.maximum(val_len, 0)
        if (key_len < -1).any() or (val_len < -1).any():
            raise CorruptRecordError("negative key or value length")
        header_count, p = _varints(buf, p, 5)
        if (header_count < 0).any():
            raise CorruptRecordError("negative header count")
        if self.include_headers:
            headers, p = self._headers(buf, p, header_count)
            fits = np.array_equal(p, ends)
        else:
            fits = bool((p <= ends).all())
        if not fits:
            raise CorruptRecordError("record fields do not end where the record does")

        ts_type = np.repeat(np.array([m[3] for m in meta], np.int32), counts)[sel]
        base_ts = np.repeat(np.array([m[2] for m in meta], np.int64), counts)[sel]
        max_ts = np.repeat(np.array([m[4] for m in meta], np.int64), counts)[sel]
        ts_ms = np.where(ts_type == 1, max_ts, base_ts + ts_delta)
        columns = [
            _binary(buf, key_pos, key_len),
            _binary(buf, val_pos, val_len),
            self._constant("topic", rows),
            self._constant("partition", rows),
            pa.array(offsets, pa.int64()),
            pa.Array.from_buffers(_TS, rows, [None, pa.py_buffer(ts_ms * 1000)]),
            pa.array(ts_type, pa.int32()),
        ]
        if self.include_headers:
            columns.append(headers)
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _headers(self, buf: _Bytes, p: np.ndarray, count: np.ndarray):
        """Decode every record's headers; returns (list<struct> array, positions after)."""
        total = int(count.sum())
        list_offsets = np.zeros(len(count) + 1, np.int32)
        np.cumsum(count, out=list_offsets[1:])
        key_pos = np.zeros(total, np.int64)
        key_len = np.zeros(total, np.int64)
        val_pos = np.zeros(total, np.int64)
        val_len = np.zeros(total, np.int64)
        p = p.copy()
        j = 0
        rows = np.nonzero(count > 0)[0]
        while rows.size:
            q = p[rows]
            kl, q = _varints(buf, q, 5)
            if (kl < 0).any():
                raise CorruptRecordError("null or negative header key length")
            slot = list_offsets[rows] + j
            key_pos[slot], key_len[slot] = q, kl
            q = q + kl
            vl, q = _varints(buf, q, 5)
            if (vl < -1).any():
                raise CorruptRecordError("negative header value length")
            val_pos[slot], val_len[slot] = q, vl
            p[rows] = q + np.maximum(vl, 0)
            j += 1
            rows = rows[count[rows] > j]
        keys = _binary(buf, key_pos, key_len)
        try:
            keys = keys.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: decoded with U+FFFD, as Java's String does
            keys = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()],
                            pa.string())
        values = _binary(buf, val_pos, val_len)
        structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
        mask = pa.array(count == 0)
        headers = pa.ListArray.from_arrays(pa.array(list_offsets), structs,
                                           type=pa.list_(HEADER_TYPE), mask=mask)
        return headers, p

    def _legacy(self, entries: list, lo_offset: int, hi_offset: int) -> pa.RecordBatch | None:
        """Magic v0/v1 messages, one Python object each (old formats only)."""
        from protocol.legacy_records import iter_legacy_messages

        cols: dict[str, list] = {k: [] for k in ("key", "value", "offset", "ts", "type")}
        for entry in entries:
            for m in iter_legacy_messages(entry, verify_crc=self.check_crcs):
                if not lo_offset <= m.offset < hi_offset:
                    continue
                cols["key"].append(m.key)
                cols["value"].append(m.value)
                cols["offset"].append(m.offset)
                has_ts = m.magic > 0 and m.timestamp >= 0
                cols["ts"].append(m.timestamp * 1000 if has_ts else None)
                cols["type"].append((1 if m.timestamp_type == LOG_APPEND_TIME else 0)
                                    if has_ts else -1)
        rows = len(cols["offset"])
        if not rows:
            return None
        columns = [pa.array(cols["key"], pa.binary()), pa.array(cols["value"], pa.binary()),
                   self._constant("topic", rows), self._constant("partition", rows),
                   pa.array(cols["offset"], pa.int64()), pa.array(cols["ts"], _TS),
                   pa.array(cols["type"], pa.int32())]
        if self.include_headers:
            columns.append(pa.nulls(rows, pa.list_(HEADER_TYPE)))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _constant(self, name: str, rows: int) -> pa.Array:
        """The topic or partition column: one value repeated ``rows`` times."""
        if name == "partition":
            return pa.array(np.full(rows, self.partition, np.int32))
        encoded = self.topic.encode()
        offsets = np.arange(0, (rows + 1) * len(encoded), len(encoded), dtype=np.int32)
        return pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(offsets),
                                                         pa.py_buffer(encoded * rows)])


def record_starts(region: bytes, count: int) -> np.ndarray:
    """Byte positions of the ``count`` records in ``region`` and the position after the
    last (``count + 1`` values), following each record's length varint.

    Only the length is decoded here (one- and two-byte varints inline, the rest with
    :func:`protocol.records.read_varint`); negative lengths are caught by the caller, which
    decodes the lengths again and checks them against these positions.
    """
    out = [0] * (count + 1)
    pos = 0
    try:
        for i in range(count):
            out[i] = pos
            b = region[pos]
            if b < 0x80:
                pos += 1 + (b >> 1)
            else:
                c = region[pos + 1]
                if c < 0x80:
                    pos += 2 + (((b & 0x7F) | (c << 7)) >> 1)
                else:
                    length, pos = read_varint(region, pos, 5)
                    pos += max(length, 0)
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    if pos > len(region):
        raise CorruptRecordError("record runs past the end of its batch")
    out[count] = pos
    return np.array(out, np.int64)


class _Bytes:
    """A records buffer (with 16 zero bytes of padding) and unaligned little-endian
    uint64/uint32 views of it at every byte position, for vectorised reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.u8 = np.frombuffer(data, np.uint8)
        self.u64 = np.ndarray((len(data) - 7,), "<u8", buffer=data, strides=(1,))
        self.u32 = np.ndarray((len(data) - 3,), "<u4", buffer=data, strides=(1,))


_U = np.uint64
_HIGH_BITS = _U(0x8080808080808080)
_LOW7 = _U(0x7F7F7F7F7F7F7F7F)
_PAIRS = (_U(0x007F007F007F007F), _U(0x7F007F007F007F00), _U(1))
_QUADS = (_U(0x00003FFF00003FFF), _U(0x3FFF00003FFF0000), _U(2))
_OCTS = (_U(0x000000000FFFFFFF), _U(0x0FFFFFFF00000000), _U(4))


def _varints(b: _Bytes, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at every position of ``pos`` at once: (values int64, positions after).

    Each position's next 8 bytes are read as one little-endian word; the first byte with
    its high bit clear ends the varint (its width is the number of high bits left after
    masking the word up to that byte), and the 7-bit groups are packed together with three
    shift-and-mask steps. Varints longer than 8 bytes (values >= 2**55, rare) are decoded
    one by one.
    """
    try:
        word = b.u64[pos]
    except IndexError:
        raise CorruptRecordError("record field runs past the end of the records") from None
    stop = ~word & _HIGH_BITS
    last = stop & (_U(0) - stop)  # the lowest stop bit: bit 7 of the varint's last byte
    mask = (last << _U(1)) - _U(1)  # all bits up to that byte (all ones if none / byte 8)
    width = np.bitwise_count(mask & _HIGH_BITS).astype(np.int64)
    x = word & mask & _LOW7
    for low, high, shift in (_PAIRS, _QUADS, _OCTS):
        x = (x & low) | ((x & high) >> shift)
    value = ((x >> _U(1)) ^ (_U(0) - (x & _U(1)))).view(np.int64)
    after = pos + width
    if (last == 0).any():
        for i in np.nonzero(last == 0)[0]:
            try:
                value[i], after[i] = read_varint(b.data, int(pos[i]), max_bytes)
            except IndexError:
                raise CorruptRecordError("truncated varint") from None
    if width.max(initial=0) > max_bytes:
        raise CorruptRecordError("varint too long")
    return value, after


_MASK8 = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)
_MASK4 = np.array([(1 << (8 * k)) - 1 for k in range(5)], np.uint64)


def _binary(b: _Bytes, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """A binary array of ``data[pos[i]:pos[i]+length[i]]`` (null where length is -1).

    Built as an Arrow binary-view array over ``data`` (16 bytes per value: int32 length,
    then the value itself zero-padded if <= 12 bytes, else its first 4 bytes, buffer index
    0 and its offset), then cast to ``binary``, which copies the values in C.
    """
    n = len(pos)
    valid = length >= 0
    nulls = n - int(np.count_nonzero(valid))
    size = (np.where(valid, length, 0) if nulls else length).astype(np.uint64)
    words = np.empty((n, 2), np.uint64)  # little-endian: length | prefix, then the rest
    short = size <= _U(12)
    n_short = int(np.count_nonzero(short))
    if n_short < n:  # out of line
        words[:, 0] = size | (b.u32[pos].astype(np.uint64) << _U(32))
        words[:, 1] = pos.astype(np.uint64) << _U(32)
    if n_short:
        at, sz = (pos, size) if n_short == n else (pos[short], size[short])
        head = b.u64[at] & _MASK8[np.minimum(sz, _U(8)).astype(np.intp)]
        tail = b.u32[at + 8].astype(np.uint64) & _MASK4[
            (np.maximum(sz, _U(8)) - _U(8)).astype(np.intp)]
        first = sz | (head << _U(32))
        second = (head >> _U(32)) | (tail << _U(32))
        if n_short == n:
            words[:, 0], words[:, 1] = first, second
        else:
            words[short, 0], words[short, 1] = first, second
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    view = pa.Array.from_buffers(pa.binary_view(), n, [bitmap, pa.py_buffer(words),
                                                       pa.py_buffer(b.data)], null_count=nulls)
    return view.cast(pa.binary())
