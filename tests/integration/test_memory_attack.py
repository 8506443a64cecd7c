"""The broker's memory under hostile frame sizes (issue 13): connections that announce huge
requests and send a little must not make the broker allocate the announced size, and with
``queued.max.request.bytes`` all connections together stay within the bound. Measured on a
broker subprocess with /proc (VmRSS, VmHWM)."""

from __future__ import annotations

import time

import pytest

from tests.faults.attacks import close_all, declared_size_attack
from tests.faults.procfs import peak_rss_bytes, reset_peak_rss, rss_bytes
from tests.integration.harness import api_versions_probe

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MB = 1024 * 1024


def _settled_rss(pid: int) -> int:
    """RSS once the idle broker stopped growing (startup allocations done)."""
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.1)
        now = rss_bytes(pid)
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


def test_ten_90mb_announcements_with_1mb_sent(broker_factory):
    """The issue's measurement: before, 37 MB -> 918 MB RSS; now the growth is about what
    was sent (10 x 1 MB, buffers at most about twice that)."""
    broker = broker_factory()
    pid = broker.pid
    idle = _settled_rss(pid)
    reset_peak_rss(pid)
    socks = declared_size_attack(broker.host, broker.port, connections=10, declared=90 * MB,
                                 send_bytes=1 * MB)
    try:
        time.sleep(0.5)
        grown = peak_rss_bytes(pid) - idle
        assert grown < 48 * MB, f"broker grew by {grown / MB:.0f} MB"
        api_versions_probe(broker.host, broker.port)  # still serving
    finally:
        close_all(socks)


def test_queued_max_request_bytes_bounds_many_connections(broker_factory):
    """120 connections offer 4 MB each (480 MB) of 16 MB announcements; the pool is 16 MB:
    peak RSS stays under twice the idle RSS plus the bound (the fuzzer's criterion). As in
    Kafka, an exhausted pool mutes every connection that needs memory (a new client too) until
    memory frees: here when the idle attackers are closed after connections.max.idle.ms."""
    broker = broker_factory({"socket.request.max.bytes": str(16 * MB),
                             "queued.max.request.bytes": str(16 * MB),
                             "connections.max.idle.ms": "4000"})
    pid = broker.pid
    idle = _settled_rss(pid)
    reset_peak_rss(pid)
    socks = declared_size_attack(broker.host, broker.port, connections=120, declared=16 * MB,
                                 send_bytes=4 * MB, stall_s=1.0)
    try:
        peak = peak_rss_bytes(pid)
        assert peak < 2 * idle + 16 * MB, (
            f"peak {peak / MB:.0f} MB, idle {idle / MB:.0f} MB, bound 16 MB")
        started = time.monotonic()
        api_versions_probe(broker.host, broker.port, timeout=30)  # muted until memory frees
        waited = time.monotonic() - started
        assert waited > 0.5, "a new request was served while the pool was exhausted"
        peak = peak_rss_bytes(pid)
        assert peak < 2 * idle + 16 * MB, (
            f"peak {peak / MB:.0f} MB, idle {idle / MB:.0f} MB, bound 16 MB")
    finally:
        close_all(socks)
    api_versions_probe(broker.host, broker.port)
