"""Option validation and offset planning: pure checks, then the errors as Spark shows them."""

from __future__ import annotations

import socket

import pytest

from connectors.spark.options import (
    EARLIEST,
    LATEST,
    KafkaOptionError,
    parse_sink_options,
    parse_source_options,
)
from connectors.spark.planning import OffsetRange, plan_ranges, rate_limit, split_ranges

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


@pytest.fixture
def spark(spark_local):
    """These checks happen before any task runs: local[2] is enough."""
    return spark_local

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_source_options_parse_like_sparks_kafka_source():
    opts = parse_source_options({
        "Kafka.Bootstrap.Servers": "h1:1,h2:2", "ASSIGN": '{"a":[1,0],"b":[2]}',
        "startingOffsets": '{"a":{"0":5,"1":-2}}', "maxOffsetsPerTrigger": "100",
        "includeHeaders": "TRUE", "failOnDataLoss": "false", "kafka.client.id": "me",
    }, streaming=True)
    assert opts.topics.assign == (("a", 0), ("a", 1), ("b", 2))
    assert opts.starting_offsets == {"a": {0: 5, 1: EARLIEST}}
    assert opts.ending_offsets == LATEST
    assert (opts.max_offsets_per_trigger, opts.include_headers, opts.fail_on_data_loss) == (
        100, True, False)
    assert opts.client_config == {"bootstrap.servers": "h1:1,h2:2", "client.id": "me"}
    assert parse_source_options(BASE, streaming=True).starting_offsets == LATEST
    assert parse_source_options(BASE, streaming=False).starting_offsets == EARLIEST
    pattern = parse_source_options({**BASE, "subscribe": None, "subscribePattern": "ev.*"},
                                   streaming=True).topics
    assert pattern.matches("events") and not pattern.matches("xevents")


@pytest.mark.parametrize(("options", "streaming", "message"), [
    ({**BASE, "subscrbe": "t"}, True, r"unknown source option\(s\) \['subscrbe'\]"),
    ({"subscribe": "t"}, True, "'kafka.bootstrap.servers' is required"),
    ({**BASE, "kafka.bootstrap.servers": "nohostport"}, True, "is not host:port"),
    ({**BASE, "assign": '{"t":[0]}'}, True, "exactly one of"),
    ({**BASE, "startingOffsets": '{"t":{"0":5}'}, True, "'startingOffsets' is not valid JSON"),
    ({**BASE, "startingOffsets": '{"t":{"x":5}}'}, True, "partition 'x'"),
    ({**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True, "must be an integer >= 0"),
    ({**BASE, "startingOffsets": '["t"]'}, True, "must be 'earliest', 'latest' or JSON"),
    ({**BASE, "startingOffsets": "latest"}, False, "cannot be 'latest'"),
    ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, r"-2 \(earliest\) is not allowed"),
    ({**BASE, "endingOffsets": "latest"}, True, "for batch reads only"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "positive integer"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "streaming reads only"),
    ({**BASE, "includeHeaders": "yes"}, True, "true or false"),
    ({**BASE, "subscribe": None, "assign": '{"t":["0"]}'}, True, "list of partition numbers"),
    ({**BASE, "subscribe": None, "subscribePattern": "(("}, True, "not a valid regex"),
    ({**BASE, "kafka.group.id": "g"}, True, "never joins a consumer group"),
    ({**BASE, "startingTimestamp": "yesterday"}, True, "'startingTimestamp' must be a timestamp"),
    ({**BASE, "startingTimestamp": "-5"}, True, "'startingTimestamp' must be >= 0"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":{"0":"x"}}'}, True, "must be an integer >= 0"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t":[1]}'}, True, "must map partition numbers"),
    ({**BASE, "endingTimestamp": "5"}, True, "'endingTimestamp' is for batch reads only"),
    ({**BASE, "endingOffsetsByTimestamp": '{"t":{"0":5}}'}, True, "for batch reads only"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, True, "'error' or 'latest'"),
    ({**BASE, "minPartitions": "0"}, False, "'minPartitions' must be a positive integer"),
])
def test_bad_source_options_name_the_option(options, streaming, message):
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(KafkaOptionError, match=message):
        parse_source_options(options, streaming=streaming)


def test_timestamp_options_parse_like_sparks():
    opts = parse_source_options({**BASE, "startingTimestamp": "1700000000000",
                                 "startingOffsetsByTimestamp": '{"t":{"0":5}}',
                                 "endingOffsetsByTimestamp": '{"t":{"1":7,"0":9}}',
                                 "startingOffsetsByTimestampStrategy": "LATEST",
                                 "minPartitions": "12"}, streaming=False)
    assert opts.starting_timestamps == 1_700_000_000_000  # wins over the JSON form
    assert opts.ending_timestamps == {"t": {1: 7, 0: 9}}
    assert opts.no_timestamp_match_latest and opts.min_partitions == 12
    plain = parse_source_options(BASE, streaming=True)
    assert (plain.starting_timestamps, plain.ending_timestamps, plain.min_partitions) == (
        None, None, None)


def test_min_partitions_splits_large_ranges_like_spark():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 50, 60),
              OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]  # enough ranges already
    split = split_ranges(ranges, 5)
    # t-1 is 1% of the data: one part; t-0 gets the other 4, cut evenly, in order.
    assert split == [OffsetRange("t", 0, 0, 250), OffsetRange("t", 0, 250, 500),
                     OffsetRange("t", 0, 500, 750), OffsetRange("t", 0, 750, 1000),
                     OffsetRange("t", 1, 50, 60)]
    uneven = split_ranges([OffsetRange("t", 0, 0, 10)], 3)
    assert [(r.from_offset, r.until_offset) for r in uneven] == [(0, 3), (3, 6), (6, 10)]
    tiny = split_ranges([OffsetRange("t", 0, 0, 2)], 5)  # never an empty range
    assert [(r.from_offset, r.until_offset) for r in tiny] == [(0, 1), (1, 2)]


def test_sink_options():
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "out"})
    assert (opts.topic, opts.client_config) == ("out", {"bootstrap.servers": "h:1"})
    with pytest.raises(KafkaOptionError, match="acks=all"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.acks": "1"})
    with pytest.raises(KafkaOptionError, match=r"unknown sink option\(s\) \['subscribe'\]"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})


def test_rate_limit_shares_budget_by_backlog():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5, ("u", 0): 50}  # u-0 new: starts at 0
    capped = rate_limit(start, end, 90)
    assert capped == {("t", 0): 60, ("t", 1): 120, ("t", 2): 5, ("u", 0): 10}
    assert rate_limit(start, end, 10_000) == end
    one = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 1}, 1)
    assert sum(one.values()) == 1  # always progress, never more than the budget
    for budget in range(1, 460, 7):
        capped = rate_limit(start, end, budget)
        assert sum(capped[tp] - start.get(tp, 0) for tp in end) == min(budget, 450)
        assert all(start.get(tp, 0) <= capped[tp] <= end[tp] for tp in end)


def test_plan_ranges_one_per_partition_with_data():
    start = {("t", 0): 10, ("t", 1): 7, ("t", 2): 9}
    end = {("t", 0): 20, ("t", 1): 7, ("t", 2): 3, ("u", 0): 4}
    assert plan_ranges(start, end) == [OffsetRange("t", 0, 10, 20), OffsetRange("u", 0, 0, 4)]


# --- as Spark reports them, before a query runs --------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_spark_load_rejects_unknown_option(spark, kafka_bootstrap):
    with pytest.raises(Exception, match=r"KafkaOptionError: unknown option\(s\) \['subscrib'\]"):
        (spark.readStream.format("josef").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("subscrib", "t").load())


def test_spark_load_rejects_malformed_offsets_json(spark, kafka_bootstrap):
    with pytest.raises(Exception, match="'startingOffsets' is not valid JSON"):
        (spark.read.format("josef").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("subscribe", "t").option("startingOffsets", "{oops").load())


def test_spark_load_reports_unreachable_bootstrap(spark):
    port = _closed_port()
    for reader in (spark.read, spark.readStream):
        with pytest.raises(Exception, match=f"cannot reach kafka.bootstrap.servers='127.0.0.1:{port}'"):
            (reader.format("josef").option("kafka.bootstrap.servers", f"127.0.0.1:{port}")
             .option("kafka.default.api.timeout.ms", "2000").option("subscribe", "t").load())


def test_spark_batch_write_checks_before_writing(spark, kafka_bootstrap):
    df = spark.createDataFrame([("x",)], "v string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        (df.write.format("josef").option("kafka.bootstrap.servers", kafka_bootstrap)
         .option("topic", "t").mode("append").save())
    port = _closed_port()
    with pytest.raises(Exception, match="cannot reach kafka.bootstrap.servers"):
        (df.selectExpr("v AS value").write.format("josef")
         .option("kafka.bootstrap.servers", f"127.0.0.1:{port}")
         .option("kafka.default.api.timeout.ms", "2000").option("topic", "t")
         .mode("append").save())
