"""``josef dump-log``: print segment, offset-index, time-index, transaction-index and producer
snapshot files, like ``kafka-dump-log.sh --files ...``, verifying CRCs and index
consistency (``.txnindex`` / ``.snapshot``: see cli._dump_txn_files).

Works on files only (no broker). Layouts (Kafka's, see DESIGN.md "On disk"):

- ``.log``: RecordBatches (v2). One line per batch::

    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1
    producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false
    deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 85
    magic: 2 compresscodec: none crcValid: true

  (on one line) and, with ``--deep-iteration`` or ``--print-data-log``, one ``| offset: ...``
  line per record (``key:``/``payload:`` only with ``--print-data-log``; with
  ``--transaction-log-decoder`` they are `__transaction_state` records decoded as Kafka's
  ``transaction_metadata::transactionalId=<id>`` / ``producerId:..,producerEpoch:..,state=..,
  partitions=[..],txnLastUpdateTimestamp=..,txnTimeoutMs=..`` or ``<DELETE>``). A torn tail is
  reported as "Found N invalid bytes at the end of ...". CRC failures and offsets going
  backwards are listed at the end; any problem makes the exit code 1. Gaps in the offsets
  (left by compaction) are printed as "Non-consecutive offsets" notes, not problems.
- ``.index``: 8-byte entries (4-byte offset relative to the segment's base, 4-byte
  position), printed ``offset: O position: P``; each is checked against the ``.log`` next to
  it: a batch must start at P and end at offset O ("Mismatches in :<file>").
  Zero entries after the first (preallocated space) end the listing.
- ``.timeindex``: 12-byte entries (8-byte timestamp, 4-byte relative offset), printed
  ``timestamp: T offset: O``; timestamps must not decrease ("Found out of order timestamp")
  and offsets must not go backwards.

Files are memory-mapped read-only, so large segments do not load into memory; a progress
bar (stderr, when it is a terminal and stdout is not, or ``--progress``) follows the bytes
read; its final line reads ``00000000000000000000.log: 100.0%|####| 1.00MB/1.00MB [00:00,
9.80MB/s]``.
"""

from __future__ import annotations

import argparse
import mmap
import os
import struct
import sys

from cli._common import EXIT_ERROR, EXIT_OK, tool_main
from cli._dump_txn_files import dump_snapshot_file, dump_txn_index_file
from cli._progress import ProgressBar
from client.connection import ToolError

COMMAND = "dump-log"
HELP = ("Print and verify .log/.index/.timeindex/.txnindex/.snapshot files "
        "(like kafka-dump-log.sh)")
CODEC = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
INDEX_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--files", required=True, metavar="FILE[,FILE...]",
                   help="comma-separated .log, .index, .timeindex, .txnindex and .snapshot "
                        "files")
    p.add_argument("--deep-iteration", action="store_true", help="print every record")
    p.add_argument("--print-data-log", action="store_true",
                   help="print keys and values (implies --deep-iteration)")
    p.add_argument("--transaction-log-decoder", action="store_true",
                   help="decode __transaction_state records (implies --deep-iteration)")
    p.add_argument("--max-bytes", type=int, default=None, metavar="BYTES",
                   help="read at most this many bytes of each .log file")
    p.add_argument("--progress", action="store_true",
                   help="show a progress bar even when stderr is not a terminal")


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise ToolError(f"{path}: the file name is not a base offset "
                        "(expected 00000000000000000000.log and friends)") from None


class _Mapped:
    def __init__(self, path: str) -> None:
        try:
            self.f = open(path, "rb")
        except OSError as e:
            raise ToolError(f"cannot open {path}: {e.strerror}") from None
        size = os.fstat(self.f.fileno()).st_size
        self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.view = memoryview(self.mm) if self.mm is not None else memoryview(b"")

    def close(self) -> None:
        self.view.release()
        if self.mm is not None:
            self.mm.close()
        self.f.close()


def _text(b) -> str:
    return "null" if b is None else bytes(b).decode("utf-8", errors="replace")


def _batches(view, limit: int):
    """(position, batch | None, error) for each batch; None + message at a bad tail."""
    from protocol.record_format import BATCH_HEADER_SIZE, CorruptRecordError
    from protocol.records import RecordBatch

    pos = 0
    end = min(len(view), limit)
    while pos < end:
        if end - pos < BATCH_HEADER_SIZE:
            yield pos, None, f"Found {end - pos} invalid bytes at the end of the segment"
            return
        try:
            batch = RecordBatch(view, pos)
        except CorruptRecordError as e:
            yield pos, None, f"Found {end - pos} invalid bytes at the end of the segment ({e})"
            return
        yield pos, batch, None
        pos += batch.size_in_bytes


def dump_log_file(path: str, args, out) -> list[str]:
    problems: list[str] = []
    deep = args.deep_iteration or args.print_data_log or args.transaction_log_decoder
    out.write(f"Dumping {path}\n")
    out.write(f"Log starting offset: {_base_offset(path)}\n")
    m = _Mapped(path)
    try:
        limit = args.max_bytes if args.max_bytes is not None else len(m.view)
        expected = None
        with ProgressBar(min(limit, len(m.view)), os.path.basename(path),
                         force=args.progress or None, quiet_when_stdout_is_tty=True) as bar:
            for pos, b, err in _batches(m.view, limit):
                if b is None:
                    out.write(err + "\n")
                    problems.append(f"{path}: {err}")
                    break
                bar.update(b.size_in_bytes)
                valid = b.is_valid()
                if not valid:
                    problems.append(f"{path}: CRC mismatch in the batch at position {pos} "
                                    f"(offsets {b.base_offset}-{b.last_offset})")
                if expected is not None and b.base_offset < expected:
                    problems.append(f"{path}: offsets go backwards: {expected} expected, "
                                    f"batch starts at {b.base_offset} (position {pos})")
                elif expected is not None and b.base_offset != expected:
                    # compaction and transaction markers leave gaps: a note, as in Kafka
                    out.write(f"Non-consecutive offsets: {expected - 1} is followed by "
                              f"{b.base_offset}\n")
                expected = b.last_offset + 1
                ts_kind = "LogAppendTime" if b.timestamp_type == 1 else "CreateTime"
                out.write(
                    f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} "
                    f"count: {b.record_count} baseSequence: {b.base_sequence} "
                    f"lastSequence: {b.last_sequence} producerId: {b.producer_id} "
                    f"producerEpoch: {b.producer_epoch} "
                    f"partitionLeaderEpoch: {b.partition_leader_epoch} "
                    f"isTransactional: {str(b.is_transactional).lower()} "
                    f"isControl: {str(b.is_control).lower()} "
                    f"deleteHorizonMs: OptionalLong.empty position: {pos} "
                    f"{ts_kind}: {b.max_timestamp} size: {b.size_in_bytes} magic: {b.magic} "
                    f"compresscodec: {CODEC.get(b.compression_type, b.compression_type)} "
                    f"crcValid: {str(valid).lower()}\n")
                if deep and valid:
                    _dump_records(b, args, out, problems, path)
    finally:
        m.close()
    return problems


def _dump_records(b, args, out, problems, path) -> None:
    ts_kind = "LogAppendTime" if b.timestamp_type == 1 else "CreateTime"
    try:
        records = list(b.iter_records())
    except Exception as e:  # noqa: BLE001 - reported as a finding, not a crash
        problems.append(f"{path}: cannot read the records of batch {b.base_offset}: {e}")
        return
    expected = b.base_offset
    for r in records:
        if r.offset < expected:
            problems.append(f"{path}: offsets go backwards in batch {b.base_offset}: "
                            f"{r.offset} after {expected - 1}")
        elif r.offset != expected:  # a compacted batch keeps its records' original offsets
            out.write(f"Non-consecutive offsets: {expected - 1} is followed by {r.offset}\n")
        expected = r.offset + 1
        if b.is_control:
            from protocol.records import parse_control_record

            try:
                ctl = parse_control_record(r.key, r.value)
                line = (f"| offset: {r.offset} {ts_kind}: {r.timestamp} "
                        f"endTxnMarker: {'COMMIT' if ctl.is_commit else 'ABORT'} "
                        f"coordinatorEpoch: {getattr(ctl, 'coordinator_epoch', 0)}")
            except Exception:  # noqa: BLE001
                line = f"| offset: {r.offset} {ts_kind}: {r.timestamp} controlRecord: unknown"
            out.write(line + "\n")
            continue
        seq = b.base_sequence + (r.offset - b.base_offset) if b.base_sequence >= 0 else -1
        line = (f"| offset: {r.offset} {ts_kind}: {r.timestamp} "
                f"keySize: {-1 if r.key is None else len(r.key)} "
                f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                f"headerKeys: [{','.join(k for k, _ in (r.headers or []))}]")
        if args.transaction_log_decoder:  # __transaction_state records, as Kafka prints them
            from coordinator.transaction.log_records import format_record
            key_text, value_text = format_record(r.key, r.value)
            line += f" key: {key_text} payload: {value_text}"
        elif args.print_data_log:
            if r.key is not None:
                line += f" key: {_text(r.key)}"
            line += f" payload: {_text(r.value)}"
        out.write(line + "\n")


def _log_positions(log_path: str) -> dict[int, tuple[int, int]] | None:
    """position -> (base offset, last offset) of every batch in the segment, or None."""
    if not os.path.exists(log_path):
        return None
    m = _Mapped(log_path)
    try:
        return {pos: (b.base_offset, b.last_offset)
                for pos, b, _ in _batches(m.view, len(m.view)) if b is not None}
    finally:
        m.close()


def _unused_first(positions, base: int) -> bool:
    """A zero first entry is real only if the first batch ends at the base offset."""
    if positions is None:
        return False
    first = positions.get(0)
    return first is None or first[1] != base


def dump_index_file(path: str, args, out) -> list[str]:
    base = _base_offset(path)
    out.write(f"Dumping {path}\n")
    positions = _log_positions(path[:-len(".index")] + ".log")
    mismatches, problems = [], []
    m = _Mapped(path)
    try:
        n = len(m.view) // INDEX_ENTRY.size
        last = None
        for i in range(n):
            rel, pos = INDEX_ENTRY.unpack_from(m.view, i * INDEX_ENTRY.size)
            if rel == 0 and pos == 0 and (i > 0 or _unused_first(positions, base)):
                break  # preallocated, unused
            offset = base + rel
            out.write(f"offset: {offset} position: {pos}\n")
            if last is not None and offset <= last:
                problems.append(f"{path}: index offsets not increasing: {offset} after {last}")
            last = offset
            if positions is not None:
                batch = positions.get(pos)
                if batch is None:
                    mismatches.append(f"  Index position {pos} (offset {offset}) is not the "
                                      "start of a batch")
                elif batch[1] != offset:
                    mismatches.append(f"  Index offset: {offset}, log offset: {batch[1]}")
    finally:
        m.close()
    if mismatches:
        out.write(f"Mismatches in :{path}\n" + "\n".join(mismatches) + "\n")
        problems += [f"{path}: {x.strip()}" for x in mismatches]
    if positions is None:
        out.write(f"(no {os.path.basename(path)[:-6]}.log next to it: entries not verified)\n")
    return problems


def dump_time_index_file(path: str, args, out) -> list[str]:
    base = _base_offset(path)
    out.write(f"Dumping {path}\n")
    problems = []
    m = _Mapped(path)
    try:
        n = len(m.view) // TIME_ENTRY.size
        last_ts = last_off = None
        for i in range(n):
            ts, rel = TIME_ENTRY.unpack_from(m.view, i * TIME_ENTRY.size)
            if ts == 0 and rel == 0:
                break  # preallocated, unused
            offset = base + rel
            out.write(f"timestamp: {ts} offset: {offset}\n")
            if last_ts is not None and ts < last_ts:
                problems.append(f"Found out of order timestamp in :{path}: {ts} after "
                                f"{last_ts}")
            if last_off is not None and offset < last_off:
                problems.append(f"{path}: offsets go backwards: {offset} after {last_off}")
            last_ts, last_off = ts, offset
    finally:
        m.close()
    return problems


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    problems: list[str] = []
    for path in [p.strip() for p in args.files.split(",") if p.strip()]:
        if path.endswith((".index", ".timeindex")) and not os.path.exists(path) and \
                os.path.exists(path[:path.rindex(".")] + ".log"):
            # the active segment's indexes live in the broker's memory until its next
            # flush, roll or close (README, "Scale and resource limits")
            out.write(f"Dumping {path}\n(not written yet: the active segment's index reaches "
                      "its file at the broker's next flush, roll or close)\n")
            continue
        if path.endswith(".log"):
            problems += dump_log_file(path, args, out)
        elif path.endswith(".timeindex"):
            problems += dump_time_index_file(path, args, out)
        elif path.endswith(".index"):
            problems += dump_index_file(path, args, out)
        elif path.endswith(".txnindex"):
            problems += dump_txn_index_file(path, args, out)
        elif path.endswith(".snapshot"):
            problems += dump_snapshot_file(path, args, out)
        else:
            raise ToolError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot "
                            "file")
    out.flush()
    for p in problems:
        print(p, file=sys.stderr)
    return EXIT_ERROR if problems else EXIT_OK
