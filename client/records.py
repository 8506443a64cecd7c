"""Records of a Fetch response partition (``records`` bytes of RecordBatch v2, as a broker
sends them: possibly ending in a partial batch, which is skipped)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["fetched_records"]


def fetched_records(buf, fetch_offset: int) -> Iterator[tuple[object | None, int]]:
    """``((record, timestamp_type) | None, next offset)`` for each record at or after
    ``fetch_offset`` (``protocol.records`` Record: ``offset, timestamp, key, value,
    headers``); ``None`` items only advance the position (control batches, batch ends)."""
    from protocol.records import iter_batches_lenient

    if buf is None:
        return
    for batch in iter_batches_lenient(buf):
        if batch.is_control:
            yield None, batch.next_offset
            continue
        for r in batch.iter_records():
            if r.offset >= fetch_offset:
                yield (r, batch.timestamp_type), r.offset + 1
        yield None, batch.next_offset
