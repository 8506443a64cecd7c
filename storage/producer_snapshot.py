"""Producer state snapshots: `<20-digit offset>.snapshot` files (Kafka's ProducerStateManager
snapshot format, `ProducerSnapshot` schema version 1).

A snapshot named N holds the producer state after every batch below offset N, so loading
replays only the log from N (KIP-98; Kafka takes one on each segment roll and on clean
shutdown). Big-endian layout::

    version        int16   1
    crc            uint32  CRC-32C of every byte after this field
    entries        int32   count, then per producer (46 bytes):
      producer_id              int64
      epoch                    int16
      last_sequence            int32   of the producer's last batch (-1 if none)
      last_offset              int64   of that batch (-1: no data batch known)
      offset_delta             int32   last_sequence - first sequence of that batch
      timestamp                int64   max timestamp of the producer's last append
      coordinator_epoch        int32   of the last transaction marker (-1 if none)
      current_txn_first_offset int64   first offset of its open transaction, -1 if none

Only the last batch of each producer survives a snapshot (as in Kafka). `read_snapshot`
raises `CorruptSnapshotError` (bad version, torn file, CRC mismatch); the caller deletes
such a file and falls back to an older snapshot or a replay. Blocking file I/O: the owning
Log calls these during load, roll and close.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import crc32c

__all__ = ["SnapshotEntry", "CorruptSnapshotError", "SNAPSHOT_SUFFIX", "read_snapshot",
           "write_snapshot", "encode_snapshot", "decode_snapshot", "list_snapshots",
           "snapshot_path", "offset_from_path"]

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
CRC_START = 6  # the CRC covers everything after version + crc


class CorruptSnapshotError(Exception):
    pass


class SnapshotEntry(NamedTuple):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: none


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = bytearray(_HEADER.size + _ENTRY.size * len(entries))
    pos = _HEADER.size
    for e in entries:
        _ENTRY.pack_into(body, pos, *e)
        pos += _ENTRY.size
    struct.pack_into(">i", body, 6, len(entries))
    crc = crc32c.crc32c(bytes(body[CRC_START:]))
    struct.pack_into(">hI", body, 0, VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[SnapshotEntry]:
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes is shorter than the header")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"{name}: unknown snapshot version {version}")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{name}: {count} entries do not fit {len(data)} bytes")
    computed = crc32c.crc32c(data[CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"{name}: CRC mismatch (stored {crc}, computed {computed})")
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size))
            for i in range(count)]


def snapshot_path(dir_path: str, offset: int) -> str:
    return os.path.join(dir_path, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def offset_from_path(path: str) -> int:
    return int(os.path.basename(path).split(".")[0])


def read_snapshot(path: str) -> list[SnapshotEntry]:
    with open(path, "rb") as f:
        data = f.read()
    return decode_snapshot(data, path)


def write_snapshot(path: str, entries: list[SnapshotEntry], sync: bool = True) -> None:
    """Write atomically (temp file + rename) so a crash never leaves a torn snapshot."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_snapshot(entries))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def list_snapshots(dir_path: str, names: list[str] | None = None) -> list[int]:
    """Offsets of the `<20 digits>.snapshot` files in `dir_path` (or among `names`, its
    listing when the caller has one), ascending."""
    out = []
    for name in os.listdir(dir_path) if names is None else names:
        if name.endswith(SNAPSHOT_SUFFIX):
            stem = name[:-len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                out.append(int(stem))
    return sorted(out)
