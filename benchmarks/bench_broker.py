"""Whole-broker benchmark: Josef against a ceiling server, raw sendfile and Tansu, same run.

Workloads (this process is the client, blocking sockets on 127.0.0.1; every server is a
separate process, so client and server never share a GIL):

1. produce 1 MiB batches: Produce v7 requests (request header v1, acks=1, one partition),
   each carrying one pre-encoded ~1 MiB RecordBatch v2 (uncompressed, 1 KB values), 5 in
   flight on one connection. Against Josef, Tansu and the *ceiling*: an asyncio Protocol
   (``--serve-ceiling``) that parses the same frames (size prefix, request header, produce
   body up to the records length), streams the batch bytes into a file with ``os.write`` as
   they arrive, and answers each frame with a fixed Produce v7 response (correlation id
   patched). Every response's error code is checked.
2. small produce requests: the same request shape carrying one record with a 100-byte value,
   5 in flight: requests/s (Josef, Tansu, ceiling).
3. fetch: a partition of ``JOSEF_BENCH_FETCH_MB`` MiB (default 1024; 128 with ``--quick``)
   filled with workload 1's batches, read back with Fetch v4 (one request in flight, as a
   consumer does; ``partition_max_bytes`` 8 MiB) against raw ``os.sendfile`` of the
   partition's segment files to a loopback socket (``--serve-sendfile``), and Tansu.
4. stock client: the confluent-kafka (librdkafka) producer, 1 KiB values, no compression,
   acks=1, linger.ms=5: MB/s to Josef and to Tansu.

Josef runs as ``python -m broker`` with its log dir under ``JOSEF_BENCH_DIR`` (default a fresh
directory in /dev/shm when present, so the disk does not dominate; the ceiling file lives
next to it). Tansu (``benchmarks/tansu.py``) is memory-only. Each workload runs
``--rounds`` times with the servers alternating; the best round is reported, and server CPU
time (utime+stime from /proc) per unit from that round.

Run: ``python benchmarks/bench_broker.py [--quick] [--rounds N] [--no-tansu]``. Prints a
markdown table and writes it to ``benchmarks/results/broker.md``. Ratios are only meaningful
within one run. Never run from the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from protocol.record_builder import RecordBatchBuilder  # noqa: E402

MiB = 1 << 20
CLIENT_ID = b"josef-bench"
PRODUCE_VERSION = 7
FETCH_VERSION = 4
CID_OFFSET = 8  # size int32 | api_key int16 | api_version int16 | correlation_id int32
TICK = os.sysconf("SC_CLK_TCK")


# ----- request encoding (hand-made, so a codec bug cannot flatter the numbers) ----------------

def _string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack(">h", len(b)) + b


def record_batch(records: int, value_size: int) -> bytes:
    """One uncompressed RecordBatch v2 of ``records`` records with ``value_size``-byte values,
    no key, no producer id (idempotence off), CreateTime now."""
    builder = RecordBatchBuilder()
    now = int(time.time() * 1000)
    value = bytes(range(256)) * (value_size // 256) + bytes(value_size % 256)
    for _ in range(records):
        builder.append(now, None, value)
    return builder.build()


def one_mib_batch() -> bytes:
    """The largest batch of 1000-byte records that fits in 1 MiB (1 MiB = 1,048,576 bytes)."""
    n = (MiB - 61) // 1012
    batch = record_batch(n, 1000)
    while len(batch) > MiB:
        n -= 1
        batch = record_batch(n, 1000)
    return batch


def produce_frame(topic: str, batch: bytes, acks: int = 1) -> bytearray:
    """Produce v7 frame: size | header v1 (api_key 0, version, correlation_id, client_id) |
    transactional_id null | acks int16 | timeout_ms int32 | [topic [partition 0, records]]."""
    body = (struct.pack(">hhi", 0, PRODUCE_VERSION, 0) + _string(CLIENT_ID)
            + struct.pack(">hhi", -1, acks, 30000) + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">iii", 1, 0, len(batch)) + batch)
    return bytearray(struct.pack(">i", len(body)) + body)


def produce_error_offset(topic: str) -> int:
    """Offset of the partition error code in a Produce v7 response body (after the size):
    correlation_id int32 | topics int32 | name | partitions int32 | index int32 | error int16."""
    return 4 + 4 + 2 + len(topic.encode()) + 4 + 4


def produce_response(topic: str) -> bytearray:
    """A Produce v7 response for one partition with error 0 (the ceiling's fixed answer)."""
    body = (struct.pack(">ii", 0, 1) + _string(topic) + struct.pack(">iihqqq", 1, 0, 0, 0, -1, 0)
            + struct.pack(">i", 0))
    return bytearray(struct.pack(">i", len(body)) + body)


def fetch_frame(topic: str, offset: int, max_bytes: int) -> bytes:
    """Fetch v4: replica_id -1 | max_wait_ms 500 | min_bytes 1 | max_bytes | isolation 0 |
    [topic [partition 0, fetch_offset int64, partition_max_bytes]]."""
    body = (struct.pack(">hhi", 1, FETCH_VERSION, 0) + _string(CLIENT_ID)
            + struct.pack(">iiiib", -1, 500, 1, max_bytes, 0) + struct.pack(">i", 1)
            + _string(topic) + struct.pack(">iiqi", 1, 0, offset, max_bytes))
    return struct.pack(">i", len(body)) + body


# ----- clients ------------------------------------------------------------------------------

def connect(bootstrap: str) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def pipelined_produce(bootstrap: str, frame: bytearray, count: int, err_offset: int,
                      inflight: int = 5) -> float:
    """Send ``count`` copies of ``frame`` (correlation ids 1..count) keeping ``inflight``
    outstanding; check every response's correlation id and error code. Returns seconds."""
    sock = connect(bootstrap)
    rf = sock.makefile("rb", buffering=1 << 16)
    sent = got = 0
    t0 = time.perf_counter()
    try:
        while sent < min(inflight, count):
            sent += 1
            struct.pack_into(">i", frame, CID_OFFSET, sent)
            sock.sendall(frame)
        while got < count:
            head = rf.read(4)
            if len(head) < 4:
                raise ConnectionError(f"connection closed after {got} responses")
            body = rf.read(struct.unpack(">i", head)[0])
            cid, = struct.unpack_from(">i", body, 0)
            err, = struct.unpack_from(">h", body, err_offset)
            got += 1
            if cid != got or err != 0:
                raise RuntimeError(f"response {got}: correlation id {cid}, error code {err}")
            if sent < count:
                sent += 1
                struct.pack_into(">i", frame, CID_OFFSET, sent)
                sock.sendall(frame)
        return time.perf_counter() - t0
    finally:
        rf.close()
        sock.close()


def _recv_into(sock: socket.socket, mv: memoryview) -> None:
    pos, n = 0, len(mv)
    while pos < n:
        k = sock.recv_into(mv[pos:])
        if not k:
            raise ConnectionError("connection closed mid-response")
        pos += k


def fetch_all(bootstrap: str, topic: str, end_offset: int, max_bytes: int = 8 * MiB
              ) -> tuple[float, int]:
    """Fetch v4 from offset 0 until ``end_offset``, one request in flight. Returns
    (seconds, record bytes received). The next offset comes from the last complete batch
    header (base offset int64 at 0, batch length int32 at 8, last offset delta int32 at 23)."""
    sock = connect(bootstrap)
    buf = bytearray(max_bytes + 64 * 1024)
    mv = memoryview(buf)
    head = memoryview(bytearray(4))
    offset = total = 0
    t0 = time.perf_counter()
    try:
        while offset < end_offset:
            sock.sendall(fetch_frame(topic, offset, max_bytes))
            _recv_into(sock, head)
            size = struct.unpack(">i", head)[0]
            if size > len(buf):
                buf = bytearray(size)
                mv = memoryview(buf)
            _recv_into(sock, mv[:size])
            # cid | throttle | topics | name | partitions | index | error | hw | lso | aborted
            pos = 4 + 4 + 4
            (name_len,) = struct.unpack_from(">h", buf, pos)
            pos += 2 + name_len + 4 + 4
            err, hw, _lso, aborted = struct.unpack_from(">hqqi", buf, pos)
            pos += 2 + 8 + 8 + 4 + max(aborted, 0) * 16
            if err:
                raise RuntimeError(f"fetch at offset {offset}: error code {err}")
            (rec_len,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            end = pos + max(rec_len, 0)
            total += max(rec_len, 0)
            advanced = False
            while pos + 61 <= end:
                base, blen = struct.unpack_from(">qi", buf, pos)
                if pos + 12 + blen > end:
                    break
                (delta,) = struct.unpack_from(">i", buf, pos + 23)
                offset = base + delta + 1
                pos += 12 + blen
                advanced = True
            if not advanced and hw <= offset:
                raise RuntimeError(f"fetch stalled at offset {offset} (high watermark {hw})")
        return time.perf_counter() - t0, total
    finally:
        sock.close()


def timed_fetch(bootstrap: str, end_offset: int, got: list[int]) -> float:
    """:func:`fetch_all` of the "fetch" topic; appends the bytes received to ``got``."""
    seconds, nbytes = fetch_all(bootstrap, "fetch", end_offset)
    got.append(nbytes)
    return seconds


def raw_sendfile_read(port: int, expected: int) -> float:
    """Connect to ``--serve-sendfile`` and read until EOF; returns seconds."""
    sock = connect(f"127.0.0.1:{port}")
    buf = memoryview(bytearray(8 * MiB + 64 * 1024))
    got = 0
    t0 = time.perf_counter()
    try:
        while True:
            k = sock.recv_into(buf)
            if not k:
                break
            got += k
    finally:
        sock.close()
    if got != expected:
        raise RuntimeError(f"sendfile server sent {got} bytes, expected {expected}")
    return time.perf_counter() - t0


def stock_client_produce(bootstrap: str, topic: str, records: int, value_size: int = 1024
                         ) -> float:
    """confluent-kafka Producer, acks=1, no compression, linger.ms=5; returns seconds until
    every delivery report arrived (all must succeed)."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def report(err, _msg):
        if err is not None:
            failures.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "compression.type": "none", "enable.idempotence": False,
                  "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 1 << 20,
                  "batch.size": 1_000_000, "log_level": 3})
    value = os.urandom(value_size)
    p.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.005)
    if p.flush(120) != 0:
        raise RuntimeError("stock client: records still unacknowledged after 120 s")
    elapsed = time.perf_counter() - t0
    if failures:
        raise RuntimeError(f"stock client: {len(failures)} failed deliveries: {failures[0]}")
    return elapsed


def create_topics(bootstrap: str, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)


# ----- comparison servers (child processes of this script) ------------------------------------

class CeilingProtocol(asyncio.Protocol):
    """Parses each produce frame up to its records length, streams the batch bytes to the
    file as they arrive, answers with a fixed Produce v7 response carrying the frame's
    correlation id."""

    def __init__(self, fd: int, response: bytearray):
        self.fd = fd
        self.response = response
        self.head = bytearray()  # bytes of the current frame before its batch
        self.batch_left = -1  # batch bytes still to write; -1 while reading the head
        self.skip_left = 0  # bytes after the batch still to skip
        self.cid = 0

    def connection_made(self, transport):
        self.transport = transport

    def _parse_head(self) -> int:
        """Bytes of ``head`` before the batch, or -1 if more are needed."""
        h = self.head
        try:
            size, _key, _ver, self.cid, cl = struct.unpack_from(">ihhih", h, 0)
            pos = 14 + max(cl, 0)
            (tl,) = struct.unpack_from(">h", h, pos)
            pos += 2 + max(tl, 0) + 2 + 4 + 4
            (nl,) = struct.unpack_from(">h", h, pos)
            pos += 2 + nl + 4 + 4
            (rec_len,) = struct.unpack_from(">i", h, pos)
        except struct.error:
            return -1
        pos += 4
        self.batch_left = rec_len
        self.skip_left = size + 4 - pos - rec_len
        return pos

    def data_received(self, data: bytes) -> None:
        mv = memoryview(data)
        i, n = 0, len(mv)
        while i < n:
            if self.batch_left < 0:
                take = min(n - i, 256 - len(self.head))
                self.head += mv[i:i + take]
                i += take
                pos = self._parse_head()
                if pos < 0:
                    continue
                extra = len(self.head) - pos  # head bytes beyond the batch start
                i -= extra
                self.head.clear()
            take = min(self.batch_left, n - i)
            if take:
                os.write(self.fd, mv[i:i + take])
                i += take
                self.batch_left -= take
            if self.batch_left == 0:
                skip = min(self.skip_left, n - i)
                i += skip
                self.skip_left -= skip
                if self.skip_left == 0:
                    self.batch_left = -1
                    struct.pack_into(">i", self.response, 4, self.cid)
                    self.transport.write(bytes(self.response))


def serve_ceiling(path: str, topic: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    response = produce_response(topic)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: CeilingProtocol(fd, response), "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        server.close()

    asyncio.run(main())


def serve_sendfile(paths: list[str]) -> None:
    """Each connection gets every file, in order, through os.sendfile; then EOF."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    print(srv.getsockname()[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        conn, _ = srv.accept()
        with conn:
            for path in paths:
                with open(path, "rb") as f:
                    size, pos = os.fstat(f.fileno()).st_size, 0
                    while pos < size:
                        pos += os.sendfile(conn.fileno(), f.fileno(), pos, size - pos)


class ChildServer:
    """This script re-run with ``--serve-*`` args; the first stdout line is its port."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child server {args} did not start")
        self.port = int(line)
        self.bootstrap = f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


# ----- measurement bookkeeping ---------------------------------------------------------------

@dataclass
class Result:
    """Best (highest rate) round of one server on one workload."""
    rate: float = 0.0  # units per second
    cpu_per_unit: float = 0.0  # server CPU seconds per unit in that round
    rounds: list[float] = field(default_factory=list)

    def add(self, rate: float, cpu: float, units: float) -> None:
        self.rounds.append(rate)
        if rate > self.rate:
            self.rate, self.cpu_per_unit = rate, cpu / units


def measure(res: Result, pid: int | None, units: float, fn, *args) -> None:
    """Run ``fn(*args)`` (returns seconds) and record ``units``/s and ``pid``'s CPU time."""
    c0 = cpu_seconds(pid) if pid else 0.0
    seconds = fn(*args)
    c1 = cpu_seconds(pid) if pid else 0.0
    res.add(units / seconds, c1 - c0, units)


# ----- the run -------------------------------------------------------------------------------

@dataclass
class Servers:
    josef: object
    ceiling: ChildServer
    tansu: object | None


def partition_files(log_dir: Path, topic: str) -> list[str]:
    return sorted(str(p) for p in (log_dir / f"{topic}-0").glob("*.log"))


def run(args) -> str:
    from tests.integration.harness import BrokerProcess

    quick = args.quick
    produce_mb = args.produce_mb or (64 if quick else 512)
    fetch_mb = args.fetch_mb or int(os.environ.get("JOSEF_BENCH_FETCH_MB",
                                                   "128" if quick else "1024"))
    small = args.small or (5_000 if quick else 50_000)
    client_records = args.client_records or (20_000 if quick else 200_000)
    rounds = args.rounds or (1 if quick else 3)

    base = os.environ.get("JOSEF_BENCH_DIR") or ("/dev/shm" if os.path.isdir("/dev/shm")
                                                 else None)
    work = Path(tempfile.mkdtemp(prefix="josef-bench-broker-", dir=base))
    batch = one_mib_batch()
    records_per_batch = struct.unpack_from(">i", batch, 57)[0]
    small_batch = record_batch(1, 100)
    print(f"work dir {work}; batch {len(batch)} bytes ({records_per_batch} records); "
          f"produce {produce_mb} MiB x {rounds} rounds; fetch {fetch_mb} MiB; "
          f"{small} small requests; {client_records} stock-client records", flush=True)

    # socket buffers as config/server.properties ships them (-1: OS auto-tuning; Kafka's
    # fixed 102400 default halves loopback throughput for 1 MiB batches)
    josef = BrokerProcess(work / "josef", {"num.partitions": "1",
                                           "auto.create.topics.enable": "false",
                                           "socket.send.buffer.bytes": "-1",
                                           "socket.receive.buffer.bytes": "-1"},
                          startup_timeout=60)
    tansu = None
    servers: list = []
    res: dict[tuple[str, str], Result] = {}

    def r(workload: str, server: str) -> Result:
        return res.setdefault((workload, server), Result())

    try:
        josef.start()
        servers.append(josef)
        if not args.no_tansu:
            from tansu import TansuProcess, TansuUnavailable
            try:
                tansu = TansuProcess(work / "tansu.out").start()
                servers.append(tansu)
            except TansuUnavailable as e:
                print(f"Tansu skipped: {e}", flush=True)
        brokers = [("Josef", josef)] + ([("Tansu", tansu)] if tansu else [])
        topics = ([f"produce-{i}" for i in range(rounds)] + [f"small-{i}" for i in range(rounds)]
                  + [f"client-{i}" for i in range(rounds)] + ["fetch"])
        for _, b in brokers:
            create_topics(b.bootstrap, topics)

        # 1. produce 1 MiB batches
        n_frames = max(1, produce_mb * MiB // len(batch))
        for i in range(rounds):
            topic = f"produce-{i}"
            frame = produce_frame(topic, batch)
            ceiling = ChildServer("--serve-ceiling", str(work / f"ceiling-{i}.log"), topic)
            servers.append(ceiling)
            try:
                measure(r("produce", "ceiling"), ceiling.pid, n_frames * len(batch) / 1e6,
                        pipelined_produce, ceiling.bootstrap, frame, n_frames,
                        produce_error_offset(topic))
            finally:
                ceiling.stop()
                os.unlink(work / f"ceiling-{i}.log")
            for name, b in brokers:
                measure(r("produce", name), b.pid, n_frames * len(batch) / 1e6,
                        pipelined_produce, b.bootstrap, frame, n_frames,
                        produce_error_offset(topic))
            print(f"produce round {i}: " + ", ".join(
                f"{k[1]} {v.rounds[-1]:.0f} MB/s" for k, v in res.items() if k[0] == "produce"),
                flush=True)

        # 2. small produce requests
        for i in range(rounds):
            topic = f"small-{i}"
            frame = produce_frame(topic, small_batch)
            ceiling = ChildServer("--serve-ceiling", str(work / f"ceiling-small-{i}.log"), topic)
            try:
                measure(r("small", "ceiling"), ceiling.pid, small,
                        pipelined_produce, ceiling.bootstrap, frame, small,
                        produce_error_offset(topic))
            finally:
                ceiling.stop()
            for name, b in brokers:
                measure(r("small", name), b.pid, small,
                        pipelined_produce, b.bootstrap, frame, small,
                        produce_error_offset(topic))
            print(f"small round {i}: " + ", ".join(
                f"{k[1]} {v.rounds[-1]:.0f} req/s" for k, v in res.items() if k[0] == "small"),
                flush=True)

        # 3. fetch a partition of fetch_mb MiB
        n_fetch = max(1, fetch_mb * MiB // len(batch))
        frame = produce_frame("fetch", batch)
        for _, b in brokers:
            pipelined_produce(b.bootstrap, frame, n_fetch, produce_error_offset("fetch"))
        end_offset = n_fetch * records_per_batch
        files = partition_files(josef.log_dir, "fetch")
        file_bytes = sum(os.path.getsize(p) for p in files)
        sendfile = ChildServer("--serve-sendfile", ",".join(files))
        servers.append(sendfile)
        try:
            for i in range(rounds):
                measure(r("fetch", "sendfile"), sendfile.pid, file_bytes / 1e6,
                        raw_sendfile_read, sendfile.port, file_bytes)
                for name, b in brokers:
                    got: list[int] = []
                    measure(r("fetch", name), b.pid, file_bytes / 1e6, timed_fetch, b.bootstrap,
                            end_offset, got)
                    if got[0] < file_bytes * 0.99:
                        raise RuntimeError(f"{name} fetch returned {got[0]} of {file_bytes} B")
                print(f"fetch round {i}: " + ", ".join(
                    f"{k[1]} {v.rounds[-1]:.0f} MB/s" for k, v in res.items()
                    if k[0] == "fetch"), flush=True)
        finally:
            sendfile.stop()

        # 4. stock client
        for i in range(rounds):
            for name, b in brokers:
                measure(r("client", name), b.pid, client_records * 1024 / 1e6,
                        stock_client_produce, b.bootstrap, f"client-{i}", client_records)
            print(f"stock client round {i}: " + ", ".join(
                f"{k[1]} {v.rounds[-1]:.0f} MB/s" for k, v in res.items() if k[0] == "client"),
                flush=True)
    except BaseException:
        print(f"bench failed; Josef log tail:\n{josef.log_tail(30)}", file=sys.stderr)
        raise
    finally:
        for s in reversed(servers):
            s.stop()
        if not os.environ.get("JOSEF_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)

    return render(res, quick=quick, produce_mb=produce_mb, fetch_mb=fetch_mb, small=small,
                  client_records=client_records, rounds=rounds, batch_len=len(batch),
                  work_base=base or tempfile.gettempdir(), tansu=tansu is not None)


def render(res: dict[tuple[str, str], Result], **info) -> str:
    def rate(w: str, s: str) -> float | None:
        v = res.get((w, s))
        return v.rate if v else None

    def fmt(x: float | None, unit: str) -> str:
        return "n/a" if x is None else f"{x:,.0f} {unit}"

    def ratio(a: float | None, b: float | None) -> str:
        return "n/a" if not a or not b else f"{a / b:.2f}"

    rows = []
    specs = [
        ("produce", f"produce 1 MiB batches, 5 in flight, acks=1, 1 partition "
                    f"({info['produce_mb']} MiB)", "MB/s", "ceiling", ">= 0.50"),
        ("small", "produce requests of one 100-byte record, 5 in flight", "req/s", "ceiling",
         "report"),
        ("fetch", f"fetch a {info['fetch_mb']} MiB partition (Fetch v4, 8 MiB per request)",
         "MB/s", "sendfile", ">= 0.60"),
    ]
    for w, label, unit, ref, aim in specs:
        j = rate(w, "Josef")
        rows.append((label, fmt(j, unit), f"{fmt(rate(w, ref), unit)} ({ref})",
                     ratio(j, rate(w, ref)), aim))
        rows.append((label, fmt(j, unit), f"{fmt(rate(w, 'Tansu'), unit)} (Tansu)",
                     ratio(j, rate(w, "Tansu")), "> 1 (MB/s)" if unit == "MB/s" else "report"))
    j = rate("client", "Josef")
    rows.append((f"confluent-kafka producer, 1 KiB values, no compression, acks=1 "
                 f"({info['client_records']:,} records)", fmt(j, "MB/s"),
                 f"{fmt(rate('client', 'Tansu'), 'MB/s')} (Tansu)",
                 ratio(j, rate("client", "Tansu")), "> 1"))

    cpu_rows = []
    for (w, s), v in sorted(res.items()):
        unit = "req" if w == "small" else "MB"
        scale, label = (1e6, "us") if w == "small" else (1e3, "ms")
        cpu_rows.append(f"| {w} | {s} | {v.cpu_per_unit * scale:,.2f} {label}/{unit} | "
                        + ", ".join(f"{x:,.0f}" for x in v.rounds) + " |")

    lines = [
        "# Broker benchmark (benchmarks/bench_broker.py)",
        "",
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at the end; client in this process, each "
        f"server its own process, loopback; best of {info['rounds']} round(s); Josef's log "
        f"dir and the ceiling file under {info['work_base']}; Tansu memory-only"
        + ("" if info["tansu"] else " (not available in this run)")
        + ("; quick mode" if info["quick"] else "") + ".",
        "",
        "| workload | Josef | compared with | ratio | aim |",
        "| --- | ---: | ---: | ---: | --- |",
        *[f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows],
        "",
        "Server CPU time per unit in the best round, and every round's rate:",
        "",
        "| workload | server | CPU | rates per round |",
        "| --- | --- | ---: | --- |",
        *cpu_rows,
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one round")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--produce-mb", type=int, default=0)
    ap.add_argument("--fetch-mb", type=int, default=0, help="default $JOSEF_BENCH_FETCH_MB")
    ap.add_argument("--small", type=int, default=0, help="small produce requests per round")
    ap.add_argument("--client-records", type=int, default=0)
    ap.add_argument("--no-tansu", action="store_true")
    ap.add_argument("--no-write", action="store_true", help="do not write results/broker.md")
    ap.add_argument("--serve-ceiling", nargs=2, metavar=("FILE", "TOPIC"), help=argparse.SUPPRESS)
    ap.add_argument("--serve-sendfile", metavar="FILES", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_ceiling:
        serve_ceiling(*args.serve_ceiling)
        return
    if args.serve_sendfile:
        serve_sendfile(args.serve_sendfile.split(","))
        return
    table = run(args)
    print(table)
    if not args.no_write:
        out = ROOT / "benchmarks" / "results" / "broker.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(table)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
