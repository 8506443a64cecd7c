"""Where security metadata lives: a small znode-store interface.

Credentials and quotas (``/config/users/...``, ``/config/clients/...``), ACLs
(``/kafka-acl/...``, ``/kafka-acl-extended/...``) and delegation tokens
(``/delegation_token/tokens/...``) are kept as Kafka keeps them in ZooKeeper (paths and JSON
in :mod:`broker.security.znodes`). The broker's security components read and write them only
through a :class:`ZNodeStore`: in embedded mode ``controller.security_store
.EmbeddedZNodeStore`` (the embedded metadata store), in ZooKeeper mode an adapter over the
ZooKeeper client with the same five calls. Change notifications (``/kafka-acl-changes``,
``/kafka-acl-extended-changes``, ``/config/changes``, ``/delegation_token/token_changes``)
are sequential znodes; a store calls the callbacks given to :meth:`ZNodeStore.watch_children`
on the event loop when the children of a watched path change (after its own writes in
embedded mode, on ZooKeeper watches otherwise).

:class:`MemoryZNodeStore` is the in-memory implementation used by unit tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

__all__ = ["MemoryZNodeStore", "ZNodeBadVersion", "ZNodeError", "ZNodeExists", "ZNodeMissing",
           "ZNodeStore", "ensure_path", "upsert"]

MATCH_ANY = -1


class ZNodeError(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class ZNodeMissing(ZNodeError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "no such znode")


class ZNodeExists(ZNodeError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "znode already exists")


class ZNodeBadVersion(ZNodeError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "znode version changed")


class ZNodeStore(Protocol):
    async def get(self, path: str) -> tuple[bytes | None, int] | None:
        """``(data, version)``, or None when the znode does not exist."""

    async def get_children(self, path: str) -> list[str]:
        """Sorted child names ([] when the znode does not exist)."""

    async def create(self, path: str, data: bytes | None, *, sequential: bool = False) -> str:
        """Create (parents as needed); returns the path (with the sequence suffix);
        ZNodeExists if it exists."""

    async def set(self, path: str, data: bytes | None, expected_version: int = MATCH_ANY) -> int:
        """Replace the data; returns the new version. ZNodeMissing / ZNodeBadVersion."""

    async def delete(self, path: str, expected_version: int = MATCH_ANY, *,
                     recursive: bool = False) -> None:
        """Delete (a missing znode is not an error); ZNodeBadVersion on a version mismatch."""

    def watch_children(self, path: str, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the event loop whenever ``path``'s children change."""


async def ensure_path(store: ZNodeStore, path: str) -> None:
    """Create ``path`` (and parents) if missing: a ZooKeeper watch can only be armed on a
    znode that exists (Kafka's ``makeSurePersistentPathExists``)."""
    if await store.get(path) is None:
        try:
            await store.create(path, None)
        except ZNodeExists:
            pass


async def upsert(store: ZNodeStore, path: str, data: bytes | None,
                 expected_version: int = MATCH_ANY) -> int:
    """Set ``path`` (version -1 = create it if missing) and return its version."""
    if expected_version == MATCH_ANY:
        try:
            return await store.set(path, data)
        except ZNodeMissing:
            try:
                await store.create(path, data)
                return 0
            except ZNodeExists:
                return await store.set(path, data)
    if expected_version == -2:  # must not exist yet
        await store.create(path, data)
        return 0
    return await store.set(path, data, expected_version)


class MemoryZNodeStore:
    """A ZNodeStore in a dict (unit tests; watch callbacks run with ``call_soon``)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes | None, int]] = {"/": (None, 0)}
        self.seq: dict[str, int] = {}
        self.watchers: dict[str, list[Callable[[], None]]] = {}

    async def get(self, path):
        return self.nodes.get(path)

    async def get_children(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes
                       if p.startswith(prefix) and p != prefix})

    async def create(self, path, data, *, sequential=False):
        if sequential:
            parent = path.rsplit("/", 1)[0] or "/"
            n = self.seq.get(parent, 0)
            self.seq[parent] = n + 1
            path = f"{path}{n:010d}"
        if path in self.nodes:
            raise ZNodeExists(path)
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            self.nodes.setdefault("/" + "/".join(parts[:i]), (None, 0))
        self.nodes[path] = (None if data is None else bytes(data), 0)
        self._notify(path.rsplit("/", 1)[0] or "/")
        return path

    async def set(self, path, data, expected_version=MATCH_ANY):
        node = self.nodes.get(path)
        if node is None:
            raise ZNodeMissing(path)
        if expected_version != MATCH_ANY and node[1] != expected_version:
            raise ZNodeBadVersion(path)
        self.nodes[path] = (None if data is None else bytes(data), node[1] + 1)
        return node[1] + 1

    async def delete(self, path, expected_version=MATCH_ANY, *, recursive=False):
        node = self.nodes.get(path)
        if node is None:
            return
        if expected_version != MATCH_ANY and node[1] != expected_version:
            raise ZNodeBadVersion(path)
        for p in [p for p in self.nodes if p == path or (recursive and p.startswith(path + "/"))]:
            del self.nodes[p]
        self._notify(path.rsplit("/", 1)[0] or "/")

    def watch_children(self, path, callback):
        self.watchers.setdefault(path, []).append(callback)

    def _notify(self, parent: str) -> None:
        callbacks = self.watchers.get(parent, ())
        if not callbacks:
            return
        loop = asyncio.get_running_loop()
        for cb in callbacks:
            loop.call_soon(cb)
