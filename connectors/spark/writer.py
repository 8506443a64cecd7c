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

from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
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
    """What one task wrote: number of records acknowledged."""

    records: int


def _as_bytes(value) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # bytearray / memoryview


def produce_rows(options: SinkOptions, rows: Iterator) -> KafkaCommitMessage:
    """Produce every row, wait for all acknowledgements; raise on the first failed record."""
    producer = Producer(librdkafka_config(options.client_config, "producer"))
    errors: list[str] = []
    acked = 0

    def on_delivery(err, msg) -> None:
        nonlocal acked
        if err is not None:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")
        else:
            acked += 1

    count = 0
    for row in rows:
        fields = row.asDict()
        topic = options.topic or fields.get("topic")
        if not topic:
            raise KafkaOptionError("a row has a null 'topic' and no 'topic' option is set")
        headers = fields.get("headers")
        kwargs = {
            "value": _as_bytes(fields["value"]),
            "key": _as_bytes(fields.get("key")),
            "on_delivery": on_delivery,
        }
        if headers:
            kwargs["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers]
        partition = fields.get("partition")
        kwargs["partition"] = _PARTITION_ANY if partition is None else partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as exc:
                raise RuntimeError(f"producing to {topic}: {exc.args[0].str()}") from None
        count += 1
        if errors:
            break
        producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise RuntimeError(f"{len(errors)} record(s) failed, first: {errors[0]}")
    if remaining:
        raise TimeoutError(f"{remaining} record(s) not acknowledged after {FLUSH_TIMEOUT_S:g}s")
    assert acked == count
    return KafkaCommitMessage(records=count)


class KafkaBatchWriter(DataSourceWriter):
    """``df.write.format("josef")...save()``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> KafkaCommitMessage:
        return produce_rows(self.options, iterator)


class KafkaStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("josef")...start()``: each micro-batch's rows, at least once."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> KafkaCommitMessage:
        return produce_rows(self.options, iterator)

    def commit(self, messages: list, batchId: int) -> None:
        """Records are durable once acknowledged (acks=all); nothing left to do."""

    def abort(self, messages: list, batchId: int) -> None:
        """Acknowledged records cannot be taken back; Spark re-runs the batch (at-least-once)."""
