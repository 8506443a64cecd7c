"""PySpark Structured Streaming source and sink for Josef (and any Kafka-protocol) topics.

Usage::

    from connectors.spark import register
    register(spark)                      # makes format("josef") available
    df = spark.read.format("josef").option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "events").load()

See docs/spark.md.
"""

from connectors.spark.client import (
    KafkaDataLossError,
    KafkaUnreachableError,
    UnknownTopicPartitionError,
)
from connectors.spark.options import KafkaOptionError
from connectors.spark.source import FORMAT_NAME, KafkaDataSource

__all__ = [
    "FORMAT_NAME",
    "KafkaDataLossError",
    "KafkaDataSource",
    "KafkaOptionError",
    "KafkaUnreachableError",
    "UnknownTopicPartitionError",
    "register",
]


def register(spark) -> None:
    """Register the ``josef`` format with ``spark`` (a SparkSession); idempotent."""
    spark.dataSource.register(KafkaDataSource)
