"""``EmbeddedZNodeStore``: the ``broker.security.store.ZNodeStore`` interface over the
embedded metadata store, so the broker's security components (credentials, ACLs, quotas,
delegation tokens) keep Kafka's znode documents in ``josef-metadata.json`` when
``zookeeper.connect`` is not set. Watch callbacks run (``call_soon``) after this process's
own writes: there is no other writer in embedded mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.security.store import MATCH_ANY, ZNodeBadVersion, ZNodeExists, ZNodeMissing
from controller.metadata_store import (
    BadVersionError,
    Create,
    Delete,
    EmbeddedMetadataStore,
    NodeExistsError,
    NoNodeError,
    SetData,
)

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
