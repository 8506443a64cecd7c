"""Time series for the console's live charts, sampled every ``interval`` seconds.

From the cluster (works with any Kafka): messages in per second, per topic and in total (the
change of the partitions' log end offsets), and each group's total lag (at most
``max_groups`` groups). From the brokers' own metrics when a broker publishes a Prometheus
endpoint (Josef's ``prometheus.listener``, found with DescribeConfigs): bytes in/out and
requests per second, per broker, from ``kafka_server_brokertopicmetrics_{bytesin,bytesout}_total``
and ``kafka_network_requestmetrics_requests_total``, and its ``BrokerState`` gauge
(``kafka_server_kafkaserver_brokerstate``: 6/7 = controlled shutdown) for the broker list.
Each sample also probes every registered broker (ApiVersions), so a broker that stops
answering shows as offline. Each series keeps ``points`` samples (``[unix seconds,
value]``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from urllib.parse import urlsplit

from console import queries
from console.service import ClusterService, ClusterUnavailable

__all__ = ["Sampler"]

log = logging.getLogger(__name__)

PROMETHEUS_KEY = "prometheus.listener"
_BROKER_SERIES = {"kafka_server_brokertopicmetrics_bytesin_total": "bytes_in",
                  "kafka_server_brokertopicmetrics_bytesout_total": "bytes_out",
                  "kafka_network_requestmetrics_requests_total": "requests",
                  "kafka_server_kafkaserver_brokerstate": "state"}


def _parse_metrics(text: str) -> dict[str, float]:
    """Totals of the broker families the charts use (all-topic samples only)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = _BROKER_SERIES.get(s.name)
            if key is None or (key in ("bytes_in", "bytes_out") and "topic" in s.labels):
                continue
            out[key] = out.get(key, 0.0) + s.value
    return out


class Sampler:
    def __init__(self, service: ClusterService, interval: float = 5.0, points: int = 180,
                 max_groups: int = 50) -> None:
        self.service = service
        self.interval = interval
        self.max_groups = max_groups
        self.series: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=points))
        self.metrics_urls: dict[int, str] = {}
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self._prev_offsets: tuple[float, dict] | None = None
        self._prev_broker: dict[int, tuple[float, dict]] = {}
        self._urls_checked = 0.0
        self._task: asyncio.Task | None = None
        self._session = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._session is not None:
            await self._session.close()

    def get(self, names: list[str]) -> dict[str, list[list[float]]]:
        return {n: [list(p) for p in self.series.get(n, ())] for n in names}

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep sampling whatever happened
                log.exception("sampling failed")
            await asyncio.sleep(self.interval)

    async def sample_once(self) -> None:
        now = time.time()
        try:
            await self.service.probe_brokers()
            ends = await self.service.run(queries.all_end_offsets)
            lags = await self.service.run(queries.group_lags, self.max_groups)
        except ClusterUnavailable as e:
            self.last_error = str(e)
            self._prev_offsets = None
            return
        except Exception as e:  # noqa: BLE001 - a ToolError: show it, try again later
            self.last_error = str(e)
            return
        self.last_ok, self.last_error = now, None
        self._offset_rates(now, ends)
        for gid, lag in lags.items():
            self.series[f"group.{gid}.lag"].append((now, lag))
        await self._broker_metrics(now)

    def _offset_rates(self, now: float, ends: dict) -> None:
        per_topic: dict[str, int] = {}
        for (t, _), off in ends.items():
            per_topic[t] = per_topic.get(t, 0) + off
        prev = self._prev_offsets
        self._prev_offsets = (now, per_topic)
        if prev is None or now <= prev[0]:
            return
        dt = now - prev[0]
        total = 0.0
        for t, off in per_topic.items():
            rate = max(0, off - prev[1].get(t, off)) / dt
            total += rate
            self.series[f"topic.{t}.messages_in"].append((now, round(rate, 2)))
        self.series["cluster.messages_in"].append((now, round(total, 2)))

    async def _discover(self) -> None:
        brokers = [b for b in self.service.tracker.brokers() if b["state"] != "offline"]
        ids = [b["id"] for b in brokers]
        hosts = {b["id"]: b["host"] for b in brokers}
        configs = await self.service.run(queries.broker_configs, ids, [PROMETHEUS_KEY])
        urls = {}
        for b, cfg in configs.items():
            value = cfg.get(PROMETHEUS_KEY)
            if not value:
                continue
            parts = urlsplit(value)
            host = parts.hostname
            if not host or host in ("0.0.0.0", "::"):
                host = hosts.get(b, "127.0.0.1")
            if parts.port:
                urls[b] = f"http://{host}:{parts.port}/metrics"
        self.metrics_urls = {**{b: u for b, u in self.metrics_urls.items() if b not in ids},
                             **urls}

    async def _broker_metrics(self, now: float) -> None:
        import aiohttp

        if now - self._urls_checked > 60 or any(
                b["id"] not in self.metrics_urls and b["state"] == "online"
                for b in self.service.tracker.brokers()) and now - self._urls_checked > 10:
            self._urls_checked = now
            try:
                await self._discover()
            except Exception as e:  # noqa: BLE001 - charts from offsets still work
                log.debug("no broker metrics: %s", e)
        if not self.metrics_urls:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        loop = asyncio.get_running_loop()
        for b, url in list(self.metrics_urls.items()):
            try:
                async with self._session.get(url) as resp:
                    text = await resp.text()
                values = await loop.run_in_executor(None, _parse_metrics, text)
            except Exception as e:  # noqa: BLE001 - a broker without metrics right now
                log.debug("scrape %s failed: %s", url, e)
                continue
            if "state" in values:
                self.service.tracker.set_metric_state(b, int(values.pop("state")))
            prev = self._prev_broker.get(b)
            self._prev_broker[b] = (now, values)
            if prev is None or now <= prev[0]:
                continue
            dt = now - prev[0]
            for key, v in values.items():
                rate = max(0.0, v - prev[1].get(key, v)) / dt
                self.series[f"broker.{b}.{key}"].append((now, round(rate, 2)))
