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


def register(spark, ship_code: bool = True) -> None:
    """Register the ``josef`` format with ``spark`` (a SparkSession).

    With ``ship_code`` (default) the packages the connector runs on executors
    (``connectors``, ``client``, ``protocol``, ``broker.security``) are zipped and added with
    ``SparkContext.addPyFile``, so Python workers need only the third-party packages, not
    the project itself: pyspark, pyarrow, numpy, confluent-kafka, and for compressed topics
    lz4, python-snappy, zstandard, crc32c.
    Pass False when the project is installed on every node.
    """
    if ship_code:
        spark.sparkContext.addPyFile(_package_zip())
    spark.dataSource.register(KafkaDataSource)


def _package_zip() -> str:
    """Zip the shipped packages (source files only) once per process; return its path."""
    global _ZIP_PATH
    if _ZIP_PATH is None:
        import os
        import tempfile
        import zipfile

        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        target = os.path.join(tempfile.mkdtemp(prefix="josef-spark-"), "josef_connectors.zip")
        with zipfile.ZipFile(target, "w") as zf:
            for package in SHIPPED_PACKAGES:
                base = os.path.join(repo, package)
                walked = os.walk(base) if os.path.isdir(base) else [
                    (os.path.dirname(base), [], [os.path.basename(base)])]
                for folder, _dirs, files in walked:
                    for name in files:
                        if name.endswith(".py"):
                            path = os.path.join(folder, name)
                            zf.write(path, os.path.relpath(path, repo))
        _ZIP_PATH = target
    return _ZIP_PATH


_ZIP_PATH: str | None = None
SHIPPED_PACKAGES = ("connectors", "client", "protocol", "broker/__init__.py", "broker/security")
"""Packages (and files) of this project that executors import (zipped by :func:`register`;
``broker.security`` for TLS/SASL in :mod:`client.connection`)."""
