"""``josef dump-log`` for the transaction files, with kafka-dump-log.sh's output lines:

- ``.txnindex`` (storage.transaction_index: 34-byte entries), one line per aborted
  transaction::

    version: 0 producerId: 7 firstOffset: 0 lastOffset: 4 lastStableOffset: 2

  An entry whose marker lies before the segment's base offset, an unknown version, marker
  offsets that do not increase or a partial trailing entry are problems (exit code 1).
- ``.snapshot`` (storage.producer_snapshot: version 1, CRC-32C, 46-byte entries), one line
  per producer::

    producerId: 7 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: OptionalLong[5]
    lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 9 lastOffset: 14
    offsetDelta: 9 timestamp: 1700000000000

  (one line; the batch part only when the producer has a data batch). A corrupt snapshot
  (bad version or CRC, torn) prints Kafka's message on stderr and is a problem.
"""

from __future__ import annotations

import os

from storage.producer_snapshot import CorruptSnapshotError, read_snapshot
from storage.transaction_index import ENTRY, TransactionIndex, read_entries

__all__ = ["dump_txn_index_file", "dump_snapshot_file"]


def _base_offset(path: str) -> int:
    try:
        return int(os.path.basename(path).split(".")[0])
    except ValueError:
        return 0


def dump_txn_index_file(path: str, args, out) -> list[str]:
    out.write(f"Dumping {path}\n")
    with open(path, "rb") as f:
        data = f.read()
    problems = []
    for t in read_entries(data):
        out.write(f"version: {t.version} producerId: {t.producer_id} firstOffset: "
                  f"{t.first_offset} lastOffset: {t.last_offset} lastStableOffset: "
                  f"{t.last_stable_offset}\n")
    if len(data) % ENTRY.size:
        problems.append(f"{path}: {len(data) % ENTRY.size} bytes of a partial entry at the end")
    try:
        TransactionIndex(path, _base_offset(path)).sanity_check()
    except Exception as e:  # noqa: BLE001 - CorruptIndexError: a finding, not a crash
        problems.append(f"{path}: {e}")
    return problems


def _optional_long(value: int) -> str:
    return "OptionalLong.empty" if value < 0 else f"OptionalLong[{value}]"


def dump_snapshot_file(path: str, args, out) -> list[str]:
    out.write(f"Dumping {path}\n")
    try:
        entries = read_snapshot(path)
    except CorruptSnapshotError as e:
        return [str(e)]
    for e in entries:
        line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: "
                f"{_optional_long(e.current_txn_first_offset)} lastTimestamp: {e.timestamp} ")
        if e.last_offset >= 0:
            line += (f"firstSequence: {e.last_sequence - e.offset_delta} lastSequence: "
                     f"{e.last_sequence} lastOffset: {e.last_offset} offsetDelta: "
                     f"{e.offset_delta} timestamp: {e.timestamp}")
        out.write(line + "\n")
    return []
