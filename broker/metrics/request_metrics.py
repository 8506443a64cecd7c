"""Kafka's RequestMetrics (``kafka.network:type=RequestMetrics,...``) and the request log.

Each request carries ``time.monotonic_ns()`` stamps taken on its way through the broker
(Kafka's ``RequestChannel.Request`` timings):

=====================  =======================================================================
``received_ns``        the frame was complete (Processor)
``dequeue_ns``         an IO worker took it (RequestChannel)
``local_ns``           the handler returned (response or parked future)
``response_ns``        the response was known (a parked request: when its purgatory
                       operation completed; else ``local_ns``)
``send_start_ns``      its turn to be written came (responses leave in request order)
end (argument)         the bytes were handed to the socket
=====================  =======================================================================

``RequestQueueTimeMs`` = dequeue - received, ``LocalTimeMs`` = local - dequeue,
``RemoteTimeMs`` = response - local, ``ResponseQueueTimeMs`` = send_start - response,
``ResponseSendTimeMs`` = end - send_start, ``TotalTimeMs`` = end - received; plus
``RequestsPerSec`` per ``request`` and ``version`` and ``RequestBytes``. Fetch requests are
recorded as ``Fetch`` and as ``FetchConsumer`` or ``FetchFollower`` (as Kafka does).

With the ``kafka.request.logger`` logger at DEBUG, every completed request is also logged as
Kafka's ``Completed request:{json}`` line (see ``broker.oplogs``).
"""

from __future__ import annotations

import logging

from broker.metrics.core import MetricsRegistry
from protocol import api

__all__ = ["RequestMetricsRecorder", "request_name"]

FETCH = 1
REQUEST_LOGGER = logging.getLogger("kafka.request.logger")

_NAMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
          "ResponseSendTimeMs", "TotalTimeMs")


def request_name(api_key: int) -> str:
    """Kafka's ``ApiKeys.name`` in CamelCase (``Produce``, ``ListOffsets``, ...)."""
    spec = api.API_KEYS.get(api_key)
    if spec is None:
        return f"Unknown{api_key}"
    name = spec.name
    return name[:-len("Request")] if name.endswith("Request") else name


class _ForRequest:
    """The histograms and per-version meters of one request name."""

    __slots__ = ("hists", "versions", "bytes", "base", "registry")

    def __init__(self, registry: MetricsRegistry, name: str) -> None:
        self.registry = registry
        self.base = f"kafka.network:type=RequestMetrics,name={{}},request={name}"
        self.hists = tuple(registry.histogram(self.base.format(n)) for n in _NAMES)
        self.bytes = registry.histogram(self.base.format("RequestBytes"), resolution=1.0)
        self.versions: dict[int, object] = {}

    def version_meter(self, version: int):
        m = self.versions.get(version)
        if m is None:
            m = self.versions[version] = self.registry.meter(
                self.base.format("RequestsPerSec") + f",version={version}")
        return m


class RequestMetricsRecorder:
    """``record(request, end_ns)`` once per request, when its response left (or was dropped).
    ``log_requests`` is re-read from the request logger's level by :meth:`refresh_log_level`
    (the server calls it when levels change)."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.registry = registry
        self._by_key: dict[int, _ForRequest] = {}
        self._fetch: dict[str, _ForRequest] = {}
        self.log_requests = REQUEST_LOGGER.isEnabledFor(logging.DEBUG)
        self.request_log = None  # set by broker.oplogs when request logging is enabled

    def refresh_log_level(self) -> None:
        self.log_requests = REQUEST_LOGGER.isEnabledFor(logging.DEBUG)

    def _for(self, api_key: int) -> _ForRequest:
        m = self._by_key.get(api_key)
        if m is None:
            m = self._by_key[api_key] = _ForRequest(self.registry, request_name(api_key))
        return m

    def _fetch_kind(self, request) -> _ForRequest:
        body = request.body
        replica = -1
        if body is not None:
            state = getattr(body, "replica_state", None)
            replica = state.replica_id if state is not None and request.api_version >= 15 \
                else getattr(body, "replica_id", -1)
        name = "FetchFollower" if replica is not None and replica >= 0 else "FetchConsumer"
        m = self._fetch.get(name)
        if m is None:
            m = self._fetch[name] = _ForRequest(self.registry, name)
        return m

    def record(self, request, end_ns: int) -> None:
        t0 = request.received_ns
        t1 = request.dequeue_ns or t0
        t2 = request.local_ns or t1
        t3 = request.response_ns or t2
        t4 = request.send_start_ns or t3
        deltas = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, end_ns - t4, end_ns - t0)
        key = request.api_key
        m = self._by_key.get(key) or self._for(key)
        self._update(m, request, deltas)
        if key == FETCH:
            self._update(self._fetch_kind(request), request, deltas)
        if self.log_requests and self.request_log is not None:
            self.request_log(request, deltas)

    @staticmethod
    def _update(m: _ForRequest, request, deltas) -> None:
        for h, d in zip(m.hists, deltas, strict=True):
            if d < 0:
                d = 0
            h.update_scaled(d // 1000, d / 1e6)
        try:
            size = request.frame.nbytes
        except (ValueError, AttributeError):  # buffer already given back
            size = 0
        m.bytes.update_scaled(size, size)
        m.version_meter(request.api_version).count += 1
