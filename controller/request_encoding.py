"""LeaderAndIsr v7 and UpdateMetadata v8 requests whose partition states are encoded
directly from the controller's state tuples (issue 22: a failover at 100,000 partitions).

Building a generated ``LeaderAndIsrPartitionState`` / ``UpdateMetadataPartitionState``
object costs about 7 us and encoding it about 7 us; a failover of 100,000 partitions at RF 3
sends 100,000 partition states to every live broker. Here each partition state is encoded
once, from ``(partition, LeaderIsrAndControllerEpoch, ReplicaAssignment, is_new)``, its
replica lists taken from a small cache of encoded arrays (a cluster has a few hundred
distinct replica lists), and the bytes are shared by every broker that gets the same state.

The generated codec (:mod:`protocol.messages`) stays the source of truth:

- the layouts below are checked against it at import on probe values (``RuntimeError`` if
  the generated encoding of these versions ever differs: nothing is sent wrong silently);
- :class:`LeaderAndIsrBatch` / :class:`UpdateMetadataBatch` are the generated request
  classes; the header and the other arrays are encoded by the generated codec, only the
  ``topic_states`` array is spliced in; any other version goes through the generated codec;
- reading ``topic_states`` builds the generated objects (tests, logging) and from then on
  the request is encoded by the generated codec only;
- ``tests/unit/controller/test_request_encoding.py`` compares both byte for byte.

Layouts (flexible versions, KIP-482; compact arrays are uvarint(n + 1) then the items):

- LeaderAndIsrPartitionState v7: PartitionIndex, ControllerEpoch, Leader, LeaderEpoch
  (int32 each), Isr ([]int32), PartitionEpoch int32, Replicas, AddingReplicas,
  RemovingReplicas ([]int32), IsNew bool, LeaderRecoveryState int8, tagged fields (0).
- UpdateMetadataPartitionState v8: PartitionIndex, ControllerEpoch, Leader, LeaderEpoch
  (int32 each), Isr, ZkVersion int32, Replicas, OfflineReplicas, tagged fields (0).
- a topic state (both): TopicName compact string, TopicId uuid, PartitionStates, tagged
  fields (0).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from typing import Any

from controller.zk_data import LeaderIsrAndControllerEpoch, ReplicaAssignment
from protocol.messages import LeaderAndIsrRequest, UpdateMetadataRequest
from protocol.types import encode_unsigned_varint

__all__ = ["LEADER_AND_ISR_VERSION", "UPDATE_METADATA_VERSION", "LeaderAndIsrBatch",
           "UpdateMetadataBatch", "lai_partition_state", "um_partition_state"]

LEADER_AND_ISR_VERSION, UPDATE_METADATA_VERSION = 7, 8
_HEAD = struct.Struct(">iiii")
_I32 = struct.Struct(">i")
_CACHE_SIZE = 4096

_LaiTopic = LeaderAndIsrRequest.LeaderAndIsrTopicState
_LaiState = LeaderAndIsrRequest.LeaderAndIsrPartitionState
_UmTopic = UpdateMetadataRequest.UpdateMetadataTopicState
_UmState = UpdateMetadataRequest.UpdateMetadataPartitionState

_arrays: dict[tuple, bytes] = {}
_lai_tails: dict[tuple, bytes] = {}
_um_tails: dict[tuple, bytes] = {}


def _array(ids: Sequence[int]) -> bytes:
    """A compact int32 array; cached per distinct tuple."""
    key = tuple(ids)
    got = _arrays.get(key)
    if got is None:
        if len(_arrays) >= _CACHE_SIZE:
            _arrays.clear()
        got = _arrays[key] = encode_unsigned_varint(len(key) + 1) + struct.pack(
            f">{len(key)}i", *key)
    return got


def lai_partition_state(partition: int, state: LeaderIsrAndControllerEpoch,
                        assignment: ReplicaAssignment, is_new: bool) -> bytes:
    """One LeaderAndIsrPartitionState at v7 (the generated encoder's bytes)."""
    key = (assignment, is_new, state.leader_recovery_state)
    tail = _lai_tails.get(key)
    if tail is None:
        if len(_lai_tails) >= _CACHE_SIZE:
            _lai_tails.clear()
        tail = _lai_tails[key] = b"".join((
            _array(assignment.replicas), _array(assignment.adding_replicas),
            _array(assignment.removing_replicas),
            struct.pack(">?b", is_new, state.leader_recovery_state), b"\x00"))
    isr = _arrays.get(state.isr) or _array(state.isr)
    return b"".join((_HEAD.pack(partition, state.controller_epoch, state.leader,
                                state.leader_epoch), isr, _I32.pack(state.partition_epoch), tail))


def um_partition_state(partition: int, controller_epoch: int, leader: int, leader_epoch: int,
                       isr: tuple[int, ...], zk_version: int, replicas: tuple[int, ...],
                       offline: tuple[int, ...]) -> bytes:
    """One UpdateMetadataPartitionState at v8 (the generated encoder's bytes)."""
    key = (replicas, offline)
    tail = _um_tails.get(key)
    if tail is None:
        if len(_um_tails) >= _CACHE_SIZE:
            _um_tails.clear()
        tail = _um_tails[key] = _array(replicas) + _array(offline) + b"\x00"
    return b"".join((_HEAD.pack(partition, controller_epoch, leader, leader_epoch),
                     _arrays.get(isr) or _array(isr), _I32.pack(zk_version), tail))


def _topic_states(topics: list[tuple[str, uuid.UUID, list, list[bytes]]]) -> bytes:
    """The compact ``topic_states`` array from per topic (name, id, partitions, encoded
    partition states)."""
    out = [encode_unsigned_varint(len(topics) + 1)]
    for name, topic_id, _parts, encoded in topics:
        raw = name.encode()
        out.append(encode_unsigned_varint(len(raw) + 1))
        out.append(raw)
        out.append(topic_id.bytes)
        out.append(encode_unsigned_varint(len(encoded) + 1))
        out.extend(encoded)
        out.append(b"\x00")
    return b"".join(out)


def _splice_offset(cls, version: int, topic: Any) -> int:
    """Where the ``topic_states`` array starts in a body of ``cls`` at ``version``: the
    first byte that differs between a body without topics and one with ``topic``."""
    a = cls(topic_states=[]).encode(version)
    b = cls(topic_states=[topic]).encode(version)
    at = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    if a[at] != 1 or a[at + 1:] != b[len(b) - (len(a) - at - 1):]:
        raise RuntimeError(f"{cls.__name__} v{version} layout changed: topic_states not found")
    return at


class _Batch:
    """Mixin of the two request classes: ``_topics`` holds per topic ``(name, topic_id,
    partitions, encoded partition states)``; None once ``topic_states`` was read or set
    (then the generated codec encodes the request)."""

    __slots__ = ()
    _VERSION: int
    _AT: int

    def _materialize(self) -> list:
        raise NotImplementedError

    def _get_topic_states(self):
        if self._topics is not None:
            self._base.topic_states.__set__(self, self._materialize())
            self._topics = None
        return self._base.topic_states.__get__(self)

    def _set_topic_states(self, value) -> None:
        self._topics = None
        self._base.topic_states.__set__(self, value)

    def _head(self):
        """The same request of the generated class without topic states."""
        return self._base(**{f.attr: getattr(self, f.attr) for f in self._base._schema.fields
                             if f.attr != "topic_states"},
                          unknown_tagged_fields=self.unknown_tagged_fields)

    def encode(self, version: int) -> bytes:
        if version != self._VERSION or self._topics is None:
            return self._base.encode(self, version)
        body = self._base.encode(self._head(), version)
        if body[self._AT] != 1:  # the empty topic_states array of the header-only body
            raise RuntimeError(f"{type(self).__name__}: unexpected header layout")
        return body[:self._AT] + _topic_states(self._topics) + body[self._AT + 1:]


class LeaderAndIsrBatch(_Batch, LeaderAndIsrRequest):
    """A LeaderAndIsrRequest built from ``topics``: per topic ``(name, topic_id,
    [(partition, LeaderIsrAndControllerEpoch, ReplicaAssignment, is_new)], [encoded
    partition state (lai_partition_state)])``. With ``entries`` (``(topic, partition) ->
    (state, assignment)``) and ``new`` (the partitions sent with is_new), the partition
    lists hold only the partition numbers."""

    __slots__ = ("_topics", "_entries", "_new")
    _base = LeaderAndIsrRequest
    _VERSION = LEADER_AND_ISR_VERSION

    def __init__(self, topics: list, entries: dict | None = None,
                 new: set | tuple = (), **fields) -> None:
        LeaderAndIsrRequest.__init__(self, **fields)
        self._topics = topics
        self._entries = entries
        self._new = new

    topic_states = property(_Batch._get_topic_states, _Batch._set_topic_states)

    def _rows(self, name: str, parts: list) -> list:
        entries, new = self._entries, self._new
        if entries is None:
            return parts
        return [(p, *entries[(name, p)], (name, p) in new) for p in parts]

    def _materialize(self) -> list:
        lists: dict[tuple, list] = {}

        def shared(ids: tuple) -> list:
            got = lists.get(ids)
            if got is None:
                got = lists[ids] = list(ids)
            return got
        return [_LaiTopic(topic_name=name, topic_id=topic_id, partition_states=[_LaiState(
            topic_name=name, partition_index=p, controller_epoch=s.controller_epoch,
            leader=s.leader, leader_epoch=s.leader_epoch, isr=shared(s.isr),
            partition_epoch=s.partition_epoch, replicas=shared(a.replicas),
            adding_replicas=shared(a.adding_replicas),
            removing_replicas=shared(a.removing_replicas), is_new=is_new,
            leader_recovery_state=s.leader_recovery_state)
            for p, s, a, is_new in self._rows(name, parts)])
            for name, topic_id, parts, _encoded in self._topics]


class UpdateMetadataBatch(_Batch, UpdateMetadataRequest):
    """An UpdateMetadataRequest built from ``topics``: per topic ``(name, topic_id,
    [(partition, controller_epoch, leader, leader_epoch, isr, zk_version, replicas,
    offline_replicas)], [encoded partition state (um_partition_state)])``.

    ``shared`` (a dict, the same for every broker's copy) keeps the first v8 encoding; the
    other copies reuse it with their own ``broker_epoch`` (int64 after ControllerId int32,
    isKRaftController bool, ControllerEpoch int32; its offset found at import)."""

    __slots__ = ("_topics", "shared")
    _base = UpdateMetadataRequest
    _VERSION = UPDATE_METADATA_VERSION

    def __init__(self, topics: list, shared: dict | None = None, **fields) -> None:
        UpdateMetadataRequest.__init__(self, **fields)
        self._topics = topics
        self.shared = shared

    topic_states = property(_Batch._get_topic_states, _Batch._set_topic_states)

    def encode(self, version: int) -> bytes:
        shared = self.shared
        if version != UPDATE_METADATA_VERSION or shared is None or self._topics is None:
            return _Batch.encode(self, version)
        body = shared.get(version)
        if body is None:
            body = shared[version] = _Batch.encode(self, version)
        return body[:_EPOCH_AT] + struct.pack(">q", self.broker_epoch) + body[_EPOCH_AT + 8:]

    def _materialize(self) -> list:
        return [_UmTopic(topic_name=name, topic_id=topic_id, partition_states=[_UmState(
            topic_name=name, partition_index=p, controller_epoch=ce, leader=leader,
            leader_epoch=le, isr=list(isr), zk_version=zkv, replicas=list(replicas),
            offline_replicas=list(offline))
            for p, ce, leader, le, isr, zkv, replicas, offline in parts])
            for name, topic_id, parts, _encoded in self._topics]


def _broker_epoch_offset() -> int:
    """Where the int64 broker_epoch sits in an UpdateMetadata v8 body, found by encoding
    two bodies that differ only there."""
    a, b = (UpdateMetadataRequest(controller_id=1, controller_epoch=1, broker_epoch=e)
            .encode(UPDATE_METADATA_VERSION) for e in (0, -1))
    at = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    if a[at:at + 8] != bytes(8) or b[at:at + 8] != b"\xff" * 8 or a[at + 8:] != b[at + 8:]:
        raise RuntimeError("UpdateMetadata v8 layout changed: broker_epoch not found")
    return at


def _self_check() -> None:
    """The direct encoders against the generated ones on probe values (import time)."""
    tid = uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
    state = LeaderIsrAndControllerEpoch(2, 7, (2, 3), 5, 9, 1)
    assignment = ReplicaAssignment((1, 2, 3), (3,), (1,))
    lai = LeaderAndIsrBatch([("probe-é", tid, [(4, state, assignment, True)],
                              [lai_partition_state(4, state, assignment, True)])],
                            controller_id=1, controller_epoch=5, broker_epoch=11)
    um = UpdateMetadataBatch([("probe-é", tid, [(4, 5, 2, 7, (2, 3), 9, (1, 2, 3), (1,))],
                               [um_partition_state(4, 5, 2, 7, (2, 3), 9, (1, 2, 3), (1,))])],
                             controller_id=1, controller_epoch=5, broker_epoch=11)
    for req, base in ((lai, LeaderAndIsrRequest), (um, UpdateMetadataRequest)):
        fast = req.encode(req._VERSION)
        generated = base(**{f.attr: getattr(req, f.attr) for f in base._schema.fields}
                         ).encode(req._VERSION)
        if fast != generated:
            raise RuntimeError(f"{base.__name__} v{req._VERSION}: direct partition-state "
                               "encoding differs from the generated codec")


LeaderAndIsrBatch._AT = _splice_offset(LeaderAndIsrRequest, LEADER_AND_ISR_VERSION,
                                       _LaiTopic(topic_name="t", topic_id=uuid.UUID(int=1)))
UpdateMetadataBatch._AT = _splice_offset(UpdateMetadataRequest, UPDATE_METADATA_VERSION,
                                         _UmTopic(topic_name="t", topic_id=uuid.UUID(int=1)))
_EPOCH_AT = _broker_epoch_offset()
_self_check()
