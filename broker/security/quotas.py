"""Client quotas (Kafka's ``ClientQuotaManager``, ``ClientRequestQuotaManager``,
``ControllerMutationQuotaManager``; KIP-13, KIP-55, KIP-124, KIP-219, KIP-599).

Quota types, configured per entity in ``/config/users/...`` and ``/config/clients/...``
(``broker.security.znodes``; AlterClientQuotas, ``josef configs``):

* ``producer_byte_rate`` (bytes/s of Produce requests), ``consumer_byte_rate`` (bytes/s of
  Fetch responses);
* ``request_percentage`` (percent of one request-handler thread's time: time in the
  handlers per quota window);
* ``controller_mutation_rate`` (partitions created/deleted per second by CreateTopics,
  CreatePartitions, DeleteTopics).

Which entity applies to a (user, client id) pair, per quota type (Kafka's
``DefaultQuotaCallback``): ``/config/users/<user>/clients/<client-id>``, then
``users/<user>/clients/<default>``, ``users/<user>``, ``users/<default>/clients/<client-id>``,
``users/<default>/clients/<default>``, ``users/<default>``, ``clients/<client-id>``,
``clients/<default>``; the first that sets the type wins. Each (user, client id) that a
default applies to gets its own rate with the default's bound.

Measurement is Kafka's ``Rate``: ``quota.window.num`` (11) samples of
``quota.window.size.seconds`` (1 s); the rate is the sum of the kept samples over the window
(at least ``samples - 1`` whole windows). A value that brings the rate above the bound is
still recorded and gives a throttle time ``(rate - bound) / bound * window`` (ms), capped at
the full window; the handler puts it in ``throttle_time_ms`` and the connection is muted for
that long after the response (KIP-219). Controller mutations use a token bucket (KIP-599):
a strict quota (new request versions) refuses the topics once the bucket is empty with
THROTTLING_QUOTA_EXCEEDED.

Everything here is pure (manual clock in tests); ``QuotaManagers`` bundles the four and
listens to client config changes of the SecurityManager.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.security import znodes

__all__ = ["ClientQuotaManager", "ControllerMutationQuota", "QUOTA_KEYS", "QuotaManagers",
           "Rate", "TokenBucket"]

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
REQUEST, MUTATION = "request_percentage", "controller_mutation_rate"
QUOTA_KEYS = (PRODUCE, FETCH, REQUEST, MUTATION)
DEFAULT = znodes.DEFAULT_ENTITY
INACTIVE_MS = 3600 * 1000  # Kafka drops quota sensors idle for an hour


def _wall_ms() -> float:
    return time.time() * 1000


@dataclass
class _Sample:
    start_ms: float
    value: float = 0.0


class Rate:
    """Kafka's ``Rate`` (SampledStat of ``samples`` windows of ``window_ms``), per second."""

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.samples = max(2, samples)
        self.window_ms = window_ms
        self._s: list[_Sample] = []

    def record(self, value: float, now_ms: float) -> None:
        s = self._s
        if not s or now_ms - s[-1].start_ms >= self.window_ms:
            s.append(_Sample(now_ms))
            if len(s) > self.samples:
                del s[0]
        s[-1].value += value

    def _purge(self, now_ms: float) -> None:
        limit = self.samples * self.window_ms
        while self._s and now_ms - self._s[0].start_ms >= limit:
            del self._s[0]

    def window_size(self, now_ms: float) -> float:
        """Kafka's ``Rate.windowSize``: elapsed time since the oldest sample, at least
        ``samples - 1`` whole windows."""
        self._purge(now_ms)
        oldest = self._s[0].start_ms if self._s else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        self._purge(now_ms)
        total = sum(s.value for s in self._s)
        return total / (self.window_size(now_ms) / 1000.0)


class TokenBucket:
    """KIP-599's token bucket: ``rate`` tokens/s up to ``rate * burst_s``; starts full."""

    def __init__(self, rate: float, burst_s: float, now_ms: float) -> None:
        self.rate = rate
        self.burst = rate * burst_s
        self.tokens = self.burst
        self.last_ms = now_ms

    def refill(self, now_ms: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now_ms - self.last_ms) / 1000.0 * self.rate)
        self.last_ms = now_ms

    def throttle_ms(self) -> int:
        return 0 if self.tokens >= 0 else math.ceil(-self.tokens / self.rate * 1000)


@dataclass
class _Sensor:
    bound: float
    rate: Rate
    last_ms: float = field(default=0.0)


class ClientQuotaManager:
    """One quota type. ``configs()`` gives the client configs by entity path (the
    SecurityManager's ``entity_configs``); call :meth:`refresh` after they changed."""

    def __init__(self, key: str, configs: Callable[[], dict[str, dict[str, str]]], *,
                 samples: int = 11, window_s: int = 1,
                 clock_ms: Callable[[], float] = _wall_ms) -> None:
        self.key = key
        self.configs = configs
        self.samples = samples
        self.window_ms = window_s * 1000
        self.clock_ms = clock_ms
        self._quotas: dict[tuple[str | None, str | None], float] = {}
        self._sensors: dict[tuple[str, str], _Sensor] = {}
        self.refresh()

    @property
    def enabled(self) -> bool:
        return bool(self._quotas)

    def refresh(self) -> None:
        """Re-read the bounds of this quota type from the entity configs."""
        quotas: dict[tuple[str | None, str | None], float] = {}
        for path, config in self.configs().items():
            value = config.get(self.key)
            if value is None:
                continue
            try:
                bound = float(value)
            except ValueError:
                continue
            quotas[_entity_key(path)] = bound
        self._quotas = quotas
        self._sensors.clear()  # bounds (and which entity applies) may have changed

    def _tags(self, user: str, client: str) -> tuple[str, str]:
        """Kafka's ``quotaMetricTags``: which (user, client) the rate is kept for."""
        q = self._quotas
        if (user, client) in q or (user, DEFAULT) in q:
            return user, client
        if (user, None) in q:
            return user, ""
        if (DEFAULT, client) in q or (DEFAULT, DEFAULT) in q:
            return user, client
        if (DEFAULT, None) in q:
            return user, ""
        return "", client

    def _limit(self, user: str, client: str) -> float | None:
        q = self._quotas
        if user and client:
            for key in ((user, client), (user, DEFAULT), (DEFAULT, client), (DEFAULT, DEFAULT)):
                if key in q:
                    return q[key]
        elif user:
            for key in ((user, None), (DEFAULT, None)):
                if key in q:
                    return q[key]
        elif client:
            for key in ((None, client), (None, DEFAULT)):
                if key in q:
                    return q[key]
        return None

    def bound_for(self, user: str, client: str) -> float | None:
        """The quota that applies to ``user`` (principal name) and ``client`` (client id)."""
        return self._limit(*self._tags(znodes.sanitize(user), client or ""))

    def _sensor(self, user: str, client: str, now_ms: float) -> _Sensor | None:
        tags = self._tags(znodes.sanitize(user), client or "")
        sensor = self._sensors.get(tags)
        if sensor is None:
            bound = self._limit(*tags)
            if bound is None:
                return None
            if len(self._sensors) > 10_000:
                self._expire(now_ms)
            sensor = self._sensors[tags] = _Sensor(bound, Rate(self.samples, self.window_ms))
        sensor.last_ms = now_ms
        return sensor

    def _expire(self, now_ms: float) -> None:
        for tags in [t for t, s in self._sensors.items() if now_ms - s.last_ms > INACTIVE_MS]:
            del self._sensors[tags]

    def record(self, user: str, client: str, value: float, now_ms: float | None = None) -> int:
        """Record ``value`` and return the throttle time in ms (0 within the quota)."""
        if not self._quotas:
            return 0
        now = self.clock_ms() if now_ms is None else now_ms
        sensor = self._sensor(user, client, now)
        if sensor is None:
            return 0
        sensor.rate.record(value, now)
        rate = sensor.rate.measure(now)
        if rate <= sensor.bound or sensor.bound <= 0 and rate <= 0:
            return 0
        if sensor.bound <= 0:
            return self.samples * self.window_ms
        throttle = (rate - sensor.bound) / sensor.bound * sensor.rate.window_size(now)
        return int(min(round(throttle), self.samples * self.window_ms))

    def unrecord(self, user: str, client: str, value: float, now_ms: float | None = None) -> None:
        """Take back a recorded value (a throttled fetch answers empty: Kafka's
        ``unrecordQuotaSensor``)."""
        if self._quotas:
            now = self.clock_ms() if now_ms is None else now_ms
            sensor = self._sensor(user, client, now)
            if sensor is not None:
                sensor.rate.record(-value, now)


class ControllerMutationQuota:
    """KIP-599 per (user, client id): a token bucket of ``controller_mutation_rate``
    partition mutations per second (burst: the quota window)."""

    def __init__(self, manager: ClientQuotaManager) -> None:
        self.manager = manager
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def _bucket(self, user: str, client: str, now_ms: float) -> TokenBucket | None:
        m = self.manager
        if not m.enabled:
            return None
        tags = m._tags(znodes.sanitize(user), client or "")
        bound = m._limit(*tags)
        if bound is None:
            return None
        b = self._buckets.get(tags)
        if b is None or b.rate != bound:
            b = self._buckets[tags] = TokenBucket(bound, m.samples * m.window_ms / 1000, now_ms)
        b.refill(now_ms)
        return b

    def exceeded(self, user: str, client: str, now_ms: float | None = None) -> int:
        """Strict quota: the throttle time when the bucket is already empty, else 0."""
        now = self.manager.clock_ms() if now_ms is None else now_ms
        b = self._bucket(user, client, now)
        return 0 if b is None else b.throttle_ms()

    def record(self, user: str, client: str, mutations: int, now_ms: float | None = None) -> int:
        """Take ``mutations`` tokens; returns the throttle time (permissive quota)."""
        now = self.manager.clock_ms() if now_ms is None else now_ms
        b = self._bucket(user, client, now)
        if b is None:
            return 0
        b.tokens -= mutations
        return b.throttle_ms()


def _entity_key(path: str) -> tuple[str | None, str | None]:
    """``users/alice/clients/c1`` -> ("alice", "c1"); ``users/<default>`` -> ("<default>",
    None); ``clients/c1`` -> (None, "c1"). Names stay sanitized (users) as in the znodes."""
    parts = path.split("/")
    if parts[0] == "users":
        user = parts[1] if len(parts) > 1 else None
        client = parts[3] if len(parts) > 3 and parts[2] == "clients" else None
        return user, (znodes.desanitize(client) if client not in (None, DEFAULT) else client)
    if parts[0] == "clients" and len(parts) > 1:
        return None, parts[1] if parts[1] == DEFAULT else znodes.desanitize(parts[1])
    return None, None


class QuotaManagers:
    """The four managers of a broker (``security.quotas``)."""

    def __init__(self, configs: Callable[[], dict[str, dict[str, str]]], config=None, *,
                 clock_ms: Callable[[], float] = _wall_ms) -> None:
        samples = config.get("quota.window.num") if config is not None else 11
        window = config.get("quota.window.size.seconds") if config is not None else 1
        csamples = config.get("controller.quota.window.num") if config is not None else 11
        cwindow = config.get("controller.quota.window.size.seconds") if config is not None \
            else 1
        self.produce = ClientQuotaManager(PRODUCE, configs, samples=samples, window_s=window,
                                          clock_ms=clock_ms)
        self.fetch = ClientQuotaManager(FETCH, configs, samples=samples, window_s=window,
                                        clock_ms=clock_ms)
        self.request = ClientQuotaManager(REQUEST, configs, samples=samples, window_s=window,
                                          clock_ms=clock_ms)
        self.controller_mutation = ControllerMutationQuota(ClientQuotaManager(
            MUTATION, configs, samples=csamples, window_s=cwindow, clock_ms=clock_ms))

    def refresh(self) -> None:
        for m in (self.produce, self.fetch, self.request, self.controller_mutation.manager):
            m.refresh()

    def on_entity_change(self, entity_path: str, config: dict[str, str]) -> None:
        self.refresh()
