"""Leader-epoch cache: epoch -> start offset, persisted as `leader-epoch-checkpoint`.

Kafka's LeaderEpochFileCache (KIP-101, KIP-279). Each entry says "leader epoch E wrote its
first message at offset S". Entries are strictly increasing in both epoch and start offset.
`end_offset_for_epoch` answers OffsetsForLeaderEpoch. The file is written by `flush()`
(blocking: call from an executor), normally as part of `Log.flush`; entries lost in a crash
are re-learnt from the batches' partitionLeaderEpoch when the log is recovered.
"""

from __future__ import annotations

import bisect
import os

from storage.checkpoints import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """The epochs of the log in `dir_path` (None: in memory only). One per log, so slots and
    only the log's directory kept: the checkpoint file's object is made when it is used."""

    __slots__ = ("_dir", "_entries", "_dirty")

    def __init__(self, dir_path: str | None, exists: bool | None = None):
        """`exists`: False when the caller's listing of `dir_path` has no
        `leader-epoch-checkpoint` (nothing to read, no `open` tried); None to look."""
        self._dir = dir_path
        file = self._file if exists is not False else None
        self._entries: list[tuple[int, int]] = file.read() if file is not None else []
        self._dirty = False

    @property
    def _file(self) -> LeaderEpochCheckpointFile | None:
        d = self._dir
        return LeaderEpochCheckpointFile(os.path.join(d, LEADER_EPOCH_CHECKPOINT)) \
            if d else None

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """Epoch whose range contains `offset`, UNDEFINED_EPOCH before the first entry."""
        i = bisect.bisect_right([o for _, o in self._entries], offset) - 1
        return self._entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` if it is a new, larger epoch. Entries
        with epoch >= `epoch` or start offset >= `start_offset` are removed first (as Kafka
        does for non-monotonic entries). Returns True if the cache changed."""
        if epoch < 0:
            return False
        if self._entries and self._entries[-1][0] == epoch and \
                self._entries[-1][1] <= start_offset:
            return False
        if self._entries and epoch < self._entries[-1][0] and start_offset >= self._entries[-1][1]:
            return False  # an older epoch after a newer one: ignore (stale)
        self._entries = [(e, o) for e, o in self._entries if e < epoch and o < start_offset]
        self._entries.append((epoch, start_offset))
        self._dirty = True
        return True

    def end_offset_for_epoch(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch (KIP-279):

        - requested == latest epoch -> (latest, log end offset);
        - requested older -> (largest known epoch <= requested, start offset of the first
          epoch > requested); if no epoch <= requested is known -> (requested, start of the
          first epoch);
        - requested newer than latest, or -1, or empty cache -> (-1, -1).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        hi = bisect.bisect_right(epochs, requested_epoch)
        if hi >= len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[hi][1]
        if hi == 0:
            return requested_epoch, higher_start
        return self._entries[hi - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries with start offset >= `end_offset` (log truncated to it)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._entries, self._dirty = kept, True

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start advanced: drop entries wholly before it, moving the one that covers it
        to start at `start_offset`."""
        i = bisect.bisect_right([o for _, o in self._entries], start_offset) - 1
        if i < 0:
            return
        kept = [(self._entries[i][0], start_offset)] + self._entries[i + 1:]
        if kept != self._entries:
            self._entries, self._dirty = kept, True

    def clear(self) -> None:
        if self._entries:
            self._entries, self._dirty = [], True

    def flush(self, force: bool = False, sync: bool = True) -> None:
        """Write the checkpoint file atomically if changed (blocking); `sync=False` skips
        the fsyncs (the caller makes the file system durable at once, see
        `storage.checkpoints.sync_filesystem`)."""
        if (self._dirty or force) and self._dir:
            self._dirty = False
            self._file.write(self._entries, sync)
