"""Sink: produce a DataFrame's rows to topics (batch ``df.write`` and ``df.writeStream``).

Input columns, as Spark's Kafka sink takes them: ``value`` (binary or string, required),
``key`` (binary or string, optional), ``topic`` (string; required unless the ``topic``
option is set, which then wins), ``partition`` (int, optional: else the client's default
partitioner, murmur2 of the key like the Java client's), ``headers``
(array<struct<key string, value binary>>, optional). Other columns are ignored.

Each Spark task runs one idempotent producer (``enable.idempotence=true``, ``acks=all``;
KIP-98), so retries inside a task never duplicate or reorder records of a partition. Like
Spark's own Kafka sink the guarantee across task retries is at-least-once: a task that
fails after some records were acknowledged is re-run from its input.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from connectors.spark.client import librdkafka_config
from connectors.spark.options import KafkaOptionError, SinkOptions
from connectors.spark.schema import HEADER_TYPE

FLUSH_TIMEOUT_S = 120.0
"""Seconds a task waits at its end for all its records to be acknowledged."""

_PARTITION_ANY = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


def check_sink_schema(schema: StructType, options: SinkOptions) -> None:
    """Raise :class:`KafkaOptionError` when the DataFrame cannot be written (before any task)."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise KafkaOptionError("the DataFrame to write needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (BinaryType, StringType)):
            raise KafkaOptionError(f"column '{name}' must be binary or string, not "
                                   f"{types[name].simpleString()}")
    if options.topic is None:
        if "topic" not in types:
            raise KafkaOptionError("no topic: set the 'topic' option or add a 'topic' column")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise KafkaOptionError(f"column 'topic' must be string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise KafkaOptionError("column 'partition' must be int, not "
                               f"{types['partition'].simpleString()}")
    wanted = ArrayType(HEADER_TYPE).simpleString()  # nullability does not matter
    if "headers" in types and types["headers"].simpleString() != wanted:
        raise KafkaOptionError("column 'headers' must be array<struct<key:string,value:binary>>, "
                               f"not {types['headers'].simpleString()}")


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one task wrote: number of records acknowledged; ``skipped`` when an exactly-once
    task found its output of the micro-batch already committed."""

    records: int
    skipped: bool = False


PRODUCER_DEFAULTS = {
    "linger.ms": "100",  # fill large batches (batch.size, 1 MB) before sending
    "batch.num.messages": "100000",
    "partitioner": "murmur2_random",  # the Java client's: same key, same partition
    "delivery.report.only.error": True,  # no Python callback per acknowledged record
}
"""librdkafka settings of the sink's producers unless ``kafka.<name>`` options say else."""


def _binary_list(batch: pa.RecordBatch, name: str) -> list | None:
    """Column ``name`` as a list of bytes / None (strings as their UTF-8 bytes)."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


class _Delivery:
    """A producer with the sink's settings and the errors its delivery reports carry."""

    def __init__(self, options: SinkOptions, extra: dict | None = None) -> None:
        self.errors: list[str] = []
        self.config = {**PRODUCER_DEFAULTS,
                       **librdkafka_config(options.client_config, "producer"),
                       **(extra or {}), "on_delivery": self._report}

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    def check(self) -> None:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} record(s) failed, first: {self.errors[0]}")


def produce_batches(options: SinkOptions, batches: Iterator[pa.RecordBatch]
                    ) -> KafkaCommitMessage:
    """Produce every row of the Arrow batches with an idempotent producer, wait for all
    acknowledgements; raise on the first failed record."""
    delivery = _Delivery(options)
    producer = Producer(delivery.config)
    count = produce_rows(producer, options, batches, delivery.errors)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    delivery.check()
    if remaining:
        raise TimeoutError(f"{remaining} record(s) not acknowledged after {FLUSH_TIMEOUT_S:g}s")
    return KafkaCommitMessage(records=count)


def produce_rows(producer, options: SinkOptions, batches: Iterator[pa.RecordBatch],
                 errors: list) -> int:
    """Hand every row to ``producer``; returns the row count. Columns become Python lists
    once per batch; the only per-record Python work is the ``produce`` call. Stops early
    when a delivery report has failed."""
    count = 0
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        batch = batch.rename_columns([name.lower() for name in batch.schema.names])
        names = set(batch.schema.names)
        values = _binary_list(batch, "value")
        keys = _binary_list(batch, "key") or [None] * n
        topics = None
        if not options.topic:
            topics = batch.column("topic").to_pylist()
            if None in topics:
                raise KafkaOptionError("a row has a null 'topic' and no 'topic' option is set")
        partitions = batch.column("partition").to_pylist() if "partition" in names else None
        headers = None
        if "headers" in names:
            headers = [[(x["key"], x["value"]) for x in h] if h else None
                       for h in batch.column("headers").to_pylist()]
        _produce_all(producer, options.topic, topics, values, keys, partitions, headers)
        count += n
        producer.poll(0)
        if errors:
            break
    return count


def _produce_all(producer, topic, topics, values, keys, partitions, headers) -> None:
    """``producer.produce`` for every row; a full local queue (BufferError) is drained with
    ``poll`` and the row retried."""
    produce = producer.produce
    n = len(values)
    i = 0
    while i < n:
        start = i
        try:
            if topics is None and partitions is None and headers is None:
                for i in range(start, n):  # the common case: one topic, no extras
                    produce(topic, values[i], keys[i])
            else:
                for i in range(start, n):
                    p = partitions[i] if partitions is not None else None
                    produce(topic or topics[i], values[i], keys[i],
                            _PARTITION_ANY if p is None else p,
                            headers=headers[i] if headers is not None else None)
            i = n
        except BufferError:  # local queue full: serve delivery reports, then retry row i
            producer.poll(0.1)
        except KafkaException as exc:
            raise RuntimeError(f"producing to {topic or topics[i]}: "
                               f"{exc.args[0].str()}") from None


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("josef")...save()``: each task's Arrow batches, produced."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return produce_batches(self.options, iterator)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("josef")...start()``: each micro-batch's rows, exactly once
    (one transaction per micro-batch and task, :mod:`connectors.spark.txn_writer`), or at
    least once with ``exactlyOnce=false``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        if not self.options.exactly_once:
            return produce_batches(self.options, iterator)
        from connectors.spark.txn_writer import task_identity

        batch_id, partition = task_identity()
        return write_transactionally(self.options, iterator, batch_id, partition)

    def commit(self, messages: list, batchId: int) -> None:
        """Each task committed its own transaction (or, at least once, was acknowledged)."""

    def abort(self, messages: list, batchId: int) -> None:
        """Committed task transactions stay; Spark re-runs the batch and those tasks find
        their batch recorded and write nothing (at least once: they write again)."""


def write_transactionally(options: SinkOptions, batches: Iterator[pa.RecordBatch],
                          batch_id: int, partition: int) -> KafkaCommitMessage:
    """One task's rows of micro-batch ``batch_id`` in one transaction (see
    :func:`connectors.spark.txn_writer.produce_transactionally`)."""
    from connectors.spark.txn_writer import produce_transactionally

    delivery = _Delivery(options)
    count, skipped = produce_transactionally(
        options, batches, batch_id, partition, delivery.config,
        lambda producer, rows: produce_rows(producer, options, rows, delivery.errors))
    delivery.check()
    return KafkaCommitMessage(records=count, skipped=skipped)
