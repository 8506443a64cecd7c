"""Driver-side cluster queries: topic partitions and offsets, through confluent-kafka.

Everything here runs on the Spark driver (in the Python worker that plans the query), never
on executors. Offsets are asked with ListOffsets (API key 2): "earliest" is the log start
offset, "latest" the end offset a consumer can read up to (high watermark with
read_uncommitted, last stable offset with read_committed; see KIP-98).

Timeouts: ``kafka.default.api.timeout.ms`` (Java client name, default 30000 ms here) bounds
every call; it is not handed to librdkafka, which has no such property.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from connectors.spark.options import EARLIEST, LATEST, TopicSelection

DEFAULT_API_TIMEOUT_MS = 30_000


class KafkaUnreachableError(ConnectionError):
    """No broker in ``kafka.bootstrap.servers`` answered a Metadata request in time."""


class KafkaDataLossError(RuntimeError):
    """Records the query should read are gone (offset below the log start offset, or a
    partition/topic that disappeared). Raised only with ``failOnDataLoss=true``."""


class UnknownTopicPartitionError(LookupError):
    """A topic-partition named by ``assign`` or offsets JSON does not exist."""


def api_timeout_s(config: dict[str, str]) -> float:
    """The call timeout in seconds from ``default.api.timeout.ms`` (ms) or the default."""
    return int(config.get("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS)) / 1000.0


def librdkafka_config(config: dict[str, str], role: str) -> dict[str, str]:
    """The client config for librdkafka: Java-only keys removed, our fixed settings added.

    ``role`` is "admin", "consumer" or "producer". Consumers never join a group (they use
    ``assign``), so the group id is a throw-away and auto commit is off.
    """
    conf = {k: v for k, v in config.items() if k != "default.api.timeout.ms"}
    conf.setdefault("client.id", f"josef-spark-{role}")
    conf.setdefault("log_level", "4")  # syslog levels: warnings and worse reach stderr
    if role == "consumer":
        conf.update({
            "group.id": f"josef-spark-{uuid.uuid4().hex}",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "error",
            "enable.partition.eof": "true",
        })
        conf.setdefault("isolation.level", "read_uncommitted")
    elif role == "producer":
        conf.update({"acks": "all", "enable.idempotence": "true"})
    else:
        conf.pop("isolation.level", None)
    return conf


class ClusterView:
    """Topic/partition metadata and offsets of one cluster, for planning reads."""

    def __init__(self, config: dict[str, str]) -> None:
        self._timeout = api_timeout_s(config)
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if config.get("isolation.level") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        self._servers = config["bootstrap.servers"]
        self._errors: list[str] = []  # client-level errors (authentication, TLS, ...)
        conf = {**librdkafka_config(config, "admin"), "error_cb": self._on_error}
        try:
            self._admin = AdminClient(conf)
        except KafkaException as exc:
            raise ValueError(f"bad kafka.* option: {exc.args[0].str()}") from None

    def _on_error(self, err) -> None:
        self._errors.append(err.str())

    def topic_partitions(self) -> dict[str, int]:
        """All topics and their partition counts (Metadata request).

        Raises :class:`KafkaUnreachableError` when no broker answers within the timeout.
        """
        try:
            metadata = self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            self._admin.poll(0)  # serves error_cb: the reason (authentication, TLS, ...)
            cause = f" ({self._errors[-1]})" if self._errors else ""
            raise KafkaUnreachableError(
                f"cannot reach kafka.bootstrap.servers={self._servers!r} within "
                f"{self._timeout:g}s: {exc.args[0].str()}{cause}") from None
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None or topic.error.code() == KafkaError.NO_ERROR
        }

    def selected_partitions(self, selection: TopicSelection) -> list[tuple[str, int]]:
        """The (topic, partition) pairs the selection names that exist now, sorted."""
        counts = self.topic_partitions()
        if selection.assign:
            return [tp for tp in selection.assign if tp[1] < counts.get(tp[0], 0)]
        return sorted((t, p) for t, n in counts.items() if selection.matches(t) for p in range(n))

    def offsets(self, tps: Iterable[tuple[str, int]], which: int) -> dict[tuple[str, int], int]:
        """ListOffsets for ``which`` = EARLIEST (log start) or LATEST (end offset)."""
        spec = OffsetSpec.earliest() if which == EARLIEST else OffsetSpec.latest()
        assert which in (EARLIEST, LATEST)
        return self._list_offsets({TopicPartition(t, p): spec for t, p in tps})

    def offsets_for_times(self, timestamps: dict[tuple[str, int], int]
                          ) -> dict[tuple[str, int], int]:
        """ListOffsets by timestamp (ms, KIP-79): per partition the first offset whose
        record timestamp is >= the timestamp, or -1 when there is none."""
        return self._list_offsets({TopicPartition(t, p): OffsetSpec.for_timestamp(ts)
                                   for (t, p), ts in timestamps.items()})

    def _list_offsets(self, request: dict) -> dict[tuple[str, int], int]:
        if not request:
            return {}
        futures = self._admin.list_offsets(
            request, isolation_level=self._isolation, request_timeout=self._timeout)
        result = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                  KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                    raise UnknownTopicPartitionError(
                        f"{tp.topic}-{tp.partition} does not exist") from None
                if err.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                    raise KafkaUnreachableError(
                        f"ListOffsets to {self._servers!r} failed: {err.str()}") from None
                raise
        return result
