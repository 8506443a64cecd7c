"""``ChangeNotificationListener``: follow a sequence of change notifications in the znode
store (Kafka's ``ZkNodeChangeNotificationListener``), the one path every broker uses for
``/config/changes`` (dynamic configs, credentials, quotas), ``/kafka-acl-changes`` and
``/kafka-acl-extended-changes`` (ACLs) and ``/delegation_token/token_changes``.

Notifications are sequential znodes ``<path>/<prefix><10-digit seq>``; each names what
changed, and its handler re-reads the current state (so a repeated or coalesced notification
converges). Processing, as Kafka's listener:

* a watch on ``path`` (``ZNodeStore.watch_children``) fires ``on_change`` on the event loop;
  it sets the *pending* flag and starts the processing task unless one is running. The task
  loops while the flag is set: clear it, list the children (which re-arms a ZooKeeper
  watch), process every notification with a sequence number above the last one processed,
  in order. A change that arrives while a pass is running is therefore never dropped: the
  pass that follows sees it (the bug this replaces: a busy listener ignored the watch, no
  one re-armed it, and the broker missed every later change until restart).
* a handler logs and skips a notification it cannot read (bad JSON, unknown type) itself;
  an exception out of a handler or a failure to read the store (connection loss) ends the
  pass *without* advancing past that notification, is logged, and the pass is retried after
  a backoff (0.1 s doubling to 5 s) and on the next watch or reconnect: a change is applied
  late, never skipped (Kafka logs and skips it).
* notifications first seen more than ``expiration_ms`` ago (Kafka: 15 minutes, by znode
  creation time) are deleted by whichever broker sees them expire.

``start(skip_existing=...)``: with True the notifications present at start are taken as
processed (the caller has just loaded the full state), else they are processed once.
``processed`` counts handled notifications (tests, metrics).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from controller.znode_store import ZNodeStore, ensure_path

__all__ = ["CHANGE_EXPIRATION_MS", "ChangeNotificationListener", "sequence_number"]

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_BACKOFF_S = (0.1, 5.0)

#: ``handler(notification path, data)``: apply one notification (re-read what it names)
NotificationHandler = Callable[[str, bytes | None], Awaitable[None]]


def sequence_number(child: str, prefix: str) -> int | None:
    """``config_change_0000000042`` -> 42; None for a child that is not a notification."""
    if not child.startswith(prefix):
        return None
    try:
        return int(child[len(prefix):])
    except ValueError:
        return None


class ChangeNotificationListener:
    def __init__(self, store: ZNodeStore, path: str, prefix: str, handler: NotificationHandler,
                 *, expiration_ms: int = CHANGE_EXPIRATION_MS,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self.path = path
        self.prefix = prefix
        self.handler = handler
        self.expiration_ms = expiration_ms
        self.clock_ms = clock_ms
        self.last_executed_change = -1
        self.processed = 0
        self._pending = False
        self._closed = False
        self._task: asyncio.Task | None = None
        self._seen_ms: dict[str, int] = {}  # notification -> first seen (ms)

    async def start(self, *, skip_existing: bool = False) -> None:
        """Create ``path`` if missing, watch it and process what is there (or, with
        ``skip_existing``, start after the newest notification present)."""
        await ensure_path(self.store, self.path)  # a watch needs an existing znode
        self.store.watch_children(self.path, self.on_change)
        if skip_existing:
            children = await self.store.get_children(self.path)
            seqs = [s for s in (sequence_number(c, self.prefix) for c in children)
                    if s is not None]
            self.last_executed_change = max(seqs, default=-1)
        self.on_change()
        await self.wait_idle()

    async def shutdown(self) -> None:
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Return once no pass is running or pending (tests, startup)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    # ---- the watch ---------------------------------------------------------------------
    def on_change(self) -> None:
        """The children of ``path`` changed (or a reconnect asks for a re-read): on the
        event loop; never drops a change that arrives while a pass runs."""
        if self._closed:
            return
        self._pending = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"change-notifications:{self.path}")

    async def _run(self) -> None:
        delay = _BACKOFF_S[0]
        while self._pending and not self._closed:
            self._pending = False
            try:
                await self._process(await self.store.get_children(self.path))
                delay = _BACKOFF_S[0]
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the store failed: retry, never give up
                log.error("Error while processing notification change for path = %s "
                          "(retrying in %.1f s): %s", self.path, delay, e)
                self._pending = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_S[1])

    async def _process(self, children: list[str]) -> None:
        now = self.clock_ms()
        numbered = []
        for child in children:
            seq = sequence_number(child, self.prefix)
            if seq is None:
                log.error("skipping %s/%s: not a change notification", self.path, child)
            else:
                numbered.append((seq, child))
        numbered.sort()
        if any(seq > self.last_executed_change for seq, _ in numbered):
            log.info("Processing notification(s) to %s", self.path)
        for seq, child in numbered:
            path = f"{self.path}/{child}"
            if seq > self.last_executed_change:
                node = await self.store.get(path)  # a store error ends the pass here
                if node is None:
                    log.warning("change notification %s vanished before it was read", path)
                else:
                    await self.handler(path, node[0])  # raises: retried, not skipped
                    self.processed += 1
                self.last_executed_change = seq
            first = self._seen_ms.setdefault(child, now)
            if now - first > self.expiration_ms:
                log.debug("Purging change notification %s", path)
                await self.store.delete(path)
                self._seen_ms.pop(child, None)
        present = {child for _, child in numbered}
        for child in [c for c in self._seen_ms if c not in present]:
            del self._seen_ms[child]
