"""Finalized features in ZooKeeper mode (KIP-584): the ``/feature`` znode, watched by every
broker (Kafka's FinalizedFeatureChangeListener / FinalizedFeatureCache) and written by
UpdateFeatures.

Znode: ``/feature`` = Kafka's FeatureZNode v2 JSON
``{"version":2,"status":1,"features":{"<name>":{"max_version_level":N}}}``
(:class:`controller.broker_config_admin.FeatureZNode`); the finalized features epoch is the
znode's version (its ``dataVersion``), -1 while it does not exist.

The cache is filled at startup and refreshed by the znode's watch (kazoo's thread hands the
event to the loop through :class:`controller.zk_client.ZkClient`); ApiVersions reads it
without touching ZooKeeper. Unreadable data is logged with the path and the last good value
is kept. Writes are conditional on the version read (a concurrent writer makes this one
re-read and retry); a failed write raises ``OSError`` (UpdateFeatures answers
FEATURE_UPDATE_FAILED).
"""

from __future__ import annotations

import asyncio
import logging

from controller.broker_config_admin import FeatureZNode
from controller.zk_client import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    ZkClient,
    ZNodeChangeHandler,
)

__all__ = ["FinalizedFeatureCache"]

log = logging.getLogger(__name__)
_WRITE_ATTEMPTS = 5


class FinalizedFeatureCache(ZNodeChangeHandler):
    """``epoch`` and ``features`` ({name: max version level}) of ``/feature``."""

    path = FeatureZNode.path

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self.epoch = -1
        self.features: dict[str, int] = {}
        self._refresh: asyncio.Task | None = None

    async def startup(self) -> None:
        """Load ``/feature``; a new cluster (no ``/feature`` yet) gets
        ``FeatureZNode.BOOTSTRAP`` first (a create: the broker that loses the race reads the
        winner's)."""
        self._zk.register_znode_change_handler(self)
        if await self._zk.exists(self.path) is None:
            try:
                await self._zk.create(self.path, FeatureZNode.encode(FeatureZNode.BOOTSTRAP))
            except NodeExistsError:
                pass
        await self._load()

    def shutdown(self) -> None:
        self._zk.unregister_znode_change_handler(self.path)
        if self._refresh is not None:
            self._refresh.cancel()

    async def _load(self) -> None:
        got = await self._zk.get_data(self.path)  # re-arms the watch
        if got is None:
            self.epoch, self.features = -1, {}
            return
        data, stat = got
        try:
            features = FeatureZNode.decode(data)
        except (ValueError, AttributeError) as e:
            log.error("skipping unreadable %s (version %d): %s", self.path, stat.version, e)
            return
        self.epoch, self.features = stat.version, features

    def _reload(self) -> None:
        self._refresh = asyncio.ensure_future(self._load_logged())

    async def _load_logged(self) -> None:
        try:
            await self._load()
        except (KazooException, OSError) as e:  # the next session event reloads
            log.warning("reading %s failed: %s", self.path, e)

    on_create = on_data_change = on_delete = _reload

    async def update(self, levels: dict[str, int]) -> int:
        """Set (level > 0) or remove (level 0) finalized levels; returns the new epoch."""
        for _ in range(_WRITE_ATTEMPTS):
            try:
                got = await self._zk.get_data(self.path)
                current = FeatureZNode.decode(got[0]) if got is not None else {}
                data = FeatureZNode.encode(FeatureZNode.apply(current, levels))
                if got is None:
                    await self._zk.create(self.path, data)
                else:
                    await self._zk.set_data(self.path, data, version=got[1].version)
            except (BadVersionError, NodeExistsError):
                continue  # another writer won: read again
            except (KazooException, ValueError) as e:
                raise OSError(f"writing {self.path} failed: {e}") from e
            await self._load()
            return self.epoch
        raise OSError(f"{self.path} kept changing under {_WRITE_ATTEMPTS} attempts")
