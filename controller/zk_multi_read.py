"""ZooKeeper's multiRead (OpCode 22, ZooKeeper 3.6+) over kazoo's connection.

A controller failover reads every partition's state znode: 100,000 getData requests. kazoo
sends one request per turn of its connection thread and wakes the caller once per answer,
so even pipelined that is a few thousand reads a second in CPython. ``multiRead`` carries
hundreds of reads in one request and one answer, each read answered on its own (a missing
znode fails only its own read, unlike a write ``multi``).

Wire format (ZooKeeper's ``MultiOperationRecord`` / ``MultiResponse``, big-endian): per
operation a header ``type int32 | done bool | err int32`` (``done`` false, ``err`` -1) and
the read's request (``GetDataRequest``/``GetChildrenRequest``: path string, watch bool); a
final header ``-1 | true | -1``. The answer has per operation a header with the operation's
type and then its response (``GetDataResponse``: data buffer + stat; ``GetChildrenResponse``:
string vector), or type -1 with an ``ErrorResponse`` (int32 code), and the same final header.

`MultiRead` is a kazoo request object (``type``, ``serialize``, ``deserialize``), sent with
kazoo's own request queue; a watch asked for is registered in kazoo's watcher tables while
the answer is read (on kazoo's connection thread, as kazoo does for a plain getData).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import (
    int_struct,
    multiheader_struct,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

GET_DATA, GET_CHILDREN, ERROR = 4, 8, -1
MULTI_READ = 22
#: reads per multiRead request (an answer stays well under a megabyte for state znodes)
OPS_PER_REQUEST = 500


class ReadOp(NamedTuple):
    type: int  # GET_DATA or GET_CHILDREN
    path: str  # with the chroot prefixed
    watch: bool = False


class MultiRead:
    """One multiRead request; ``deserialize`` gives per op ``(data, ZnodeStat)``, a list of
    child names, or the op's kazoo exception (NoNodeError, ...)."""

    type = MULTI_READ

    def __init__(self, ops: list[ReadOp], client: Any = None, watcher: Any = None) -> None:
        self.ops = ops
        self.client = client  # the KazooClient whose watcher tables get the watches
        self.watcher = None  # kazoo must not register one for the whole request
        self._op_watcher = watcher

    def serialize(self) -> bytearray:
        b = bytearray()
        for op in self.ops:
            b += multiheader_struct.pack(op.type, False, -1)
            b += write_string(op.path)
            b.append(1 if op.watch else 0)
        b += multiheader_struct.pack(-1, True, -1)
        return b

    def deserialize(self, buf, offset: int) -> list[Any]:
        # on kazoo's thread, holding the GIL against the event loop: kept tight (a failover
        # reads 100,000 states)
        results: list[Any] = []
        append = results.append
        header, intp, stat = multiheader_struct.unpack_from, int_struct.unpack_from, \
            stat_struct.unpack_from
        make_stat = ZnodeStat._make
        for op in self.ops:
            op_type, _done, _err = header(buf, offset)
            offset += 9
            if op_type == GET_DATA:
                n = intp(buf, offset)[0]
                offset += 4
                if n < 0:
                    data = None
                else:
                    data = bytes(buf[offset:offset + n])
                    offset += n
                append((data, make_stat(stat(buf, offset))))
                offset += 68
                if op.watch:
                    self._register_watch(op, self.client and self.client._data_watchers)
            elif op_type == ERROR:
                append(EXCEPTIONS[intp(buf, offset)[0]]())
                offset += 4
            elif op_type == GET_CHILDREN:
                count = intp(buf, offset)[0]
                offset += 4
                kids = []
                for _ in range(max(count, 0)):
                    name, offset = read_string(buf, offset)
                    kids.append(name)
                append(kids)
                if op.watch:
                    self._register_watch(op, self.client and self.client._child_watchers)
            else:
                raise ValueError(f"unexpected operation type {op_type} in a multiRead answer")
        return results

    def _register_watch(self, op: ReadOp, table) -> None:
        if op.watch and self._op_watcher is not None and table is not None \
                and not self.client._stopped.is_set():
            table[op.path].add(self._op_watcher)

    def __repr__(self) -> str:
        return f"MultiRead({len(self.ops)} ops)"
