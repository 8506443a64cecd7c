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
    error_listeners)``), made with ``build()`` -> topic message when missing; at most
    `MAX_VARIANTS` kept (the oldest dropped)."""
    raw = memo.get(key)
    if raw is None:
        if len(memo) >= MAX_VARIANTS:
            del memo[next(iter(memo))]
        raw = memo[key] = encode_topic(build(), key[0])
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
