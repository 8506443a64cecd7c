"""The metrics registry: Kafka's MBeans as plain counters, read when Prometheus scrapes.

Every metric is named by its Kafka MBean (``kafka.server:type=ReplicaManager,name=
IsrShrinksPerSec``; extra key properties such as ``topic=t`` follow in Kafka's order) and is
one of Yammer's kinds as Kafka uses them:

* :class:`Meter` - an event count (Kafka's ``...PerSec`` meters; Prometheus derives rates from
  the count). ``mark(n=1)`` is one integer addition.
* :class:`Histogram` - a distribution (Kafka's ``...TimeMs`` histograms and timers):
  ``update(value)`` adds the value to a log-linear bucket (4 buckets per power of two, so a
  reported quantile is within ~19% of the true one) and to a running sum; quantiles are
  computed at scrape time over roughly the last five minutes (Kafka's histograms use an
  exponentially decaying reservoir biased to the last five minutes).
* :class:`Gauge` - a value read at scrape time from a callable (``Value`` attribute).
* providers - a callable returning many ``(mbean, value)`` gauge samples at scrape time
  (per-partition Log metrics, purgatory sizes) or native Prometheus families (consumer lag,
  named as kafka_exporter names them).

Updates are plain attribute/list operations with no lock: call them from the event loop (an
executor thread may ``update`` too; a rare race loses one count, never corrupts state).
Collection (:meth:`MetricsRegistry.snapshot`) runs on the event loop and only copies numbers;
turning names into Prometheus names and formatting text happens in a worker thread
(``broker.metrics.exporter``).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

__all__ = ["Gauge", "Histogram", "Meter", "MetricsRegistry", "NativeFamily", "parse_mbean",
           "QUANTILES"]

#: Kafka's (Yammer's) exported percentiles: attribute name -> quantile label.
QUANTILES = (("50thPercentile", 0.50), ("75thPercentile", 0.75), ("95thPercentile", 0.95),
             ("98thPercentile", 0.98), ("99thPercentile", 0.99), ("999thPercentile", 0.999))

_SUB = 4  # buckets per power of two
_MAX_BITS = 52  # values up to 2**52 units (in µs: ~140 years)
NUM_BUCKETS = _MAX_BITS * _SUB
WINDOW_S = 300.0  # quantiles cover about this much recent time
_ROTATE_S = 30.0


def parse_mbean(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``"kafka.server:type=T,name=N,topic=t"`` -> ``("kafka.server", (("type", "T"),
    ("name", "N"), ("topic", "t")))``; ValueError when it is not ``domain:k=v[,k=v...]``."""
    domain, sep, rest = name.partition(":")
    if not sep or not domain or not rest:
        raise ValueError(f"not an MBean name: {name!r}")
    props = []
    for item in rest.split(","):
        k, eq, v = item.partition("=")
        if not eq or not k:
            raise ValueError(f"not an MBean name: {name!r}")
        props.append((k, v))
    return domain, tuple(props)


def mbean_name(base: str, **props: object) -> str:
    """``mbean_name("kafka.log:type=Log,name=Size", topic="t", partition=0)``."""
    if not props:
        return base
    return base + "," + ",".join(f"{k}={v}" for k, v in props.items())


class Meter:
    """Kafka's Meter: ``count`` of events since start (``mark(n=1)``)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def mark(self, n: int = 1) -> None:
        self.count += n


def bucket_index(x: int) -> int:
    """Log-linear bucket of a non-negative integer: exact below 8, then 4 per power of two."""
    if x < 8:
        return x if x > 0 else 0
    b = x.bit_length()
    if b > _MAX_BITS:
        return NUM_BUCKETS - 1
    return (b << 2) + ((x >> (b - 3)) & 3) - 8


def bucket_bounds(index: int) -> tuple[int, int]:
    """[low, high) integer range of a bucket (inverse of :func:`bucket_index`)."""
    if index < 8:
        return index, index + 1
    i = index + 8
    b, sub = i >> 2, i & 3
    shift = b - 3
    return (4 + sub) << shift, (5 + sub) << shift


class Histogram:
    """Kafka's Histogram/Timer: ``update(value)`` with value in the metric's unit (ms for
    ``...TimeMs``). ``resolution`` values per unit are kept exactly below 8 and log-linearly
    above (default 1000: microsecond steps for millisecond timers)."""

    __slots__ = ("counts", "count", "sum", "scale", "_snapshots", "_last_rotate")

    def __init__(self, resolution: float = 1000.0) -> None:
        self.counts = [0] * NUM_BUCKETS
        self.count = 0
        self.sum = 0.0
        self.scale = resolution
        self._snapshots: list[tuple[float, list[int]]] = []
        self._last_rotate: float | None = None

    def update(self, value: float) -> None:
        self.update_scaled(int(value * self.scale), value)

    def update_scaled(self, x: int, value: float) -> None:
        """``update`` for a caller that already has ``value * resolution`` as an int."""
        if x < 8:
            i = x if x > 0 else 0
        else:
            b = x.bit_length()
            i = (b << 2) + ((x >> (b - 3)) & 3) - 8 if b <= _MAX_BITS else NUM_BUCKETS - 1
        self.counts[i] += 1
        self.count += 1
        self.sum += value

    def window_counts(self, now: float | None = None) -> list[int]:
        """Bucket counts of about the last ``WINDOW_S`` seconds (all of them until the first
        snapshot is that old). Called at scrape time, on the event loop."""
        now = time.monotonic() if now is None else now
        current = list(self.counts)
        snaps = self._snapshots
        if self._last_rotate is None or now - self._last_rotate >= _ROTATE_S:
            snaps.append((now, current))
            self._last_rotate = now
            while len(snaps) > 1 and now - snaps[1][0] >= WINDOW_S:
                snaps.pop(0)
        if snaps and now - snaps[0][0] >= WINDOW_S / 2:
            base = snaps[0][1]
            return [c - b for c, b in zip(current, base, strict=True)]
        return current

    def window_key(self) -> tuple[int, float | None]:
        """Changes whenever ``window_counts`` may give a different answer (a renderer may
        reuse quantiles computed for the same key)."""
        snaps = self._snapshots
        return self.count, snaps[0][0] if snaps else None


def quantiles(counts: list[int], scale: float, qs: Iterable[float]) -> list[float]:
    """Quantile estimates (in the metric's unit) from bucket counts, interpolating linearly
    inside a bucket; 0.0 for an empty histogram (cumulative sums and bisection: C speed)."""
    cum = list(itertools.accumulate(counts))
    total = cum[-1] if cum else 0
    if total <= 0:
        return [0.0 for _ in qs]
    out = []
    for q in qs:
        rank = q * total
        i = bisect.bisect_left(cum, rank)
        if i >= len(cum):
            i = len(cum) - 1
        c = counts[i]
        low, high = bucket_bounds(i)
        if i < 8 or not c:
            out.append(low / scale)
        else:
            seen = cum[i] - c
            out.append((low + (high - low) * (rank - seen) / c) / scale)
    return out


class Gauge:
    """Kafka's Gauge: ``fn()`` is read at scrape time (on the event loop; keep it cheap)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], float]) -> None:
        self.fn = fn


@dataclass(frozen=True, slots=True)
class NativeFamily:
    """A Prometheus family named directly (not from an MBean): ``type`` is ``gauge`` or
    ``counter``; ``samples`` are ``(labels, value)``."""

    name: str
    type: str
    help: str
    samples: list[tuple[dict[str, str], float]]


@dataclass(slots=True)
class Snapshot:
    """Numbers copied from the registry on the event loop; rendered elsewhere."""

    meters: list[tuple[str, int]]
    gauges: list[tuple[str, float]]
    #: mbean, window counts, count, sum, resolution, window key (see Histogram.window_key)
    histograms: list[tuple[str, list[int], int, float, float, tuple]]
    native: list[NativeFamily]
    errors: list[str]
    #: (key, convert, data) of deferred providers: ``convert(data)`` runs in the render thread
    deferred: list[tuple[str, Callable, object]] = field(default_factory=list)


class MetricsRegistry:
    """Metrics by MBean name. ``meter``/``histogram`` get or create; ``gauge`` sets (the last
    registration wins); ``remove`` drops one; ``remove_matching(prefix)`` drops a group (a
    component shutting down). Providers add samples computed at scrape time."""

    def __init__(self) -> None:
        self.meters: dict[str, Meter] = {}
        self.histograms: dict[str, Histogram] = {}
        self.gauges: dict[str, Gauge] = {}
        self.gauge_providers: dict[str, Callable[[], Iterable[tuple[str, float]]]] = {}
        self.native_providers: dict[str, Callable[[], Iterable[NativeFamily]]] = {}
        self.deferred_providers: dict[str, tuple[Callable[[], object],
                                                 Callable[[object], Iterable[NativeFamily]]]] = {}

    def meter(self, mbean: str) -> Meter:
        m = self.meters.get(mbean)
        if m is None:
            parse_mbean(mbean)
            m = self.meters[mbean] = Meter()
        return m

    def histogram(self, mbean: str, resolution: float = 1000.0) -> Histogram:
        h = self.histograms.get(mbean)
        if h is None:
            parse_mbean(mbean)
            h = self.histograms[mbean] = Histogram(resolution)
        return h

    def gauge(self, mbean: str, fn: Callable[[], float]) -> Gauge:
        parse_mbean(mbean)
        g = self.gauges[mbean] = Gauge(fn)
        return g

    def gauge_provider(self, key: str, fn: Callable[[], Iterable[tuple[str, float]]]) -> None:
        """``fn()`` yields ``(mbean, value)`` gauge samples at scrape time; ``key`` names the
        provider (registering the same key again replaces it)."""
        self.gauge_providers[key] = fn

    def native_provider(self, key: str, fn: Callable[[], Iterable[NativeFamily]]) -> None:
        self.native_providers[key] = fn

    def deferred_provider(self, key: str, fetch: Callable[[], object],
                          convert: Callable[[object], Iterable[NativeFamily]]) -> None:
        """``fetch()`` copies data on the event loop at scrape time; ``convert(data)`` turns
        it into NativeFamily objects in the render thread (names, labels: the costly part)."""
        self.deferred_providers[key] = (fetch, convert)

    def _dicts(self) -> tuple[dict, ...]:
        return (self.meters, self.histograms, self.gauges, self.gauge_providers,
                self.native_providers, self.deferred_providers)

    def remove(self, mbean: str) -> None:
        for d in self._dicts():
            d.pop(mbean, None)

    def remove_matching(self, prefix: str) -> None:
        for d in self._dicts():
            for k in [k for k in d if k.startswith(prefix)]:
                del d[k]

    def clear(self) -> None:
        for d in self._dicts():
            d.clear()

    def snapshot(self) -> Snapshot:
        """Copy every value (gauges and providers evaluated here). A failing gauge or
        provider is skipped and named in ``errors``; the rest is still reported."""
        now = time.monotonic()
        errors: list[str] = []
        meters = [(k, m.count) for k, m in self.meters.items()]
        hists = [(k, h.window_counts(now), h.count, h.sum, h.scale, h.window_key())
                 for k, h in self.histograms.items()]
        gauges: list[tuple[str, float]] = []
        for k, g in list(self.gauges.items()):
            try:
                v = g.fn()
            except Exception as e:  # noqa: BLE001 - one broken gauge must not fail a scrape
                errors.append(f"{k}: {e!r}")
                continue
            if v is not None:
                gauges.append((k, v))
        for k, fn in list(self.gauge_providers.items()):
            try:
                gauges.extend(fn())
            except Exception as e:  # noqa: BLE001
                errors.append(f"{k}: {e!r}")
        native: list[NativeFamily] = []
        for k, fn in list(self.native_providers.items()):
            try:
                native.extend(fn())
            except Exception as e:  # noqa: BLE001
                errors.append(f"{k}: {e!r}")
        deferred: list[tuple[str, Callable, object]] = []
        for k, (fetch, convert) in list(self.deferred_providers.items()):
            try:
                deferred.append((k, convert, fetch()))
            except Exception as e:  # noqa: BLE001
                errors.append(f"{k}: {e!r}")
        return Snapshot(meters, gauges, hists, native, errors, deferred)
