"""ZooKeeper's ``multi`` (OpCode 14) serialized by us, sent over kazoo's connection.

A controller failover writes 100,000 partition states in multis of 1,000. kazoo's own
``Transaction`` builds a namedtuple per operation on the caller's thread and, on its
connection thread, a ``MultiHeader`` namedtuple and a few bytearrays per operation to
serialize it, and another namedtuple per operation to read the answer: about a second of
Python per 100,000 writes, most of it on kazoo's thread, where it holds the GIL against the
event loop. :class:`Multi` is serialized once, directly, when it is built, and reads its
answer in one tight loop.

Wire format (ZooKeeper's ``MultiOperationRecord`` / ``MultiResponse``, big-endian; the same
bytes kazoo's ``Transaction`` writes): per operation a header ``type int32 | done bool |
err int32`` (``done`` false, ``err`` -1) and the operation's record:

- create (1): path string, data buffer, ACL vector (int32 count; per ACL perms int32,
  scheme string, id string), flags int32 (1 ephemeral, 2 sequential);
- delete (2): path string, version int32;
- setData (5): path string, data buffer, version int32;
- check (13): path string, version int32;

then a final header ``-1 | true | -1``. A string / buffer is an int32 length and the bytes
(kazoo writes an empty path as length -1). The answer has per operation a header with the
operation's type and its result (create: the created path string; setData: a ``Stat``;
delete / check: nothing) or type -1 and an ``ErrorResponse`` (int32 code), and the final
header. Results as kazoo's ``Transaction.deserialize`` gives them: the created path, a
``ZnodeStat``, True, or the error's kazoo exception (``RolledBackError`` for the others).
kazoo strips the chroot from created paths itself (it does so for every request of type 14).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.states import ZnodeStat

MULTI = 14
CREATE, DELETE, SET_DATA, CHECK, ERROR = 1, 2, 5, 13, -1
_HEADER = struct.Struct(">i?i")
_INT = struct.Struct(">i")
_STAT = struct.Struct(">qqqqiiiqiiq")
_END = _HEADER.pack(-1, True, -1)
_SET_DATA_HEADER = _HEADER.pack(SET_DATA, False, -1)


def _string(text: str) -> bytes:
    if not text:
        return _INT.pack(-1)
    raw = text.encode()
    return _INT.pack(len(raw)) + raw


def _buffer(data: bytes) -> bytes:
    return _INT.pack(len(data)) + data


def encode_acl(acl: list) -> bytes:
    """An ACL vector (kazoo ``ACL`` objects: ``perms``, ``id.scheme``, ``id.id``)."""
    return _INT.pack(len(acl)) + b"".join(
        _INT.pack(a.perms) + _string(a.id.scheme) + _string(a.id.id) for a in acl)


def encode_create(path: str, data: bytes, acl: bytes, flags: int) -> bytes:
    return b"".join((_HEADER.pack(CREATE, False, -1), _string(path), _buffer(data), acl,
                     _INT.pack(flags)))


def encode_set_data(path: str, data: bytes, version: int) -> bytes:
    raw = path.encode()
    return b"".join((_SET_DATA_HEADER, _INT.pack(len(raw)), raw, _INT.pack(len(data)), data,
                     _INT.pack(version)))


def encode_delete(path: str, version: int) -> bytes:
    return _HEADER.pack(DELETE, False, -1) + _string(path) + _INT.pack(version)


def encode_check(path: str, version: int) -> bytes:
    return _HEADER.pack(CHECK, False, -1) + _string(path) + _INT.pack(version)


class Multi:
    """One multi request from encoded operations (``encode_*``), in order; ``count`` is how
    many. A kazoo request object: ``type``, ``serialize``, ``deserialize``."""

    type = MULTI

    def __init__(self, encoded_ops: list[bytes]) -> None:
        self.count = len(encoded_ops)
        self._body = b"".join(encoded_ops) + _END

    def serialize(self) -> bytes:
        return self._body

    def deserialize(self, buf, offset: int) -> list[Any]:
        results: list[Any] = []
        append = results.append
        header, stat, intp = _HEADER.unpack_from, _STAT.unpack_from, _INT.unpack_from
        make_stat: Callable = ZnodeStat._make
        while True:
            op_type, done, _err = header(buf, offset)
            offset += 9
            if done:
                break
            if op_type == SET_DATA:
                append(make_stat(stat(buf, offset)))
                offset += 68
            elif op_type == CREATE:
                n = intp(buf, offset)[0]
                offset += 4
                if n < 0:
                    append(None)
                else:
                    append(bytes(buf[offset:offset + n]).decode())
                    offset += n
            elif op_type in (DELETE, CHECK):
                append(True)
            elif op_type == ERROR:
                append(EXCEPTIONS[intp(buf, offset)[0]]())
                offset += 4
            else:
                raise ValueError(f"unexpected operation type {op_type} in a multi answer")
        if len(results) != self.count:
            raise ValueError(f"multi answer has {len(results)} results for {self.count} "
                             "operations")
        return results

    def __repr__(self) -> str:
        return f"Multi({self.count} ops)"
