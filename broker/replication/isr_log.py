"""The leader's ISR change log lines, batched per event-loop iteration.

Kafka logs each partition's ISR expansion, shrink and update at INFO. A broker restarting
in a cluster of 100,000 partitions makes its peers expand 100,000 ISRs within seconds: two
INFO lines per partition were 8-10% of the leaders' CPU during that restart (issue 22's
profile), on the loop that also serves the fetches the ISR waits for.

So every line goes through `IsrChangeLog.add`. The lines added in one loop iteration (one
fetch request's partitions, one AlterPartition answer) are written when the iteration ends:
- up to `LISTED` of one kind: each on its own INFO line, as before;
- more: one INFO line per kind naming the first `LISTED` partitions and the count, and each
  partition's own line at DEBUG (written only when DEBUG is on for `broker.partition`).
Without a running loop (tools, unit tests) a line is written at once.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["IsrChangeLog", "LISTED", "isr_change_log"]

#: changes of one kind in one loop iteration logged line by line; above it, summarised
LISTED = 10


class IsrChangeLog:
    """Batches lines of the form ``"<topic>-<partition>: <text>"`` by kind (a short verb
    phrase such as ``"expanding ISR"``, the summary's subject)."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._pending: dict[str, list[str]] = {}
        self._scheduled_on: asyncio.AbstractEventLoop | None = None  # the flush's loop

    def add(self, kind: str, line: str) -> None:
        """Log `line` (already formatted, naming its partition) at INFO, batched with the
        other `kind` lines of this loop iteration."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.logger.info("%s", line)
            return
        self._pending.setdefault(kind, []).append(line)
        if self._scheduled_on is not loop:  # (a test's earlier loop may have closed first)
            self._scheduled_on = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what was added (the loop's callback; harmless to call directly)."""
        self._scheduled_on = None
        pending, self._pending = self._pending, {}
        logger = self.logger
        for kind, lines in pending.items():
            if len(lines) <= LISTED:
                for line in lines:
                    logger.info("%s", line)
                continue
            logger.info("%s of %d partitions: %s; ... (each at DEBUG)", kind, len(lines),
                        "; ".join(lines[:LISTED]))
            if logger.isEnabledFor(logging.DEBUG):
                for line in lines:
                    logger.debug("%s", line)


#: the one shared by every partition of the broker (`broker.replication.isr`)
isr_change_log = IsrChangeLog(logging.getLogger("broker.partition"))
