"""Key/value framing of the coordinator records in `__consumer_offsets` and
`__transaction_state`.

A record key is `int16 key_version | key body`, a value is `int16 value_version | value body`
(a null value is a tombstone). In `__consumer_offsets` the key version names the record type:

    key version  key class                                   value class
    0, 1         OffsetCommitKey                             OffsetCommitValue (v0-4)
    2            GroupMetadataKey                            GroupMetadataValue (v0-4)
    3            ConsumerGroupMetadataKey                    ConsumerGroupMetadataValue
    4            ConsumerGroupPartitionMetadataKey           ConsumerGroupPartitionMetadataValue
    5            ConsumerGroupMemberMetadataKey              ConsumerGroupMemberMetadataValue
    6            ConsumerGroupTargetAssignmentMetadataKey    ...TargetAssignmentMetadataValue
    7            ConsumerGroupTargetAssignmentMemberKey      ...TargetAssignmentMemberValue
    8            ConsumerGroupCurrentMemberAssignmentKey     ...CurrentMemberAssignmentValue
    10-15        ShareGroup{MemberMetadata, Metadata, TargetAssignmentMetadata,
                 TargetAssignmentMember, CurrentMemberAssignment, StatePartitionMetadata}Key

`__transaction_state` keys are TransactionLogKey v0 and values TransactionLogValue v0-1.
The bodies are the generated message classes (protocol.messages); this module only adds and
strips the version prefix. Errors: TruncatedError for < 2 bytes, UnsupportedVersionError
for a version no record type uses.
"""

from __future__ import annotations

from protocol.errors import TruncatedError, UnsupportedVersionError
from protocol.messages import MESSAGES, Message
from protocol.types import INT16

_GROUP_KEYS = (
    "OffsetCommitKey", "GroupMetadataKey", "ConsumerGroupMetadataKey",
    "ConsumerGroupPartitionMetadataKey", "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ShareGroupMemberMetadataKey", "ShareGroupMetadataKey",
    "ShareGroupTargetAssignmentMetadataKey", "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupCurrentMemberAssignmentKey", "ShareGroupStatePartitionMetadataKey",
)

#: __consumer_offsets key version -> key class
GROUP_KEY_BY_VERSION: dict[int, type] = {
    v: MESSAGES[name]
    for name in _GROUP_KEYS
    for v in range(MESSAGES[name].min_version, MESSAGES[name].max_version + 1)
}
TRANSACTION_KEY_VERSION = 0


def value_class(key_cls: type) -> type:
    """The value class paired with a key class (`OffsetCommitKey` -> `OffsetCommitValue`)."""
    return MESSAGES[key_cls.message_name.removesuffix("Key") + "Value"]


def _version(buf, offset: int) -> int:
    if len(buf) - offset < 2:
        raise TruncatedError("coordinator record needs a 2-byte version")
    return INT16.unpack_from(buf, offset)[0]


def encode_key(key: Message, version: int | None = None) -> bytes:
    """int16 version + key body; the version defaults to the key class's newest (e.g. 1 for
    OffsetCommitKey, 2 for GroupMetadataKey)."""
    if version is None:
        version = key.max_version
    return INT16.pack(version) + key.encode(version)


def encode_value(value: Message | None, version: int | None = None) -> bytes | None:
    """int16 version + value body (None stays None: a tombstone)."""
    if value is None:
        return None
    if version is None:
        version = value.max_version
    return INT16.pack(version) + value.encode(version)


def decode_group_key(buf, offset: int = 0) -> tuple[Message, int]:
    """Decode a `__consumer_offsets` key -> (key record, key version)."""
    version = _version(buf, offset)
    cls = GROUP_KEY_BY_VERSION.get(version)
    if cls is None:
        raise UnsupportedVersionError(f"unknown __consumer_offsets key version {version}")
    return cls.decode(buf, version, offset + 2), version


def decode_transaction_key(buf, offset: int = 0) -> Message:
    """Decode a `__transaction_state` key (TransactionLogKey v0)."""
    version = _version(buf, offset)
    cls = MESSAGES["TransactionLogKey"]
    return cls.decode(buf, version, offset + 2)


def decode_value(key_cls: type, buf, offset: int = 0) -> tuple[Message | None, int | None]:
    """Decode the value for a key class -> (value record, value version); (None, None) for a
    tombstone (buf is None)."""
    if buf is None:
        return None, None
    version = _version(buf, offset)
    cls = value_class(key_cls)
    return cls.decode(buf, version, offset + 2), version


__all__ = [
    "GROUP_KEY_BY_VERSION",
    "TRANSACTION_KEY_VERSION",
    "decode_group_key",
    "decode_transaction_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "value_class",
]
