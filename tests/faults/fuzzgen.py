"""Frame generation for the protocol fuzzer (I/O free, deterministic from a ``random.Random``).

A request is built for any API key and version of ``protocol.api.API_KEYS`` by walking the
message's schema (``FieldSpec``: type, versions, nullable, tagged, flexible) with small random
values: strings from a pool of topic/group-like names, arrays of 0-2 elements, a valid record
batch (sometimes compressed) in ``records`` fields. The walker writes the wire bytes itself
(independently of ``protocol.messages``, so a codec bug cannot hide from it) and notes a
*slot* for every length, count, varint and integer it wrote. Mutations then work on the
structure:

* ``value``: an integer slot set to a boundary value (0, -1, int max/min, ...);
* ``length``: a string/bytes/array length or count set to huge, negative or off by a little
  (compact varints made overlong or malformed);
* ``records``: inside a record batch: batch length, record count, CRC, attributes (another
  codec over garbage or valid-but-wrong compressed data), record varints;
* ``truncate`` / ``extend`` / ``splice`` / ``flip``: byte-level damage to the body;
* ``header``: an unsupported version, a broken client id length or tagged-field section;
* ``random``: a frame of random bytes.

Frames with a broken size prefix (negative, huge, shorter than the header) are produced by
``bad_prefix_frame``; they end their connection, so the fuzzer sends them last.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from protocol.api import API_KEYS
from protocol.compression import compress
from protocol.headers import request_header_version
from protocol.record_builder import RecordBatchBuilder

#: names used for every string field: the fuzzer's own topics and groups (never an internal
#: topic or the well-behaved clients' ones: deleting ``__consumer_offsets`` or adding partitions
#: to it is an admin's right in Kafka too, and would only prove that admins can break groups)
NAME_POOL = ("fuzz-a", "fuzz-b", "", "x", "fuzz-group")
#: fields whose random values would make a request wait (an answer never comes, or only after
#: a timeout): drawn from these values unless a mutation picks an edge value
QUICK_VALUES = {"Acks": (-1, 1), "MaxWaitMs": (0, 1, 10), "TimeoutMs": (0, 10, 100)}
INT_EDGES = {
    "int8": (0, -1, 1, 127, -128),
    "int16": (0, -1, 1, 32767, -32768, 2),
    "uint16": (0, 1, 65535),
    "int32": (0, -1, 1, 2**31 - 1, -(2**31), 1 << 20, 100),
    "uint32": (0, 1, 2**32 - 1),
    "int64": (0, -1, 1, 2**63 - 1, -(2**63), 1 << 40),
}
FIXED = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "uint32": ">I",
         "int64": ">q", "float64": ">d"}


def uvarint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _in(rng: tuple | None, v: int) -> bool:
    return rng is not None and rng is not False and rng[0] <= v <= rng[1]


@dataclass
class Slot:
    offset: int
    size: int
    kind: str  # int8..int64, uvarint (compact length/count/tag), len16, len32, count32, records
    note: str = ""


@dataclass
class Body:
    data: bytearray = field(default_factory=bytearray)
    slots: list[Slot] = field(default_factory=list)


def record_batch(rng: random.Random) -> bytes:
    """A valid v2 batch of 1-3 small records, sometimes compressed, sometimes idempotent."""
    codec = rng.choice((0, 0, 0, 1, 2, 3, 4))
    idem = rng.random() < 0.3
    b = RecordBatchBuilder(compression_type=codec,
                           producer_id=rng.randrange(5) if idem else -1,
                           producer_epoch=0 if idem else -1,
                           base_sequence=rng.randrange(10) if idem else -1)
    for i in range(rng.randint(1, 3)):
        b.append(1_700_000_000_000 + i, rng.choice((None, b"k")), rng.randbytes(rng.randint(0, 40)))
    return b.build()


class Walker:
    """Writes a request body for one (struct schema, version) with slots (see module doc)."""

    def __init__(self, rng: random.Random, version: int, flexible: bool) -> None:
        self.rng, self.v, self.flex = rng, version, flexible
        self.body = Body()

    def _put(self, data: bytes, kind: str | None = None, note: str = "") -> None:
        if kind is not None:
            self.body.slots.append(Slot(len(self.body.data), len(data), kind, note))
        self.body.data += data

    def _len(self, n: int, flex: bool, wide: bool, note: str) -> None:
        """A length/count: compact uvarint n+1, or int16/int32 (n = -1 for null)."""
        if flex:
            self._put(uvarint(n + 1), "uvarint", note)
        elif wide:
            self._put(struct.pack(">i", n), "count32" if note == "array" else "len32", note)
        else:
            self._put(struct.pack(">h", n), "len16", note)

    def struct(self, schema, depth: int = 0) -> None:
        rng = self.rng
        tagged = []
        for f in schema.fields:
            if not _in(f.versions, self.v):
                continue
            if _in(f.tagged, self.v):
                if rng.random() < 0.3:
                    tagged.append(f)
                continue
            self.field(f, depth)
        if self.flex:
            self._put(uvarint(len(tagged)), "uvarint", "tag count")
            for f in sorted(tagged, key=lambda f: int(f.tag)):
                sub = Walker(rng, self.v, self.flex)
                sub.field(f, depth)
                self._put(uvarint(int(f.tag)), "uvarint", "tag")
                self._put(uvarint(len(sub.body.data)), "uvarint", "tag size")
                base = len(self.body.data)
                self.body.data += sub.body.data
                self.body.slots += [Slot(s.offset + base, s.size, s.kind, s.note)
                                    for s in sub.body.slots]

    def field(self, f, depth: int) -> None:
        rng = self.rng
        flex = self.flex if f.flexible is None else _in(f.flexible, self.v)
        nullable = _in(f.nullable, self.v)
        if f.is_array:
            if nullable and rng.random() < 0.1:
                self._len(-1, flex, True, "array")
                return
            n = rng.choice((0, 1, 1, 2)) if depth < 3 else 0
            self._len(n, flex, True, "array")
            for _ in range(n):
                self.value(f, f.elem, flex, depth + 1, nullable=False)
            return
        self.value(f, f.elem, flex, depth, nullable)

    def value(self, f, t: str, flex: bool, depth: int, nullable: bool) -> None:
        rng = self.rng
        if f.struct is not None:
            if nullable and not f.is_array:
                if rng.random() < 0.2:
                    self._put(struct.pack(">b", -1), "int8", "null struct")
                    return
                self._put(struct.pack(">b", 1), "int8", "struct present")
            inner = Walker(rng, self.v, flex)
            inner.struct(f.struct, depth + 1)
            base = len(self.body.data)
            self.body.data += inner.body.data
            self.body.slots += [Slot(s.offset + base, s.size, s.kind, s.note)
                                for s in inner.body.slots]
            return
        if t in FIXED:
            if t == "float64":
                self._put(struct.pack(">d", rng.random()))
                return
            edges = INT_EDGES[t]
            v = rng.choice((0, 1, 2, -1, rng.randrange(100))) if t not in ("uint16", "uint32") \
                else rng.randrange(100)
            if f.name in QUICK_VALUES:
                v = rng.choice(QUICK_VALUES[f.name])
            if t == "int8":
                v = max(-128, min(127, v))
            if rng.random() < 0.05:
                v = rng.choice(edges)
            self._put(struct.pack(FIXED[t], v), t, f.name)
            return
        if t == "bool":
            self._put(bytes([rng.random() < 0.5]), "int8", f.name)
            return
        if t == "uuid":
            self._put(rng.randbytes(16) if rng.random() < 0.5 else bytes(16))
            return
        if t == "string":
            if nullable and rng.random() < 0.1:
                self._len(-1, flex, False, "string")
                return
            s = rng.choice(NAME_POOL).encode() if rng.random() < 0.8 else \
                rng.randbytes(rng.randint(0, 8)).hex().encode()
            self._len(len(s), flex, False, "string")
            self._put(s)
            return
        if t in ("bytes", "records"):
            if nullable and rng.random() < 0.1:
                self._len(-1, flex, True, t)
                return
            data = record_batch(rng) if t == "records" else rng.randbytes(rng.randint(0, 24))
            self._len(len(data), flex, True, t)
            if t == "records":
                self.body.slots.append(Slot(len(self.body.data), len(data), "records"))
            self._put(data)
            return
        raise ValueError(f"unknown type {t}")


def request_header(api_key: int, version: int, correlation_id: int,
                   client_id: bytes = b"fuzzer") -> bytes:
    hv = request_header_version(api_key, version)
    out = struct.pack(">hhi", api_key, version, correlation_id)
    if hv >= 1:
        out += struct.pack(">h", len(client_id)) + client_id
    if hv >= 2:
        out += b"\x00"  # no tagged fields
    return out


def valid_body(rng: random.Random, api_key: int, version: int) -> Body:
    spec = API_KEYS[api_key]
    cls = spec.request_cls
    flexible = spec.flexible_min_version is not None and version >= spec.flexible_min_version
    w = Walker(rng, version, flexible)
    w.struct(cls._schema)
    return w.body


# ---- mutations -----------------------------------------------------------------------------
def _mutate_slot(rng: random.Random, data: bytearray, slot: Slot) -> bytearray:
    k = slot.kind
    o = slot.offset
    if k in FIXED and k != "float64":
        struct.pack_into(FIXED[k], data, o, rng.choice(INT_EDGES[k]))
        return data
    if k == "len16":
        struct.pack_into(">h", data, o, rng.choice((-2, -1, 32767, 1, 0, 300)))
        return data
    if k in ("len32", "count32"):
        cur = struct.unpack_from(">i", data, o)[0]
        struct.pack_into(">i", data, o, rng.choice(
            (-2, 2**31 - 1, 1 << 24, cur + 1, cur + rng.randint(2, 1000), max(cur - 1, -5))))
        return data
    if k == "uvarint":
        choice = rng.random()
        if choice < 0.3:  # overlong: same value with continuation bytes
            v = data[o] & 0x7F
            repl = bytes([v | 0x80] + [0x80] * rng.randint(1, 9) + [0])
        elif choice < 0.5:  # never-ending varint
            repl = bytes([0xFF] * rng.randint(5, 12))
        else:
            repl = uvarint(rng.choice((0, 2**31, 2**32 - 1, 2**63, 1 << 20, 5000,
                                       rng.randrange(1, 64))))
        return data[:o] + repl + data[o + slot.size:]
    if k == "records":
        return data[:o] + _mutate_batch(rng, bytearray(data[o:o + slot.size])) + \
            data[o + slot.size:]
    return data


def _mutate_batch(rng: random.Random, batch: bytearray) -> bytearray:
    """Damage a v2 record batch in one of the ways a broken client could."""
    choice = rng.randrange(8)
    if len(batch) < 61:
        return batch
    if choice == 0:  # batchLength
        struct.pack_into(">i", batch, 8, rng.choice((-1, 0, 2**31 - 1, len(batch),
                                                     len(batch) - 20)))
    elif choice == 1:  # records count
        struct.pack_into(">i", batch, 57, rng.choice((-1, 0, 2**31 - 1, 1000)))
    elif choice == 2:  # CRC
        struct.pack_into(">I", batch, 17, rng.randrange(2**32))
    elif choice == 3:  # compression codec over garbage, CRC fixed so only the payload is bad
        attrs = struct.unpack_from(">h", batch, 21)[0]
        struct.pack_into(">h", batch, 21, (attrs & ~7) | rng.randint(1, 7))
        batch[61:] = rng.randbytes(max(1, len(batch) - 61))
        _fix_crc(batch)
    elif choice == 4:  # valid compressed data of something that is not records
        attrs = struct.unpack_from(">h", batch, 21)[0]
        codec = rng.randint(1, 4)
        struct.pack_into(">h", batch, 21, (attrs & ~7) | codec)
        payload = compress(codec, rng.choice((b"\xff" * 200, bytes(5000),
                                              rng.randbytes(100))))
        batch[61:] = payload
        struct.pack_into(">i", batch, 8, len(batch) - 12)
        _fix_crc(batch)
    elif choice == 5:  # magic
        batch[16] = rng.choice((0, 1, 3, 255))
    elif choice == 6:  # a record's varints (first record starts at 61 when uncompressed)
        i = 61 + rng.randrange(max(1, len(batch) - 61))
        batch[i] = rng.choice((0xFF, 0x80, 0x7F, 0x00))
        _fix_crc(batch)
    else:  # truncated batch
        del batch[rng.randint(12, len(batch) - 1):]
    return batch


def _fix_crc(batch: bytearray) -> None:
    from crc32c import crc32c
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


#: mutations that mostly leave a parseable request (the handlers see odd values; about 5% make
#: the broker close the connection) and those that mostly break the request or its frame (the
#: broker closes the connection): a fuzz connection sends many of the first, then one of the
#: second, so that a connection carries many frames
SAFE_MUTATIONS = {"none": 2, "value": 10, "records": 7, "extend": 3}
RISKY_MUTATIONS = {"length": 4, "truncate": 2, "splice": 1, "flip": 2, "header": 1, "random": 1}


BODIES_PER_VERSION = 8


class FrameGenerator:
    """``next()`` -> (frame bytes with size prefix, api_key, mutation name)."""

    def __init__(self, seed: int, supported: list[tuple[int, int]] | None = None,
                 other_share: float = 0.1,
                 bodies: dict[tuple[int, int], list[Body]] | None = None) -> None:
        """``supported``: the (key, version) pairs the broker advertises; they get most
        frames (an unsupported key or version only makes the broker close the connection),
        every other pair of ``protocol.api.API_KEYS`` gets ``other_share`` of them."""
        self.rng = random.Random(seed)
        self.all_keys = [(k, v) for k, spec in sorted(API_KEYS.items())
                         for v in range(spec.min_version, spec.max_version + 1)]
        self.keys = [kv for kv in (supported or self.all_keys) if kv[0] in API_KEYS and
                     API_KEYS[kv[0]].min_version <= kv[1] <= API_KEYS[kv[0]].max_version]
        self.other_share = other_share if supported else 0.0
        self.correlation_id = 0
        #: valid bodies by (key, version); generators of one run may share it
        self._bodies: dict[tuple[int, int], list[Body]] = {} if bodies is None else bodies

    def _body(self, api_key: int, version: int) -> Body:
        """A valid body: a fresh one for the first ``BODIES_PER_VERSION`` draws of a version,
        then one of those again (the mutations differ; generating is the slow part)."""
        cached = self._bodies.setdefault((api_key, version), [])
        if len(cached) < BODIES_PER_VERSION:
            cached.append(valid_body(self.rng, api_key, version))
            return cached[-1]
        return self.rng.choice(cached)

    def next(self, risky: bool = False) -> tuple[bytes, int, str]:
        """A frame with a safe mutation, or with a risky one (see ``SAFE_MUTATIONS``)."""
        rng = self.rng
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        keys = self.all_keys if rng.random() < self.other_share else self.keys
        api_key, version = rng.choice(keys)
        table = RISKY_MUTATIONS if risky else SAFE_MUTATIONS
        mutation = rng.choices(list(table), list(table.values()))[0]
        if mutation == "random":
            payload = rng.randbytes(rng.randint(8, 300))
            return struct.pack(">i", len(payload)) + payload, -1, mutation
        header = request_header(api_key, version, self.correlation_id)
        if mutation == "header":
            header = bytearray(header)
            what = rng.randrange(3)
            if what == 0:  # a version nobody supports
                struct.pack_into(">h", header, 2, rng.choice((-1, 99, 32767, version + 50)))
            elif what == 1 and len(header) >= 10:  # client id length
                struct.pack_into(">h", header, 8, rng.choice((-2, 32767, 200)))
            else:  # header tagged fields (or an extra byte for v0/v1 headers)
                header += bytes([rng.choice((1, 0x80, 0xFF))]) + rng.randbytes(3)
            header = bytes(header)
        body = self._body(api_key, version)
        data = bytes(body.data)
        slots = body.slots
        if mutation in ("value", "length", "records"):
            wanted = {"value": tuple(INT_EDGES), "length": ("len16", "len32", "count32",
                                                           "uvarint"),
                      "records": ("records",)}[mutation]
            cands = [s for s in slots if s.kind in wanted]
            if cands:
                data = _mutate_slot(rng, bytearray(data), rng.choice(cands))
        elif mutation == "truncate" and data:
            data = data[:rng.randrange(len(data))]
        elif mutation == "extend":
            data = data + rng.randbytes(rng.randint(1, 64))
        elif mutation == "splice" and len(data) > 2:
            i, j = sorted(rng.sample(range(len(data)), 2))
            data = data[:i] + data[j:] + data[i:j]
        elif mutation == "flip" and data:
            data = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        payload = header + bytes(data)
        return struct.pack(">i", len(payload)) + payload, api_key, mutation

    def bad_prefix_frame(self) -> bytes:
        """A size prefix the broker must refuse (it closes the connection)."""
        rng = self.rng
        size = rng.choice((-1, -(2**31), 2**31 - 1, 0, 3, 7))
        tail = rng.randbytes(rng.randint(0, 16))
        return struct.pack(">i", size) + tail
