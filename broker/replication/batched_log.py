"""Per-partition log lines of the replication path, batched per event-loop iteration.

Kafka logs each partition's ISR expansion, shrink and update at INFO, and each fenced fetch
partition at WARN. A broker restarting in a cluster of 100,000 partitions makes its peers
expand 100,000 ISRs within seconds, and a controlled shutdown fences the fetches of every
partition it led: two lines per partition were 8-10% of the leaders' CPU during that restart
(issue 22's profile), on the loop that also serves the fetches the ISR waits for.

So those lines go through `BatchedLog.add`. The lines of one kind and level added in one
loop iteration (one fetch response's partitions, one AlterPartition answer) are written when
the iteration ends:
- up to `LISTED` of them: each on its own line, as before;
- more: one line naming the first `LISTED` and the count, and each partition's own line at
  DEBUG (written only when DEBUG is on for the logger).
Without a running loop (tools, unit tests) a line is written at once.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["BatchedLog", "LISTED", "isr_change_log"]

#: lines of one kind in one loop iteration logged one by one; above it, summarised
LISTED = 10


class BatchedLog:
    """Batches lines that each name their partition by kind (a short phrase such as
    ``"expanding ISR"``, the summary's subject) and level."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._pending: dict[tuple[int, str], list[str]] = {}
        self._scheduled_on: asyncio.AbstractEventLoop | None = None  # the flush's loop

    def add(self, kind: str, line: str, level: int = logging.INFO) -> None:
        """Log `line` (already formatted, naming its partition) at `level`, batched with the
        other `kind` lines of this loop iteration."""
        if not self.logger.isEnabledFor(level):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.logger.log(level, "%s", line)
            return
        self._pending.setdefault((level, kind), []).append(line)
        if self._scheduled_on is not loop:  # (a test's earlier loop may have closed first)
            self._scheduled_on = loop
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write what was added (the loop's callback; harmless to call directly)."""
        self._scheduled_on = None
        pending, self._pending = self._pending, {}
        logger = self.logger
        for (level, kind), lines in pending.items():
            if len(lines) <= LISTED:
                for line in lines:
                    logger.log(level, "%s", line)
                continue
            logger.log(level, "%s of %d partitions: %s; ... (each at DEBUG)", kind,
                       len(lines), "; ".join(lines[:LISTED]))
            if logger.isEnabledFor(logging.DEBUG):
                for line in lines:
                    logger.debug("%s", line)


#: the leader's ISR changes, for every partition of the broker (`broker.replication.isr`)
isr_change_log = BatchedLog(logging.getLogger("broker.partition"))
