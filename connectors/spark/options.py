"""Option parsing for the Spark connector, modelled on Spark's built-in Kafka source/sink.

Option names are matched case-insensitively (as Spark does). The names and their meaning
follow the "Structured Streaming + Kafka Integration Guide" of Spark 4:

source (``spark.read`` / ``spark.readStream``):
  ``kafka.bootstrap.servers`` (required), exactly one of ``subscribe`` (comma-separated
  topics), ``subscribePattern`` (Java-style regex, matched against the whole topic name) or
  ``assign`` (JSON ``{"topicA":[0,1],"topicB":[2,4]}``); ``startingOffsets`` and
  ``endingOffsets`` (``earliest`` / ``latest`` / JSON ``{"topicA":{"0":23,"1":-2}}`` where
  -2 means earliest and -1 latest); ``startingTimestamp`` / ``endingTimestamp`` (ms since
  the epoch, every partition) and ``startingOffsetsByTimestamp`` /
  ``endingOffsetsByTimestamp`` (JSON ``{"topicA":{"0":1700000000000}}``): the first offset
  whose record timestamp is >= the timestamp (ListOffsets, KIP-79), taking precedence over
  ``*Offsets`` in that order; ``startingOffsetsByTimestampStrategy`` (``error``, default, or
  ``latest``: what a starting timestamp with no such record gives; an ending one gives
  latest); ``minPartitions`` (split large offset ranges so that about that many Spark
  tasks read); ``maxOffsetsPerTrigger`` (long, streaming only); ``includeHeaders`` (bool,
  default false); ``failOnDataLoss`` (bool, default true); ``kafkaConsumer.pollTimeoutMs``
  (ms an executor waits without progress, default 120000). ``ending*`` are batch-only.

sink (``df.write`` / ``df.writeStream``):
  ``kafka.bootstrap.servers`` (required), ``topic`` (optional; overrides the ``topic`` column),
  ``exactlyOnce`` (streaming writes: one transaction per micro-batch and task, default true;
  ``false`` is at-least-once like Spark's Kafka sink), ``kafka.transactional.id`` (the prefix
  of the transactional ids; default derived from the query's checkpoint location).

Every other ``kafka.<name>`` option is handed to the client library (librdkafka, through
confluent-kafka) as ``<name>``; librdkafka rejects names it does not know, and that error is
reported as a bad option. Any other option name is an error (:class:`KafkaOptionError`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
"""Offset sentinel meaning "the partition's log start offset" (as in Spark's offsets JSON)."""
LATEST = -1
"""Offset sentinel meaning "the partition's end offset (high watermark)"."""

SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "maxoffsetspertrigger",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "minpartitions",
    "includeheaders",
    "failondataloss",
    "kafkaconsumer.polltimeoutms",
}
SINK_OPTIONS = {"topic", "exactlyonce"}
# Options Spark itself may add to a data source's option map (query options included).
SPARK_INTERNAL_OPTIONS = {"path", "paths", "checkpointlocation", "queryname"}

# Java client properties that have no librdkafka counterpart and no meaning here: ignored.
_JAVA_ONLY_PROPERTIES = {"max.poll.records", "key.deserializer", "value.deserializer",
                         "key.serializer", "value.serializer"}


class KafkaOptionError(ValueError):
    """A connector option is missing, unknown or malformed. The message names the option."""


Offsets = dict[str, dict[int, int]]
"""Per topic, per partition offset: ``{"topic": {0: 42}}`` (may hold EARLIEST/LATEST)."""

Timestamps = int | dict[str, dict[int, int]]
"""One timestamp (ms) for every partition, or per topic and partition."""


@dataclass(frozen=True)
class TopicSelection:
    """How topics are chosen: exactly one of the three fields is set."""

    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is selected by ``subscribe``/``subscribePattern`` (not ``assign``)."""
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None and not topic.startswith("__")
        return topic in self.subscribe


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of a read (batch or streaming)."""

    client_config: dict[str, str]
    topics: TopicSelection
    starting_offsets: Offsets | int  # EARLIEST / LATEST or per-partition JSON
    ending_offsets: Offsets | int
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    starting_timestamps: Timestamps | None = None  # wins over starting_offsets
    ending_timestamps: Timestamps | None = None  # wins over ending_offsets
    no_timestamp_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    min_partitions: int | None = None


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of a write (batch or streaming)."""

    client_config: dict[str, str]
    topic: str | None = None
    exactly_once: bool = True  # streaming writes only
    transactional_id_prefix: str | None = None  # kafka.transactional.id, or from the checkpoint


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _split_client_config(opts: dict[str, str], allowed: set[str], kind: str) -> dict[str, str]:
    """Pull out ``kafka.*`` options; raise on any name that is neither known nor ``kafka.*``."""
    unknown = sorted(
        k for k in opts
        if k not in allowed and k not in SPARK_INTERNAL_OPTIONS and not k.startswith("kafka.")
    )
    if unknown:
        raise KafkaOptionError(
            f"unknown {kind + ' ' if kind else ''}option(s) {unknown}; known: kafka.bootstrap.servers, kafka.<client "
            f"property>, {', '.join(sorted(allowed))}"
        )
    config = {}
    for key, value in opts.items():
        if key.startswith("kafka."):
            name = key[len("kafka."):]
            if name in _JAVA_ONLY_PROPERTIES:
                continue
            if name in ("group.id", "enable.auto.commit", "auto.offset.reset"):
                raise KafkaOptionError(
                    f"option 'kafka.{name}' is not supported: the connector tracks offsets "
                    "itself (in Spark's checkpoint) and never joins a consumer group"
                )
            config[name] = value
    servers = config.get("bootstrap.servers", "").strip()
    if not servers:
        raise KafkaOptionError("option 'kafka.bootstrap.servers' is required (host:port[,...])")
    for server in servers.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise KafkaOptionError(
                f"option 'kafka.bootstrap.servers': {server.strip()!r} is not host:port"
            )
    return config


def _parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise KafkaOptionError(f"option '{name}' must be true or false, got {value!r}")


def _parse_positive_long(name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        raise KafkaOptionError(f"option '{name}' must be a positive integer, got {value!r}") from None
    if number <= 0:
        raise KafkaOptionError(f"option '{name}' must be a positive integer, got {value!r}")
    return number


def _load_json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaOptionError(f"option '{name}' is not valid JSON ({exc.msg} at char "
                               f"{exc.pos}): {text!r}") from None


def parse_assign(text: str) -> tuple[tuple[str, int], ...]:
    """Parse ``assign`` JSON ``{"topicA":[0,1]}`` into sorted (topic, partition) pairs."""
    data = _load_json("assign", text)
    if not isinstance(data, dict) or not data:
        raise KafkaOptionError(
            f"option 'assign' must be a JSON object like {{\"topicA\":[0,1]}}, got {text!r}")
    pairs = set()
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise KafkaOptionError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers >= 0")
        pairs.update((topic, p) for p in parts)
    return tuple(sorted(pairs))


def parse_offsets(name: str, text: str, allow: tuple[str, ...]) -> Offsets | int:
    """Parse ``startingOffsets``/``endingOffsets``.

    Returns EARLIEST/LATEST for the keywords, else ``{"topic": {partition: offset}}`` from JSON
    ``{"topic":{"0":23,"1":-2}}``; offsets are >= 0 or one of -2 (earliest) / -1 (latest), and
    -1 or -2 are refused where ``allow`` does not name them.
    """
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if word not in allow:
            raise KafkaOptionError(f"option '{name}' cannot be {word!r} here; use one of "
                                   f"{list(allow)} or per-partition JSON")
        return EARLIEST if word == "earliest" else LATEST
    data = _load_json(name, text)
    example = '{"topicA":{"0":23,"1":-2}}'
    if not isinstance(data, dict) or not data:
        raise KafkaOptionError(
            f"option '{name}' must be 'earliest', 'latest' or JSON like {example}, got {text!r}")
    result: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise KafkaOptionError(
                f"option '{name}': topic {topic!r} must map to an object of partition -> offset")
        result[topic] = {}
        for part, offset in parts.items():
            if not str(part).isdigit():
                raise KafkaOptionError(
                    f"option '{name}': partition {part!r} of topic {topic!r} is not a number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise KafkaOptionError(
                    f"option '{name}': offset {offset!r} for {topic}-{part} must be an integer "
                    ">= 0, or -2 (earliest) / -1 (latest)")
            if offset == EARLIEST and "earliest" not in allow:
                raise KafkaOptionError(f"option '{name}': -2 (earliest) is not allowed here")
            if offset == LATEST and "latest" not in allow:
                raise KafkaOptionError(f"option '{name}': -1 (latest) is not allowed here")
            result[topic][int(part)] = offset
    return result


def check_option_names(options: Mapping[str, str]) -> None:
    """Checks that hold for every use (read or write): option names, bootstrap servers."""
    _split_client_config(_lower(options), SOURCE_OPTIONS | SINK_OPTIONS, "")


def parse_source_options(options: Mapping[str, str], streaming: bool | None) -> SourceOptions:
    """Validate read options; raise :class:`KafkaOptionError` naming the bad option.

    ``streaming`` None checks only what holds for both batch and streaming reads.
    """
    opts = _lower(options)
    client_config = _split_client_config(opts, SOURCE_OPTIONS, "source")
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(chosen) != 1:
        raise KafkaOptionError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be given, got "
            f"{chosen or 'none'}")
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise KafkaOptionError("option 'subscribe' must list at least one topic")
        selection = TopicSelection(subscribe=topics)
    elif "subscribepattern" in opts:
        try:
            re.compile(opts["subscribepattern"])
        except re.error as exc:
            raise KafkaOptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        selection = TopicSelection(pattern=opts["subscribepattern"])
    else:
        selection = TopicSelection(assign=parse_assign(opts["assign"]))

    # streaming=None: mode not known yet (DataSource.schema()); check what both modes accept.
    starting_default = "earliest" if streaming is False else "latest"
    starting = parse_offsets(
        "startingOffsets", opts.get("startingoffsets", starting_default),
        ("earliest",) if streaming is False else ("earliest", "latest"))
    for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
        if streaming and name in opts:
            raise KafkaOptionError(f"option '{_NAMES[name]}' is for batch reads only "
                                   "(spark.read)")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or "
                               f"'latest', got {strategy!r}")
    ending = parse_offsets("endingOffsets", opts.get("endingoffsets", "latest"), ("latest",))
    if streaming is False and "maxoffsetspertrigger" in opts:
        raise KafkaOptionError("option 'maxOffsetsPerTrigger' is for streaming reads only")
    poll_timeout = _parse_positive_long(
        "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms"))
    return SourceOptions(
        client_config=client_config,
        topics=selection,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=_parse_positive_long(
            "maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger")),
        include_headers=_parse_bool("includeHeaders", opts.get("includeheaders"), False),
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss"), True),
        poll_timeout_ms=poll_timeout or 120_000,
        starting_timestamps=_parse_timestamps(opts, "starting"),
        ending_timestamps=_parse_timestamps(opts, "ending"),
        no_timestamp_match_latest=strategy == "latest",
        min_partitions=_parse_positive_long("minPartitions", opts.get("minpartitions")),
    )


_NAMES = {"endingoffsets": "endingOffsets", "endingtimestamp": "endingTimestamp",
          "endingoffsetsbytimestamp": "endingOffsetsByTimestamp"}


def _parse_timestamps(opts: dict[str, str], which: str) -> Timestamps | None:
    """``<which>Timestamp`` (one ms value) or ``<which>OffsetsByTimestamp`` (JSON), the
    former winning as in Spark; None when neither is set."""
    single = opts.get(f"{which}timestamp")
    if single is not None:
        name = f"{which}Timestamp"
        try:
            value = int(single.strip())
        except ValueError:
            raise KafkaOptionError(f"option '{name}' must be a timestamp in ms since the "
                                   f"epoch, got {single!r}") from None
        if value < 0:
            raise KafkaOptionError(f"option '{name}' must be >= 0, got {single!r}")
        return value
    text = opts.get(f"{which}offsetsbytimestamp")
    if text is None:
        return None
    name = f"{which}OffsetsByTimestamp"
    data = _load_json(name, text)
    example = '{"topicA":{"0":1700000000000}}'
    if not isinstance(data, dict) or not data:
        raise KafkaOptionError(f"option '{name}' must be JSON like {example}, got {text!r}")
    result: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not all(str(p).isdigit() for p in parts):
            raise KafkaOptionError(f"option '{name}': topic {topic!r} must map partition "
                                   "numbers to timestamps")
        for part, ts in parts.items():
            if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
                raise KafkaOptionError(f"option '{name}': timestamp {ts!r} for {topic}-{part} "
                                       "must be an integer >= 0 (ms since the epoch)")
        result[topic] = {int(p): ts for p, ts in parts.items()}
    return result


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate write options; raise :class:`KafkaOptionError` naming the bad option."""
    opts = _lower(options)
    # Streaming writes see the query's options too (checkpointLocation, queryName).
    client_config = _split_client_config(opts, SINK_OPTIONS, "sink")
    for name in ("acks", "enable.idempotence"):
        if name in client_config and client_config[name] not in ("all", "-1", "true"):
            raise KafkaOptionError(
                f"option 'kafka.{name}={client_config[name]}' is not allowed: the sink always "
                "writes with acks=all and enable.idempotence=true")
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaOptionError("option 'topic' must not be empty")
    prefix = client_config.pop("transactional.id", None)
    if prefix is None and "checkpointlocation" in opts:
        import hashlib
        import os

        where = os.path.abspath(opts["checkpointlocation"]) if "://" not in opts[
            "checkpointlocation"] else opts["checkpointlocation"]
        prefix = "josef-spark-" + hashlib.sha256(where.encode()).hexdigest()[:16]
    return SinkOptions(client_config=client_config, topic=topic,
                       exactly_once=_parse_bool("exactlyOnce", opts.get("exactlyonce"), True),
                       transactional_id_prefix=prefix)


def offsets_to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets in Spark's checkpoint layout: ``{"topic": {"0": 42}}``, keys sorted."""
    return {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`offsets_to_json`; raises :class:`KafkaOptionError` if malformed."""
    try:
        return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (AttributeError, TypeError, ValueError):
        raise KafkaOptionError(f"malformed stream offsets in checkpoint: {data!r}") from None
