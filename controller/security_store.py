"""``EmbeddedZNodeStore``: the ``controller.znode_store.ZNodeStore`` interface over the
embedded metadata store, so the broker's security components (credentials, ACLs, quotas,
delegation tokens) keep Kafka's znode documents in ``josef-metadata.db`` when
``zookeeper.connect`` is not set. Watch callbacks run (``call_soon``) after this process's
own writes: there is no other writer in embedded mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from controller.metadata_store import (
    BadVersionError,
    Create,
    Delete,
    EmbeddedMetadataStore,
    NodeExistsError,
    NoNodeError,
    SetData,
)
from controller.znode_store import MATCH_ANY, ZNodeBadVersion, ZNodeExists, ZNodeMissing

__all__ = ["EmbeddedZNodeStore"]


class EmbeddedZNodeStore:
    def __init__(self, store: EmbeddedMetadataStore) -> None:
        self._store = store
        self._watchers: dict[str, list[Callable[[], None]]] = {}

    async def get(self, path: str) -> tuple[bytes | None, int] | None:
        try:
            data, stat = self._store.get(path)
        except NoNodeError:
            return None
        return data, stat.version

    async def get_children(self, path: str) -> list[str]:
        try:
            return self._store.get_children(path)
        except NoNodeError:
            return []

    async def create(self, path: str, data: bytes | None, *, sequential: bool = False) -> str:
        try:
            (created,) = await self._store.multi(
                [Create(path, data, make_parents=True, sequential=sequential)])
        except NodeExistsError:
            raise ZNodeExists(path) from None
        self._notify(created.rsplit("/", 1)[0] or "/")
        return created

    async def set(self, path: str, data: bytes | None, expected_version: int = MATCH_ANY) -> int:
        try:
            (stat,) = await self._store.multi([SetData(path, data, expected_version)])
        except NoNodeError:
            raise ZNodeMissing(path) from None
        except BadVersionError:
            raise ZNodeBadVersion(path) from None
        return stat.version

    async def delete(self, path: str, expected_version: int = MATCH_ANY, *,
                     recursive: bool = False) -> None:
        try:
            await self._store.multi([Delete(path, expected_version, recursive=recursive,
                                            must_exist=False)])
        except BadVersionError:
            raise ZNodeBadVersion(path) from None
        self._notify(path.rsplit("/", 1)[0] or "/")

    def watch_children(self, path: str, callback: Callable[[], None]) -> None:
        self._watchers.setdefault(path, []).append(callback)

    def _notify(self, parent: str) -> None:
        callbacks = self._watchers.get(parent)
        if callbacks:
            loop = asyncio.get_running_loop()
            for cb in callbacks:
                loop.call_soon(cb)


class ZkZNodeStore:
    """The same interface over the ZooKeeper client (``controller.zk_client.ZkClient``) in
    ZooKeeper mode: every broker reads and writes the same znodes; children watches are
    ZooKeeper watches, re-armed by the callback's own ``get_children`` (the client's
    handler registry arms a watch on every read of a watched path)."""

    def __init__(self, zk) -> None:
        self._zk = zk

    async def get(self, path: str) -> tuple[bytes | None, int] | None:
        got = await self._zk.get_data(path)
        if got is None:
            return None
        data, stat = got
        return (data if data else None), stat.version

    async def get_children(self, path: str) -> list[str]:
        return sorted(await self._zk.get_children(path) or [])

    async def create(self, path: str, data: bytes | None, *, sequential: bool = False) -> str:
        from controller.zk_client import NodeExistsError as ZkNodeExists

        try:
            return await self._zk.create(path, data, sequential=sequential, make_parents=True)
        except ZkNodeExists:
            raise ZNodeExists(path) from None

    async def set(self, path: str, data: bytes | None, expected_version: int = MATCH_ANY) -> int:
        from controller.zk_client import BadVersionError as ZkBadVersion
        from controller.zk_client import NoNodeError as ZkNoNode

        try:
            return (await self._zk.set_data(path, data, expected_version)).version
        except ZkNoNode:
            raise ZNodeMissing(path) from None
        except ZkBadVersion:
            raise ZNodeBadVersion(path) from None

    async def delete(self, path: str, expected_version: int = MATCH_ANY, *,
                     recursive: bool = False) -> None:
        from controller.zk_client import BadVersionError as ZkBadVersion
        from controller.zk_client import NoNodeError as ZkNoNode

        if recursive:
            await self._zk.delete_recursive(path)
            return
        try:
            await self._zk.delete(path, expected_version)
        except ZkNoNode:
            pass
        except ZkBadVersion:
            raise ZNodeBadVersion(path) from None

    def watch_children(self, path: str, callback: Callable[[], None]) -> None:
        from controller.zk_client import ZNodeChildChangeHandler

        handler = ZNodeChildChangeHandler()
        handler.path = path
        handler.on_child_change = callback  # type: ignore[method-assign]
        self._zk.register_znode_child_change_handler(handler)
