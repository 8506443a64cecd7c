"""Executor side, Arrow path: read one offset range with Fetch requests, decode whole
responses into Arrow batches (:mod:`connectors.spark.columnar`).

Speaks the Kafka protocol with :class:`client.connection.KafkaClient` (ApiVersions, SASL
if configured, then Metadata for the partition's leader, then Fetch v4-v12 to that leader;
Apache Kafka and Josef alike; TLS and SASL PLAIN/SCRAM as :func:`wire_security` maps
librdkafka's settings). Fetches are pipelined: as soon as a response arrives, the offset after its
last complete batch is known from the batch headers and the next Fetch is sent, so the
broker reads and sends it while this process decodes the previous one.

Which Kafka consumer properties apply (``kafka.<name>`` options): ``client.id``,
``isolation.level`` (``read_committed`` drops aborted transactions and control records,
KIP-98), ``max.partition.fetch.bytes`` (bytes per Fetch for the partition, default
1 MiB; Kafka's broker returns at least one whole batch however large, KIP-74),
``fetch.max.bytes`` (default 50 MiB), ``fetch.wait.max.ms`` / ``fetch.max.wait.ms``
(default 500), ``fetch.min.bytes`` (default 1), ``check.crcs`` (CRC-32C of every batch,
default false as in librdkafka), ``socket.timeout.ms`` and ``default.api.timeout.ms``.

Errors, as a Kafka consumer handles them: leadership moves (NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE, FENCED/UNKNOWN_LEADER_EPOCH, ...) and lost connections refresh the
metadata and retry after ``retry.backoff.ms`` (100); OFFSET_OUT_OF_RANGE compares the
offset with the log start and end offsets (ListOffsets) and is data loss (records deleted,
or the log truncated below the planned end). With ``failOnDataLoss=true`` data loss raises
:class:`~connectors.spark.client.KafkaDataLossError`; otherwise the range goes on at the
log start offset, or ends. No progress for ``kafkaConsumer.pollTimeoutMs`` raises
``TimeoutError``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pyarrow as pa

from client.connection import KafkaClient, ToolError, error_name
from connectors.spark.client import KafkaDataLossError, api_timeout_s
from connectors.spark.columnar import ColumnDecoder
from connectors.spark.planning import OffsetRange
from connectors.spark.schema import source_arrow_schema
from protocol.errors import ErrorCode

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
MIN_FETCH_VERSION, MAX_FETCH_VERSION = 4, 12  # v13+ names topics by id
EARLIEST, LATEST = -2, -1

_RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
}
_BATCH_END = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23 of a v2 batch
_LEGACY_MIN = 26  # smallest v0 message entry


_SECURITY_KEYS = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                  "sasl.password", "ssl.ca.location", "ssl.endpoint.identification.algorithm"}
_LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                  "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                  "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


def wire_security(config: dict[str, str]) -> dict[str, str] | None:
    """The librdkafka security settings of ``config`` as Kafka client properties for
    :class:`client.security.ClientSecurity`, or None when this reader cannot honour them
    (then librdkafka reads, :mod:`connectors.spark.fetch`).

    Understood: ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL),
    ``sasl.mechanism(s)`` PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512 with ``sasl.username`` and
    ``sasl.password``, ``ssl.ca.location`` (PEM CA file; else the system's CAs) and
    ``ssl.endpoint.identification.algorithm`` (``https``, librdkafka's default, or
    ``none``). Any other ``ssl.*`` / ``sasl.*`` setting (client certificates, OAUTHBEARER,
    Kerberos) is left to librdkafka.
    """
    if any(k.startswith(("ssl.", "sasl.")) and k not in _SECURITY_KEYS for k in config):
        return None
    protocol = config.get("security.protocol", "PLAINTEXT").strip().upper()
    props = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        if "ssl.ca.location" in config:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = config["ssl.ca.location"]
        check = config.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        props["ssl.endpoint.identification.algorithm"] = "https" if check == "https" else ""
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = (config.get("sasl.mechanisms") or config.get("sasl.mechanism")
                     or "GSSAPI").strip().upper()
        user, password = config.get("sasl.username"), config.get("sasl.password")
        if (mechanism not in _LOGIN_MODULES or user is None or password is None
                or any(c in user + password for c in '"\\')):
            return None
        props["sasl.mechanism"] = mechanism
        props["sasl.jaas.config"] = (f'{_LOGIN_MODULES[mechanism]} required '
                                     f'username="{user}" password="{password}";')
    elif protocol not in ("PLAINTEXT", "SSL"):
        return None
    return props


def wire_config_supported(config: dict[str, str]) -> bool:
    """Whether this reader can honour the client config (see :func:`wire_security`)."""
    return wire_security(config) is not None


class _Settings:
    """The consumer properties this reader uses, from the ``kafka.*`` options."""

    def __init__(self, config: dict[str, str], poll_timeout_ms: int) -> None:
        def number(*names: str, default: int) -> int:
            for name in names:
                if name in config:
                    return int(config[name])
            return default

        self.bootstrap = config["bootstrap.servers"]
        self.security = wire_security(config)
        self.client_id = config.get("client.id", "josef-spark-reader")
        self.read_committed = config.get("isolation.level", "").lower() == "read_committed"
        self.partition_bytes = number("max.partition.fetch.bytes", default=1 << 20)
        self.fetch_bytes = number("fetch.max.bytes", default=50 << 20)
        self.max_wait_ms = number("fetch.wait.max.ms", "fetch.max.wait.ms", default=500)
        self.min_bytes = number("fetch.min.bytes", default=1)
        self.check_crcs = config.get("check.crcs", "false").lower() == "true"
        self.backoff_s = number("retry.backoff.ms", default=100) / 1000.0
        self.timeout_s = max(api_timeout_s(config),
                             number("socket.timeout.ms", default=60_000) / 1000.0,
                             self.max_wait_ms / 1000.0 + 10.0)
        self.poll_timeout_s = poll_timeout_ms / 1000.0


def next_fetch_offset(records, offset: int) -> int:
    """The offset after the last complete batch in a Fetch response's ``records`` (v2
    batches: baseOffset + lastOffsetDelta + 1; v0/v1 entries: their offset + 1), or
    ``offset`` if no batch is complete. Reads only the batch headers."""
    mv = records if isinstance(records, memoryview) else memoryview(records)
    pos, end, nxt = 0, len(mv), offset
    while end - pos >= 17:
        base, length = _BATCH_END.unpack_from(mv, pos)
        stop = pos + 12 + length
        if length < 0 or stop > end:
            break
        if mv[pos + 16] >= 2:
            if length < 49:
                break
            (delta,) = _LAST_DELTA.unpack_from(mv, pos + 23)
            nxt = max(nxt, base + delta + 1)
        elif length + 12 >= _LEGACY_MIN:
            nxt = max(nxt, base + 1)
        pos = stop
    return nxt


class _PartitionGone(Exception):
    """The topic or partition is no longer in the cluster metadata."""


class PartitionFetcher:
    """Fetches ``[from_offset, until_offset)`` of one partition, one request ahead."""

    def __init__(self, config: dict[str, str], rng: OffsetRange, fail_on_data_loss: bool,
                 poll_timeout_ms: int) -> None:
        self.s = _Settings(config, poll_timeout_ms)
        self.rng = rng
        self.fail_on_data_loss = fail_on_data_loss
        self.client: KafkaClient | None = None
        self.leader: int | None = None
        self.version = MIN_FETCH_VERSION

    # -- connections ------------------------------------------------------------------------
    def _connect(self) -> None:
        if self.client is None:
            self.client = KafkaClient(self.s.bootstrap, client_id=self.s.client_id,
                                      timeout=self.s.timeout_s,
                                      max_response_bytes=self.s.fetch_bytes + (16 << 20),
                                      security=self.s.security)
            self.version = self.client.version_for(FETCH, MAX_FETCH_VERSION)
            if self.version < MIN_FETCH_VERSION:
                raise RuntimeError(f"the broker's Fetch is too old (v{self.version}; "
                                   f"needs v{MIN_FETCH_VERSION}+)")
        if self.leader is None:
            self.leader = self._find_leader()

    def _find_leader(self) -> int | None:
        """The partition's leader from Metadata; None while there is none. A partition or
        topic missing from the metadata is data loss (it was deleted)."""
        topic, partition = self.rng.topic, self.rng.partition
        md = self.client.metadata([topic])
        for t in md.topics:
            if t.name != topic:
                continue
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                break
            for p in t.partitions:
                if p.partition_index == partition:
                    return p.leader_id if p.leader_id >= 0 else None
            break
        raise _PartitionGone(f"{topic}-{partition} no longer exists")

    def _reset(self) -> None:
        """Forget the connection and leader (after an error); reconnect on next use."""
        if self.client is not None:
            self.client.close()
        self.client = None
        self.leader = None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # -- requests ---------------------------------------------------------------------------
    def _send_fetch(self, offset: int) -> tuple:
        partition = {"partition": self.rng.partition, "fetch_offset": offset,
                     "partition_max_bytes": self.s.partition_bytes,
                     "current_leader_epoch": -1, "log_start_offset": -1,
                     "last_fetched_epoch": -1}
        body = {"replica_id": -1, "max_wait_ms": self.s.max_wait_ms,
                "min_bytes": self.s.min_bytes, "max_bytes": self.s.fetch_bytes,
                "isolation_level": 1 if self.s.read_committed else 0,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": self.rng.topic, "partitions": [partition]}],
                "forgotten_topics_data": [], "rack_id": ""}
        return self.client.send_request(FETCH, body, self.version, node=self.leader)

    def _partition_data(self, response):
        if getattr(response, "error_code", 0):
            return response.error_code, None
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == self.rng.partition:
                    return p.error_code, p
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None

    def _log_bounds(self) -> tuple[int, int]:
        """(log start offset, end offset) of the partition from its leader."""
        out = []
        version = self.client.version_for(LIST_OFFSETS, 7)
        for spec in (EARLIEST, LATEST):
            resp = self.client.request(LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": 1 if self.s.read_committed else 0,
                "topics": [{"name": self.rng.topic, "partitions": [
                    {"partition_index": self.rng.partition, "timestamp": spec,
                     "current_leader_epoch": -1}]}]}, version=version, node=self.leader)
            p = resp.topics[0].partitions[0]
            if p.error_code:
                raise ToolError(f"ListOffsets: {error_name(p.error_code)}")
            out.append(p.offset)
        return out[0], out[1]

    # -- reading ----------------------------------------------------------------------------
    def chunks(self) -> Iterator[tuple[int, object, list | None]]:
        """Yield ``(fetch offset, records, aborted transactions)`` per Fetch response in
        offset order until the range's end; the next request is already sent when a
        response is yielded."""
        rng = self.rng
        offset = rng.from_offset
        pending = None
        last_progress = time.monotonic()
        while offset < rng.until_offset:
            try:
                self._connect()
                if self.leader is None:
                    raise ToolError(f"{rng.topic}-{rng.partition} has no leader")
                if pending is None:
                    pending = (offset, self._send_fetch(offset))
                response = self.client.receive_response(pending[1])
                pending = None
            except ToolError as exc:
                pending = None
                self._reset()
                self._wait(last_progress, f"{exc}")
                continue
            except _PartitionGone as exc:
                self._data_loss(str(exc))
                return
            code, data = self._partition_data(response)
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                offset = self._out_of_range(offset)
                last_progress = time.monotonic()
                continue
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self._reset()  # _find_leader decides: deleted (data loss) or not yet known
                self._wait(last_progress, error_name(code))
                continue
            if code in _RETRIABLE:
                self._reset()
                self._wait(last_progress, error_name(code))
                continue
            if code:
                raise RuntimeError(f"fetching {rng.topic}-{rng.partition} at offset {offset}: "
                                   f"{error_name(code)}")
            records = data.records if data.records is not None else b""
            nxt = next_fetch_offset(records, offset)
            if nxt == offset:
                end = (data.last_stable_offset if self.s.read_committed
                       and data.last_stable_offset >= 0 else data.high_watermark)
                if end <= offset:  # the partition ends before the planned range does
                    self._data_loss(f"{rng.topic}-{rng.partition} ends at offset {end} but "
                                    f"offsets up to {rng.until_offset} were planned (log "
                                    "truncated or topic recreated)")
                    return
                self._wait(last_progress, f"no records at offset {offset}")
                continue
            last_progress = time.monotonic()
            if nxt < rng.until_offset:
                try:
                    pending = (nxt, self._send_fetch(nxt))
                except ToolError:
                    self._reset()
            aborted = None
            if self.s.read_committed and data.aborted_transactions:
                aborted = [(a.producer_id, a.first_offset) for a in data.aborted_transactions]
            yield offset, records, aborted
            offset = nxt

    def _out_of_range(self, offset: int) -> int:
        """OFFSET_OUT_OF_RANGE at ``offset``: where to go on (or raise, data loss)."""
        rng = self.rng
        start, end = self._log_bounds()
        if offset < start:
            self._data_loss(f"offsets {offset}..{min(start, rng.until_offset) - 1} of "
                            f"{rng.topic}-{rng.partition} were deleted (log start offset is "
                            f"now {start})")
            return min(start, rng.until_offset)
        self._data_loss(f"{rng.topic}-{rng.partition} ends at offset {end} but offsets up to "
                        f"{rng.until_offset} were planned (log truncated or topic recreated)")
        return rng.until_offset

    def _wait(self, last_progress: float, why: str) -> None:
        rng = self.rng
        if time.monotonic() - last_progress > self.s.poll_timeout_s:
            raise TimeoutError(
                f"no records from {rng.topic}-{rng.partition} for "
                f"{self.s.poll_timeout_s * 1000:.0f} ms ({why}; range "
                f"{rng.from_offset}..{rng.until_offset}); raise kafkaConsumer.pollTimeoutMs "
                "if the cluster is just slow")
        time.sleep(self.s.backoff_s)

    def _data_loss(self, message: str) -> None:
        if self.fail_on_data_loss:
            raise KafkaDataLossError(
                message + ". Set failOnDataLoss=false to skip lost data and go on.")


def read_range_wire(config: dict[str, str], rng: OffsetRange, include_headers: bool,
                    fail_on_data_loss: bool, poll_timeout_ms: int) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` in offset order as Arrow batches of the source schema,
    one batch per Fetch response that holds records of the range."""
    if rng.size == 0:
        return
    fetcher = PartitionFetcher(config, rng, fail_on_data_loss, poll_timeout_ms)
    decoder = ColumnDecoder(rng.topic, rng.partition, include_headers,
                            fetcher.s.read_committed, source_arrow_schema(include_headers),
                            fetcher.s.check_crcs)
    try:
        for offset, records, aborted in fetcher.chunks():
            chunk = decoder.decode(records, offset, rng.until_offset, aborted)
            if chunk.rows is not None and chunk.rows.num_rows:
                yield chunk.rows
    finally:
        fetcher.close()
