"""`ProducerIdManager`: hands out producer ids for InitProducerId (Kafka's ProducerIdManager,
KIP-730 block allocation).

Ids come in blocks reserved through `controller.allocate_producer_ids(broker_id)` (blocks of
1000, persisted by the controller, so ids are never reused across restarts). The next block
is requested in the background once 90% of the current one is used, as Kafka's
RPCProducerIdManager does, so a request rarely waits for the controller.

`await generate_producer_id()` -> int; raises KafkaError(COORDINATOR_LOAD_IN_PROGRESS,
retriable) when the controller cannot provide a block (store write failure).
"""

from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode, KafkaError

__all__ = ["ProducerIdManager"]

log = logging.getLogger(__name__)

PREFETCH_RATIO = 0.9


class ProducerIdManager:
    def __init__(self, broker_id: int, controller) -> None:
        self.broker_id = broker_id
        self.controller = controller
        self._next = 0
        self._end = -1  # inclusive end of the current block; -1: no block
        self._block_start = 0
        self._prefetched = None  # a ProducerIdBlock waiting to be used
        self._prefetch_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    async def _fetch_block(self):
        try:
            return await self.controller.allocate_producer_ids(self.broker_id)
        except OSError as e:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"cannot allocate a producer id block: {e}") from e

    def _install(self, block) -> None:
        self._block_start = block.block_start
        self._next = block.block_start
        self._end = block.block_end

    def _maybe_prefetch(self) -> None:
        size = self._end - self._block_start + 1
        if self._prefetched is not None or self._prefetch_task is not None or size <= 0:
            return
        if self._next - self._block_start >= size * PREFETCH_RATIO:
            self._prefetch_task = asyncio.get_running_loop().create_task(self._prefetch())

    async def _prefetch(self) -> None:
        try:
            self._prefetched = await self._fetch_block()
        except Exception as e:  # noqa: BLE001 - the foreground path retries
            log.warning("producer id block prefetch failed: %s", e)
        finally:
            self._prefetch_task = None

    async def generate_producer_id(self) -> int:
        """The next unused producer id (never reused, also across restarts)."""
        if self._next <= self._end:
            pid = self._next
            self._next += 1
            self._maybe_prefetch()
            return pid
        async with self._lock:
            while self._next > self._end:
                if self._prefetch_task is not None:
                    await asyncio.shield(self._prefetch_task)
                if self._prefetched is not None:
                    block, self._prefetched = self._prefetched, None
                else:
                    block = await self._fetch_block()
                if block.block_start > self._end:
                    self._install(block)
            pid = self._next
            self._next += 1
            self._maybe_prefetch()
            return pid

    async def shutdown(self) -> None:
        task = self._prefetch_task
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
