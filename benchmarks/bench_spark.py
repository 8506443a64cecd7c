"""Throughput of the Spark ``josef`` source vs the client library alone, same topic, same run.

    python benchmarks/bench_spark.py [--bootstrap 127.0.0.1:9092] [--records 200000]

Without ``--bootstrap`` (or ``JOSEF_TEST_BOOTSTRAP``) it starts a Josef broker itself.

1. creates a topic (6 partitions) and produces ``--records`` records of ``--value-bytes``
   bytes (key ~8 bytes, one header);
2. reads it all with confluent-kafka directly in this process (one consumer, all partitions
   assigned): the baseline;
3. reads it all through Spark (local[2]) with the ``josef`` source, after a warm-up read so
   JVM and Python worker start-up are not counted: a batch read (``spark.read`` ->
   ``noop`` sink) and a streaming read (``readStream`` -> ``noop``, availableNow);
4. prints a markdown table of records/s and MB/s and writes it to benchmarks/results/spark.md.

Each measurement is the best of ``--repeat`` runs (default 3).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import sys
import tempfile
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "spark.md"
PARTITIONS = 6


def produce(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "acks": "all",
                         "enable.idempotence": True})
    value = b"x" * value_bytes
    body = records - PARTITIONS
    for i in range(body):
        while True:
            try:
                producer.produce(topic, value=value, key=b"k%07d" % i, partition=i % PARTITIONS,
                                 headers=[("n", b"%d" % i)])
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    # The last record of each partition alone in its batch: Tansu 0.6 (a stand-in broker
    # while Josef is built) reports ListOffsets latest as the last batch's base offset + 1.
    for p in range(PARTITIONS):
        producer.produce(topic, value=value, key=b"last", partition=p, headers=[("n", b"-")])
        producer.flush(30)


def direct_read(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for one confluent-kafka consumer to read all ``records`` (values touched)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "log_level": 4})
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = nbytes = 0
    while seen < records:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() is None:
                seen += 1
                nbytes += len(msg.value())
                msg.headers()
                msg.timestamp()
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def spark_session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(REPO))
    from pyspark.sql import SparkSession

    from connectors.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark, ship_code=False)
    return spark


def spark_batch(spark, bootstrap: str, topic: str) -> float:
    started = time.perf_counter()
    (spark.read.format("josef").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).option("includeHeaders", "true").load()
     .write.format("noop").mode("overwrite").save())
    return time.perf_counter() - started


def spark_stream(spark, bootstrap: str, topic: str) -> float:
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (spark.readStream.format("josef").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("includeHeaders", "true").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - started
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if query.exception() is not None:
        raise query.exception()
    return elapsed if rows else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("JOSEF_TEST_BOOTSTRAP"),
                        help="host:port of a running broker (default: start a Josef broker "
                             "on 127.0.0.1 with tests/integration/harness.py, stopped at the end)")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--broker-name", default=None, help="label for the results table")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = parser.parse_args(argv)
    if args.bootstrap:
        return run(args, args.bootstrap, args.broker_name or "the broker")
    sys.path.insert(0, str(REPO))
    from tests.integration.harness import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as directory:
        broker = BrokerProcess(pathlib.Path(directory))
        broker.start()
        try:
            return run(args, broker.bootstrap, args.broker_name or "Josef (python -m broker)")
        finally:
            broker.stop()


def run(args, bootstrap: str, broker_name: str) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    produce(bootstrap, topic, args.records, args.value_bytes)

    spark = spark_session()
    try:
        # Warm-up: JVM, Python workers, librdkafka; not measured.
        spark_batch(spark, bootstrap, topic)
        timings = {
            "confluent-kafka Consumer, 1 process": min(
                direct_read(bootstrap, topic, args.records) for _ in range(args.repeat)),
            "Spark source, batch (spark.read -> noop), local[2]": min(
                spark_batch(spark, bootstrap, topic) for _ in range(args.repeat)),
            "Spark source, streaming availableNow -> noop, local[2]": min(
                spark_stream(spark, bootstrap, topic) for _ in range(args.repeat)),
        }
    finally:
        spark.stop()

    mb = args.records * (args.value_bytes + 8) / 1e6
    lines = [
        f"# Spark source throughput ({time.strftime('%Y-%m-%d')})",
        "",
        f"{args.records:,} records ({args.value_bytes}-byte values, 1 header) in {PARTITIONS} "
        f"partitions on {broker_name} at {bootstrap}; {os.cpu_count()} CPUs, load "
        f"average {os.getloadavg()[0]:.1f} at the end; Python {platform.python_version()}; "
        f"best of {args.repeat}.",
        "",
        "| reader | seconds | records/s | MB/s |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in timings.items():
        lines.append(f"| {name} | {seconds:.2f} | {args.records / seconds:,.0f} | "
                     f"{mb / seconds:.1f} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
