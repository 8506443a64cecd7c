"""A consumer-group member in its own process, for tests that kill members for real.

    python -m tests.integration.group_worker BOOTSTRAP GROUP PROTOCOL TOPIC_OR_^REGEX

PROTOCOL is ``consumer`` (KIP-848) or ``classic``. Consumes with confluent-kafka from the
earliest offset, prints ``<topic> <partition> <offset> <value>`` per record (flushed) and
commits that record synchronously: the line is printed once the commit succeeded, or as
``uncommitted ...`` when it failed (the record may then be read again by another member).
``assigned`` / ``revoked`` lines mark rebalances.
SIGTERM closes the consumer (leaving the group) and exits 0; SIGKILL is the crash case.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    from confluent_kafka import Consumer, KafkaException

    bootstrap, group, protocol, topic = sys.argv[1:5]
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    if protocol == "classic":
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "partition.assignment.strategy": "cooperative-sticky"})
    c = Consumer(conf)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))

    def on_assign(consumer, parts):
        print("assigned", " ".join(f"{p.topic}:{p.partition}" for p in parts), flush=True)

    def on_revoke(consumer, parts):
        print("revoked", " ".join(f"{p.topic}:{p.partition}" for p in parts), flush=True)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    print("started", flush=True)
    while not stop:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            print("error", m.error(), flush=True)
            continue
        committed = False
        while not stop:
            try:
                c.commit(message=m, asynchronous=False)
                committed = True
                break
            except KafkaException as e:
                if not e.args[0].retriable():
                    break
        if committed:
            print(m.topic(), m.partition(), m.offset(), m.value().decode(), flush=True)
        else:  # another member may read it again: at-least-once, not a re-read
            print("uncommitted", m.topic(), m.partition(), m.offset(), m.value().decode(),
                  flush=True)
    c.close()
    print("closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
