"""The queue workload with stock clients, recording every operation in the ``History``.

* ``ProducerWorker``: confluent-kafka or kafka-python, idempotent, acks=all; sends unique
  values ``"<process>-<n>"`` round-robin over the partitions at a steady rate (at most
  ``MAX_OUTSTANDING`` unresolved). ``invoke`` before each send, ``ok`` with the acknowledged
  partition/offset, ``info`` for errors (the outcome is unknown: timeouts and lost connections
  may still have written), ``fail`` when the client refused the send before it left (queue
  full, no metadata). A producer that turns fatal (e.g. an idempotence error) is replaced by
  a new one with the next generation in its process name (``ck0.1``).
* ``ConsumerWorker``: confluent-kafka or kafka-python in one consumer group, manual commits:
  each batch read is recorded (``poll``) and its offsets committed synchronously (``commit``
  once the coordinator accepted them); assignments and revocations are recorded.
* ``final_read``: after the cluster healed and the producers flushed, a fresh consumer reads
  every partition from its log start to its high watermark (``final``, ``final_end``).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from tests.faults.history import History

log = logging.getLogger(__name__)

MAX_OUTSTANDING = 500
#: Stock idempotent producers may write a message twice when some message times out: the
#: producer bumps its epoch and renumbers the messages still unacknowledged, including ones a
#: broker may already have written (librdkafka#4953; the Java client re-initialises its
#: producer id). The delivery timeout is therefore longer than any fault the nemeses cause, so
#: that no message times out and a duplicate in the log is the broker's doing.
DELIVERY_TIMEOUT_MS = 300_000

#: client settings that make clients notice faults and recover within seconds
CONFLUENT_COMMON = {
    "socket.timeout.ms": 10000,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
    "topic.metadata.refresh.interval.ms": 2000,
    "metadata.max.age.ms": 6000,
    "retry.backoff.ms": 100,
    "log_level": 3,
}


def _quiet(*_args: Any) -> None:
    return None


class ProducerWorker(threading.Thread):
    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int,
                 name: str, client: str, rate: float, stop: threading.Event) -> None:
        super().__init__(name=f"producer-{name}", daemon=True)
        self.history, self.bootstrap, self.topic = history, bootstrap, topic
        self.partitions, self.base, self.client, self.rate = partitions, name, client, rate
        self.stop_event = stop
        self.generation = 0
        self.sent = 0
        self._outstanding = 0
        self._lock = threading.Lock()
        self._producer: Any = None
        self._fatal = False

    @property
    def process(self) -> str:
        return self.base if self.generation == 0 else f"{self.base}.{self.generation}"

    # ---- outcome callbacks (client threads) -------------------------------------------------
    def _resolved(self) -> None:
        with self._lock:
            self._outstanding -= 1

    def _ok(self, process: str, value: str, partition: int, offset: int) -> None:
        self.history.add("ok", process=process, value=value, partition=partition, offset=offset)
        self._resolved()

    def _info(self, process: str, value: str, partition: int, error: str) -> None:
        self.history.add("info", process=process, value=value, partition=partition, error=error)
        self._resolved()

    # ---- clients ---------------------------------------------------------------------------------
    def _make(self) -> None:
        if self.client == "confluent":
            from confluent_kafka import Producer

            def on_error(err):
                if err.fatal():
                    self._fatal = True
                    self.history.add("client_error", process=self.process, error=str(err),
                                     fatal=True)

            self._producer = Producer({
                **CONFLUENT_COMMON, "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                "message.timeout.ms": DELIVERY_TIMEOUT_MS, "request.timeout.ms": 10000,
                "client.id": self.process, "error_cb": on_error, "debug": "eos",
                "log_level": 7,
                "logger": logging.getLogger(f"librdkafka.{self.process}"),
            })
        else:
            from kafka import KafkaProducer
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap.split(","), enable_idempotence=True,
                acks="all", linger_ms=5, request_timeout_ms=10000,
                delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                max_block_ms=5000, retry_backoff_ms=100, metadata_max_age_ms=6000,
                reconnect_backoff_max_ms=1000, client_id=self.process)

    def _send(self, value: str, partition: int) -> None:
        process = self.process
        self.history.add("invoke", process=process, value=value, partition=partition)
        with self._lock:
            self._outstanding += 1
        if self.client == "confluent":
            def delivered(err, msg, value=value, partition=partition, process=process):
                if err is None:
                    self._ok(process, value, msg.partition(), msg.offset())
                else:
                    self._info(process, value, partition, str(err))
            try:
                self._producer.produce(self.topic, value=value.encode(), partition=partition,
                                       on_delivery=delivered)
            except Exception as e:  # BufferError (queue full), KafkaException: not sent
                self.history.add("fail", process=process, value=value, partition=partition,
                                 error=repr(e))
                self._resolved()
            self._producer.poll(0)
            return
        from kafka.errors import KafkaTimeoutError
        try:
            future = self._producer.send(self.topic, value=value.encode(), partition=partition)
        except KafkaTimeoutError as e:  # no metadata within max_block_ms: never sent
            self.history.add("fail", process=process, value=value, partition=partition,
                             error=repr(e))
            self._resolved()
            return
        except Exception as e:
            self.history.add("fail", process=process, value=value, partition=partition,
                             error=repr(e))
            self.history.add("client_error", process=process, error=repr(e), fatal=True)
            self._resolved()
            self._fatal = True
            return
        future.add_callback(lambda md: self._ok(process, value, md.partition, md.offset))
        future.add_errback(lambda exc: self._info(process, value, partition, repr(exc)))

    def _replace(self) -> None:
        """A fatal producer: close it (its outstanding sends resolve as errors), start anew."""
        old = self._producer
        try:
            if self.client == "confluent":
                old.flush(5)
            else:
                old.close(timeout=5)
        except Exception as e:  # it is broken already
            log.info("closing a fatal producer: %r", e)
        self.generation += 1
        self._fatal = False
        self._make()

    def run(self) -> None:
        try:
            self._make()
        except Exception as e:
            self.history.add("client_error", process=self.process, error=repr(e), fatal=True)
            return
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        while not self.stop_event.is_set():
            try:
                if self._fatal:
                    self._replace()
                now = time.monotonic()
                if now < next_at or self._outstanding >= MAX_OUTSTANDING:
                    if self.client == "confluent":
                        self._producer.poll(min(0.05, max(0.0, next_at - now)))
                    else:
                        time.sleep(min(0.05, max(0.001, next_at - now)))
                    continue
                next_at += interval
                if next_at < now - 1.0:
                    next_at = now  # do not burst after a stall
                self._send(f"{self.process}-{n}", n % self.partitions)
                n += 1
                self.sent += 1
            except Exception as e:  # a fatal client error raised from poll()/produce()
                log.info("producer %s: %r", self.process, e)
                self.history.add("client_error", process=self.process, error=repr(e),
                                 fatal=True)
                self._fatal = True
                time.sleep(0.1)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for every outstanding send; returns how many remain."""
        deadline = time.monotonic() + timeout
        while self._outstanding > 0 and time.monotonic() < deadline and self._producer:
            if self.client == "confluent":
                self._producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            else:
                try:
                    self._producer.flush(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                except Exception:  # KafkaTimeoutError: keep waiting
                    pass
        return self._outstanding

    def close(self) -> None:
        if self._producer is None:
            return
        try:
            if self.client == "confluent":
                self._producer.flush(0)
            else:
                self._producer.close(timeout=2)
        except Exception as e:
            log.info("closing producer %s: %r", self.process, e)


class _NullLogger:
    """A logging.Logger stand-in for librdkafka's log callback (the harness log stays short)."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        return None


class ConsumerWorker(threading.Thread):
    def __init__(self, history: History, bootstrap: str, topic: str, group: str, name: str,
                 client: str, stop: threading.Event) -> None:
        super().__init__(name=f"consumer-{name}", daemon=True)
        self.history, self.bootstrap, self.topic, self.group = history, bootstrap, topic, group
        self.member, self.client, self.stop_event = name, client, stop
        self.polled = 0

    def run(self) -> None:
        try:
            if self.client == "confluent":
                self._run_confluent()
            else:
                self._run_kafka_python()
        except Exception as e:
            log.exception("consumer %s died", self.member)
            self.history.add("client_error", process=self.member, error=repr(e), fatal=True)

    def _record(self, batch: list[tuple[int, int, bytes]]) -> dict[int, int]:
        upto: dict[int, int] = {}
        for partition, offset, value in batch:
            self.history.add("poll", member=self.member, partition=partition, offset=offset,
                             value=value.decode(errors="replace"))
            upto[partition] = max(upto.get(partition, -1), offset)
        self.polled += len(batch)
        return upto

    def _run_confluent(self) -> None:
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
        c = Consumer({
            **CONFLUENT_COMMON, "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "client.id": self.member, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000,
            "enable.partition.eof": False,
            "logger": logging.getLogger(f"librdkafka.{self.member}"),
        })

        def on_assign(consumer, partitions):
            self.history.add("assign", member=self.member,
                             partitions=sorted(tp.partition for tp in partitions))

        def on_revoke(consumer, partitions):
            self.history.add("revoke", member=self.member,
                             partitions=sorted(tp.partition for tp in partitions))

        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not self.stop_event.is_set():
                msgs = c.consume(num_messages=200, timeout=0.5)
                batch = []
                for m in msgs:
                    if m.error() is not None:
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.history.add("client_error", process=self.member,
                                             error=str(m.error()))
                        continue
                    batch.append((m.partition(), m.offset(), m.value() or b""))
                upto = self._record(batch)
                if not upto:
                    continue
                offsets = [TopicPartition(self.topic, p, o + 1) for p, o in upto.items()]
                try:
                    done = c.commit(offsets=offsets, asynchronous=False)
                except KafkaException as e:
                    self.history.add("client_error", process=self.member,
                                     error=f"commit: {e}")
                    continue
                for tp in done or []:
                    if tp.error is None:
                        self.history.add("commit", member=self.member, partition=tp.partition,
                                         offset=tp.offset)
        finally:
            c.close()

    def _run_kafka_python(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        history, member = self.history, self.member

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                history.add("revoke", member=member,
                            partitions=sorted(tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned):
                history.add("assign", member=member,
                            partitions=sorted(tp.partition for tp in assigned))

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","), group_id=self.group,
            client_id=self.member, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=1000, request_timeout_ms=10000,
            max_poll_interval_ms=60000, retry_backoff_ms=100, reconnect_backoff_max_ms=1000,
            metadata_max_age_ms=6000)
        c.subscribe(topics=[self.topic], listener=Listener())
        try:
            while not self.stop_event.is_set():
                try:
                    got = c.poll(timeout_ms=500, max_records=200)
                except Exception as e:  # a fault surfaced through poll
                    self.history.add("client_error", process=self.member, error=f"poll: {e!r}")
                    time.sleep(0.2)
                    continue
                batch = [(tp.partition, r.offset, r.value or b"")
                         for tp, records in got.items() for r in records]
                upto = self._record(batch)
                if not upto:
                    continue
                offsets = {TopicPartition(self.topic, p): OffsetAndMetadata(o + 1, "", -1)
                           for p, o in upto.items()}
                try:
                    c.commit(offsets)
                except Exception as e:  # CommitFailedError, timeouts
                    self.history.add("client_error", process=self.member,
                                     error=f"commit: {e!r}")
                    continue
                for tp, om in offsets.items():
                    self.history.add("commit", member=self.member, partition=tp.partition,
                                     offset=om.offset)
        finally:
            try:
                c.close(autocommit=False)
            except Exception as e:
                log.info("closing consumer %s: %r", self.member, e)


def final_read(history: History, bootstrap: str, topic: str, partitions: int,
               timeout: float = 90.0, *, isolation: str = "read_uncommitted",
               prefix: str = "") -> bool:
    """Read every partition from its log start to its high watermark (``{prefix}final`` and
    ``{prefix}final_end`` events); True when complete. With ``read_committed`` only
    committed records are returned, and completion is the consumer's position (it moves past
    aborted records and transaction markers) reaching the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
    c = Consumer({**CONFLUENT_COMMON, "bootstrap.servers": bootstrap,
                  "group.id": f"final-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                  "enable.partition.eof": False, "check.crcs": True,
                  "isolation.level": isolation, "logger": _NullLogger()})
    deadline = time.monotonic() + timeout
    try:
        marks: dict[int, tuple[int, int]] = {}
        while len(marks) < partitions and time.monotonic() < deadline:
            for p in range(partitions):
                if p in marks:
                    continue
                try:
                    marks[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                except KafkaException as e:
                    log.info("final read: watermarks of %s-%d: %s", topic, p, e)
            if len(marks) < partitions:
                time.sleep(0.5)
        if len(marks) < partitions:
            return False
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        c.assign(tps)
        position = {p: marks[p][0] for p in range(partitions)}
        seen: dict[int, set[int]] = {p: set() for p in range(partitions)}
        while any(position[p] < marks[p][1] for p in range(partitions)) \
                and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error() is not None:
                    log.info("final read: %s", m.error())
                    continue
                p, o = m.partition(), m.offset()
                if o >= marks[p][1] or o in seen[p]:
                    continue
                seen[p].add(o)
                history.add(f"{prefix}final", partition=p, offset=o,
                            value=(m.value() or b"").decode(errors="replace"))
                position[p] = max(position[p], o + 1)
            if isolation == "read_committed":
                for tp in c.position(tps):
                    if tp.offset >= 0:
                        position[tp.partition] = max(position[tp.partition], tp.offset)
        complete = True
        for p in range(partitions):
            if position[p] >= marks[p][1]:
                history.add(f"{prefix}final_end", partition=p, log_start=marks[p][0],
                            high_watermark=marks[p][1])
            else:
                complete = False
                log.warning("final read of %s-%d stopped at %d of %d", topic, p, position[p],
                            marks[p][1])
        return complete
    finally:
        c.close()
