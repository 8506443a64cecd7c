"""The genuine Apache kafka-clients 3.9.1 jar (driven by tests/java/JosefClient.java) against a
live broker: every codec, keys, headers, null values, a 900 KB record, 100 partitions,
auto-created topics, and the idempotent producer (the 3.x default) retrying through
connection drops and a broker SIGKILL without duplicates or loss.

Retries are provoked by :class:`DroppingProxy`, a loopback TCP proxy that forwards Kafka
frames both ways and, for chosen Produce responses, closes the connection instead of
forwarding the response: the broker has appended the batch, the client never hears so and
resends it with the same producer id, epoch and sequence. The broker must answer that resend
with the original offsets (Kafka's DUPLICATE_SEQUENCE_NUMBER handling, KIP-98). The control
test runs the same scenario with ``enable.idempotence=false`` and expects duplicates, which
shows the proxy really causes resends.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.harness import JavaResult, java_value, run_java_client

pytestmark = [pytest.mark.integration, pytest.mark.java, pytest.mark.timeout(150)]

PRODUCE = 0


# ----- helpers -------------------------------------------------------------------------------

def _java(cp: str, command: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["java", "-cp", cp, "JosefClient", command, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def _finish(proc: subprocess.Popen, timeout: float) -> JavaResult:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"JosefClient timed out; stdout tail {out[-2000:]!r}") from None
    return JavaResult(proc.returncode, out, err)


def _produced(res: JavaResult, count: int) -> dict[int, tuple[int, int]]:
    assert res.returncode == 0, (res.returncode, res.stdout[-2000:], res.stderr[-4000:])
    acks = {}
    for line in res.lines:
        if line.startswith("ack "):
            _, i, part, off = line.split()
            acks[int(i)] = (int(part), int(off))
    assert res.lines[-1] == f"produced {count}" and sorted(acks) == list(range(count))
    return acks


def _consumed(res: JavaResult, count: int) -> list[tuple]:
    assert res.returncode == 0, (res.returncode, res.stdout[-2000:], res.stderr[-4000:])
    rows = []
    for line in res.lines[:-1]:
        part, off, key, vlen, crc, headers = line.split(" ")
        rows.append((int(part), int(off), key, int(vlen), crc, headers))
    assert res.lines[-1] == f"consumed {count}" and len(rows) == count
    return rows


def produce_args(bootstrap: str, topic: str, count: int, *args: str) -> list[str]:
    return ["--bootstrap", bootstrap, "--topic", topic, "--count", str(count), *args]


def consume_args(bootstrap: str, topic: str, count: int, *args: str) -> list[str]:
    return ["--bootstrap", bootstrap, "--topic", topic, "--count", str(count),
            "--from-beginning", "--timeout-ms", "40000", *args]


def produce(cp: str, bootstrap: str, topic: str, count: int, *args: str, timeout: float = 90):
    """Run the producer; ``{i: (partition, offset)}`` of every acknowledged record."""
    proc = _java(cp, "produce", *produce_args(bootstrap, topic, count, *args))
    return _produced(_finish(proc, timeout), count)


def consume(cp: str, bootstrap: str, topic: str, count: int, *args: str, timeout: float = 90):
    """``[(partition, offset, key, value_len, crc_hex, headers), ...]`` from the beginning."""
    proc = _java(cp, "consume", *consume_args(bootstrap, topic, count, *args))
    return _consumed(_finish(proc, timeout), count)


def crc_hex(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=15)[topic]
    fut.result(timeout=20)


def read_all(bootstrap: str, topic: str, partition: int = 0, timeout: float = 30.0):
    """Every record of one partition up to its high watermark: ``[(offset, key, value)]``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, low)])
        out, deadline = [], time.monotonic() + timeout
        while (not out or out[-1][0] < high - 1) and high > low:
            assert time.monotonic() < deadline, f"read {len(out)} records, high watermark {high}"
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.offset(), m.key(), m.value()))
        return out, high
    finally:
        c.close()


class DroppingProxy:
    """Loopback TCP proxy for Kafka frames that drops chosen Produce responses.

    Each accepted connection gets an upstream connection to ``target`` and two pump
    threads. Client-to-broker frames are forwarded whole while remembering
    ``correlation_id -> api_key`` (request header: size int32 | api_key int16 | api_version
    int16 | correlation_id int32 ...). Broker-to-client frames (size int32 | correlation_id
    int32 ...) are forwarded whole, except that the ``n``-th Produce response, for ``n`` in
    ``drop_at``, is swallowed and both sockets are closed.
    """

    def __init__(self, target: tuple[str, int], drop_at: set[int]):
        self.target = target
        self.drop_at = set(drop_at)
        self.produce_responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._socks += [client, upstream]
            api_keys: dict[int, int] = {}
            threading.Thread(target=self._pump, args=(client, upstream, api_keys, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, api_keys, False),
                             daemon=True).start()

    @staticmethod
    def _recv_exact(s: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def _pump(self, src: socket.socket, dst: socket.socket, api_keys: dict[int, int],
              requests: bool) -> None:
        try:
            while True:
                size_bytes = self._recv_exact(src, 4)
                (size,) = struct.unpack(">i", size_bytes)
                body = self._recv_exact(src, size)
                if requests:
                    api_key, _ver, cid = struct.unpack_from(">hhi", body, 0)
                    api_keys[cid] = api_key
                else:
                    (cid,) = struct.unpack_from(">i", body, 0)
                    if api_keys.pop(cid, None) == PRODUCE:
                        with self._lock:
                            self.produce_responses += 1
                            drop = self.produce_responses in self.drop_at
                            self.dropped += drop
                        if drop:
                            break
                dst.sendall(size_bytes + body)
        except (OSError, ConnectionError, struct.error):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.close()
                except OSError:
                    pass


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker advertising a :class:`DroppingProxy` in front of it (``proxy.drop_at`` is
    set by the test before producing)."""
    proxy = DroppingProxy(("127.0.0.1", 1), set())
    try:
        b = broker_factory({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
        proxy.target = (b.host, b.port)
        yield b, proxy
    finally:
        proxy.close()


# ----- produce / consume -----------------------------------------------------------------------

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def test_codecs_keys_headers_auto_created(shared_broker, java_client):
    """One producer per codec (run side by side to save JVM start-up time), each to its own
    auto-created topic; then one consumer per topic."""
    bs = shared_broker.bootstrap
    procs = {c: _java(java_client, "produce", *produce_args(
        bs, f"java-codec-{c}", 300, "--compression", c, "--key-prefix", "k", "--headers",
        "--value-size", "100")) for c in CODECS}
    acks = {c: _produced(_finish(p, 120), 300) for c, p in procs.items()}
    procs = {c: _java(java_client, "consume", *consume_args(bs, f"java-codec-{c}", 300))
             for c in CODECS}
    rows = {c: _consumed(_finish(p, 120), 300) for c, p in procs.items()}
    for c in CODECS:
        assert sorted(off for _, off in acks[c].values()) == list(range(300)), c
        by_key = {r[2]: r for r in rows[c]}
        for i in range(300):
            part, off, _key, vlen, crc, headers = by_key[f"k{i}"]
            assert (part, off) == acks[c][i], c
            assert (vlen, crc) == (100, crc_hex(java_value(i, 100))), c
            assert headers == f"index={i},nothing=null", c


def test_null_values_and_null_keys(shared_broker, java_client):
    produce(java_client, shared_broker.bootstrap, "java-nulls", 20, "--key-prefix", "n",
            "--null-values", "--compression", "lz4")
    produce(java_client, shared_broker.bootstrap, "java-nulls", 5, "--value-size", "3")
    rows = consume(java_client, shared_broker.bootstrap, "java-nulls", 25)
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows[:20]] == [
        (i, f"n{i}", -1, "null", "-") for i in range(20)]
    assert [(r[1], r[2], r[3], r[4]) for r in rows[20:]] == [
        (20 + i, "null", 3, crc_hex(java_value(i, 3))) for i in range(5)]


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_900kb_records(shared_broker, java_client, codec):
    topic = f"java-big-{codec}"
    acks = produce(java_client, shared_broker.bootstrap, topic, 3, "--value-size", "900000",
                   "--compression", codec, "--key-prefix", "big")
    assert sorted(acks.values()) == [(0, 0), (0, 1), (0, 2)]
    rows = consume(java_client, shared_broker.bootstrap, topic, 3)
    assert [(r[1], r[3], r[4]) for r in rows] == [
        (i, 900_000, crc_hex(java_value(i, 900_000))) for i in range(3)]


def test_100_partitions(shared_broker, java_client):
    topic = "java-p100"
    create_topic(shared_broker.bootstrap, topic, 100)
    acks = produce(java_client, shared_broker.bootstrap, topic, 1000, "--key-prefix", "key",
                   "--compression", "snappy", "--linger-ms", "20")
    assert {p for p, _ in acks.values()} == set(range(100))  # murmur2 spreads these keys
    rows = consume(java_client, shared_broker.bootstrap, topic, 1000)
    got = {r[2]: (r[0], r[1]) for r in rows}
    assert got == {f"key{i}": acks[i] for i in range(1000)}
    per_part = Counter(p for p, _ in got.values())
    for p in range(100):  # offsets dense from 0 in every partition
        assert sorted(o for q, o in got.values() if q == p) == list(range(per_part[p]))


def test_assigned_consumer_at_latest_sees_no_old_records(shared_broker, java_client):
    """In assign mode (no group) with auto.offset.reset=latest the consumer starts at the
    log end offset (ListOffsets latest), so earlier records are not returned."""
    produce(java_client, shared_broker.bootstrap, "java-assign", 10)
    res = run_java_client(java_client, "consume", "--bootstrap", shared_broker.bootstrap,
                          "--topic", "java-assign", "--count", "1", "--timeout-ms", "3000")
    assert res.returncode == 2 and res.lines[-1] == "consumed 0"  # latest: nothing new


# ----- idempotent producer retries -------------------------------------------------------------

def _check_exactly_once(bootstrap: str, topic: str, count: int) -> None:
    records, high = read_all(bootstrap, topic)
    keys = [k.decode() for _, k, _ in records]
    dups = [k for k, n in Counter(keys).items() if n > 1]
    assert not dups, f"duplicated records: {dups[:20]}"
    assert high == count and sorted(keys, key=lambda k: int(k[1:])) == [
        f"r{i}" for i in range(count)]
    assert [off for off, _, _ in records] == list(range(count))
    for _off, key, value in records:
        assert value == java_value(int(key[1:]), 32)
    # one partition, one producer, max.in.flight 5 with idempotence: order is kept
    assert keys == [f"r{i}" for i in range(count)]


def test_idempotent_retries_after_dropped_responses(proxied_broker, java_client):
    broker, proxy = proxied_broker
    proxy.drop_at = {3, 8, 14, 20}
    produce(java_client, f"127.0.0.1:{proxy.port}", "java-idem", 400, "--key-prefix", "r",
            "--value-size", "32", "--delay-ms", "2", "--linger-ms", "0",
            "--prop", "retry.backoff.ms=50", timeout=120)
    assert proxy.dropped == 4
    _check_exactly_once(broker.bootstrap, "java-idem", 400)


def test_control_without_idempotence_dropped_responses_duplicate(proxied_broker, java_client):
    broker, proxy = proxied_broker
    proxy.drop_at = {3, 8, 14, 20}
    produce(java_client, f"127.0.0.1:{proxy.port}", "java-dup", 400, "--key-prefix", "r",
            "--value-size", "32", "--delay-ms", "2", "--linger-ms", "0",
            "--idempotence", "false", "--prop", "retry.backoff.ms=50", timeout=120)
    assert proxy.dropped == 4
    records, high = read_all(broker.bootstrap, "java-dup")
    keys = Counter(k for _, k, _ in records)
    assert set(keys) == {b"r%d" % i for i in range(400)}  # nothing lost
    assert high > 400 and max(keys.values()) > 1  # but resends were appended twice


@pytest.mark.parametrize("hard", [True, False], ids=["sigkill", "sigterm"])
def test_idempotent_producer_survives_broker_restart(broker_factory, java_client, tmp_path,
                                                     hard):
    """Produce a slow stream; restart the broker mid-stream (SIGKILL, or a clean SIGTERM
    shutdown); every record is acknowledged and stored exactly once, in order (the
    producer state, last sequence per producer id, is rebuilt from the log)."""
    broker = broker_factory()
    out_path: Path = tmp_path / "producer.out"
    count = 600
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            ["java", "-cp", java_client, "JosefClient", "produce", "--bootstrap",
             broker.bootstrap, "--topic", "java-kill", "--count", str(count), "--key-prefix",
             "r", "--value-size", "32", "--delay-ms", "5", "--linger-ms", "0",
             "--timeout-ms", "60000", "--prop", "retry.backoff.ms=100",
             "--prop", "reconnect.backoff.max.ms=200"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while out_path.read_text().count("ack ") < 150:
            assert proc.poll() is None and time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.05)
        broker.restart(hard=hard)
        rc = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out_path.read_text()
    assert rc == 0 and f"produced {count}" in text, text[-3000:]
    acked = sum(line.startswith("ack ") for line in text.splitlines())
    assert acked == count
    _check_exactly_once(broker.bootstrap, "java-kill", count)


def test_acks_0_and_1(shared_broker, java_client):
    """acks=0 (no Produce response at all; the client reports offset -1) and acks=1."""
    bs = shared_broker.bootstrap
    p0 = _java(java_client, "produce", *produce_args(bs, "java-acks0", 50, "--acks", "0",
                                                     "--key-prefix", "a"))
    p1 = _java(java_client, "produce", *produce_args(bs, "java-acks1", 50, "--acks", "1",
                                                     "--key-prefix", "b"))
    acks0, acks1 = _produced(_finish(p0, 90), 50), _produced(_finish(p1, 90), 50)
    assert {off for _, off in acks0.values()} == {-1}
    assert sorted(off for _, off in acks1.values()) == list(range(50))
    for topic, prefix in (("java-acks0", "a"), ("java-acks1", "b")):
        rows = consume(java_client, bs, topic, 50)
        assert [(r[1], r[2]) for r in rows] == [(i, f"{prefix}{i}") for i in range(50)]
