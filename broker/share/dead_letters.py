"""The dead-letter writer: durable dead-letter intents -> records in the group's dead-letter
topic, exactly once (the design and the failover argument: `coordinator.share.dead_letter`).

`submit(sp, intents)` is the SharePartition listener's hand-off (intents are already in the
share state). One worker per share-partition, in sequence order:

1. the dead-letter topic is the group's current `errors.deadletterqueue.topic.name`; it is
   created with the broker defaults when missing (auto-creation through the controller, as
   Kafka Connect creates its DLQ topics); with no topic configured any more the intents are
   completed without a record (logged);
2. the share-partition's idempotent producer id: the persisted one, else a new one from the
   broker's ProducerIdManager, persisted (`set_dead_letter_producer`) before its first use;
3. the source record is read from the local log at the intent's offset (key, value,
   headers, timestamp; `source.missing` once retention removed it) and produced as a
   one-record batch (acks=all) to `dead_letter_partition(...)` with base sequence =
   `producer_sequence(intent)`: appended locally when this broker leads that partition, else
   sent as Produce to its leader over the inter-broker listener;
4. NONE or DUPLICATE_SEQUENCE_NUMBER (already there, e.g. written by the previous leader)
   complete the intent (`complete_dead_letters`, a share-state write).

Failures (no leader, not enough replicas, the topic being created, a failed state write)
are retried every `RETRY_BACKOFF_MS`, for as long as the share-partition is not fenced; a
fenced one stops (the new leader re-sends its pending intents).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from coordinator.share.dead_letter import (
    build_dead_letter,
    dead_letter_partition,
    producer_sequence,
)
from coordinator.share.share_partition import SharePartition
from coordinator.share.state import DeadLetterIntent
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import MESSAGES
from protocol.record_builder import RecordBatchBuilder
from protocol.records import iter_batches_lenient

__all__ = ["DeadLetterWriter"]

log = logging.getLogger(__name__)
E = ErrorCode
RETRY_BACKOFF_MS = 500
PRODUCE_TIMEOUT_MS = 10_000
_Produce = MESSAGES["ProduceRequest"]


class DeadLetterWriter:
    """See the module docstring."""

    def __init__(self, services, manager, links) -> None:
        self.services = services
        self.manager = manager
        self.links = links
        self._workers: dict[int, asyncio.Task] = {}
        self.written = 0
        self.duplicates = 0

    def submit(self, sp: SharePartition, intents: list[DeadLetterIntent]) -> None:
        key = id(sp)
        task = self._workers.get(key)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._run(sp))
            self._workers[key] = task
            task.add_done_callback(lambda _t: self._workers.pop(key, None))

    async def _run(self, sp: SharePartition) -> None:
        while sp.fenced is None:
            pending = sp.pending_dead_letters()
            if not pending:
                return
            try:
                done = await self._write(sp, pending)
            except Exception:  # noqa: BLE001 - retried; never lose an intent
                log.exception("dead letters of %r failed; retrying", sp)
                done = None
            if done is None:
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)

    async def _write(self, sp: SharePartition, pending: list[DeadLetterIntent]) -> bool | None:
        """Write what it can of `pending`; None when it must wait and retry."""
        topic = sp.config.dead_letter_topic
        if topic is None:
            log.warning("share group %s has pending dead letters for %s-%d but no "
                        "errors.deadletterqueue.topic.name: completing %d without a record",
                        sp.group_id, sp.topic_id, sp.partition, len(pending))
            code = await sp.complete_dead_letters([i.sequence for i in pending])
            return True if code == E.NONE else None
        cache = self.services.metadata_cache
        n = cache.num_partitions(topic)
        if n is None:
            await self._create(topic)
            return None
        if sp.dead_letter_producer is None:
            pid = await self.services.producer_id_manager.generate_producer_id()
            if await sp.set_dead_letter_producer(pid, 0) != E.NONE:
                return None
        pid, epoch = sp.dead_letter_producer
        target = dead_letter_partition(sp.group_id, str(sp.topic_id), sp.partition, n)
        source = cache.topic_name(sp.topic_id) or str(sp.topic_id)
        for intent in pending:
            batch = await self._dead_letter_batch(sp, source, intent, pid, epoch)
            code = await self._produce(topic, target, batch)
            if code == E.DUPLICATE_SEQUENCE_NUMBER:
                self.duplicates += 1
            elif code != E.NONE:
                log.info("dead letter %d of %s:%s-%d to %s-%d: %s; retrying", intent.sequence,
                         sp.group_id, source, sp.partition, topic, target, E(code).name)
                return None
            else:
                self.written += 1
                if self.manager.metrics is not None:
                    self.manager.metrics.dead_letters.mark()
            if await sp.complete_dead_letters([intent.sequence]) != E.NONE:
                return None
        return True

    async def _dead_letter_batch(self, sp: SharePartition, source: str,
                                 intent: DeadLetterIntent, pid: int, epoch: int) -> bytes:
        key = value = None
        headers: tuple = ()
        ts = -1
        missing = True
        part = self.services.replica_manager.get_partition(source, sp.partition)
        if part is not None and part.log.log_start_offset <= intent.offset \
                < part.log.log_end_offset:
            info = part.log.read(intent.offset, 1, None, min_one_message=True)
            data = await asyncio.get_running_loop().run_in_executor(
                None, info.records.read_bytes)
            for b in iter_batches_lenient(data):
                if not b.base_offset <= intent.offset <= b.last_offset:
                    continue
                for rec in b:
                    if rec.offset == intent.offset:
                        key = None if rec.key is None else bytes(rec.key)
                        value = None if rec.value is None else bytes(rec.value)
                        headers = tuple((k, None if v is None else bytes(v))
                                        for k, v in rec.headers or ())
                        ts = rec.timestamp
                        missing = False
                        break
                break
        dl = build_dead_letter(intent, group_id=sp.group_id, topic=source,
                               partition=sp.partition, key=key, value=value, headers=headers,
                               timestamp_ms=ts, source_missing=missing)
        builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch,
                                     base_sequence=producer_sequence(intent))
        builder.append(dl.timestamp_ms if dl.timestamp_ms >= 0 else int(time.time() * 1000),
                       dl.key, dl.value, dl.headers)
        return bytes(builder.build())

    async def _produce(self, topic: str, partition: int, batch: bytes) -> int:
        cache = self.services.metadata_cache
        state = cache.partition_state(topic, partition)
        if state is None or state.leader is None or state.leader < 0:
            return E.LEADER_NOT_AVAILABLE
        if state.leader == self.services.broker_id:
            tp = (topic, partition)
            result = self.services.replica_manager.append_records(
                PRODUCE_TIMEOUT_MS, -1, {tp: memoryview(bytearray(batch))}, origin="client")
            if isinstance(result, asyncio.Future):
                result = await result
            r = result.get(tp)
            return E.UNKNOWN_SERVER_ERROR if r is None else r.error
        request = _Produce(transactional_id=None, acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS,
                           topic_data=[_Produce.TopicProduceData(
                               name=topic, topic_id=cache.topic_id(topic) or uuid.UUID(int=0),
                               partition_data=[_Produce.PartitionProduceData(
                                   index=partition, records=batch)])])
        try:
            resp = await self.links.request(state.leader, 0, request)
        except (ConnectionError, OSError, TimeoutError, KafkaError) as e:
            log.debug("dead letter produce to broker %d failed: %r", state.leader, e)
            return E.NETWORK_EXCEPTION
        for t in resp.responses:
            for p in t.partition_responses:
                if p.index == partition:
                    return p.error_code
        return E.UNKNOWN_SERVER_ERROR

    async def _create(self, topic: str) -> None:
        controller = self.services.controller
        if controller is None:
            return
        from broker.handlers.metadata import internal_topic_spec
        try:
            results = await controller.auto_create_topics(
                [internal_topic_spec(topic, self.services.config)])
        except Exception as e:  # noqa: BLE001 - retried
            log.info("creating dead-letter topic %s failed: %r", topic, e)
            return
        for r in results:
            if r.error_code not in (E.NONE, E.TOPIC_ALREADY_EXISTS):
                log.warning("cannot create dead-letter topic %s: %s %s", topic,
                            E(r.error_code).name, r.error_message or "")

    async def shutdown(self) -> None:
        for t in list(self._workers.values()):
            t.cancel()
        for t in list(self._workers.values()):
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass
