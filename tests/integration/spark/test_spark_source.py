"""The ``josef`` source against a live broker: streaming (availableNow, restarts, new
partitions, data loss) and batch reads."""

from __future__ import annotations

import datetime
import json
import time
import uuid

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

PARTITIONS = 6
RECORDS = 30_000
MORE = 3_000
MAX_PER_TRIGGER = 9_000
BASE_TS = 1_700_000_000_000


def record(i: int) -> tuple:
    """Record ``i``: partition i % 6 (so its offset there is i // 6), own key/value/headers,
    CreateTime ``BASE_TS + i`` ms."""
    return (i % PARTITIONS, b"k%d" % i, b"v%d" % i,
            [("i", b"%d" % i), ("even", b"1" if i % 2 == 0 else None)], BASE_TS + i)


@pytest.fixture(scope="module")
def big_topic(kafka):
    topic = kafka.new_topic("spark-src", PARTITIONS)
    kafka.produce(topic, (record(i) for i in range(RECORDS)))
    return topic


def stream(spark, bootstrap, checkpoint, output, **options):
    """Run an availableNow query from the ``josef`` source into parquet; return progress."""
    reader = spark.readStream.format("josef").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    query = (reader.load().writeStream.format("parquet")
             .option("path", str(output)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    started = time.monotonic()
    query.awaitTermination(180)
    print(f"query took {time.monotonic() - started:.1f}s:",
          [(p["numInputRows"], p["durationMs"].get("addBatch")) for p in query.recentProgress])
    assert not query.isActive, "availableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def check_output(spark, output, count: int, topic: str) -> None:
    """The parquet output holds records 0..count-1 exactly once, every column right.

    Checked in Spark SQL (no 100k-row collect): each row's index ``i`` is parsed from its
    value, and every other column must be what :func:`record` made for ``i``.
    """
    df = spark.read.parquet(str(output)).selectExpr(
        "*", "CAST(substring(CAST(value AS STRING), 2) AS BIGINT) AS i")
    df.createOrReplaceTempView("out")
    stats = spark.sql(f"""
        SELECT count(*) AS n, count(DISTINCT i) AS distinct_i, min(i) AS lo, max(i) AS hi,
          sum(CASE WHEN topic = '{topic}'
                    AND partition = i % {PARTITIONS} AND offset = i DIV {PARTITIONS}
                    AND CAST(key AS STRING) = concat('k', i)
                    AND unix_millis(timestamp) = {BASE_TS} + i AND timestampType = 0
                    AND size(headers) = 2
                    AND headers[0].key = 'i' AND CAST(headers[0].value AS STRING) = CAST(i AS STRING)
                    AND headers[1].key = 'even'
                    AND ((i % 2 = 0 AND CAST(headers[1].value AS STRING) = '1')
                         OR (i % 2 = 1 AND headers[1].value IS NULL))
               THEN 0 ELSE 1 END) AS wrong
        FROM out""").first()
    assert (stats.n, stats.distinct_i, stats.lo, stats.hi, stats.wrong) == (
        count, count, 0, count - 1, 0), stats


def collect_one(spark, output, i: int):
    """Record ``i`` from the output, collected, to check the column values in Python too."""
    return spark.read.parquet(str(output)).where(f"value = X'{(b'v%d' % i).hex()}'").collect()


@pytest.mark.spark_cluster_only
def test_available_now_reads_all_once_then_resumes(spark, kafka, big_topic, tmp_path):
    # This test appends MORE records to big_topic; when both modes' tests run without the
    # module fixture being set up again in between (e.g. -k picks this test only), the second
    # finds RECORDS + MORE. Everything is relative to what is there now (records
    # 0..held-1, record(i) at offset i // 6 of partition i % 6).
    held = sum(kafka.end_offsets(big_topic, PARTITIONS).values())
    assert held in (RECORDS, RECORDS + MORE), held
    checkpoint, output = tmp_path / "ckpt", tmp_path / "out"
    options = {"subscribe": big_topic, "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": MAX_PER_TRIGGER, "includeHeaders": "true"}
    progress = stream(spark, kafka.bootstrap, checkpoint, output, **options)
    sizes = [p["numInputRows"] for p in progress]
    assert sum(sizes) == held
    assert max(sizes) <= MAX_PER_TRIGGER and len(sizes) == -(-held // MAX_PER_TRIGGER)
    check_output(spark, output, held, big_topic)
    [row] = collect_one(spark, output, 12_345)
    assert (row.key, row.value, row.topic, row.partition, row.offset) == (
        b"k12345", b"v12345", big_topic, 12_345 % 6, 12_345 // 6)
    assert row.timestamp == datetime.datetime(2023, 11, 14, 22, 13, 32, 345_000)  # UTC
    assert [(h.key, h.value) for h in row.headers] == [("i", b"12345"), ("even", None)]
    last_end = json.loads(progress[-1]["sources"][0]["endOffset"])
    assert last_end == {big_topic: {str(p): held // PARTITIONS + (p < held % PARTITIONS)
                                    for p in range(PARTITIONS)}}

    kafka.produce(big_topic, (record(i) for i in range(held, held + MORE)))
    progress = stream(spark, kafka.bootstrap, checkpoint, output, **options)
    assert sum(p["numInputRows"] for p in progress) == MORE
    check_output(spark, output, held + MORE, big_topic)


def test_batch_read_of_offset_ranges(spark, kafka, big_topic):
    df = (spark.read.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
          .option("subscribe", big_topic)
          .option("startingOffsets", json.dumps({big_topic: {"0": 10, "3": -2}}))
          .option("endingOffsets", json.dumps(
              {big_topic: {"0": 25, "3": 7, "1": 0, "2": 0, "4": 0, "5": 0}}))
          .load())
    assert df.rdd.getNumPartitions() == 2  # one input partition per topic-partition range
    rows = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").collect()
    got = sorted((r.partition, r.offset, r.v) for r in rows)
    want = sorted([(0, o, f"v{o * 6}") for o in range(10, 25)]
                  + [(3, o, f"v{o * 6 + 3}") for o in range(0, 7)])
    assert got == want
    assert "headers" not in df.columns  # only with includeHeaders=true, as in Spark


def test_pattern_picks_up_new_topics_and_partitions(spark, kafka, tmp_path):
    prefix = f"spark-pat-{uuid.uuid4().hex[:8]}"
    first = kafka.new_topic(prefix + "-a", 2)
    kafka.produce(first, [(i % 2, None, b"a%d" % i, None, None) for i in range(20)])
    options = {"subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest"}
    checkpoint, output = tmp_path / "ckpt", tmp_path / "out"
    stream(spark, kafka.bootstrap, checkpoint, output, **options)
    second = kafka.new_topic(prefix + "-b", 3)
    kafka.produce(second, [(i % 3, None, b"b%d" % i, None, None) for i in range(30)])
    kafka.produce(first, [(0, None, b"a%d" % i, None, None) for i in range(20, 25)])
    progress = stream(spark, kafka.bootstrap, checkpoint, output, **options)
    assert sum(p["numInputRows"] for p in progress) == 35
    values = sorted(r.v for r in spark.read.parquet(str(output))
                    .selectExpr("CAST(value AS STRING) AS v").collect())
    assert values == sorted([f"a{i}" for i in range(25)] + [f"b{i}" for i in range(30)])

    # More partitions for an existing topic (CreatePartitions, KIP-195), if the broker can.
    from confluent_kafka.admin import NewPartitions

    try:
        for future in kafka.admin.create_partitions([NewPartitions(first, 4)]).values():
            future.result(30)
    except Exception as exc:  # noqa: BLE001 - the broker's answer decides
        pytest.skip(f"broker cannot add partitions: {exc}")
    kafka.produce(first, [(3, None, b"c%d" % i, None, None) for i in range(4)])
    progress = stream(spark, kafka.bootstrap, checkpoint, output, **options)
    assert sum(p["numInputRows"] for p in progress) == 4


def test_offsets_past_the_end_are_data_loss(spark, kafka, tmp_path):
    topic = kafka.new_topic("spark-loss", 2)
    kafka.produce(topic, [(i % 2, None, b"x%d" % i, None, None) for i in range(10)])
    starting = json.dumps({topic: {"0": 1000, "1": 0}})
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        stream(spark, kafka.bootstrap, tmp_path / "c1", tmp_path / "o1",
               subscribe=topic, startingOffsets=starting)
    progress = stream(spark, kafka.bootstrap, tmp_path / "c2", tmp_path / "o2",
                      subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    assert sum(p["numInputRows"] for p in progress) == 5  # partition 1 only


def test_deleted_records_are_data_loss(spark, kafka, tmp_path):
    from confluent_kafka import TopicPartition

    topic = kafka.new_topic("spark-del", 1)
    kafka.produce(topic, [(0, None, b"d%d" % i, None, None) for i in range(10)])
    try:
        for future in kafka.admin.delete_records([TopicPartition(topic, 0, 4)]).values():
            future.result(30)
    except Exception as exc:  # noqa: BLE001 - the broker's answer decides
        pytest.skip(f"broker cannot delete records (DeleteRecords): {exc}")
    starting = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="deleted"):
        stream(spark, kafka.bootstrap, tmp_path / "c1", tmp_path / "o1",
               subscribe=topic, startingOffsets=starting)
    progress = stream(spark, kafka.bootstrap, tmp_path / "c2", tmp_path / "o2",
                      subscribe=topic, startingOffsets=starting, failOnDataLoss="false")
    assert sum(p["numInputRows"] for p in progress) == 6


def test_batch_read_by_timestamps_split_by_min_partitions(spark, kafka, big_topic):
    # Record i is in partition i % 6 at offset i // 6 with timestamp BASE_TS + i.
    ending = {big_topic: {str(p): BASE_TS + 1200 * (1 + p % 2) for p in range(PARTITIONS)}}

    def read(**options):
        reader = spark.read.format("josef").option("kafka.bootstrap.servers", kafka.bootstrap)
        for key, value in {"subscribe": big_topic, **options}.items():
            reader = reader.option(key, str(value))
        return reader.load()

    df = read(startingTimestamp=BASE_TS + 600, endingOffsetsByTimestamp=json.dumps(ending),
              minPartitions=12)
    # Even partitions hold 100 offsets, odd ones 300: one task each for the even ones, the
    # odd ones cut in three (Spark's minPartitions arithmetic).
    assert df.rdd.getNumPartitions() == 12
    rows = df.groupBy("partition").agg({"offset": "min", "*": "count"}).collect()
    got = {r["partition"]: (r["min(offset)"], r["count(1)"]) for r in rows}
    assert got == {p: (100, 100 if p % 2 == 0 else 300) for p in range(PARTITIONS)}
    assert df.selectExpr("count(DISTINCT offset, partition)").first()[0] == 1200

    future = BASE_TS + 10**9
    with pytest.raises(Exception, match="no offset matched the starting timestamp"):
        read(startingTimestamp=future).count()
    assert read(startingTimestamp=future, startingOffsetsByTimestampStrategy="latest").count() == 0
    # An ending timestamp after every record is the end offset; partitions the JSON does not
    # name follow startingOffsets / endingOffsets.
    rows = (read(startingOffsetsByTimestamp=json.dumps({big_topic: {"2": BASE_TS + 600}}),
                 endingOffsetsByTimestamp=json.dumps({big_topic: {"2": future}}),
                 endingOffsets=json.dumps({big_topic: {str(p): 0 for p in range(6) if p != 2}}))
            .groupBy("partition").agg({"offset": "min", "*": "count"}).collect())
    assert [(r["partition"], r["min(offset)"]) for r in rows] == [(2, 100)]
    assert rows[0]["count(1)"] >= RECORDS // PARTITIONS - 100
