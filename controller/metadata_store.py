"""The embedded single-node metadata store: a ZooKeeper-shaped tree in one SQLite database.

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

On disk: ``<dir>/josef-metadata.db``, SQLite (the standard library's ``sqlite3``) in WAL mode
with ``synchronous=FULL`` (+ its ``-wal`` and ``-shm`` files)::

  znodes(path TEXT PRIMARY KEY, data BLOB NULL, version, czxid, mzxid, cversion INTEGER)
  meta(key TEXT PRIMARY KEY, value)          -- "format" = "josef-metadata", "version" = 2,
                                             -- "zxid" = the last transaction id

Incremental and crash-safe: a ``multi`` writes only the znodes it changes, in one SQLite
transaction (a crash, SIGKILL included, leaves all of it or none), on the store's own writer
thread, never on the event loop; the in-memory tree that serves reads changes only after the
commit. Startup reads every row once (time proportional to the store's size). A store from
before version 2 (``josef-metadata.json``, rewritten whole on every write) is imported on the
first open and renamed ``josef-metadata.json.migrated``. A database that cannot be read
stops startup with :class:`MetadataStoreCorruptError` naming the file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from controller.zk_data import ZkVersion

FILE_NAME = "josef-metadata.db"
LEGACY_FILE_NAME = "josef-metadata.json"
FORMAT_NAME = "josef-metadata"
FORMAT_VERSION = 2
_ROOT = "/"


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
    """Overlay of pending changes over the committed tree (used by one ``multi``). Child
    sets change as deltas, so a transaction costs what it touches, not the tree's size."""

    def __init__(self, nodes: dict[str, _Node], children: dict[str, set[str]], zxid: int):
        self.base_nodes = nodes
        self.base_children = children
        self.nodes: dict[str, _Node | None] = {}
        self.added: dict[str, set[str]] = {}  # parent -> child names created
        self.removed: dict[str, set[str]] = {}  # parent -> child names deleted
        self.zxid = zxid

    def get(self, path: str) -> _Node | None:
        if path in self.nodes:
            return self.nodes[path]
        return self.base_nodes.get(path)

    def kids(self, path: str) -> set[str]:
        """The child names of ``path`` as of this transaction."""
        out = set(self.base_children.get(path, ()))
        out |= self.added.get(path, set())
        out -= self.removed.get(path, set())
        return out

    def _add_kid(self, parent: str, name: str) -> None:
        self.added.setdefault(parent, set()).add(name)
        self.removed.get(parent, set()).discard(name)

    def _remove_kid(self, parent: str, name: str) -> None:
        self.removed.setdefault(parent, set()).add(name)
        self.added.get(parent, set()).discard(name)

    def create(self, op: Create) -> str:
        path = op.path
        validate_path(path + "0" if op.sequential else path)
        if path == _ROOT:
            raise NodeExistsError(path)
        parent = _parent(path)
        if op.make_parents and parent != _ROOT and self.get(parent) is None:
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
        self._add_kid(parent, path.rsplit("/", 1)[1])
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
        if path == _ROOT:
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
        self._remove_kid(_parent(path), path.rsplit("/", 1)[1])

    def check(self, op: Check) -> None:
        node = self.get(validate_path(op.path))
        if node is None:
            raise NoNodeError(op.path)
        if op.expected_version != node.stat.version:
            raise BadVersionError(op.path, op.expected_version, node.stat.version)


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS znodes (path TEXT PRIMARY KEY, data BLOB, version INTEGER "
    "NOT NULL, czxid INTEGER NOT NULL, mzxid INTEGER NOT NULL, cversion INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
)


class EmbeddedMetadataStore:
    """ZooKeeper-like tree persisted to ``<directory>/josef-metadata.db``.

    Call ``await open()`` once before use (and ``close()`` at the end). Reads are
    synchronous and in-memory; writes go through :meth:`multi` (or the one-op helpers) and
    return after the SQLite transaction is committed (durable: WAL, ``synchronous=FULL``).
    Single-process, single-writer: all writes are serialised by an ``asyncio.Lock`` and run
    on one writer thread that owns the database connection.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.file_path = os.path.join(directory, FILE_NAME)
        self._nodes: dict[str, _Node] = {_ROOT: _Node(None, ZNodeStat(0, 0, 0, 0))}
        self._children: dict[str, set[str]] = {}
        self._zxid = 0
        self._lock = asyncio.Lock()
        self._opened = False
        self._db: sqlite3.Connection | None = None
        self._writer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="metadata-store")

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Open (or create) the database and load the tree, on the writer thread. Raises
        MetadataStoreCorruptError."""
        loop = asyncio.get_running_loop()
        nodes, zxid = await loop.run_in_executor(self._writer, self._open_db)
        self._load(nodes, zxid)
        self._opened = True

    async def close(self) -> None:
        """Close the database (pending writes finish first)."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            await loop.run_in_executor(self._writer, self._close_db)
        self._writer.shutdown(wait=False)

    def _close_db(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _open_db(self) -> tuple[list[tuple], int]:
        os.makedirs(self.directory, exist_ok=True)
        fresh = not os.path.exists(self.file_path)
        try:
            db = sqlite3.connect(self.file_path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            for stmt in _SCHEMA:
                db.execute(stmt)
            meta = dict(db.execute("SELECT key, value FROM meta"))
            if fresh or not meta:
                db.execute("BEGIN IMMEDIATE")
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
                    ("format", FORMAT_NAME), ("version", FORMAT_VERSION), ("zxid", 0)])
                imported = self._import_legacy(db)
                db.execute("COMMIT")
                if imported:
                    os.replace(os.path.join(self.directory, LEGACY_FILE_NAME),
                               os.path.join(self.directory, LEGACY_FILE_NAME + ".migrated"))
                meta = dict(db.execute("SELECT key, value FROM meta"))
            if meta.get("format") != FORMAT_NAME:
                raise MetadataStoreCorruptError(self.file_path, f"not a {FORMAT_NAME} database")
            if meta.get("version") != FORMAT_VERSION:
                raise MetadataStoreCorruptError(
                    self.file_path, f"unsupported format version {meta.get('version')!r}")
            rows = db.execute(
                "SELECT path, data, version, czxid, mzxid, cversion FROM znodes").fetchall()
        except sqlite3.DatabaseError as exc:
            raise MetadataStoreCorruptError(self.file_path, f"cannot be read: {exc}") from exc
        self._db = db
        return rows, int(meta["zxid"])

    def _import_legacy(self, db: sqlite3.Connection) -> bool:
        """Copy a version-1 ``josef-metadata.json`` into ``db`` (inside its transaction)."""
        legacy = os.path.join(self.directory, LEGACY_FILE_NAME)
        try:
            with open(legacy, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return False
        bad = MetadataStoreCorruptError
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad(legacy, f"not valid JSON: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME or doc.get("version") != 1:
            raise bad(legacy, f"not a version 1 {FORMAT_NAME} file")
        znodes, zxid = doc.get("znodes"), doc.get("zxid")
        if not isinstance(znodes, dict) or not isinstance(zxid, int):
            raise bad(legacy, "missing 'znodes' or 'zxid'")
        rows = []
        try:
            for path, rec in znodes.items():
                data = rec["data"]
                if data is not None and not isinstance(data, str):
                    raise TypeError("data is not text")
                rows.append((validate_path(path), None if data is None else data.encode(),
                             int(rec["version"]), int(rec["czxid"]), int(rec["mzxid"]),
                             int(rec["cversion"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(legacy, f"bad znode record: {exc}") from exc
        db.executemany("INSERT OR REPLACE INTO znodes VALUES (?, ?, ?, ?, ?, ?)", rows)
        db.execute("UPDATE meta SET value = ? WHERE key = 'zxid'", (zxid,))
        return True

    def _load(self, rows: list[tuple], zxid: int) -> None:
        bad = MetadataStoreCorruptError
        nodes: dict[str, _Node] = {_ROOT: _Node(None, ZNodeStat(0, 0, 0, 0))}
        try:
            for path, data, version, czxid, mzxid, cversion in rows:
                if data is not None:
                    data = bytes(data)
                nodes[path] = _Node(data, ZNodeStat(version, czxid, mzxid, cversion))
        except (TypeError, ValueError) as exc:
            raise bad(self.file_path, f"bad znode record: {exc}") from exc
        children: dict[str, set[str]] = {}
        for path in nodes:
            if path == _ROOT:
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
        nothing applied, or OSError / sqlite3.Error if the database cannot be written
        (nothing applied)."""
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
            upserts, deletes = [], []
            for path, node in tx.nodes.items():
                if path == _ROOT:
                    continue
                if node is None:
                    deletes.append((path,))
                else:
                    st = node.stat
                    upserts.append((path, node.data, st.version, st.czxid, st.mzxid, st.cversion))
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._writer, self._commit, upserts, deletes, tx.zxid)
            self._apply(tx)
            return results

    def _commit(self, upserts: list[tuple], deletes: list[tuple], zxid: int) -> None:
        db = self._db
        if db is None:
            raise OSError(f"{self.file_path}: the metadata store is closed")
        try:
            db.execute("BEGIN IMMEDIATE")
            if deletes:
                db.executemany("DELETE FROM znodes WHERE path = ?", deletes)
            if upserts:
                db.executemany("INSERT OR REPLACE INTO znodes VALUES (?, ?, ?, ?, ?, ?)",
                               upserts)
            db.execute("UPDATE meta SET value = ? WHERE key = 'zxid'", (zxid,))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _apply(self, tx: _Transaction) -> None:
        """Make a committed transaction visible (in place: O(what it changed))."""
        nodes, children = self._nodes, self._children
        for path, node in tx.nodes.items():
            if node is None:
                nodes.pop(path, None)
                children.pop(path, None)
            else:
                nodes[path] = node
        for parent, names in tx.removed.items():
            kids = children.get(parent)
            if kids is not None:
                kids -= names
                if not kids:
                    del children[parent]
        for parent, names in tx.added.items():
            if names and parent in nodes:
                children.setdefault(parent, set()).update(names)
        self._zxid = tx.zxid

    async def create(self, path: str, data: bytes | None = None, *, make_parents: bool = False,
                     sequential: bool = False) -> str:
        return (await self.multi([Create(path, data, make_parents, sequential)]))[0]

    async def set_data(self, path: str, data: bytes | None,
                       expected_version: int = ZkVersion.MATCH_ANY) -> ZNodeStat:
        return (await self.multi([SetData(path, data, expected_version)]))[0]

    async def delete(self, path: str, *, recursive: bool = False,
                     expected_version: int = ZkVersion.MATCH_ANY) -> None:
        await self.multi([Delete(path, expected_version, recursive)])


def read_znodes(directory: str) -> dict[str, dict[str, Any]]:
    """Every znode of the store in ``directory`` as ``{path: {"data": text | None,
    "version", "czxid", "mzxid", "cversion"}}`` (read-only, blocking; for tools and tests)."""
    db = sqlite3.connect(f"file:{os.path.join(directory, FILE_NAME)}?mode=ro", uri=True)
    try:
        return {path: {"data": None if data is None else bytes(data).decode("utf-8"),
                       "version": v, "czxid": c, "mzxid": m, "cversion": k}
                for path, data, v, c, m, k in db.execute("SELECT * FROM znodes")}
    finally:
        db.close()
