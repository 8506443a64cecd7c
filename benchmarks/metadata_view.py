"""What the brokers' Metadata answers show, polled cheaply and often (issue 22's scale runs).

A Metadata answer for 100,000 partitions is 4.2 MB. Decoding it with the generated codec
takes this process 0.5-0.7 s of CPU, on a machine whose 2 CPUs also run the brokers it
measures. So :func:`scan_partitions` reads only what the benchmark looks at, (leader, ISR
size) per partition, from the raw v9 frame: 0.05-0.1 s, about 5x cheaper. :func:`wait_view` polls each
broker from its own thread, so a broker's new state is seen one poll after it is answered,
not one round of every broker later.

MetadataResponse v9 (flexible: compact arrays and strings carry length + 1 as an unsigned
varint, every struct ends in tagged fields), after the response header (correlation id
int32, tagged fields): throttle_time_ms int32; brokers [node_id int32, host string,
port int32, rack nullable string, tags]; cluster_id nullable string; controller_id int32;
topics [error_code int16, name string, is_internal bool, partitions [error_code int16,
partition_index int32, leader_id int32, leader_epoch int32, replica_nodes [int32],
isr_nodes [int32], offline_replicas [int32], tags], topic_authorized_operations int32,
tags]; cluster_authorized_operations int32; tags. Source: Kafka's MetadataResponse.json.
"""

from __future__ import annotations

import struct
import threading
import time

from client.connection import KafkaClient
from protocol.types import decode_tagged_fields
from protocol.types import decode_unsigned_varint as _varint

METADATA, VERSION = 3, 9
TOPICS = 100
_INT32 = struct.Struct(">i")


def _skip_tags(buf, pos: int) -> int:
    return decode_tagged_fields(buf, pos)[1]


def _skip_string(buf, pos: int) -> int:
    n, pos = _varint(buf, pos)  # length + 1; 0 is a null string
    return pos + max(n - 1, 0)


def scan_partitions(frame) -> list[tuple[int, int]]:
    """(leader_id, ISR size) of every partition of every topic answered without a topic
    error, in answer order, from a v9 Metadata response frame (header included, size
    prefix not). Replica lists are taken to be shorter than 127 (one-byte compact array
    lengths). Raises IndexError / struct.error on a truncated frame."""
    buf = bytes(frame)  # indexing bytes is cheaper than indexing a memoryview
    pos = _skip_tags(buf, 4) + 4                      # correlation id, header tags, throttle
    n, pos = _varint(buf, pos)
    for _ in range(n - 1):                            # brokers
        pos = _skip_string(buf, pos + 4) + 4          # node_id, host, port
        pos = _skip_tags(buf, _skip_string(buf, pos))  # rack
    pos = _skip_string(buf, pos) + 4                  # cluster_id, controller_id
    view: list[tuple[int, int]] = []
    append, leader_at = view.append, _INT32.unpack_from
    topics, pos = _varint(buf, pos)
    for _ in range(topics - 1):
        topic_error = buf[pos] or buf[pos + 1]
        pos = _skip_string(buf, pos + 2) + 1          # name, is_internal
        parts, pos = _varint(buf, pos)
        for _ in range(parts - 1):
            leader = leader_at(buf, pos + 6)[0]       # after error_code, partition_index
            pos += 14                                 # ... leader_id, leader_epoch
            pos += 4 * buf[pos] - 3                   # replica_nodes: (n + 1) then n ids
            isr = buf[pos] - 1
            pos += 4 * isr + 1
            pos += 4 * buf[pos] - 3                   # offline_replicas
            pos = _skip_tags(buf, pos) if buf[pos] else pos + 1
            if not topic_error:
                append((leader, isr))
        pos = _skip_tags(buf, pos + 4)                # topic_authorized_operations
    return view


def partition_view(bootstrap: str, prefix: str, topics: int = TOPICS
                   ) -> tuple[list[tuple[int, int]], float]:
    """(leader, ISR size) of every partition of topics ``prefix-0 .. prefix-{topics-1}``,
    from one broker, and the monotonic time its answer had arrived (before the scan)."""
    with KafkaClient(bootstrap, timeout=600) as k:
        ticket = k.send_request(METADATA, {
            "topics": [{"name": f"{prefix}-{t}"} for t in range(topics)],
            "allow_auto_topic_creation": False}, version=VERSION)
        frame = ticket[0].receive()
        received = time.monotonic()
    return scan_partitions(frame), received


def wait_view(bootstraps: list[str], prefix: str, expected: int, ok, what: str,
              timeout: float = 3600.0, interval: float = 0.2, view=None) -> float:
    """Poll every bootstrap, each from its own thread, until ``ok(leader, isr)`` holds for
    ``expected`` partitions on each; returns the monotonic time the last broker's answer
    that showed it arrived. A broker is polled again ``interval`` s after its last answer,
    or as long after as that answer took, whichever is longer (an answer re-encoded after
    a change costs the broker up to a second of CPU at 100,000 partitions). ``view`` is
    the poll function (``partition_view`` by default). Raises RuntimeError with what each
    broker showed last if ``timeout`` s pass first."""
    poll = view or partition_view
    deadline = time.monotonic() + timeout
    seen: dict[str, int | str] = {}
    reached: dict[str, float] = {}
    lock = threading.Lock()

    def watch(b: str) -> None:
        while time.monotonic() < deadline:
            t0 = received = time.monotonic()
            try:
                rows, received = poll(b, prefix)
                n = sum(1 for lead, isr in rows if ok(lead, isr))
                with lock:
                    seen[b] = n
                if n == expected:
                    with lock:
                        reached[b] = received
                    return
            except Exception as e:  # noqa: BLE001 - a moving cluster; polled again
                with lock:
                    seen[b] = repr(e)
            pause = max(interval, received - t0)
            time.sleep(max(0.0, pause - (time.monotonic() - received)))

    threads = [threading.Thread(target=watch, args=(b,), daemon=True) for b in bootstraps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 1.0)
    if len(reached) < len(bootstraps):
        raise RuntimeError(f"{what}: not reached in {timeout} s (last seen {seen})")
    return max(reached.values())
