"""``python -m tests.faults fuzz``: structure-aware protocol fuzzing of a live broker.

One broker (loopback, its own directory under ``DIR``) gets ``--frames`` fuzz frames
(``tests.faults.fuzzgen``: every API key and version, mutated bodies, lengths, varints, arrays,
record batches, compressed payloads, headers, random bytes, bad size prefixes) over many
concurrent connections, each pipelining a burst of frames and reading the answers until the
broker answers them all, closes the connection, or stalls for a second (a parked request).
A frame counts as processed when an answer to it or to a later frame arrived, or when the
broker closed the connection after it. The declared-size memory attack
(``tests.faults.attacks``: 10 connections announcing 90 MB and sending 1 MB) runs at the start.

Beside it a well-behaved confluent-kafka producer (idempotent, acks=all) and a consumer in a
group send and read ``fuzz-good``; ``client_errors`` counts their failed deliveries, error
events and records missing or out of order at the end.

``DIR/results.json``: ``frames``, ``frames_sent``, ``connections``, ``connections_closed``,
``broker_crashes`` (a crash restarts the broker; its log stays in DIR), ``idle_rss_bytes``,
``peak_rss_bytes`` (VmHWM since the fuzzing started), ``rss_bound_bytes`` (twice the idle RSS
plus ``queued.max.request.bytes`` when set), ``client_errors``, counts by mutation, ``valid``.
Exit status 0 only when there was no crash, no client error and the peak RSS stayed under the
bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import threading
import time
from collections import Counter
from typing import Any

from tests.faults.attacks import close_all, declared_size_attack
from tests.faults.fuzzgen import SAFE_MUTATIONS, FrameGenerator
from tests.faults.net import LoopbackNetwork
from tests.faults.nodes import BrokerNode
from tests.faults.procfs import cpu_seconds, peak_rss_bytes, reset_peak_rss, rss_bytes
from tests.faults.runner import _kv, create_topic_named, start_run_dir
from tests.faults.state import RunState, sweep
from tests.integration.harness import api_versions_probe

log = logging.getLogger("tests.faults.fuzzer")

GOOD_TOPIC = "fuzz-good"
STALL_S = 5.0  # no answer for this long: the connection is given up (a parked request)


class Stats:
    def __init__(self) -> None:
        self.frames = 0  # processed
        self.sent = 0
        self.connections = 0
        self.closed_by_broker = 0
        self.stalled = 0
        self.by_mutation: Counter[str] = Counter()
        self.closed_on: Counter[str] = Counter()  # mutation of the frame a close followed
        self.stalled_on: Counter[int] = Counter()  # api key of the frame left unanswered


async def _read_answers(reader: asyncio.StreamReader, expected: int) -> tuple[int, bool]:
    """Read up to ``expected`` response frames; (answers read, closed by the broker). Gives
    up after ``STALL_S`` without a complete answer."""
    got = 0
    buf = bytearray()
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(STALL_S) as deadline:
            while got < expected:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    return got, True
                buf += chunk
                before = got
                while len(buf) >= 4:
                    size = int.from_bytes(buf[:4], "big", signed=True)
                    if len(buf) < 4 + size:
                        break
                    del buf[:4 + size]
                    got += 1
                if got > before:
                    deadline.reschedule(loop.time() + STALL_S)
    except TimeoutError:
        return got, False
    except (ConnectionError, OSError):
        return got, True
    return got, False


WINDOW = 16  # frames written before reading their answers


def _entry(generated: tuple[bytes, int, str]) -> tuple[bytes, str, int]:
    frame, api_key, mutation = generated
    return frame, mutation, api_key


async def _fuzz_connection(host: str, port: int, gen: FrameGenerator, stats: Stats,
                           budget: list[int], rng: random.Random,
                           backlog: list[tuple[bytes, str, int]]) -> None:
    """One connection: windows of frames with safe mutations (``fuzzgen.SAFE_MUTATIONS``),
    then one risky frame (or, rarely, a bad size prefix) that likely makes the broker close
    it. Ends when the broker closes it, it stalls (a parked request), or the budget is spent.
    Frames the broker never got to (after the one it closed on) go back to ``backlog`` for the
    next connection."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    except (OSError, TimeoutError) as e:
        log.info("connect failed: %r", e)
        await asyncio.sleep(0.1)
        return
    stats.connections += 1
    safe_left = rng.randint(4, 96)
    try:
        while budget[0] > 0:
            n = min(WINDOW, safe_left)
            window = [backlog.pop() if backlog else _entry(gen.next()) for _ in range(n)]
            safe_left -= n
            if safe_left <= 0:
                window.append((gen.bad_prefix_frame(), "bad-prefix", -1) if rng.random() < 0.1
                              else _entry(gen.next(risky=True)))
            try:
                writer.write(b"".join(w[0] for w in window))
                stats.sent += len(window)
                got, closed = await _read_answers(reader, len(window))
            except (ConnectionError, OSError):
                got, closed = 0, True
            processed = min(len(window), got + (1 if got < len(window) else 0))
            stats.frames += processed
            budget[0] -= processed
            for _, m, _ in window[:processed]:
                stats.by_mutation[m] += 1
            backlog.extend(reversed([w for w in window[processed:]
                                     if w[1] in SAFE_MUTATIONS]))
            if got < len(window):
                if closed:
                    stats.closed_by_broker += 1
                    stats.closed_on[window[got][1]] += 1
                else:
                    stats.stalled += 1
                    stats.stalled_on[window[got][2]] += 1
                return
            if safe_left <= 0:
                return
    finally:
        writer.close()


async def _fuzz(host: str, port: int, frames: int, connections: int, seed: int,
                stats: Stats, broker_alive, supported: list[tuple[int, int]]) -> None:
    budget = [frames]
    bodies: dict = {}  # valid bodies shared by the workers' generators

    async def worker(i: int) -> None:
        gen = FrameGenerator(seed * 1000 + i, supported, bodies=bodies)
        rng = random.Random(seed ^ (i << 16))
        backlog: list[tuple[bytes, str, int]] = []
        while budget[0] > 0:
            if not broker_alive():
                await asyncio.sleep(0.2)
                continue
            await _fuzz_connection(host, port, gen, stats, budget, rng, backlog)

    await asyncio.gather(*(worker(i) for i in range(connections)))


class GoodClients(threading.Thread):
    """A well-behaved idempotent producer and a group consumer on ``fuzz-good``."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        super().__init__(name="good-clients", daemon=True)
        self.bootstrap, self.stop_event = bootstrap, stop
        self.errors: list[str] = []
        self.acked: list[int] = []
        self.read: list[int] = []
        self._lock = threading.Lock()

    def _error(self, what: str) -> None:
        with self._lock:
            if len(self.errors) < 1000:
                self.errors.append(what)

    def run(self) -> None:
        from confluent_kafka import Consumer, Producer
        common = {"bootstrap.servers": self.bootstrap, "log_level": 0}
        producer = Producer({**common, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "message.timeout.ms": 120000})
        consumer = Consumer({**common, "group.id": "good-group", "auto.offset.reset": "earliest",
                             "enable.auto.commit": True, "session.timeout.ms": 30000})
        consumer.subscribe([GOOD_TOPIC])

        def delivered(err, msg):
            if err is not None:
                self._error(f"delivery: {err}")
            else:
                with self._lock:
                    self.acked.append(int(msg.value()))

        n = 0
        last = time.monotonic()
        try:
            while not self.stop_event.is_set():
                if time.monotonic() - last >= 0.01:
                    producer.produce(GOOD_TOPIC, value=str(n).encode(), on_delivery=delivered)
                    n += 1
                    last = time.monotonic()
                producer.poll(0)
                self._consume(consumer, 0.005)
            if producer.flush(120) != 0:
                self._error("producer: sends unresolved after 120 s")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(self.read) < len(set(self.acked)):
                self._consume(consumer, 0.2)
        finally:
            consumer.close()
        self._verify()

    def _consume(self, consumer, timeout: float) -> None:
        for m in consumer.consume(num_messages=500, timeout=timeout):
            if m.error() is not None:
                self._error(f"consumer: {m.error()}")
                continue
            self.read.append(int(m.value()))

    def _verify(self) -> None:
        acked = sorted(set(self.acked))
        seen = set(self.read)
        missing = [v for v in acked if v not in seen]
        if missing:
            self._error(f"{len(missing)} acknowledged records never read (first {missing[:5]})")
        if len(self.read) != len(seen):
            self._error(f"{len(self.read) - len(seen)} records read twice (one consumer, "
                        "auto-commit, no rebalance expected)")
        if self.read != sorted(self.read):
            self._error("records read out of order")


def _settled_rss(pid: int) -> int:
    last = rss_bytes(pid) or 0
    for _ in range(30):
        time.sleep(0.1)
        now = rss_bytes(pid) or 0
        if abs(now - last) < 256 * 1024:
            return now
        last = now
    return last


def fuzz(args: Any) -> int:
    out = start_run_dir(args.out, "fuzzer.log")
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    sweep()
    state = RunState(secrets.token_hex(3))
    state.install_handlers()
    props = {"auto.create.topics.enable": "false", "num.partitions": "2",
             "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
             "log.segment.bytes": str(8 << 20), **_kv(args.broker_config)}
    broker = BrokerNode(out / "broker", "b1", LoopbackNetwork(), state, props, 1)
    stats = Stats()
    crashes: list[str] = []
    results: dict[str, Any] = {"seed": seed, "frames_requested": args.frames,
                               "connections_parallel": args.connections}
    stop = threading.Event()
    good = None
    started = time.monotonic()
    try:
        broker.start()
        for topic, parts in (("fuzz-a", 2), ("fuzz-b", 1), (GOOD_TOPIC, 1)):
            create_topic_named(broker.bootstrap, topic, parts, 1, {})
        idle = _settled_rss(broker.pid)
        queued = int(props.get("queued.max.request.bytes", "-1"))
        bound = 2 * idle + max(0, queued)
        reset_peak_rss(broker.pid)
        good = GoodClients(broker.bootstrap, stop)
        good.start()

        socks = declared_size_attack(broker.host, broker.port, connections=10,
                                     declared=90 * 1024 * 1024, send_bytes=1024 * 1024)
        peak_attack = peak_rss_bytes(broker.pid) or 0
        close_all(socks)

        def alive() -> bool:
            if broker.is_running():
                return True
            crashes.append(f"exit code {broker.proc.returncode if broker.proc else None}")
            log.error("the broker crashed; log tail:\n%s", broker.log_tail(40))
            broker.start()
            return False

        monitor_stop = threading.Event()
        peak = [0]

        def monitor() -> None:
            while not monitor_stop.wait(0.25):
                if broker.is_running():
                    peak[0] = max(peak[0], peak_rss_bytes(broker.pid) or 0)

        mon = threading.Thread(target=monitor, daemon=True)
        mon.start()
        supported = [(k, v) for k, lo, hi in api_versions_probe(broker.host, broker.port)
                     for v in range(lo, hi + 1)]
        results["api_versions_supported"] = len(supported)
        cpu0 = cpu_seconds(broker.pid) or 0.0
        t_fuzz = time.monotonic()
        asyncio.run(_fuzz(broker.host, broker.port, args.frames, args.connections, seed, stats,
                          alive, supported))
        results["fuzz_s"] = round(time.monotonic() - t_fuzz, 1)
        if broker.is_running() and not crashes:
            results["broker_cpu_s"] = round((cpu_seconds(broker.pid) or 0.0) - cpu0, 1)
        alive()
        stop.set()
        good.join(300)
        monitor_stop.set()
        mon.join(5)
        if broker.is_running():
            peak[0] = max(peak[0], peak_rss_bytes(broker.pid) or 0)
        results.update(idle_rss_bytes=idle, rss_bound_bytes=bound,
                       peak_rss_bytes=max(peak[0], peak_attack),
                       peak_rss_after_attack_bytes=peak_attack,
                       queued_max_request_bytes=queued)
    except Exception as e:
        log.exception("the fuzz run failed")
        results["harness_error"] = repr(e)
    finally:
        stop.set()
        try:
            broker.stop()
        except Exception:
            log.exception("stopping the broker")
        state.cleanup()
    client_errors = good.errors if good is not None else ["good clients never started"]
    results.update(
        frames=stats.frames, frames_sent=stats.sent, connections=stats.connections,
        connections_closed=stats.closed_by_broker, connections_stalled=stats.stalled,
        broker_crashes=len(crashes), crashes=crashes, client_errors=len(client_errors),
        client_error_examples=client_errors[:10],
        good_records_acked=len(good.acked) if good else 0,
        good_records_read=len(good.read) if good else 0,
        by_mutation=dict(sorted(stats.by_mutation.items())),
        closed_after_mutation=dict(sorted(stats.closed_on.items())),
        stalled_on_api_key=dict(sorted(stats.stalled_on.items())),
        duration_s=round(time.monotonic() - started, 1))
    problems = []
    if "harness_error" in results:
        problems.append(results["harness_error"])
    if crashes:
        problems.append(f"broker crashed {len(crashes)} time(s)")
    if client_errors:
        problems.append(f"well-behaved clients saw {len(client_errors)} error(s)")
    if results.get("peak_rss_bytes", 0) >= results.get("rss_bound_bytes", 0):
        problems.append("peak RSS over the bound")
    if stats.frames < args.frames:
        problems.append(f"only {stats.frames} of {args.frames} frames processed")
    results["problems"] = problems
    results["valid"] = not problems
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if results["valid"]:
        import shutil
        shutil.rmtree(broker.log_dir, ignore_errors=True)
    print(json.dumps({k: results.get(k) for k in (
        "valid", "frames", "connections_closed", "broker_crashes", "peak_rss_bytes",
        "rss_bound_bytes", "client_errors", "duration_s")}))
    if problems:
        print("problems: " + "; ".join(problems))
    return 0 if results["valid"] else 1
