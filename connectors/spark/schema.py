"""Spark and Arrow schemas of the source's rows, as Spark's built-in Kafka source has them.

Columns: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset``
long, ``timestamp`` timestamp (record timestamp, ms precision, shown in UTC),
``timestampType`` int (0 CreateTime, 1 LogAppendTime, -1 none), and with
``includeHeaders=true`` ``headers`` array<struct<key string, value binary>> (null when the
record has no headers, as in Spark).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_ARROW_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])


def source_schema(include_headers: bool) -> StructType:
    """The Spark schema of rows read from topics."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def source_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for :func:`source_schema` batches (timestamps in us, UTC)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(_ARROW_HEADER)))
    return pa.schema(fields)
