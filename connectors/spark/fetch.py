"""Executor side: fetch one offset range of one partition and turn it into Arrow batches.

:func:`read_range` runs inside a Spark Python worker. It uses the Arrow path of
:mod:`connectors.spark.wire_fetch` (whole Fetch responses decoded column-wise) for
PLAINTEXT, SSL and SASL PLAIN/SCRAM settings; other security settings (client
certificates, OAUTHBEARER, Kerberos: see ``wire_security``) use librdkafka through
confluent-kafka, record by record, as described below.

librdkafka path: A consumer is assigned the partition at ``from_offset``
(no consumer group: ``assign``, never ``subscribe``, nothing committed) and polled until its
position reaches ``until_offset``. The position, not the last record's offset, decides when
the range is done, because offsets may be missing inside a range (compacted topics,
transaction control records, aborted records under read_committed).

Data loss (KIP-107 / Kafka's OFFSET_OUT_OF_RANGE, error code 1): when ``from_offset`` is
below the log start offset the consumer reports an offset reset error (``auto.offset.reset``
is "error"). With ``failOnDataLoss=true`` this raises :class:`KafkaDataLossError`; otherwise
the range resumes at the log start offset. A range whose end was truncated away (position
stuck below ``until_offset`` at the partition end) is handled the same way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)

from connectors.spark.client import KafkaDataLossError, librdkafka_config
from connectors.spark.planning import OffsetRange
from connectors.spark.schema import source_arrow_schema
from connectors.spark.wire_fetch import read_range_wire, wire_config_supported

ARROW_BATCH_ROWS = 8192
"""Rows per Arrow record batch handed to Spark."""
POLL_BATCH = 4096
"""Records asked from the client per ``consume`` call."""

_TS_TYPE = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


class _Columns:
    """Column buffers for one Arrow batch."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.key: list = []
        self.value: list = []
        self.offset: list = []
        self.ts: list = []
        self.ts_type: list = []
        self.headers: list = []

    def add(self, msg) -> None:
        self.key.append(msg.key())
        self.value.append(msg.value())
        self.offset.append(msg.offset())
        kind, ts_ms = msg.timestamp()
        self.ts.append(ts_ms * 1000 if kind in _TS_TYPE else None)
        self.ts_type.append(_TS_TYPE.get(kind, -1))
        if self.include_headers:
            headers = msg.headers()
            self.headers.append(
                [{"key": k, "value": v} for k, v in headers] if headers else None)

    def to_batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offset)
        arrays = [
            pa.array(self.key, pa.binary()),
            pa.array(self.value, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offset, pa.int64()),
            pa.array(self.ts, pa.timestamp("us", tz="UTC")),
            pa.array(self.ts_type, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(
    config: dict[str, str],
    rng: OffsetRange,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` in offset order as Arrow batches of the source schema,
    through the Arrow path when the client config allows (see the module doc), else
    librdkafka. Raises :class:`KafkaDataLossError` and ``TimeoutError`` (no progress for
    ``poll_timeout_ms``)."""
    if wire_config_supported(config):
        return read_range_wire(config, rng, include_headers, fail_on_data_loss,
                               poll_timeout_ms)
    return read_range_rdkafka(config, rng, include_headers, fail_on_data_loss,
                              poll_timeout_ms)


def read_range_rdkafka(
    config: dict[str, str],
    rng: OffsetRange,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` in offset order as Arrow batches of the source schema.

    Raises :class:`KafkaDataLossError` (see module doc) and :class:`TimeoutError` when no
    record arrives for ``poll_timeout_ms`` ms while the range is unfinished.
    """
    if rng.size == 0:
        return
    schema = source_arrow_schema(include_headers)
    consumer = Consumer(librdkafka_config(config, "consumer"))
    tp = TopicPartition(rng.topic, rng.partition, rng.from_offset)
    cols = _Columns(include_headers)
    position = rng.from_offset
    try:
        consumer.assign([tp])
        last_progress = time.monotonic()
        while position < rng.until_offset:
            msgs = consumer.consume(POLL_BATCH, timeout=0.5)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    position = _handle_error(consumer, err, rng, position, fail_on_data_loss)
                    continue
                offset = msg.offset()
                if offset >= rng.until_offset:
                    position = rng.until_offset
                    break
                cols.add(msg)
                position = offset + 1
                if len(cols.offset) >= ARROW_BATCH_ROWS:
                    yield cols.to_batch(rng.topic, rng.partition, schema)
                    cols.clear()
            if msgs:
                last_progress = time.monotonic()
                # Skipped offsets (control records, compaction) move the position too.
                current = consumer.position([TopicPartition(rng.topic, rng.partition)])[0]
                if current.offset >= 0:
                    position = max(position, current.offset)
            elif (time.monotonic() - last_progress) * 1000 > poll_timeout_ms:
                raise TimeoutError(
                    f"no records from {rng.topic}-{rng.partition} for {poll_timeout_ms} ms at "
                    f"offset {position} (range ends at {rng.until_offset}); raise "
                    "kafkaConsumer.pollTimeoutMs if the cluster is just slow")
        if cols.offset:
            yield cols.to_batch(rng.topic, rng.partition, schema)
    finally:
        consumer.close()


def _handle_error(consumer, err, rng: OffsetRange, position: int, fail: bool) -> int:
    """Deal with an error event from ``consume``; return the new position."""
    code = err.code()
    tp = TopicPartition(rng.topic, rng.partition)
    if code == KafkaError._PARTITION_EOF:
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        if high < rng.until_offset and position >= high:
            _data_loss(fail, f"{rng.topic}-{rng.partition} ends at offset {high} but offsets up "
                             f"to {rng.until_offset} were planned (log truncated or topic "
                             "recreated)")
            return rng.until_offset
        return position
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        _data_loss(fail, f"offsets {position}..{min(low, rng.until_offset) - 1} of "
                         f"{rng.topic}-{rng.partition} were deleted (log start offset is now "
                         f"{low})")
        resume = min(max(low, position), rng.until_offset)
        if resume < rng.until_offset:
            consumer.assign([TopicPartition(rng.topic, rng.partition, resume)])
        return resume
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART or code == KafkaError._UNKNOWN_PARTITION:
        _data_loss(fail, f"{rng.topic}-{rng.partition} no longer exists")
        return rng.until_offset
    if err.retriable() or code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        return position
    raise RuntimeError(f"reading {rng.topic}-{rng.partition} at offset {position}: {err.str()}")


def _data_loss(fail: bool, message: str) -> None:
    if fail:
        raise KafkaDataLossError(
            message + ". Set failOnDataLoss=false to skip lost data and go on.")
