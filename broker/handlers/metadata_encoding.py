"""Metadata responses from encoded topic entries (issue 22: answering 100,000 partitions).

A Metadata request for every topic of a 100,000-partition cluster used to cost its broker
about a second of CPU (a ``PartitionMetadata`` and a generated ``MetadataResponsePartition``
per partition, then the generated encoder over 4.2 MB), and every client asks again after
a leadership change, exactly when the brokers are busiest. Now a found topic's whole
``MetadataResponseTopic`` entry is encoded once per (version, listener, error rules) and
kept in the MetadataCache's per-topic memo (``MetadataCache.topic_memo``), which drops a
topic's entries when an UpdateMetadata changes the topic and all of them when the live
brokers change. An unchanged topic is then answered by copying its bytes.

:class:`EncodedTopic` stands in a response's ``topics`` list for such an entry; reading one
of its fields decodes the bytes (request log, tests), so the response still reads like the
generated message. :class:`MetadataResponseWithEncodedTopics` writes the entries' bytes
where the generated encoder would write the topics array: the fields before it and after
it (v8-v10 ``cluster_authorized_operations``, v9+ tagged fields) come from the generated
encoder itself, so only the array's count is written here (INT32 before v9, compact
UNSIGNED_VARINT count + 1 from v9). Wire layout: Kafka's ``MetadataResponse.json``.
"""

from __future__ import annotations

import struct

from protocol import api
from protocol.errors import ErrorCode
from protocol.types import encode_unsigned_varint

METADATA = 3
MetadataResponse = api.API_KEYS[METADATA].response_cls
TopicEntry = MetadataResponse.MetadataResponseTopic
FLEXIBLE_FROM = 9  # compact arrays and tagged fields
_INT32 = struct.Struct(">i")
#: variants kept per topic (versions x listeners x error rules in use); a 100,000-partition
#: entry set is ~4 MB per variant
MAX_VARIANTS = 4


def encode_topic(topic, version: int) -> bytes:
    """One ``MetadataResponseTopic`` at ``version``, as the generated encoder writes it."""
    out = bytearray()
    TopicEntry._schema.codec(version)[0](topic, out, None)
    return bytes(out)


#: the first version with every partition field the direct encoder writes (leader epoch
#: from v7, offline replicas from v5); the layout is the same up to v13
DIRECT_FROM = 7
_PARTITION_HEAD = struct.Struct(">hiii")  # error_code, partition_index, leader_id, epoch
#: (flexible, broker ids) -> the encoded int32 array: a cluster has a few hundred lists
_ARRAYS: dict[tuple[bool, tuple[int, ...]], bytes] = {}
_NONE, _LEADER_NOT_AVAILABLE = int(ErrorCode.NONE), int(ErrorCode.LEADER_NOT_AVAILABLE)
_LISTENER_NOT_FOUND = int(ErrorCode.LISTENER_NOT_FOUND)


def _int32_array(ids: tuple[int, ...], flexible: bool) -> bytes:
    key = (flexible, ids)
    got = _ARRAYS.get(key)
    if got is None:
        if len(_ARRAYS) >= 4096:
            _ARRAYS.clear()
        n = len(ids)
        got = _ARRAYS[key] = (encode_unsigned_varint(n + 1) if flexible else _INT32.pack(n)) \
            + struct.pack(f">{n}i", *ids)
    return got


def encode_topic_direct(head, states, reachable: set[int], alive, version: int,
                        error_listeners: bool) -> bytes:
    """A found topic's ``MetadataResponseTopic`` at ``version`` (>= `DIRECT_FROM`) written
    straight from the MetadataCache's ``PartitionState`` tuples (``states``, by partition
    index), the same bytes as the generated encoder gives for ``MetadataCache
    .get_topic_metadata`` without endpoint errors (every version from 1 on): a leader
    without an endpoint on the listener is LEADER_NOT_AVAILABLE (5) with leader id -1, or
    LISTENER_NOT_FOUND (72) from v6 (``error_listeners``) when it is alive (``alive``:
    ``in`` for broker ids). ``head`` is the topic entry with its fields and no partitions:
    its encoding is split around the partitions array's count. Per partition: INT16 error,
    INT32 index, INT32 leader, INT32 leader epoch, then replicas, ISR and offline replicas as
    INT32 arrays (compact from v9, with an empty tagged-field section after). About 1 us a
    partition against 4.4 us through the generated messages: after an UpdateMetadata of
    100,000 partitions every Metadata answer encodes them again."""
    flexible = version >= FLEXIBLE_FROM
    empty = encode_topic(head, version)
    tail_len = (4 if version >= 8 else 0) + (1 if flexible else 0)  # authorized ops, tags
    width = 1 if flexible else 4
    at = len(empty) - tail_len - width
    out = [empty[:at], encode_unsigned_varint(len(states) + 1) if flexible
           else _INT32.pack(len(states))]
    append, pack, array = out.append, _PARTITION_HEAD.pack, _int32_array
    for s in states:
        leader = s.leader
        if leader in reachable:
            append(pack(_NONE, s.partition, leader, s.leader_epoch))
        else:
            code = _LISTENER_NOT_FOUND if error_listeners and leader in alive \
                else _LEADER_NOT_AVAILABLE
            append(pack(code, s.partition, -1, s.leader_epoch))
        append(array(s.replicas, flexible))
        append(array(s.isr, flexible))
        append(array(s.offline_replicas, flexible))
        if flexible:
            append(b"\x00")
    out.append(empty[at + width:])
    return b"".join(out)


class EncodedTopic:
    """A topic entry kept as its encoding at ``version``; its fields decode on first read."""

    __slots__ = ("raw", "version", "_decoded")
    _schema = TopicEntry._schema

    def __init__(self, raw: bytes, version: int) -> None:
        self.raw = raw
        self.version = version
        self._decoded = None

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        decoded = self._decoded
        if decoded is None:
            decoded = self._decoded = TopicEntry._schema.codec(self.version)[1](
                memoryview(self.raw), 0)[0]
        return getattr(decoded, name)


def cached_entry(memo: dict, key: tuple, build) -> EncodedTopic:
    """The memo's entry for ``key`` (``(version, listener, error_endpoints,
    error_listeners)``), made with ``build()`` -> the entry's encoding when missing; at
    most `MAX_VARIANTS` kept (the oldest dropped)."""
    raw = memo.get(key)
    if raw is None:
        if len(memo) >= MAX_VARIANTS:
            del memo[next(iter(memo))]
        raw = memo[key] = build()
    return EncodedTopic(raw, key[0])


class MetadataResponseWithEncodedTopics(MetadataResponse):
    """A MetadataResponse whose ``topics`` may hold :class:`EncodedTopic` entries."""

    def encode_parts(self, version: int) -> list:
        self._check(version)
        topics = self.topics
        try:
            head, tail = self._around_topics(version)
        finally:
            self.topics = topics
        flexible = version >= FLEXIBLE_FROM
        out = bytearray(head)
        n = len(topics)
        out += encode_unsigned_varint(n + 1) if flexible else _INT32.pack(n)
        enc = TopicEntry._schema.codec(version)[0]
        for t in topics:
            if type(t) is EncodedTopic:
                out += t.raw
            else:
                enc(t, out, None)
        out += tail
        return [bytes(out)]

    def _around_topics(self, version: int) -> tuple[bytes, bytes]:
        """(the encoding before the topics array, the encoding after it), found by the
        generated encoder itself: the response encoded with no topic and with one small
        topic differ first in the array's count, and the topic's bytes follow the count."""
        enc = self._schema.codec(version)[0]
        self.topics = []
        none = bytearray()
        enc(self, none, None)
        probe = TopicEntry(error_code=3, name="x")
        self.topics = [probe]
        one = bytearray()
        enc(self, one, None)
        flexible = version >= FLEXIBLE_FROM
        first = next(i for i in range(len(none)) if none[i] != one[i])
        at = first if flexible else first - 3  # the INT32 count's last byte differs
        width = 1 if flexible else 4
        tail = bytes(none[at + width:])
        if one != none[:at] + (b"\x02" if flexible else _INT32.pack(1)) + \
                encode_topic(probe, version) + tail:
            raise AssertionError(f"MetadataResponse v{version}: unexpected layout")
        return bytes(none[:at]), tail
