"""Exactly-once streaming output (one transaction per micro-batch and task) against a live
broker: a task's micro-batch replayed after its commit writes nothing, a failed attempt is
aborted and its retry writes once; then a streaming query copied into a topic under
read_committed."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def rows(start: int, count: int):
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "key": [b"k%d" % i for i in range(start, start + count)],
        "value": [b"v%d" % i for i in range(start, start + count)]})


def committed_values(kafka, topic: str, expected: int) -> list[bytes]:
    """Values a read_committed consumer (librdkafka's default) sees in ``topic``."""
    return sorted(m.value() for m in kafka.consume_all(topic, 1, expected=expected))


def test_replayed_and_failed_task_attempts_write_once(kafka):
    from connectors.spark.options import parse_sink_options
    from connectors.spark.writer import write_transactionally

    topic = kafka.new_topic("spark-eos", 1)
    options = parse_sink_options({"kafka.bootstrap.servers": kafka.bootstrap, "topic": topic,
                                  "kafka.transactional.id": f"eos-{uuid.uuid4().hex[:8]}"})
    first = write_transactionally(options, iter([rows(0, 50), rows(50, 50)]), 0, 3)
    assert (first.records, first.skipped) == (100, False)
    # The same task of the same micro-batch again (the query died after this commit but
    # before Spark logged the batch): nothing is written.
    again = write_transactionally(options, iter([rows(0, 100)]), 0, 3)
    assert (again.records, again.skipped) == (0, True)

    # An attempt of batch 1 that fails half-way is aborted; its retry writes once.
    def failing():
        yield rows(100, 40)
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        write_transactionally(options, failing(), 1, 3)
    retry = write_transactionally(options, iter([rows(100, 40), rows(140, 10)]), 1, 3)
    assert (retry.records, retry.skipped) == (50, False)
    # Another task of batch 1 has its own transactional id: not skipped.
    other = write_transactionally(options, iter([rows(150, 5)]), 1, 4)
    assert (other.records, other.skipped) == (5, False)
    assert committed_values(kafka, topic, 155) == sorted(b"v%d" % i for i in range(155))


@pytest.mark.spark_cluster_only
def test_streaming_copy_is_committed_once(spark, kafka, tmp_path):
    source = kafka.new_topic("spark-eos-in", 3)
    kafka.produce(source, [(i % 3, b"k%d" % i, b"v%d" % i, None, None) for i in range(3000)])
    sink = kafka.new_topic("spark-eos-out", 2)

    def run():
        query = (spark.readStream.format("josef").option("kafka.bootstrap.servers",
                                                         kafka.bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "1000").load()
                 .selectExpr("key", "value")
                 .writeStream.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
                 .option("topic", sink).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(240)
        assert not query.isActive and query.exception() is None
        return query

    query = run()
    assert sum(p["numInputRows"] for p in query.recentProgress) == 3000
    got = sorted(m.value() for m in kafka.consume_all(sink, 2, expected=3000))
    assert got == sorted(b"v%d" % i for i in range(3000))
