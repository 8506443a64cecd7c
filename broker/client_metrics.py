"""KIP-714 client metrics: subscriptions (config resource CLIENT_METRICS) and pushed metrics.

Subscriptions are named config sets (``josef client-metrics``, or IncrementalAlterConfigs /
AlterConfigs on resource type 16), stored by the controller (embedded store:
``/config/client-metrics/<name>``):

- ``metrics``: comma-separated metric name prefixes (``*`` or an empty prefix = all);
- ``interval.ms``: push interval, 100..3600000 (default 300000);
- ``match``: comma-separated ``selector=regex`` pairs, selectors ``client_instance_id``,
  ``client_id``, ``client_software_name``, ``client_software_version``,
  ``client_source_address``, ``client_source_port`` (RE2 full match, as Kafka). No match
  list = every client.

GetTelemetrySubscriptions answers a client with the union of the prefixes of the
subscriptions matching it (``[""]`` = all metrics, ``[]`` = none), the smallest of their
intervals, and a subscription id that changes whenever that set changes. PushTelemetry
checks that id (UNKNOWN_SUBSCRIPTION_ID), the size (TELEMETRY_TOO_LARGE), the compression
type (UNSUPPORTED_COMPRESSION_TYPE), decompresses and decodes the OTLP
``ExportMetricsServiceRequest`` and keeps each metric's latest number data point in
``ClientMetricsRegistry`` (an undecodable payload -> INVALID_RECORD, nothing kept).

Exporting (issue 17's Prometheus endpoint): ``ClientMetricsRegistry.snapshot()`` returns
``[PushedMetric(client_instance_id, client_id, name, value, timestamp_ms, attributes)]`` -
the latest value of every metric each live client pushed - and ``pushes`` / ``bytes`` count
what arrived; ``ctx.broker.client_metrics.registry`` is the accessor. A client's values are
dropped when it pushes with ``terminating`` set or sends no push for max(60 s, 3 x its push
interval) (Kafka's client instance expiry); ``broker.metrics.client_telemetry`` exports them.
Client software name/version are not tracked per connection: selectors on them match "".
"""

from __future__ import annotations

import struct
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field

from common.config_keys import ConfigType
from protocol.errors import ErrorCode, KafkaError

__all__ = ["ClientMetricsManager", "ClientMetricsRegistry", "PushedMetric", "decode_otlp"]

SELECTORS = ("client_instance_id", "client_id", "client_software_name",
             "client_software_version", "client_source_address", "client_source_port")
DEFAULT_INTERVAL_MS = 300_000
CACHE_EXPIRY_MS = 60_000  # a client instance expires after max(this, 3 x its push interval)
CONFIG_TYPES = {"metrics": ConfigType.LIST, "interval.ms": ConfigType.INT,
                "match": ConfigType.LIST}
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]  # zstd, lz4, gzip, snappy (Kafka's order)


@dataclass(frozen=True, slots=True)
class PushedMetric:
    client_instance_id: str
    client_id: str
    name: str
    value: float
    timestamp_ms: int
    attributes: tuple[tuple[str, str], ...] = ()


@dataclass
class _Client:
    client_id: str = ""
    pushes: int = 0
    bytes: int = 0
    metrics: dict = field(default_factory=dict)  # (name, attributes) -> PushedMetric
    terminated: bool = False
    last_push: float = 0.0  # clock() seconds
    interval_ms: int = DEFAULT_INTERVAL_MS


class ClientMetricsRegistry:
    """Latest pushed value per live client and metric (thread-safe reads for an exporter).
    ``clock`` is monotonic seconds (a manual clock in tests)."""

    def __init__(self, max_clients: int = 10_000, clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._clients: dict[str, _Client] = {}
        self.max_clients = max_clients
        self.pushes = 0
        self.bytes = 0

    def record(self, instance: str, client_id: str, size: int, metrics: list[PushedMetric],
               terminating: bool = False, interval_ms: int = DEFAULT_INTERVAL_MS) -> None:
        with self._lock:
            self.pushes += 1
            self.bytes += size
            c = self._clients.get(instance)
            if c is None:
                if len(self._clients) >= self.max_clients:
                    self._clients.pop(next(iter(self._clients)))
                c = self._clients[instance] = _Client(client_id)
            c.pushes += 1
            c.bytes += size
            c.last_push = self._clock()
            c.interval_ms = interval_ms
            c.terminated = c.terminated or terminating
            if c.terminated:  # its series end with it (the counters stay until evicted)
                c.metrics.clear()
                return
            for m in metrics:
                c.metrics[(m.name, m.attributes)] = m

    def snapshot(self) -> list[PushedMetric]:
        """Latest values of the live clients; expired clients are dropped here."""
        now = self._clock()
        with self._lock:
            expired = [i for i, c in self._clients.items()
                       if now - c.last_push > max(CACHE_EXPIRY_MS, 3 * c.interval_ms) / 1000]
            for i in expired:
                del self._clients[i]
            return [m for c in self._clients.values() for m in c.metrics.values()]

    def clients(self) -> dict[str, tuple[str, int, int, bool]]:
        """``{instance id: (client id, pushes, bytes, terminated)}``."""
        with self._lock:
            return {i: (c.client_id, c.pushes, c.bytes, c.terminated)
                    for i, c in self._clients.items()}


def validate(configs: dict[str, str]) -> None:
    """INVALID_CONFIG for unknown keys or bad values (Kafka's ClientMetricsConfigs)."""
    import re2
    for k in configs:
        if k not in CONFIG_TYPES:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown client metrics config: {k}")
    if "interval.ms" in configs:
        try:
            ms = int(configs["interval.ms"])
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, "interval.ms must be an integer") from None
        if not 100 <= ms <= 3_600_000:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {ms} for interval.ms, "
                             "interval must be between 100 and 3600000 (1 hour)")
    for item in _items(configs.get("match")):
        sel, sep, pattern = item.partition("=")
        if not sep or sel.strip() not in SELECTORS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {item}")
        try:
            re2.compile(pattern.strip())
        except re2.error as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"Illegal regex pattern in match {item}: {e}") from None


def _items(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _signed32(v: int) -> int:
    return v - (1 << 32) if v >= 1 << 31 else v


class ClientMetricsManager:
    """Subscriptions (cached from the controller) and the registry. ``controller`` has
    ``client_metrics_configs()`` / ``set_client_metrics_configs(name, configs)``."""

    def __init__(self, controller, max_bytes: int = 1_048_576) -> None:
        self.controller = controller
        self.max_bytes = max_bytes
        self.registry = ClientMetricsRegistry()
        self._subs: dict[str, dict[str, str]] | None = None
        self._compiled: dict[str, object] = {}

    def subscriptions(self) -> dict[str, dict[str, str]]:
        if self._subs is None:
            self._subs = self.controller.client_metrics_configs() if self.controller else {}
        return self._subs

    # --- configs ------------------------------------------------------------------------
    def describe(self, name: str) -> list[tuple[str, str, ConfigType]]:
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Resource name must not be empty")
        configs = self.subscriptions().get(name, {})
        return [(k, v, CONFIG_TYPES.get(k, ConfigType.STRING)) for k, v in sorted(configs.items())]

    async def alter(self, name: str, r, incremental: bool, validate_only: bool) -> None:
        from controller.broker_config_admin import apply_incremental_ops
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Resource name must not be empty")
        if incremental:
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            new = apply_incremental_ops(self.subscriptions().get(name, {}), ops)
        else:
            new = {c.name: c.value for c in r.configs if c.value is not None}
        validate(new)
        if not validate_only:
            await self.controller.set_client_metrics_configs(name, new)
            self._subs = None

    # --- matching -------------------------------------------------------------------------
    def _matches(self, configs: dict[str, str], client: dict[str, str]) -> bool:
        import re2
        for item in _items(configs.get("match")):
            sel, _, pattern = item.partition("=")
            pat = self._compiled.get(pattern)
            if pat is None:
                pat = self._compiled[pattern] = re2.compile(pattern.strip())
            if not pat.fullmatch(client.get(sel.strip(), "")):
                return False
        return True

    def subscription_for(self, client: dict[str, str]) -> tuple[int, list[str], int]:
        """(subscription id, requested metric prefixes, push interval ms) for a client."""
        prefixes: set[str] = set()
        interval = None
        names = []
        for name, configs in sorted(self.subscriptions().items()):
            if not self._matches(configs, client):
                continue
            names.append(name)
            for p in _items(configs.get("metrics")) or []:
                prefixes.add("" if p == "*" else p)
            ms = int(configs.get("interval.ms", DEFAULT_INTERVAL_MS))
            interval = ms if interval is None else min(interval, ms)
        requested = [""] if "" in prefixes else sorted(prefixes)
        interval = interval if interval is not None else DEFAULT_INTERVAL_MS
        digest = zlib.crc32(repr((client.get("client_instance_id"), names, requested,
                                  interval)).encode())
        return _signed32(digest), requested, interval

    # --- pushes -------------------------------------------------------------------------------
    def push(self, client: dict[str, str], subscription_id: int, compression_type: int,
             payload: bytes | None, terminating: bool) -> ErrorCode:
        sub_id, requested, interval = self.subscription_for(client)
        if subscription_id != sub_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if payload is not None and len(payload) > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        if compression_type not in (0, *ACCEPTED_COMPRESSION_TYPES):
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        data = payload or b""
        try:
            if compression_type and data:
                from protocol.compression import decompress
                data = bytes(decompress(compression_type, data))
            metrics = decode_otlp(data, client.get("client_instance_id", ""),
                                  client.get("client_id", ""))
        except Exception:  # noqa: BLE001 - a client's bad payload is its error
            return ErrorCode.INVALID_RECORD
        if requested != [""]:
            metrics = [m for m in metrics if any(m.name.startswith(p) for p in requested)]
        self.registry.record(client.get("client_instance_id", ""), client.get("client_id", ""),
                             len(payload or b""), metrics, terminating, interval)
        return ErrorCode.NONE


# --- a minimal OTLP (protobuf) reader: just what holds metric names and number points ------

def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message; value is an int for
    varint / fixed types and bytes for length-delimited ones."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            val = buf[pos:pos + 8]
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            val = buf[pos:pos + n]
            pos += n
        elif wt == 5:
            val = buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        if pos > end:
            raise ValueError("truncated protobuf message")
        yield num, wt, val


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7


def _attributes(kvs: list[bytes]) -> tuple[tuple[str, str], ...]:
    out = []
    for kv in kvs:
        key, value = "", ""
        for num, _, v in _fields(kv):
            if num == 1:
                key = v.decode("utf-8", "replace")
            elif num == 2:  # AnyValue: string 1, bool 2, int 3, double 4
                for n2, _, v2 in _fields(v):
                    if n2 == 1:
                        value = v2.decode("utf-8", "replace")
                    elif n2 in (2, 3):
                        value = str(v2)
                    elif n2 == 4:
                        value = repr(struct.unpack("<d", v2)[0])
        out.append((key, value))
    return tuple(sorted(out))


def decode_otlp(data: bytes, instance: str, client_id: str) -> list[PushedMetric]:
    """Number data points (gauge, sum) of an OTLP ExportMetricsServiceRequest; histograms
    and summaries are counted by name with their point count as value."""
    out: list[PushedMetric] = []
    now = int(time.time() * 1000)
    for num, _, rm in _fields(data):
        if num != 1:
            continue
        for n2, _, sm in _fields(rm):
            if n2 != 2:
                continue
            for n3, _, metric in _fields(sm):
                if n3 != 2:
                    continue
                name, points = "", []
                for n4, _, v in _fields(metric):
                    if n4 == 1:
                        name = v.decode("utf-8", "replace")
                    elif n4 in (5, 7, 9, 10, 11):
                        points.append((n4, v))
                for kind, body in points:
                    for n5, _, dp in _fields(body):
                        if n5 != 1:
                            continue
                        value, ts, attrs = 0.0, now, []
                        count = None
                        for n6, wt, v in _fields(dp):
                            if n6 == 3 and wt == 1:
                                ts = struct.unpack("<Q", v)[0] // 1_000_000
                            elif n6 == 4 and wt == 1 and kind in (5, 7):
                                value = struct.unpack("<d", v)[0]
                            elif n6 == 6 and wt == 1 and kind in (5, 7):
                                value = float(struct.unpack("<q", v)[0])
                            elif n6 == 4 and wt == 1:
                                count = struct.unpack("<Q", v)[0]
                            elif n6 == 7 and wt == 2:
                                attrs.append(v)
                        if count is not None:
                            value = float(count)
                        out.append(PushedMetric(instance, client_id, name, value, ts,
                                                _attributes(attrs)))
    return out


def client_identity(ctx, instance: uuid.UUID) -> dict[str, str]:
    """The selector values of the client behind ``ctx``."""
    addr = ctx.client_address
    host, port = (addr[0], addr[1]) if isinstance(addr, tuple) and len(addr) >= 2 else ("", "")
    return {"client_instance_id": str(instance), "client_id": ctx.client_id or "",
            "client_software_name": "", "client_software_version": "",
            "client_source_address": str(host), "client_source_port": str(port)}
