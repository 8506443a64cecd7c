"""Example pipeline: events topic -> streaming windowed aggregation -> results topic.

One command against a local broker (Josef or any Kafka-protocol broker)::

    python examples/spark_pipeline.py --bootstrap 127.0.0.1:9092

or submitted to a Spark standalone cluster (see docs/spark.md for starting one)::

    PYTHONPATH=$PWD $SPARK_HOME/bin/spark-submit --master spark://127.0.0.1:7077 \
        examples/spark_pipeline.py --bootstrap 127.0.0.1:9092

What it does:
1. creates topics ``<prefix>-events`` (3 partitions) and ``<prefix>-counts`` (1 partition);
2. produces 600 page events, 2 per second of event time from 2024-01-01T00:00:00Z
   (the Kafka record timestamp is the event time; value is JSON
   ``{"user": "u3", "action": "view"}``, key is the user), then one late "tick" event
   per partition at 00:10:00 that moves the event-time watermark past every window;
3. runs a Structured Streaming query: ``format("josef")`` source -> parse JSON -> 1 minute
   tumbling windows on the record timestamp, watermark 1 minute -> count per window and
   action -> ``format("josef")`` sink, in append mode (each window is written once, when
   final); ``trigger(availableNow=True)`` so the command finishes (``--follow`` keeps it
   running with a 2 s processing-time trigger instead);
4. reads the results topic back and prints one line per window and action.

The expected output is in docs/spark.md. Needs pyspark>=4, pyarrow, confluent-kafka.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

EVENT_START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
EVENT_COUNT = 600
EVENT_SPACING_MS = 500
ACTIONS = ("view", "view", "view", "click", "click", "buy")
USERS = 7
EVENTS_PARTITIONS = 3


def make_events() -> list[tuple[int, bytes, bytes, int]]:
    """The events: ``(partition, key, value, timestamp_ms)``; the last ones are the ticks."""
    events = []
    for i in range(EVENT_COUNT):
        user = f"u{i % USERS}"
        value = json.dumps({"user": user, "action": ACTIONS[i % len(ACTIONS)]}).encode()
        events.append((i % EVENTS_PARTITIONS, user.encode(), value,
                       EVENT_START_MS + i * EVENT_SPACING_MS))
    tick = json.dumps({"user": "system", "action": "tick"}).encode()
    for partition in range(EVENTS_PARTITIONS):
        events.append((partition, b"system", tick, EVENT_START_MS + 10 * 60_000))
    return events


def expected_counts() -> dict[tuple[str, str], int]:
    """``{(window_start ISO, action): count}`` the pipeline must output (ticks excluded:
    their window is never closed by the watermark)."""
    counts: dict[tuple[str, str], int] = {}
    for _p, _k, value, ts in make_events()[:EVENT_COUNT]:
        minute = (ts - EVENT_START_MS) // 60_000
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((EVENT_START_MS // 1000)
                                                                 + minute * 60))
        key = (start, json.loads(value)["action"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def create_topics(bootstrap: str, prefix: str, replication_factor: int = -1) -> tuple[str, str]:
    """The two topics; replication factor -1 takes the broker's ``default.replication.factor``
    (KIP-464), so the example matches the cluster it runs on (the README's three-broker
    cluster has 3 and ``min.insync.replicas=2``; a single broker has 1)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    events, counts = f"{prefix}-events", f"{prefix}-counts"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(events, EVENTS_PARTITIONS, replication_factor),
                                   NewTopic(counts, 1, replication_factor)])
    for future in futures.values():
        future.result(30)
    return events, counts


def produce_events(bootstrap: str, topic: str) -> None:
    """Produce :func:`make_events`; the ticks go after a flush, one batch each."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 10})
    events = make_events()
    for batch in (events[:EVENT_COUNT], *([e] for e in events[EVENT_COUNT:])):
        for partition, key, value, ts in batch:
            producer.produce(topic, value=value, key=key, partition=partition, timestamp=ts)
        if producer.flush(30):
            raise TimeoutError("events not acknowledged in 30 s")


def start_query(spark, bootstrap: str, events: str, counts: str, checkpoint: str,
                follow: bool = False):
    """Start the streaming aggregation; returns the StreamingQuery."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("josef")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", events)
           .option("startingOffsets", "earliest")
           .load())
    parsed = raw.select(
        F.col("timestamp").alias("event_time"),
        F.from_json(F.col("value").cast("string"), "user string, action string").alias("e"),
    )
    windowed = (parsed.withWatermark("event_time", "1 minute")
                .groupBy(F.window("event_time", "1 minute"), F.col("e.action").alias("action"))
                .count())
    start = F.date_format(F.col("window.start"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    end = F.date_format(F.col("window.end"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    out = windowed.select(
        F.concat_ws("/", start, F.col("action")).alias("key"),
        F.to_json(F.struct(start.alias("window_start"), end.alias("window_end"),
                           F.col("action"), F.col("count"))).alias("value"),
    )
    writer = (out.writeStream.format("josef")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", counts)
              .option("checkpointLocation", checkpoint)
              .outputMode("append"))
    writer = writer.trigger(processingTime="2 seconds") if follow else writer.trigger(
        availableNow=True)
    return writer.start()


def read_results(bootstrap: str, topic: str, idle_s: float = 2.0,
                 timeout_s: float = 60.0) -> list[dict]:
    """Every result record of ``topic`` (1 partition), reading until ``idle_s`` s of quiet."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    results, last = [], time.monotonic()
    deadline = last + timeout_s
    try:
        while time.monotonic() - last < idle_s and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    results.append(json.loads(msg.value()))
                    last = time.monotonic()
    finally:
        consumer.close()
    return results


def format_results(results: list[dict]) -> str:
    lines = ["window_start          window_end            action  count"]
    for r in sorted(results, key=lambda r: (r["window_start"], r["action"])):
        lines.append(f"{r['window_start']}  {r['window_end']}  {r['action']:<6}  {r['count']:>5}")
    return "\n".join(lines)


def make_session(master: str | None = None):
    """The SparkSession: under ``spark-submit`` its ``--master``; else ``master``
    (default local[2]). The connector's code is shipped to the executors (``register``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, repo)
    from pyspark.sql import SparkSession

    from connectors.spark import register

    builder = SparkSession.builder.appName("josef-example")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not started by spark-submit
        builder = builder.master(master or "local[2]")
    spark = (builder.config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="host:port of a broker")
    parser.add_argument("--prefix", default=f"example-{uuid.uuid4().hex[:6]}",
                        help="topic name prefix (default: random, so reruns start clean)")
    parser.add_argument("--follow", action="store_true",
                        help="keep the query running (Ctrl-C to stop) instead of availableNow")
    parser.add_argument("--master", default=None,
                        help="Spark master URL when not run by spark-submit (default local[2])")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint directory (default: a temporary one, removed after)")
    parser.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                        help="of the two topics (default -1: the broker's "
                             "default.replication.factor)")
    args = parser.parse_args(argv)

    events, counts = create_topics(args.bootstrap, args.prefix, args.replication_factor)
    produce_events(args.bootstrap, events)
    print(f"produced {EVENT_COUNT} events (+{EVENTS_PARTITIONS} ticks) to {events}")
    spark = make_session(args.master)
    try:
        with tempfile.TemporaryDirectory(prefix="josef-example-") as scratch:
            checkpoint = args.checkpoint or scratch
            query = start_query(spark, args.bootstrap, events, counts, checkpoint, args.follow)
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            if query.exception() is not None:
                raise query.exception()
        results = read_results(args.bootstrap, counts)
        print(f"{len(results)} results in {counts}:")
        print(format_results(results))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
