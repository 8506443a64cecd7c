"""Network limits on a live broker subprocess: queued.max.requests backpressure under many
pipelining clients, socket buffer sizes and the listen backlog as the kernel reports them
(``ss``), and max.connections.per.ip closing the connection beyond the limit."""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.integration.harness import BrokerProcess, api_versions_probe, recv_exact

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    # kafka-python 3 loads its schemas with deprecated importlib.resources calls
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def api_versions_frame(correlation_id: int) -> bytes:
    """ApiVersions v0: size | api_key=18 | version 0 | correlation_id | client_id (int16 len)."""
    client_id = b"limits"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def pipelined_api_versions(broker: BrokerProcess, client: int, count: int) -> list[int]:
    """Send ``count`` ApiVersions requests in one write, then read every response; returns the
    correlation ids in arrival order (each response must carry error_code 0)."""
    ids = [client * 100_000 + i for i in range(count)]
    seen = []
    with socket.create_connection((broker.host, broker.port), timeout=30) as s:
        s.sendall(b"".join(api_versions_frame(i) for i in ids))
        for _ in ids:
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            cid, error_code = struct.unpack(">ih", recv_exact(s, size)[:6])
            assert error_code == 0
            seen.append(cid)
    assert seen == ids  # every response, in request order
    return seen


def ss_lines(*args: str) -> list[str]:
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    out = subprocess.run(["ss", "-Htn", *args], capture_output=True, text=True, timeout=10,
                         check=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_queued_max_requests_2_serves_many_pipelining_clients(broker_factory):
    broker = broker_factory({"queued.max.requests": "2", "num.io.threads": "2",
                             "num.partitions": "4", "socket.listen.backlog.size": "7",
                             "socket.send.buffer.bytes": "24576",
                             "socket.receive.buffer.bytes": "40960"})

    # raw clients: 40 connections each pipelining 50 requests in one write
    with ThreadPoolExecutor(40) as pool:
        results = list(pool.map(lambda n: pipelined_api_versions(broker, n, 50), range(40)))
    assert sum(len(r) for r in results) == 2000

    # real producers pipelining produce requests (idempotent, up to 5 in flight) at once
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    topic = "limits-pipelined"
    per_producer, producers = 1500, 6
    errors: list[str] = []

    def produce(n: int) -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                      "enable.idempotence": True, "max.in.flight.requests.per.connection": 5})

        def delivered(err, _msg):
            if err is not None:
                errors.append(str(err))

        for i in range(per_producer):
            p.produce(topic, value=f"{n}-{i}".encode(), key=str(i).encode(),
                      on_delivery=delivered)
            p.poll(0)
        assert p.flush(60) == 0

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(4)])
        consumer.seek_to_beginning()
        values = set()
        for record in consumer:
            values.add(record.value)
            if len(values) == per_producer * producers:
                break
    finally:
        consumer.close()
    assert values == {f"{n}-{i}".encode() for n in range(producers) for i in range(per_producer)}

    # the kernel's view: listen backlog (Send-Q of a listening socket) and the accepted
    # socket's buffers (skmem rb/tb; Linux stores twice the value set)
    listening = ss_lines("-l", f"sport = :{broker.port}")
    assert len(listening) == 1 and listening[0].split()[2] == "7"
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(api_versions_frame(1))
        recv_exact(s, 4)
        local_port = s.getsockname()[1]
        lines = ss_lines("-m", f"sport = :{broker.port} and dport = :{local_port}")
        skmem = re.search(r"rb(\d+),t\d+,tb(\d+)", " ".join(lines))
        assert skmem is not None, lines
        assert int(skmem.group(1)) in (40960, 2 * 40960)
        assert int(skmem.group(2)) in (24576, 2 * 24576)
    assert broker.is_running()


def test_max_connections_per_ip_closes_the_third_connection(broker_factory):
    broker = broker_factory({"max.connections.per.ip": "2"})
    addr = (broker.host, broker.port)
    time.sleep(0.5)  # let the harness's readiness probe connection be released
    first = socket.create_connection(addr, timeout=10)
    second = socket.create_connection(addr, timeout=10)
    try:
        for n, s in enumerate((first, second)):
            s.sendall(api_versions_frame(n))
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            assert struct.unpack(">i", recv_exact(s, size)[:4])[0] == n
        with socket.create_connection(addr, timeout=10) as third:
            try:
                third.sendall(api_versions_frame(3))
                assert third.recv(4) == b""  # closed without an answer
            except ConnectionResetError:
                pass
        first.close()
        deadline = time.monotonic() + 10
        while True:  # the broker frees the slot once it sees the close
            try:
                assert api_versions_probe(broker.host, broker.port)
                break
            except (OSError, ValueError):
                assert time.monotonic() < deadline, "slot never freed"
                time.sleep(0.1)
        assert "max.connections.per.ip=2" in broker.log_text()
    finally:
        first.close()
        second.close()
