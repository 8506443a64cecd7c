"""A consume-transform-produce worker and its checker, for the exactly-once tests (single
broker: test_transactions_eos.py; 3-broker cluster: test_transactions_cluster.py).

Worker: ``python -m tests.integration.eos_pipeline BOOTSTRAP GROUP TXN_ID IN OUT [BATCH]``
reads IN (read_committed, static group member, offsets sent to the transaction), writes
each record's value to OUT as ``out-<value>`` inside a transaction of up to BATCH records,
commits, and prints ``committed <n>`` (records so far in this process) after each commit.
It runs until killed (SIGKILL in the tests) or SIGTERM.

The long version (not in CI; thousands of records, several kills):
``python -m tests.integration.eos_pipeline --soak BOOTSTRAP RECORDS KILLS``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def worker(bootstrap: str, group: str, txn_id: str, src: str, dst: str, batch: int) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "group.instance.id": txn_id, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 10000})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5, "transaction.timeout.ms": 20000})
    p.init_transactions(60)
    c.subscribe([src])
    total = 0
    while not stop:
        msgs = [m for m in c.consume(batch, 0.5) if not m.error()]
        if not msgs:
            continue
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, key=m.key(), value=b"out-" + m.value())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), 60)
            _commit(p)
        except KafkaException as e:
            err = e.args[0]
            if err.txn_requires_abort():  # e.g. a partition leader died: start over
                print(f"aborting: {err.str()}", flush=True)
                p.abort_transaction(60)
                _rewind(c)
                continue
            raise  # fatal (fenced): exit, a supervisor restarts the worker
        total += len(msgs)
        print(f"committed {total}", flush=True)
    c.close()


def _commit(p) -> None:
    """commit_transaction, retried while its error is retriable (a coordinator moving)."""
    from confluent_kafka import KafkaException
    for attempt in range(20):
        try:
            p.commit_transaction(60)
            return
        except KafkaException as e:
            if not e.args[0].retriable() or attempt == 19:
                raise
            time.sleep(0.5)


def _rewind(consumer) -> None:
    """After an abort: back to the committed offsets (the aborted output is discarded)."""
    committed = consumer.committed(consumer.assignment(), 30)
    for tp in committed:
        if tp.offset >= 0:
            consumer.seek(tp)


def start_worker(bootstrap: str, group: str, txn_id: str, src: str, dst: str,
                 batch: int = 20) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.integration.eos_pipeline", bootstrap,
                             group, txn_id, src, dst, str(batch)], cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def wait_committed(proc: subprocess.Popen, at_least: int, timeout: float = 60.0) -> int:
    """Read the worker's output until it reports `at_least` records committed."""
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.startswith("committed ") and int(line.split()[1]) >= at_least:
            return int(line.split()[1])
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"the worker did not commit {at_least} records in time "
                         f"(exit code {proc.poll()})")


def _end(proc: subprocess.Popen, sig: int) -> None:
    """`sig`, then SIGKILL if the worker is still there after 20 s (a hung client)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def stop_worker(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    _end(proc, sig)
    if proc.stdout is not None:
        proc.stdout.close()


class SupervisedWorker:
    """A worker restarted whenever it exits (as a supervisor would); `total` adds up the
    records each incarnation reported committed (a progress signal: records redone after a
    restart count again).

    Also a liveness probe: an incarnation that commits nothing for `stall_s` seconds while
    the test waits for progress is SIGKILLed and restarted (`stalls` counts them). librdkafka
    can hang in `send_offsets_to_transaction` past its timeout when the group coordinator it
    cached dies and drops out of the metadata before the client looked it up again
    (confluentinc/librdkafka#5511, #5456: the coordinator request waits for a broker thread
    that was decommissioned). A broker that never lets the transaction finish still fails
    the test: the next incarnation's InitProducerId cannot complete either."""

    def __init__(self, bootstrap: str, group: str, txn_id: str, src: str, dst: str,
                 batch: int = 20, stall_s: float = 40.0) -> None:
        self.args = (bootstrap, group, txn_id, src, dst, batch)
        self.stall_s = stall_s
        self.base = 0
        self.current = 0
        self.restarts = 0
        self.stalls = 0
        self.proc: subprocess.Popen | None = None
        self._start()

    @property
    def total(self) -> int:
        return self.base + self.current

    def _start(self) -> None:
        import threading
        self.base += self.current
        self.current = 0
        proc = self.proc = start_worker(*self.args)

        def read() -> None:
            with proc.stdout:  # closed at EOF: the incarnation exited
                for line in proc.stdout:
                    if line.startswith("committed ") and self.proc is proc:
                        self.current = int(line.split()[1])
        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()

    def wait_total(self, at_least: int, timeout: float = 90.0) -> int:
        now = time.monotonic()
        deadline = now + timeout
        seen, progress_at = self.total, now
        while self.total < at_least:
            now = time.monotonic()
            if self.total != seen:
                seen, progress_at = self.total, now
            if self.proc.poll() is not None:
                self.restarts += 1
                self._start()
                progress_at = now
            elif now - progress_at > self.stall_s:  # hung client: the liveness probe
                self.stalls += 1
                self.kill()
                progress_at = now
            if now > deadline:
                raise AssertionError(f"the worker committed {self.total} < {at_least} "
                                     f"records in time ({self.restarts} restarts, "
                                     f"{self.stalls} of them after {self.stall_s:.0f} s "
                                     f"without a commit)")
            time.sleep(0.1)
        return self.total

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.restarts += 1
        self._start()

    def stop(self) -> None:
        _end(self.proc, signal.SIGTERM)
        self._reader.join(10)  # it closes the pipe at EOF


class InputFeeder:
    """Writes input records 0, 1, 2, ... at `rate` per second from a thread (an idempotent
    producer, so broker failures neither lose nor duplicate input) until `stop()`, which
    returns how many were written."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 100.0) -> None:
        import threading

        from confluent_kafka import Producer
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True})
        self.topic = topic
        self.rate = rate
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, key=b"%d" % self.count, value=b"%d" % self.count)
            self.count += 1
            self.producer.poll(0)
            time.sleep(1.0 / self.rate)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(60) == 0
        return self.count


def produce_input(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=b"%d" % i, value=b"%d" % i)
    assert p.flush(60) == 0


def read_output(bootstrap: str, topic, expected: int, timeout: float = 90.0,
                partitions: int | None = None, quiet_s: float = 2.0) -> list[bytes]:
    """The committed values of `topic` (a name or a list), once `expected` arrived and
    nothing more comes for `quiet_s`. `partitions` N: read partitions 0..N-1 of each topic
    without a consumer group (no group coordinator involved)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    topics = [topic] if isinstance(topic, str) else list(topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    if partitions:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics
                  for p in range(partitions)])
    else:
        c.subscribe(topics)
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    quiet = None
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
                quiet = None
            elif len(got) >= expected:
                quiet = quiet or time.monotonic() + quiet_s
                if time.monotonic() > quiet:
                    break
    finally:
        c.close()
    return got


def check_exactly_once(values: list[bytes], n: int) -> None:
    expected = [b"out-%d" % i for i in range(n)]
    counts: dict[bytes, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    missing = [v for v in expected if v not in counts]
    dups = {v: c for v, c in counts.items() if c > 1}
    assert not missing and not dups and len(values) == n, \
        f"{len(values)} outputs, missing {missing[:10]}, duplicated {list(dups.items())[:10]}"


def soak(bootstrap: str, records: int, kills: int) -> None:
    """The long schedule: `records` inputs, the worker SIGKILLed `kills` times."""
    from confluent_kafka.admin import AdminClient, NewTopic
    stamp = time.monotonic_ns()
    src, dst = f"soak-in-{stamp}", f"soak-out-{stamp}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(src, 4, 1), NewTopic(dst, 4, 1)]).values():
        f.result(30)
    produce_input(bootstrap, src, records)
    step = records // (kills + 1)
    for k in range(kills):
        w = start_worker(bootstrap, "soak", "soak-tx", src, dst, 50)
        wait_committed(w, step // 2, timeout=600)
        stop_worker(w, signal.SIGKILL)
        print(f"kill {k + 1}/{kills}", flush=True)
    w = start_worker(bootstrap, "soak", "soak-tx", src, dst, 50)
    try:
        check_exactly_once(read_output(bootstrap, dst, records, timeout=1800), records)
    finally:
        stop_worker(w)
    print(f"exactly once: {records} records, {kills} kills")


if __name__ == "__main__":
    if sys.argv[1] == "--soak":
        soak(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        worker(*sys.argv[1:6], int(sys.argv[6]) if len(sys.argv) > 6 else 20)
    os._exit(0)
