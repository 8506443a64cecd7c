"""Log compaction against a live broker: a `cleanup.policy=compact` topic with small segments
is cleaned in the background; consumers from the beginning see one (the latest) value per key
in the cleaned part with the original offsets (gaps in between); a tombstone disappears after
delete.retention.ms; `josef dump-log` and kafka-python parse the cleaned segments; a restart
keeps the cleaned data."""

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from storage.checkpoints import OffsetCheckpointFile
from storage.cleaner import CLEANER_CHECKPOINT
from tests.integration.harness import REPO_ROOT

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

KEYS = 5
RETENTION_MS = 3000


def _produce(bootstrap, topic, items):
    # small batches: a produce request larger than segment.bytes is refused
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True,
                  "batch.num.messages": 10})
    errors = []
    for k, v in items:
        p.produce(topic, key=k, value=v, on_delivery=lambda e, m: e and errors.append(e))
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []


def _consume(bootstrap, topic):
    """(offset, key, value) of every record from the beginning to the end (kafka-python)."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + 30
        while c.position(tp) < end and time.monotonic() < deadline:
            for recs in c.poll(1000).values():
                out.extend((r.offset, r.key, r.value) for r in recs)
        return out, end
    finally:
        c.close()


def _cleaned_to(b, topic) -> int:
    path = b.log_dir / CLEANER_CHECKPOINT
    if not path.exists():
        return -1
    return OffsetCheckpointFile(str(path)).read().get((topic, 0), -1)


def _wait(pred, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError("timed out waiting for the cleaner")


def _check_compacted(records, upto):
    """At most one record per key below `upto`, each the last of its key there, and every
    value names its own offset (offsets preserved)."""
    seen = {}
    for off, key, value in records:
        if value is not None:
            assert value.startswith(b"v%d-" % off), (off, value)
        if off < upto:
            assert key not in seen, f"two records of {key} below {upto}"
            seen[key] = off


def test_compaction_end_to_end(broker_factory):
    b = broker_factory({"log.cleaner.backoff.ms": "200"})
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fs = admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096",
        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(RETENTION_MS)})])
    fs[topic].result(timeout=15)

    n = 300
    items = [(b"k%d" % (i % KEYS), b"v%d-" % i + b"x" * 40) for i in range(n)]
    items.append((b"k4", None))  # tombstone at offset 300
    items += [(b"f%d" % (i % 3), b"v%d-" % (n + 1 + i) + b"y" * 40) for i in range(100)]
    _produce(b.bootstrap, topic, items)

    # The cleaner may run while the records are still arriving (200 ms backoff): wait until
    # a pass has covered the tombstone at offset n.
    upto = _wait(lambda: _cleaned_to(b, topic) if _cleaned_to(b, topic) > n + 1 else 0)
    assert upto > n + 1
    records, end = _consume(b.bootstrap, topic)
    assert end == len(items)
    assert len(records) < len(items) / 2
    _check_compacted(records, upto)
    last = {}
    for off, key, value in records:
        last[key] = (off, value)
    for k in range(KEYS - 1):  # the latest value of each key survives, at its offset
        off = max(i for i in range(n) if i % KEYS == k)
        assert last[b"k%d" % k] == (off, items[off][1])
    assert last[b"k4"] == (n, None)  # the tombstone is kept until delete.retention.ms

    # after delete.retention.ms, a later cleaning removes the tombstone
    time.sleep(RETENTION_MS / 1000 + 0.5)
    more = [(b"f%d" % (i % 3), b"v%d-" % (len(items) + i) + b"z" * 40) for i in range(100)]
    _produce(b.bootstrap, topic, more)

    def tombstone_gone():
        recs, _ = _consume(b.bootstrap, topic)
        return recs if all(k != b"k4" for _, k, _ in recs) else None
    records = _wait(tombstone_gone)
    _check_compacted(records, _cleaned_to(b, topic))

    # josef dump-log parses every segment (CRCs, indexes) of the cleaned log
    part = b.log_dir / f"{topic}-0"
    files = sorted(str(p) for p in part.glob("*.log"))
    res = subprocess.run([sys.executable, "-m", "broker.cli", "dump-log", "--files",
                          ",".join(files)], capture_output=True, timeout=60, cwd=REPO_ROOT)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])

    b.stop()
    b.start()
    again, _ = _consume(b.bootstrap, topic)
    assert again == records
