"""The ``josef`` sink: a DataFrame written (batch and streaming) and read back by a consumer."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def test_batch_write_is_read_back_exactly(spark, kafka):
    topic = kafka.new_topic("spark-sink", 3)
    n = 5_000
    df = spark.range(n).selectExpr(
        "CAST(id AS INT) % 3 AS partition",
        "CASE WHEN id % 10 = 0 THEN NULL ELSE CAST(concat('k', id) AS BINARY) END AS key",
        "concat('value-', id) AS value",  # a string column is written as its UTF-8 bytes
        "CASE WHEN id % 2 = 0 THEN array(named_struct('key', 'id', 'value',"
        " CAST(CAST(id AS STRING) AS BINARY)), named_struct('key', 'nil', 'value',"
        " CAST(NULL AS BINARY))) END AS headers",
        "'ignored extra column' AS note",
    ).repartition(4)
    started = time.monotonic()
    (df.write.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
     .option("topic", topic).mode("append").save())
    print(f"write took {time.monotonic() - started:.1f}s")

    msgs = kafka.consume_all(topic, 3, expected=n)
    got = sorted(
        ((m.partition(), m.key(), m.value(), tuple(m.headers() or ())) for m in msgs),
        key=lambda r: r[2])
    want = list(
        (i % 3, None if i % 10 == 0 else b"k%d" % i, b"value-%d" % i,
         (("id", b"%d" % i), ("nil", None)) if i % 2 == 0 else ())
        for i in range(n))
    want.sort(key=lambda r: r[2])
    assert got == want


def test_topic_column_routes_records_and_streaming_write(spark, kafka, tmp_path):
    first, second = kafka.new_topic("spark-route-a", 1), kafka.new_topic("spark-route-b", 2)
    df = spark.createDataFrame(
        [(first, "k1", "a1"), (second, "k2", "b1"), (first, None, "a2"), (second, "k2", "b2")],
        "topic string, key string, value string")
    (df.write.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
     .mode("append").save())
    a = kafka.consume_all(first, 1, expected=2)
    assert sorted(((m.key(), m.value()) for m in a), key=repr) == [(None, b"a2"), (b"k1", b"a1")]
    b = kafka.consume_all(second, 2, expected=2)
    assert sorted(m.value() for m in b) == [b"b1", b"b2"]
    assert len({m.partition() for m in b}) == 1  # same key, same partition (murmur2)

    # Streaming: the source's rows of `first` copied to a third topic by a streaming sink.
    copy = kafka.new_topic("spark-copy", 1)
    query = (spark.readStream.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("subscribe", first).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load()
             .selectExpr("key", "concat(value, CAST('!' AS BINARY)) AS value", "headers")
             .writeStream.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("topic", copy).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    copied = kafka.consume_all(copy, 1, expected=2)
    assert sorted(((m.key(), m.value()) for m in copied), key=repr) == [
        (None, b"a2!"), (b"k1", b"a1!")]
