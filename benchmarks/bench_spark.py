"""The Spark ``josef`` connector against the client library alone: same topic, same run.

    python benchmarks/bench_spark.py [--bootstrap 127.0.0.1:9092] [--records 2000000]
                                     [--repeat 3] [--no-write]

Without ``--bootstrap`` (or ``JOSEF_TEST_BOOTSTRAP``) it starts a Josef broker itself.
Run it under ``nice`` on a shared machine and read the ratios: every number in one table
comes from one run, each measurement the best of ``--repeat`` rounds that interleave all
readers (so a burst of load elsewhere hits them alike).

Reads: a topic of ``--records`` records (``--value-bytes`` values, 8-byte keys, one header)
in 6 partitions, read whole by

- confluent-kafka ``Consumer``, 1 process (all partitions assigned) and 2 processes (3
  partitions each), touching key, value, headers, timestamp and offset of every record;
  ``fetch.queue.backoff.ms=0`` (librdkafka's 1000 ms default idles the consumer whenever
  Python drains its queue slower than it fills, which halves its throughput here);
- Spark ``local[2]``, ``includeHeaders=true``: a batch read (``spark.read`` -> ``noop``)
  and a streaming read (``readStream`` with ``Trigger.AvailableNow`` -> ``noop``), after
  a warm-up read so JVM and Python worker start-up are not counted.

Writes: the same number of records (value of ``--value-bytes``, 7-byte string key) to a
new 6-partition topic by a confluent-kafka ``Producer`` in 1 process (the sink's settings:
acks=all, idempotence, linger.ms=100, batch.num.messages=100000, murmur2 partitioner,
delivery reports for errors only) and by Spark ``local[2]`` ``df.write.format("josef")``
from ``spark.range`` (2 tasks, Arrow input).

Writes ``benchmarks/results/spark.md`` (a table of seconds, records/s and the ratios).
"""

from __future__ import annotations

import argparse
import multiprocessing
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
CONSUMER_TUNING = {"fetch.queue.backoff.ms": "0"}


def produce(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "acks": "all",
                         "enable.idempotence": True})
    value = b"x" * value_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=b"k%07d" % i, partition=i % PARTITIONS,
                                 headers=[("n", b"%d" % i)])
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise TimeoutError("test records not acknowledged")


def _consume(bootstrap: str, topic: str, partitions: list[int], expect: int, queue,
             go) -> None:
    """One consumer process: read ``expect`` records of ``partitions`` from offset 0, once
    ``go`` (an Event) is set; ``queue`` carries "ready" and the seconds back."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4()}",
                         "enable.auto.commit": False, "log_level": 4, **CONSUMER_TUNING})
    queue.put("ready")
    go.wait()  # the start signal (not on ``queue``: the parent could read its own message)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen = nbytes = 0
    while seen < expect:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() is None:
                seen += 1
                nbytes += len(msg.value()) + len(msg.key())
                msg.headers()
                msg.timestamp()
                msg.offset()
    queue.put(time.perf_counter() - started)
    consumer.close()


def direct_read(bootstrap: str, topic: str, records: int, processes: int) -> float:
    """Seconds for ``processes`` consumer processes to read every record (from the start
    signal until the last one is done)."""
    ctx = multiprocessing.get_context("spawn")
    shares = [list(range(PARTITIONS))[i::processes] for i in range(processes)]
    per_partition = records // PARTITIONS
    queues = [ctx.Queue() for _ in shares]
    go = ctx.Event()
    procs = [ctx.Process(target=_consume, args=(bootstrap, topic, share,
                                                per_partition * len(share), q, go))
             for share, q in zip(shares, queues, strict=True)]
    for proc in procs:
        proc.start()
    for q in queues:
        q.get(timeout=120)
    started = time.perf_counter()
    go.set()
    for q in queues:
        q.get(timeout=1800)
    elapsed = time.perf_counter() - started
    for proc in procs:
        proc.join(60)
    return elapsed


def direct_write(bootstrap: str, topic: str, records: int, value_bytes: int) -> float:
    """Seconds for one producer with the sink's settings to write and flush ``records``."""
    from confluent_kafka import Producer

    sys.path.insert(0, str(REPO))
    from connectors.spark.writer import PRODUCER_DEFAULTS

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, **PRODUCER_DEFAULTS,
                         "on_delivery": lambda err, msg: err and errors.append(err)})
    value = b"x" * value_bytes
    keys = [str(i).encode() for i in range(records)]  # the same keys Spark writes
    started = time.perf_counter()
    produce_ = producer.produce
    i = 0
    while i < records:
        try:
            for i in range(i, records):  # noqa: B020 - resumes at the record that failed
                produce_(topic, value, keys[i])
            i = records
        except BufferError:
            producer.poll(0.1)
    if producer.flush(600) or errors:
        raise RuntimeError(f"producer failed: {errors[:1]}")
    return time.perf_counter() - started


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
             .config("spark.driver.memory", "2g")
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


def spark_stream(spark, bootstrap: str, topic: str, records: int) -> float:
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (spark.readStream.format("josef").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("includeHeaders", "true").load()
                 .writeStream.format("noop").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise query.exception()
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != records:
        raise RuntimeError(f"streaming read saw {rows} records, not {records}")
    return elapsed


def spark_write(spark, bootstrap: str, topic: str, records: int, value_bytes: int) -> float:
    df = spark.range(records).selectExpr("CAST(id AS STRING) AS key",
                                         f"repeat('x', {value_bytes}) AS value")
    started = time.perf_counter()
    (df.write.format("josef").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())
    return time.perf_counter() - started


def new_topic(bootstrap: str, prefix: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    return topic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("JOSEF_TEST_BOOTSTRAP"),
                        help="host:port of a running broker (default: start a Josef broker "
                             "on 127.0.0.1 with tests/integration/harness.py, stopped at the end)")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--broker-name", default=None, help="label for the results table")
    parser.add_argument("--no-write", action="store_true", help="do not write the results file")
    args = parser.parse_args(argv)
    args.records -= args.records % PARTITIONS
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
    n = args.records
    topic = new_topic(bootstrap, "bench-spark")
    produce(bootstrap, topic, n, args.value_bytes)

    spark = spark_session()
    times: dict[str, list[float]] = {}
    try:
        spark_batch(spark, bootstrap, topic)  # warm-up: JVM, Python workers, imports
        spark_write(spark, bootstrap, new_topic(bootstrap, "bench-warm"), 60_000,
                    args.value_bytes)
        for round_ in range(args.repeat):
            steps = {
                "read: confluent-kafka Consumer, 1 process":
                    lambda: direct_read(bootstrap, topic, n, 1),
                "read: confluent-kafka Consumer, 2 processes":
                    lambda: direct_read(bootstrap, topic, n, 2),
                "read: Spark batch (spark.read -> noop), local[2]":
                    lambda: spark_batch(spark, bootstrap, topic),
                "read: Spark streaming availableNow -> noop, local[2]":
                    lambda: spark_stream(spark, bootstrap, topic, n),
                "write: confluent-kafka Producer, 1 process":
                    lambda: direct_write(bootstrap, new_topic(bootstrap, "bench-out"), n,
                                         args.value_bytes),
                "write: Spark df.write (2 tasks), local[2]":
                    lambda: spark_write(spark, bootstrap, new_topic(bootstrap, "bench-out"), n,
                                        args.value_bytes),
            }
            for name, step in steps.items():
                seconds = step()
                times.setdefault(name, []).append(seconds)
                print(f"round {round_ + 1}: {name}: {seconds:.2f} s ({n / seconds:,.0f}/s)",
                      flush=True)
    finally:
        spark.stop()

    best = {name: min(values) for name, values in times.items()}
    rate = {name: n / s for name, s in best.items()}
    two = rate["read: confluent-kafka Consumer, 2 processes"]
    one = rate["read: confluent-kafka Consumer, 1 process"]
    producer = rate["write: confluent-kafka Producer, 1 process"]
    ratio = {name: (f"{r / two:.2f} of 2 processes, {r / one:.2f} of 1"
                    if name.startswith("read: Spark") else
                    f"{r / producer:.2f} of the producer" if name.startswith("write: Spark")
                    else "") for name, r in rate.items()}
    lines = [
        f"# Spark connector throughput ({time.strftime('%Y-%m-%d')})",
        "",
        f"{n:,} records ({args.value_bytes}-byte values, 8-byte keys, 1 header) in "
        f"{PARTITIONS} partitions on {broker_name}; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at the end; Python {platform.python_version()}; best of "
        f"{args.repeat} interleaved rounds (all rounds: "
        + "; ".join(f"{name.split(': ', 1)[1].split(' (')[0].split(',')[0]} "
                    f"{'/'.join(f'{v:.1f}' for v in values)} s"
                    for name, values in times.items()) + ").",
        "",
        "| measurement | seconds | records/s | MB/s | ratio |",
        "|---|---:|---:|---:|---|",
    ]
    mb = n * (args.value_bytes + 8) / 1e6
    for name, seconds in best.items():
        lines.append(f"| {name} | {seconds:.2f} | {rate[name]:,.0f} | {mb / seconds:.1f} | "
                     f"{ratio[name]} |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
