"""A `Persister` served in-process by a `ShareCoordinatorShard` over an append-only record list.

It plays the share coordinator's runtime in miniature: each operation computes its records
on the shard, "appends" them to `log` (a list standing in for a `__share_group_state`
partition: index = offset; optionally through a codec, so what is replayed went through
bytes), replays them, then answers. A fresh shard fed `log` (`reload`) is what a new
coordinator sees after a failover. Used by the unit tests and usable by a single-node
broker before the RPC persister exists; one operation runs at a time.
"""

from __future__ import annotations

import asyncio

from coordinator.share.coordinator_shard import ShareCoordinatorShard
from coordinator.share.persister import (
    DeleteStateRequest,
    InitializeStateRequest,
    ReadStateRequest,
    ReadStateResult,
    ReadStateSummaryRequest,
    ReadStateSummaryResult,
    WriteStateRequest,
)
from coordinator.share.records import RecordCodec, ShareRecord
from protocol.errors import ErrorCode

__all__ = ["LocalPersister"]


class LocalPersister:
    """`Persister` (and the admin operations) on one shard and one in-memory record log."""

    def __init__(self, shard: ShareCoordinatorShard, codec: RecordCodec | None = None) -> None:
        self.shard = shard
        self.codec = codec
        self.log: list[tuple[bytes, bytes | None] | ShareRecord] = []
        self._lock = asyncio.Lock()

    def reload(self, shard: ShareCoordinatorShard) -> None:
        """Replace the shard by `shard` rebuilt from `log` (a coordinator failover)."""
        for offset, entry in enumerate(self.log):
            shard.replay(offset, self._decode(entry))
        self.shard = shard

    def records(self) -> list[ShareRecord]:
        return [self._decode(e) for e in self.log]

    async def write_state(self, request: WriteStateRequest) -> int:
        async with self._lock:
            records, code = self.shard.write_state(request)
            if code == ErrorCode.NONE:
                await self._append(records)
            return code

    async def read_state(self, request: ReadStateRequest) -> ReadStateResult:
        async with self._lock:
            records, result = self.shard.read_state(request)
            await self._append(records)
            return result

    async def read_state_summary(self, request: ReadStateSummaryRequest) -> ReadStateSummaryResult:
        return self.shard.read_state_summary(request)

    async def initialize_state(self, request: InitializeStateRequest) -> int:
        async with self._lock:
            records, code = self.shard.initialize_state(request)
            await self._append(records)
            return code

    async def delete_state(self, request: DeleteStateRequest) -> int:
        async with self._lock:
            records, code = self.shard.delete_state(request)
            await self._append(records)
            return code

    async def _append(self, records: list[ShareRecord]) -> None:
        """Append (the await is where a real runtime waits for acks=all), then replay."""
        await asyncio.sleep(0)
        for record in records:
            entry = self.codec.encode(record) if self.codec is not None else record
            self.log.append(entry)
            self.shard.replay(len(self.log) - 1, self._decode(entry))

    def _decode(self, entry) -> ShareRecord:
        if isinstance(entry, ShareRecord):
            return entry
        assert self.codec is not None
        return self.codec.decode(*entry)
