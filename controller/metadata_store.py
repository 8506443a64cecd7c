"""The embedded single-node metadata store: a ZooKeeper-shaped tree in one JSON file.

Used when ``zookeeper.connect`` is not set. It holds the same documents, under the same
paths, as Kafka keeps in ZooKeeper (see :mod:`controller.zk_data`): cluster id, controller
epoch, topics with topic IDs and replica assignments, partition states, topic configs. Only
the controller (:mod:`controller.embedded`) may use it; nothing in ``broker/`` touches it.

Model (a subset of ZooKeeper's): every znode has ``data`` (UTF-8 bytes or ``None``) and a
stat (``version``: +1 per set, 0 at create; ``czxid``/``mzxid``: the store transaction that
created / last modified it; ``cversion``: +1 per child created, used for sequential names).
Parents must exist unless ``make_parents`` is set. :meth:`EmbeddedMetadataStore.multi`
applies a list of operations atomically (ZooKeeper's ``multi``): all succeed and are
persisted, or none is applied and the first failure is raised.

On disk: ``<dir>/josef-metadata.json``::

  {"format":"josef-metadata","version":1,"zxid":<last transaction id>,
   "znodes":{"<path>":{"data":"<utf-8 text>"|null,"version":v,"czxid":c,"mzxid":m,
                       "cversion":k}, ...}}

Every transaction rewrites the file atomically: write ``josef-metadata.json.tmp``, fsync,
rename over the old file, fsync the directory (in an executor, never on the event loop).
A crash leaves either the old or the new file; a leftover ``.tmp`` is ignored. A file that
is not valid JSON of that shape stops startup with :class:`MetadataStoreCorruptError`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from controller.zk_data import ZkVersion

FILE_NAME = "josef-metadata.json"
FORMAT_NAME = "josef-metadata"
FORMAT_VERSION = 1


class MetadataStoreError(Exception):
    """Base class of the store's typed errors; ``.path`` names the znode."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class NoNodeError(MetadataStoreError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "no such znode")


class NodeExistsError(MetadataStoreError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "znode already exists")


class BadVersionError(MetadataStoreError):
    def __init__(self, path: str, expected: int, actual: int) -> None:
        super().__init__(path, f"expected version {expected}, znode has {actual}")


class NotEmptyError(MetadataStoreError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "znode has children")


class MetadataStoreCorruptError(MetadataStoreError):
    """The store file cannot be read; startup must stop and name the file."""


@dataclass(frozen=True)
class ZNodeStat:
    version: int
    czxid: int
    mzxid: int
    cversion: int


@dataclass(frozen=True)
class _Node:
    data: bytes | None
    stat: ZNodeStat


# ------------------------------------------------------------------ operations for multi()


@dataclass(frozen=True)
class Create:
    """Create ``path``; ``sequential`` appends a 10-digit counter from the parent's cversion."""

    path: str
    data: bytes | None = None
    make_parents: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes | None
    expected_version: int = ZkVersion.MATCH_ANY


@dataclass(frozen=True)
class Delete:
    """Delete ``path``; ``recursive`` deletes its subtree too. ``must_exist=False`` makes a
    missing znode a no-op."""

    path: str
    expected_version: int = ZkVersion.MATCH_ANY
    recursive: bool = False
    must_exist: bool = True


@dataclass(frozen=True)
class Check:
    path: str
    expected_version: int


Op = Create | SetData | Delete | Check


def validate_path(path: str) -> str:
    """ZooKeeper path rules: absolute, no trailing '/', no empty, '.' or '..' components."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"znode path must start with '/': {path!r}")
    if path == "/":
        return path
    parts = path[1:].split("/")
    if any(p in ("", ".", "..") for p in parts) or "\x00" in path:
        raise ValueError(f"invalid znode path: {path!r}")
    return path


def _parent(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _check_data(path: str, data: bytes | None) -> bytes | None:
    if data is None:
        return None
    data = bytes(data)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: the embedded store holds UTF-8 documents only") from None
    return data


class _Transaction:
    """Overlay of pending changes over the committed tree (used by one ``multi``)."""

    def __init__(self, nodes: dict[str, _Node], children: dict[str, set[str]], zxid: int):
        self.base_nodes = nodes
        self.base_children = children
        self.nodes: dict[str, _Node | None] = {}
        self.children: dict[str, set[str]] = {}
        self.zxid = zxid

    def get(self, path: str) -> _Node | None:
        if path in self.nodes:
            return self.nodes[path]
        return self.base_nodes.get(path)

    def kids(self, path: str) -> set[str]:
        if path not in self.children:
            self.children[path] = set(self.base_children.get(path, ()))
        return self.children[path]

    def create(self, op: Create) -> str:
        path = op.path
        validate_path(path + "0" if op.sequential else path)
        if path == "/":
            raise NodeExistsError(path)
        parent = _parent(path)
        if op.make_parents and parent != "/" and self.get(parent) is None:
            self.create(Create(parent, None, make_parents=True))
        parent_node = self.get(parent)
        if parent_node is None:
            raise NoNodeError(parent)
        if op.sequential:
            path = f"{path}{parent_node.stat.cversion:010d}"
        validate_path(path)
        if self.get(path) is not None:
            raise NodeExistsError(path)
        data = _check_data(path, op.data)
        self.nodes[path] = _Node(data, ZNodeStat(0, self.zxid, self.zxid, 0))
        self.nodes[parent] = replace(
            parent_node, stat=replace(parent_node.stat, cversion=parent_node.stat.cversion + 1)
        )
        self.kids(parent).add(path.rsplit("/", 1)[1])
        return path

    def set_data(self, op: SetData) -> ZNodeStat:
        path = validate_path(op.path)
        node = self.get(path)
        if node is None:
            raise NoNodeError(path)
        if op.expected_version != ZkVersion.MATCH_ANY and op.expected_version != node.stat.version:
            raise BadVersionError(path, op.expected_version, node.stat.version)
        stat = replace(node.stat, version=node.stat.version + 1, mzxid=self.zxid)
        self.nodes[path] = _Node(_check_data(path, op.data), stat)
        return stat

    def delete(self, op: Delete) -> None:
        path = validate_path(op.path)
        if path == "/":
            raise ValueError("cannot delete the root znode")
        node = self.get(path)
        if node is None:
            if op.must_exist:
                raise NoNodeError(path)
            return
        if op.expected_version != ZkVersion.MATCH_ANY and op.expected_version != node.stat.version:
            raise BadVersionError(path, op.expected_version, node.stat.version)
        kids = self.kids(path)
        if kids:
            if not op.recursive:
                raise NotEmptyError(path)
            for kid in sorted(kids):
                self.delete(Delete(f"{path}/{kid}", recursive=True))
        self.nodes[path] = None
        self.children[path] = set()
        self.kids(_parent(path)).discard(path.rsplit("/", 1)[1])

    def check(self, op: Check) -> None:
        node = self.get(validate_path(op.path))
        if node is None:
            raise NoNodeError(op.path)
        if op.expected_version != node.stat.version:
            raise BadVersionError(op.path, op.expected_version, node.stat.version)


class EmbeddedMetadataStore:
    """ZooKeeper-like tree persisted to ``<directory>/josef-metadata.json``.

    Call ``await open()`` once before use. Reads are synchronous and in-memory; writes go
    through :meth:`multi` (or the one-op helpers) and return after the file is durable.
    Single-process, single-writer: all writes are serialised by an ``asyncio.Lock``.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.file_path = os.path.join(directory, FILE_NAME)
        self._nodes: dict[str, _Node] = {"/": _Node(None, ZNodeStat(0, 0, 0, 0))}
        self._children: dict[str, set[str]] = {}
        self._zxid = 0
        self._lock = asyncio.Lock()
        self._opened = False

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Load the file if it exists (in an executor). Raises MetadataStoreCorruptError."""
        loop = asyncio.get_running_loop()
        doc = await loop.run_in_executor(None, self._read_file)
        if doc is not None:
            self._load(doc)
        self._opened = True

    def _read_file(self) -> dict[str, Any] | None:
        os.makedirs(self.directory, exist_ok=True)
        try:
            with open(self.file_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise MetadataStoreCorruptError(self.file_path, f"not valid JSON: {exc}") from exc
        return doc

    def _load(self, doc: Any) -> None:
        bad = MetadataStoreCorruptError
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise bad(self.file_path, f"not a {FORMAT_NAME} file")
        if doc.get("version") != FORMAT_VERSION:
            raise bad(self.file_path, f"unsupported format version {doc.get('version')!r}")
        znodes = doc.get("znodes")
        zxid = doc.get("zxid")
        if not isinstance(znodes, dict) or not isinstance(zxid, int):
            raise bad(self.file_path, "missing 'znodes' or 'zxid'")
        nodes: dict[str, _Node] = {"/": _Node(None, ZNodeStat(0, 0, 0, 0))}
        try:
            for path, rec in znodes.items():
                validate_path(path)
                data = rec["data"]
                if data is not None and not isinstance(data, str):
                    raise TypeError("data is not text")
                stat = ZNodeStat(
                    int(rec["version"]), int(rec["czxid"]), int(rec["mzxid"]), int(rec["cversion"])
                )
                nodes[path] = _Node(None if data is None else data.encode("utf-8"), stat)
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(self.file_path, f"bad znode record: {exc}") from exc
        children: dict[str, set[str]] = {}
        for path in nodes:
            if path == "/":
                continue
            parent = _parent(path)
            if parent not in nodes:
                raise bad(self.file_path, f"znode {path} has no parent")
            children.setdefault(parent, set()).add(path.rsplit("/", 1)[1])
        self._nodes, self._children, self._zxid = nodes, children, zxid

    # ------------------------------------------------------------------ reads

    @property
    def zxid(self) -> int:
        """The id of the last committed transaction (0 for an empty store)."""
        return self._zxid

    def exists(self, path: str) -> ZNodeStat | None:
        node = self._nodes.get(validate_path(path))
        return None if node is None else node.stat

    def get(self, path: str) -> tuple[bytes | None, ZNodeStat]:
        """Data and stat of ``path``; raises NoNodeError."""
        node = self._nodes.get(validate_path(path))
        if node is None:
            raise NoNodeError(path)
        return node.data, node.stat

    def get_data(self, path: str) -> bytes | None:
        """Data of ``path``, or None if it does not exist or has no data."""
        node = self._nodes.get(validate_path(path))
        return None if node is None else node.data

    def get_children(self, path: str) -> list[str]:
        """Sorted child names of ``path``; raises NoNodeError."""
        if validate_path(path) not in self._nodes:
            raise NoNodeError(path)
        return sorted(self._children.get(path, ()))

    # ------------------------------------------------------------------ writes

    async def multi(self, ops: Iterable[Op]) -> list[Any]:
        """Apply ``ops`` atomically and durably. Returns one result per op: the created path
        for Create, the new stat for SetData, None otherwise. Raises the first op's error
        (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, ValueError) with
        nothing applied, or OSError if the file cannot be written (nothing applied)."""
        ops = list(ops)
        async with self._lock:
            tx = _Transaction(self._nodes, self._children, self._zxid + 1)
            results: list[Any] = []
            for op in ops:
                if isinstance(op, Create):
                    results.append(tx.create(op))
                elif isinstance(op, SetData):
                    results.append(tx.set_data(op))
                elif isinstance(op, Delete):
                    results.append(tx.delete(op))
                elif isinstance(op, Check):
                    results.append(tx.check(op))
                else:
                    raise TypeError(f"not a store operation: {op!r}")
            nodes = dict(self._nodes)
            for path, node in tx.nodes.items():
                if node is None:
                    nodes.pop(path, None)
                else:
                    nodes[path] = node
            snapshot = self._snapshot(nodes, tx.zxid)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._write_file, snapshot)
            children = dict(self._children)
            for path, kids in tx.children.items():
                if kids:
                    children[path] = kids
                else:
                    children.pop(path, None)
            self._nodes, self._children, self._zxid = nodes, children, tx.zxid
            return results

    async def create(self, path: str, data: bytes | None = None, *, make_parents: bool = False,
                     sequential: bool = False) -> str:
        return (await self.multi([Create(path, data, make_parents, sequential)]))[0]

    async def set_data(self, path: str, data: bytes | None,
                       expected_version: int = ZkVersion.MATCH_ANY) -> ZNodeStat:
        return (await self.multi([SetData(path, data, expected_version)]))[0]

    async def delete(self, path: str, *, recursive: bool = False,
                     expected_version: int = ZkVersion.MATCH_ANY) -> None:
        await self.multi([Delete(path, expected_version, recursive)])

    # ------------------------------------------------------------------ persistence

    @staticmethod
    def _snapshot(nodes: dict[str, _Node], zxid: int) -> dict[str, Any]:
        znodes = {}
        for path in sorted(nodes):
            if path == "/":
                continue
            node = nodes[path]
            znodes[path] = {
                "data": None if node.data is None else node.data.decode("utf-8"),
                "version": node.stat.version,
                "czxid": node.stat.czxid,
                "mzxid": node.stat.mzxid,
                "cversion": node.stat.cversion,
            }
        return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "zxid": zxid, "znodes": znodes}

    def _write_file(self, snapshot: dict[str, Any]) -> None:
        payload = json.dumps(snapshot, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        tmp = self.file_path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.file_path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
