"""Codec benchmark: generated codecs (protocol.messages) vs hand-written struct-based codecs.

Usage: python benchmarks/bench_codec.py [--quick]

Measures microseconds per decode and per encode of message bodies for
    Produce request v9 (1 and 100 partitions, 1 KiB of records each),
    Fetch response v12 (100 partitions, 512 bytes of records each),
    Metadata response v12 (10 topics x 100 partitions = 1,000 partitions, 3 replicas),
each against a hand-written encoder/decoder for exactly that message and version (same
bytes; the hand-written decoders build small __slots__ objects), plus Produce decode with a
1 KiB vs a 1 MiB batch (records are zero-copy memoryview slices, so the time should not
depend on the batch size). Prints a markdown table and writes benchmarks/results/codec.md.
Timings: best of 5 repeats of a loop sized to ~0.1 s (time.perf_counter), one process.
"""

from __future__ import annotations

import platform
import struct
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.messages import FetchResponse, MetadataResponse, ProduceRequest  # noqa: E402

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
HI = struct.Struct(">hi")
IHI = struct.Struct(">ihi")
IHQQQ = struct.Struct(">ihqqq")
HIII = struct.Struct(">hiii")
H16S = struct.Struct(">h16s?")  # error_code, name handled apart; topic_id, is_internal
QQ = struct.Struct(">qq")

_UV = [bytes([i]) for i in range(128)]


def uv(n: int) -> bytes:
    if n < 128:
        return _UV[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uv(buf, pos):
    b = buf[pos]
    if b < 128:
        return b, pos + 1
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def skip_tags(buf, pos):
    n, pos = read_uv(buf, pos)
    for _ in range(n):
        _, pos = read_uv(buf, pos)
        size, pos = read_uv(buf, pos)
        pos += size
    return pos


def read_cstr(buf, pos):
    n, pos = read_uv(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    return str(buf[pos:end], "utf-8"), end


def write_cstr(out, s):
    if s is None:
        out.append(0)
    else:
        b = s.encode()
        out += uv(len(b) + 1)
        out += b


class Obj:
    """Base for the hand-written codecs' plain objects (positional __init__ per class)."""

    __slots__ = ()

    def __init_subclass__(cls) -> None:
        args = ", ".join(cls.__slots__)
        body = "".join(f"\n    self.{a} = {a}" for a in cls.__slots__)
        ns: dict = {}
        exec(f"def __init__(self, {args}):{body}", ns)  # noqa: S102
        cls.__init__ = ns["__init__"]


class HProduce(Obj):
    __slots__ = ("transactional_id", "acks", "timeout_ms", "topic_data")


class HTopic(Obj):
    __slots__ = ("name", "partition_data")


class HPartition(Obj):
    __slots__ = ("index", "records")


# ---------------------------------------------------------------- hand-written Produce v9

def hand_encode_produce(r: HProduce) -> bytes:
    out = bytearray()
    write_cstr(out, r.transactional_id)
    out += HI.pack(r.acks, r.timeout_ms)
    out += uv(len(r.topic_data) + 1)
    for t in r.topic_data:
        write_cstr(out, t.name)
        out += uv(len(t.partition_data) + 1)
        for p in t.partition_data:
            out += I32.pack(p.index)
            rec = p.records
            if rec is None:
                out.append(0)
            else:
                out += uv(len(rec) + 1)
                out += rec
            out.append(0)
        out.append(0)
    out.append(0)
    return bytes(out)


def hand_decode_produce(buf: memoryview) -> HProduce:
    tid, pos = read_cstr(buf, 0)
    acks, timeout = HI.unpack_from(buf, pos)
    pos += 6
    n, pos = read_uv(buf, pos)
    topics = []
    for _ in range(n - 1):
        name, pos = read_cstr(buf, pos)
        m, pos = read_uv(buf, pos)
        parts = []
        for _ in range(m - 1):
            (index,) = I32.unpack_from(buf, pos)
            pos += 4
            size, pos = read_uv(buf, pos)
            if size == 0:
                rec = None
            else:
                rec = buf[pos:pos + size - 1]
                pos += size - 1
            pos = skip_tags(buf, pos)
            parts.append(HPartition(index, rec))
        pos = skip_tags(buf, pos)
        topics.append(HTopic(name, parts))
    skip_tags(buf, pos)
    return HProduce(tid, acks, timeout, topics)


def produce_pair(partitions: int, batch_bytes: int):
    batch = bytes(range(256)) * (batch_bytes // 256) + b"\x00" * (batch_bytes % 256)
    ours = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="bench-topic", partition_data=[
            ProduceRequest.PartitionProduceData(index=i, records=batch)
            for i in range(partitions)])])
    hand = HProduce(None, -1, 30000, [HTopic("bench-topic", [
        HPartition(i, batch) for i in range(partitions)])])
    return ours, hand


# ---------------------------------------------------------------- hand-written Fetch v12

class HFetch(Obj):
    __slots__ = ("throttle_time_ms", "error_code", "session_id", "responses")


class HFetchTopic(Obj):
    __slots__ = ("topic", "partitions")


class HFetchPartition(Obj):
    __slots__ = ("partition_index", "error_code", "high_watermark", "last_stable_offset",
                 "log_start_offset", "aborted_transactions", "preferred_read_replica",
                 "records")


def hand_encode_fetch(r: HFetch) -> bytes:
    out = bytearray()
    out += IHI.pack(r.throttle_time_ms, r.error_code, r.session_id)
    out += uv(len(r.responses) + 1)
    for t in r.responses:
        write_cstr(out, t.topic)
        out += uv(len(t.partitions) + 1)
        for p in t.partitions:
            out += IHQQQ.pack(p.partition_index, p.error_code, p.high_watermark,
                              p.last_stable_offset, p.log_start_offset)
            ab = p.aborted_transactions
            if ab is None:
                out.append(0)
            else:
                out += uv(len(ab) + 1)
                for producer_id, first_offset in ab:
                    out += QQ.pack(producer_id, first_offset)
                    out.append(0)
            out += I32.pack(p.preferred_read_replica)
            rec = p.records
            if rec is None:
                out.append(0)
            else:
                out += uv(len(rec) + 1)
                out += rec
            out.append(0)
        out.append(0)
    out.append(0)
    return bytes(out)


def hand_decode_fetch(buf: memoryview) -> HFetch:
    throttle, err, session = IHI.unpack_from(buf, 0)
    pos = 10
    n, pos = read_uv(buf, pos)
    topics = []
    for _ in range(n - 1):
        name, pos = read_cstr(buf, pos)
        m, pos = read_uv(buf, pos)
        parts = []
        for _ in range(m - 1):
            idx, perr, hw, lso, lstart = IHQQQ.unpack_from(buf, pos)
            pos += 30
            k, pos = read_uv(buf, pos)
            if k == 0:
                ab = None
            else:
                ab = []
                for _ in range(k - 1):
                    ab.append(QQ.unpack_from(buf, pos))
                    pos = skip_tags(buf, pos + 16)
            (rr,) = I32.unpack_from(buf, pos)
            pos += 4
            size, pos = read_uv(buf, pos)
            if size == 0:
                rec = None
            else:
                rec = buf[pos:pos + size - 1]
                pos += size - 1
            pos = skip_tags(buf, pos)
            parts.append(HFetchPartition(idx, perr, hw, lso, lstart, ab, rr, rec))
        pos = skip_tags(buf, pos)
        topics.append(HFetchTopic(name, parts))
    skip_tags(buf, pos)
    return HFetch(throttle, err, session, topics)


def fetch_pair(partitions: int, record_bytes: int):
    rec = b"r" * record_bytes
    P = FetchResponse.PartitionData
    ours = FetchResponse(throttle_time_ms=0, error_code=0, session_id=7, responses=[
        FetchResponse.FetchableTopicResponse(topic="bench-topic", partitions=[
            P(partition_index=i, high_watermark=1000 + i, last_stable_offset=1000 + i,
              log_start_offset=0, aborted_transactions=[], preferred_read_replica=-1,
              records=rec) for i in range(partitions)])])
    hand = HFetch(0, 0, 7, [HFetchTopic("bench-topic", [
        HFetchPartition(i, 0, 1000 + i, 1000 + i, 0, [], -1, rec)
        for i in range(partitions)])])
    return ours, hand


# ---------------------------------------------------------------- hand-written Metadata v12

class HMeta(Obj):
    __slots__ = ("throttle_time_ms", "brokers", "cluster_id", "controller_id", "topics")


class HBroker(Obj):
    __slots__ = ("node_id", "host", "port", "rack")


class HMetaTopic(Obj):
    __slots__ = ("error_code", "name", "topic_id", "is_internal", "partitions",
                 "topic_authorized_operations")


class HMetaPartition(Obj):
    __slots__ = ("error_code", "partition_index", "leader_id", "leader_epoch", "replica_nodes",
                 "isr_nodes", "offline_replicas")


def _write_int_array(out, values):
    out += uv(len(values) + 1)
    out += struct.pack(f">{len(values)}i", *values)


def _read_int_array(buf, pos):
    n, pos = read_uv(buf, pos)
    n -= 1
    values = list(struct.unpack_from(f">{n}i", buf, pos))
    return values, pos + 4 * n


def hand_encode_metadata(r: HMeta) -> bytes:
    out = bytearray()
    out += I32.pack(r.throttle_time_ms)
    out += uv(len(r.brokers) + 1)
    for b in r.brokers:
        out += I32.pack(b.node_id)
        write_cstr(out, b.host)
        out += I32.pack(b.port)
        write_cstr(out, b.rack)
        out.append(0)
    write_cstr(out, r.cluster_id)
    out += I32.pack(r.controller_id)
    out += uv(len(r.topics) + 1)
    for t in r.topics:
        out += I16.pack(t.error_code)
        write_cstr(out, t.name)
        out += t.topic_id.bytes
        out.append(1 if t.is_internal else 0)
        out += uv(len(t.partitions) + 1)
        for p in t.partitions:
            out += HIII.pack(p.error_code, p.partition_index, p.leader_id, p.leader_epoch)
            _write_int_array(out, p.replica_nodes)
            _write_int_array(out, p.isr_nodes)
            _write_int_array(out, p.offline_replicas)
            out.append(0)
        out += I32.pack(t.topic_authorized_operations)
        out.append(0)
    out.append(0)
    return bytes(out)


def hand_decode_metadata(buf: memoryview) -> HMeta:
    (throttle,) = I32.unpack_from(buf, 0)
    pos = 4
    n, pos = read_uv(buf, pos)
    brokers = []
    for _ in range(n - 1):
        (node,) = I32.unpack_from(buf, pos)
        host, pos = read_cstr(buf, pos + 4)
        (port,) = I32.unpack_from(buf, pos)
        rack, pos = read_cstr(buf, pos + 4)
        pos = skip_tags(buf, pos)
        brokers.append(HBroker(node, host, port, rack))
    cluster_id, pos = read_cstr(buf, pos)
    (controller,) = I32.unpack_from(buf, pos)
    pos += 4
    n, pos = read_uv(buf, pos)
    topics = []
    for _ in range(n - 1):
        (err,) = I16.unpack_from(buf, pos)
        name, pos = read_cstr(buf, pos + 2)
        tid = uuid.UUID(bytes=bytes(buf[pos:pos + 16]))
        internal = buf[pos + 16] != 0
        pos += 17
        m, pos = read_uv(buf, pos)
        parts = []
        for _ in range(m - 1):
            perr, idx, leader, epoch = HIII.unpack_from(buf, pos)
            replicas, pos = _read_int_array(buf, pos + 14)
            isr, pos = _read_int_array(buf, pos)
            offline, pos = _read_int_array(buf, pos)
            pos = skip_tags(buf, pos)
            parts.append(HMetaPartition(perr, idx, leader, epoch, replicas, isr, offline))
        (ops,) = I32.unpack_from(buf, pos)
        pos = skip_tags(buf, pos + 4)
        topics.append(HMetaTopic(err, name, tid, internal, parts, ops))
    skip_tags(buf, pos)
    return HMeta(throttle, brokers, cluster_id, controller, topics)


def metadata_pair(topics: int, partitions: int):
    M = MetadataResponse
    brokers = [M.MetadataResponseBroker(node_id=i, host=f"broker{i}.example", port=9092,
                                        rack=None) for i in range(3)]
    ours_topics, hand_topics = [], []
    for t in range(topics):
        tid = uuid.UUID(int=t + 1)
        ps, hps = [], []
        for p in range(partitions):
            replicas = [p % 3, (p + 1) % 3, (p + 2) % 3]
            ps.append(M.MetadataResponsePartition(
                partition_index=p, leader_id=replicas[0], leader_epoch=5,
                replica_nodes=replicas, isr_nodes=list(replicas), offline_replicas=[]))
            hps.append(HMetaPartition(0, p, replicas[0], 5, replicas, list(replicas), []))
        ours_topics.append(M.MetadataResponseTopic(name=f"topic-{t}", topic_id=tid,
                                                   partitions=ps,
                                                   topic_authorized_operations=-2147483648))
        hand_topics.append(HMetaTopic(0, f"topic-{t}", tid, False, hps, -2147483648))
    ours = M(brokers=brokers, cluster_id="bench-cluster", controller_id=0, topics=ours_topics)
    hand = HMeta(0, [HBroker(i, f"broker{i}.example", 9092, None) for i in range(3)],
                 "bench-cluster", 0, hand_topics)
    return ours, hand


# ---------------------------------------------------------------- timing

def bench(fn, min_time: float) -> float:
    """Best-of-5 microseconds per call."""
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time / 5 or number > 1 << 20:
            break
        number *= 2
    best = dt / number
    for _ in range(4):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best * 1e6


def main(argv: list[str]) -> int:
    min_time = 0.02 if "--quick" in argv else 0.1
    cases = [
        ("Produce request v9, 1 partition", ProduceRequest, 9, *produce_pair(1, 1024),
         hand_encode_produce, hand_decode_produce),
        ("Produce request v9, 100 partitions", ProduceRequest, 9, *produce_pair(100, 1024),
         hand_encode_produce, hand_decode_produce),
        ("Fetch response v12, 100 partitions", FetchResponse, 12, *fetch_pair(100, 512),
         hand_encode_fetch, hand_decode_fetch),
        ("Metadata response v12, 1,000 partitions", MetadataResponse, 12,
         *metadata_pair(10, 100), hand_encode_metadata, hand_decode_metadata),
    ]
    rows = []
    for label, cls, version, ours, hand, h_enc, h_dec in cases:
        data = ours.encode(version)
        assert h_enc(hand) == data, f"hand-written encoder disagrees for {label}"
        view = memoryview(data)
        assert cls.decode(view, version) == ours
        h_dec(view)
        dec_ours = bench(lambda cls=cls, view=view, v=version: cls.decode(view, v), min_time)
        dec_hand = bench(lambda h_dec=h_dec, view=view: h_dec(view), min_time)
        enc_ours = bench(lambda o=ours, v=version: o.encode(v), min_time)
        enc_hand = bench(lambda h_enc=h_enc, hand=hand: h_enc(hand), min_time)
        rows.append((label, len(data), dec_ours, dec_hand, enc_ours, enc_hand))

    zc = []
    for size in (1024, 1 << 20):
        ours, _ = produce_pair(1, size)
        view = memoryview(ours.encode(9))
        decoded = ProduceRequest.decode(view, 9)
        assert decoded.topic_data[0].partition_data[0].records.obj is view.obj
        zc.append((size, len(view), bench(lambda view=view: ProduceRequest.decode(view, 9),
                                          min_time)))

    lines = [
        "## Codec (protocol.messages vs hand-written struct codecs)",
        "",
        f"Python {platform.python_version()} on {platform.machine()}, "
        f"`python benchmarks/bench_codec.py`; µs per call, best of 5.",
        "",
        "| message | body bytes | decode µs | hand decode µs | ratio | encode µs "
        "| hand encode µs | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, size, d_o, d_h, e_o, e_h in rows:
        lines.append(f"| {label} | {size:,} | {d_o:.1f} | {d_h:.1f} | {d_o / d_h:.2f}x "
                     f"| {e_o:.1f} | {e_h:.1f} | {e_o / e_h:.2f}x |")
    lines += [
        "",
        "Zero-copy records: Produce request v9 decode, 1 partition, by batch size.",
        "",
        "| batch | body bytes | decode µs |",
        "|---|---:|---:|",
    ]
    for size, body, us in zc:
        label = "1 KiB" if size == 1024 else "1 MiB"
        lines.append(f"| {label} | {body:,} | {us:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parent / "results" / "codec.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
