"""`TaskSet`: the background tasks a component of the transaction coordinator owns (the
marker senders, the expiration loops) and cancels when it stops."""

from __future__ import annotations

import asyncio

__all__ = ["TaskSet"]


class TaskSet:
    """Tasks started with `spawn` (kept until done); `cancel_all()` cancels and awaits them."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task] = set()

    def spawn(self, coro, name: str | None = None) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_all(self) -> None:
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass
