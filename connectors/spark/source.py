"""The ``josef`` data source: PySpark 4 Python Data Source for Kafka-protocol topics.

Register once per SparkSession with :func:`connectors.spark.register`, then::

    spark.readStream.format("josef").option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "events").load()

Option names and columns are those of Spark's built-in ``kafka`` format (see
:mod:`connectors.spark.options`), so moving a job to the official connector is renaming the
format. Checks that happen before any query or job starts: option names and values (on
``load()`` and at ``save()``/``start()`` for writes), and that a broker answers (on
``load()`` for reads, before the first task for writes).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from connectors.spark.client import ClusterView
from connectors.spark.options import (
    check_option_names,
    parse_sink_options,
    parse_source_options,
)
from connectors.spark.reader import KafkaBatchReader, KafkaStreamReader
from connectors.spark.schema import source_schema
from connectors.spark.writer import KafkaBatchWriter, KafkaStreamWriter, check_sink_schema

FORMAT_NAME = "josef"


class KafkaDataSource(DataSource):
    """Reads (batch, streaming) and writes (batch, streaming) Kafka-protocol topics."""

    def __init__(self, options) -> None:
        super().__init__(options)
        check_option_names(self.options)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        """The source schema; validates the read options and that a broker answers."""
        opts = parse_source_options(self.options, streaming=None)
        ClusterView(opts.client_config).topic_partitions()
        return source_schema(opts.include_headers)

    def reader(self, schema: StructType) -> KafkaBatchReader:
        return KafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(parse_source_options(self.options, streaming=True))

    def _sink(self, schema: StructType):
        opts = parse_sink_options(self.options)
        check_sink_schema(schema, opts)
        ClusterView(opts.client_config).topic_partitions()
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        return KafkaBatchWriter(self._sink(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self._sink(schema))
