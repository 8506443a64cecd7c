"""Connection limits (Kafka's ``ConnectionQuotas``; KIP-402, KIP-612).

* ``max.connections.per.ip`` with ``max.connections.per.ip.overrides``
  (``host-or-ip:count,...``): a new connection from an IP at its limit is closed at once.
* ``max.connections`` (broker-wide, not counting the inter-broker listener) and
  ``listener.name.<l>.max.connections``: a new connection over either limit is closed at
  once (Kafka leaves it in the accept backlog instead).
* ``max.connection.creation.rate`` (broker-wide, not for the inter-broker listener) and
  ``listener.name.<l>.max.connection.creation.rate`` (connections per second): a connection
  over the rate is held - not read - for the throttle time, then served, as Kafka's
  Acceptor waits before accepting.
* per-IP ``connection_creation_rate`` quotas (``/config/ips/<ip>``, ``/config/ips/<default>``,
  AlterClientQuotas with the ``ip`` entity): a connection over it is closed after the
  throttle time (Kafka's ``ConnectionThrottledException``).

Rates are Kafka's windowed ``Rate`` (``quota.window.num`` x ``quota.window.size.seconds``).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from broker.security import znodes
from broker.security.quotas import Rate
from common.config_error import ConfigError

__all__ = ["ConnectionQuotas", "parse_overrides"]

log = logging.getLogger(__name__)
INT_MAX = 2**31 - 1


def _mono_ms() -> float:
    return time.monotonic() * 1000


def parse_overrides(text: str | None) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,...`` -> {ip: count}; ConfigError
    for a malformed entry (host names are resolved once)."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError("max.connections.per.ip.overrides", text,
                              "host:count[,host:count...]", f"bad entry {item!r}")
        try:
            ip = socket.gethostbyname(host.strip().strip("[]"))
        except OSError:
            ip = host.strip().strip("[]")
        out[ip] = int(count)
    return out


class ConnectionQuotas:
    def __init__(self, config, *, clock_ms: Callable[[], float] = _mono_ms,
                 ip_quotas: Callable[[], dict[str, dict[str, str]]] | None = None) -> None:
        self.clock_ms = clock_ms
        self.per_ip = config.get("max.connections.per.ip")
        self.overrides = parse_overrides(config.get("max.connections.per.ip.overrides"))
        self.broker_max = config.get("max.connections")
        self.broker_rate = config.get("max.connection.creation.rate")
        self.inter_broker = config.inter_broker_listener_name
        self.listener_max: dict[str, int] = {}
        self.listener_rate: dict[str, int] = {}
        for e in config.listeners:
            name = e.listener_name
            overrides = config.listener_overrides.get(name, {})
            if "max.connections" in overrides:
                self.listener_max[name] = overrides["max.connections"]
            if "max.connection.creation.rate" in overrides:
                self.listener_rate[name] = overrides["max.connection.creation.rate"]
        self.samples = config.get("quota.window.num")
        self.window_ms = config.get("quota.window.size.seconds") * 1000
        self._rates: dict[str, Rate] = {}
        self.ip_quotas = ip_quotas or (lambda: {})

    def max_for_ip(self, ip: str) -> int:
        return self.overrides.get(ip, self.per_ip)

    def max_for_listener(self, listener: str) -> int:
        return self.listener_max.get(listener, INT_MAX)

    def counts_for_broker(self, listener: str) -> bool:
        """Whether the listener's connections count against ``max.connections``."""
        return listener != self.inter_broker

    def _throttle(self, key: str, bound: float, now: float) -> int:
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = Rate(self.samples, self.window_ms)
        rate.record(1, now)
        value = rate.measure(now)
        if value <= bound:
            return 0
        return int(min((value - bound) / bound * rate.window_size(now),
                       self.samples * self.window_ms))

    def creation_delay_ms(self, listener: str) -> int:
        """Listener/broker creation rate: how long to hold the new connection (0 = none)."""
        now = self.clock_ms()
        delay = 0
        rate = self.listener_rate.get(listener)
        if rate is not None and rate < INT_MAX:
            delay = self._throttle(f"listener:{listener}", max(rate, 1e-9), now)
        if self.broker_rate < INT_MAX and listener != self.inter_broker:
            delay = max(delay, self._throttle("broker", max(self.broker_rate, 1e-9), now))
        return delay

    def ip_throttle_ms(self, ip: str) -> int:
        """Per-IP ``connection_creation_rate``: the delay after which to close (0 = fine)."""
        quotas = self.ip_quotas()
        config = quotas.get(f"ips/{znodes.sanitize(ip)}") or \
            quotas.get(f"ips/{znodes.DEFAULT_ENTITY}")
        if not config or "connection_creation_rate" not in config:
            return 0
        try:
            bound = float(config["connection_creation_rate"])
        except ValueError:
            return 0
        return self._throttle(f"ip:{ip}", max(bound, 1e-9), self.clock_ms())
