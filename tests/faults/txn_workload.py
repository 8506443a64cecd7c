"""The transactional workload: read_committed consumers never see aborted or partial
transactions (issue 13, workload 2), on topic ``faults-txn``.

* ``TxnProducerWorker``: a confluent-kafka transactional producer (``transactional.id``
  ``faults-txn-<k>``) runs transactions of 1-6 values ``"t<k>.<gen>-<txn>-<i>"`` spread over
  the partitions, and commits or (one in five, drawn from the seed) aborts each. Events:
  ``txn_begin`` (``txn``, ``values``), then ``txn_committed`` / ``txn_aborted`` once the
  coordinator confirmed, or ``txn_unknown`` when the outcome cannot be known (a fatal error,
  a commit that never completed). Retriable commit errors are retried; an abortable one
  aborts. A fatal producer (fenced, ...) is replaced by a new one with the same
  ``transactional.id`` (the coordinator then aborts what the old one left open).
* ``TxnConsumerWorker``: a read_committed confluent-kafka consumer in its own group records
  every value it is given (``txn_poll``).
* The final read is ``workload.final_read(..., isolation="read_committed", prefix="txn_")``.

The checks are ``tests.faults.checker.check_transactions``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

from tests.faults.history import History
from tests.faults.workload import CONFLUENT_COMMON

log = logging.getLogger(__name__)

TXN_TOPIC = "faults-txn"
TXN_TIMEOUT_MS = 60_000


class TxnProducerWorker(threading.Thread):
    def __init__(self, history: History, bootstrap: str, partitions: int, index: int,
                 seed: int, rate: float, stop: threading.Event) -> None:
        super().__init__(name=f"txn-producer-{index}", daemon=True)
        self.history, self.bootstrap, self.partitions = history, bootstrap, partitions
        self.index, self.rate, self.stop_event = index, rate, stop
        self.rng = random.Random(seed * 7919 + index)
        self.generation = 0
        self.transactions = 0
        self._producer: Any = None

    @property
    def name_prefix(self) -> str:
        return f"t{self.index}.{self.generation}"

    def _make(self) -> None:
        from confluent_kafka import Producer
        self._producer = Producer({
            **CONFLUENT_COMMON, "bootstrap.servers": self.bootstrap,
            "transactional.id": f"faults-txn-{self.index}",
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "message.timeout.ms": TXN_TIMEOUT_MS - 5000, "linger.ms": 5,
            "client.id": f"txn{self.index}",
            "logger": logging.getLogger(f"librdkafka.txn{self.index}"),
        })
        deadline = time.monotonic() + 120
        while True:
            try:
                self._producer.init_transactions(30)
                return
            except Exception as e:
                if time.monotonic() > deadline or self.stop_event.is_set():
                    raise
                log.info("init_transactions: %r", e)
                time.sleep(1.0)

    def _finish(self, txn: str, commit: bool) -> str:
        """Commit or abort; returns committed / aborted / unknown."""
        from confluent_kafka import KafkaException
        p = self._producer
        deadline = time.monotonic() + TXN_TIMEOUT_MS / 1000
        while True:
            try:
                if commit:
                    p.commit_transaction(30)
                    return "committed"
                p.abort_transaction(30)
                return "aborted"
            except KafkaException as e:
                err = e.args[0]
                self.history.add("client_error", process=f"txn{self.index}",
                                 error=f"{txn} {'commit' if commit else 'abort'}: {err}")
                if err.fatal():
                    return "unknown"
                if commit and err.txn_requires_abort():
                    commit = False
                    continue
                if not err.retriable() or time.monotonic() > deadline:
                    return "unknown"
                time.sleep(0.2)

    def run(self) -> None:
        try:
            self._make()
        except Exception as e:
            self.history.add("client_error", process=f"txn{self.index}", error=repr(e),
                             fatal=True)
            return
        n = 0
        while not self.stop_event.is_set():
            txn = f"{self.name_prefix}-{n}"
            size = self.rng.randint(1, 6)
            commit = self.rng.random() >= 0.2
            values = [f"{txn}-{i}" for i in range(size)]
            self.history.add("txn_begin", txn=txn, values=values)
            outcome = "unknown"
            try:
                self._producer.begin_transaction()
                for v in values:
                    self._producer.produce(TXN_TOPIC, value=v.encode(),
                                           partition=self.rng.randrange(self.partitions))
                    self._producer.poll(0)
                outcome = self._finish(txn, commit)
            except Exception as e:
                self.history.add("client_error", process=f"txn{self.index}",
                                 error=f"{txn}: {e!r}")
                outcome = self._finish(txn, False) if self._abortable(e) else "unknown"
            self.history.add(f"txn_{outcome}", txn=txn)
            self.transactions += 1
            n += 1
            if outcome == "unknown":
                self._replace()
            self.stop_event.wait(1.0 / self.rate)

    @staticmethod
    def _abortable(e: Exception) -> bool:
        err = e.args[0] if e.args else None
        return bool(getattr(err, "txn_requires_abort", lambda: False)())

    def _replace(self) -> None:
        try:
            self._producer.flush(5)
        except Exception as e:
            log.info("closing a transactional producer: %r", e)
        self.generation += 1
        try:
            self._make()
        except Exception as e:
            self.history.add("client_error", process=f"txn{self.index}", error=repr(e),
                             fatal=True)
            self.stop_event.wait(2.0)


class TxnConsumerWorker(threading.Thread):
    """A read_committed consumer of ``faults-txn`` recording what it is given."""

    def __init__(self, history: History, bootstrap: str, name: str,
                 stop: threading.Event) -> None:
        super().__init__(name=f"txn-consumer-{name}", daemon=True)
        self.history, self.bootstrap, self.member, self.stop_event = (history, bootstrap, name,
                                                                      stop)
        self.polled = 0

    def run(self) -> None:
        from confluent_kafka import Consumer
        c = Consumer({**CONFLUENT_COMMON, "bootstrap.servers": self.bootstrap,
                      "group.id": "faults-txn-group", "client.id": self.member,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 1000,
                      "logger": logging.getLogger(f"librdkafka.{self.member}")})
        c.subscribe([TXN_TOPIC])
        try:
            while not self.stop_event.is_set():
                for m in c.consume(num_messages=200, timeout=0.5):
                    if m.error() is not None:
                        continue
                    self.history.add("txn_poll", member=self.member, partition=m.partition(),
                                     offset=m.offset(),
                                     value=(m.value() or b"").decode(errors="replace"))
                    self.polled += 1
        except Exception as e:
            self.history.add("client_error", process=self.member, error=repr(e), fatal=True)
        finally:
            c.close()
