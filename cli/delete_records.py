"""``josef delete-records``: advance partitions' log start offsets, like
``kafka-delete-records.sh --offset-json-file``.

The JSON file: ``{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}``
(offset ``-1`` = up to the high watermark). Output, as Kafka's tool::

    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 10
    partition: t-1	error: OFFSET_OUT_OF_RANGE

Exit code 1 if any partition failed. APIs: Metadata, DeleteRecords (to each leader).

Progress: a bar on stderr (when it is a terminal, or with ``--progress``) counts the records
removed (each partition's new low watermark minus its log start offset before, out of the
records below the requested offsets; ListOffsets earliest/latest first) and the partitions
done, e.g. ``delete-records: 100.0%|####| 300/300 records [00:00, 2.1k records/s, 3/3
partitions]``.
"""

from __future__ import annotations

import argparse
import json

from cli._common import UsageError, add_bootstrap, connect, tool_main
from cli._progress import ProgressBar
from client.admin import RETRY_LEADER, AdminRouter
from client.connection import ToolError, error_name
from client.offsets import EARLIEST, LATEST, list_offsets

COMMAND = "delete-records"
HELP = "Delete records below given offsets (like kafka-delete-records.sh)"
DELETE_RECORDS = 21


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, metavar="FILE",
                   help='{"partitions":[{"topic":"t","partition":0,"offset":10}],"version":1}')
    p.add_argument("--progress", action="store_true",
                   help="show the progress bar even when stderr is not a terminal")


def read_offsets(path: str) -> list[tuple[str, int, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{path} is not valid JSON: {e}") from None
    try:
        out = [(str(p["topic"]), int(p["partition"]), int(p["offset"]))
               for p in doc["partitions"]]
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"{path}: expected {{\"partitions\": [{{\"topic\": ..., "
                         "\"partition\": ..., \"offset\": ...}], \"version\": 1}") from None
    seen = set()
    for t, p, _ in out:
        if (t, p) in seen:
            raise UsageError(f"offset json file contains duplicate topic partitions: {t}-{p}")
        seen.add((t, p))
    return out


@tool_main(COMMAND)
def run(args: argparse.Namespace) -> int:
    wanted = read_offsets(args.offset_json_file)
    print("Executing records delete operation")
    results: dict[tuple[str, int], str] = {}
    offsets = {(t, p): off for t, p, off in wanted}
    starts: dict[tuple[str, int], int] = {}
    done: set[tuple[str, int]] = set()

    def build(parts):
        topics: dict[str, list] = {}
        for t, p in parts:
            topics.setdefault(t, []).append({"partition_index": p, "offset": offsets[(t, p)]})
        return {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": 30000}

    def outcomes(resp):
        for t in resp.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if p.error_code not in RETRY_LEADER and tp not in done:  # final: not resent
                    done.add(tp)
                    if not p.error_code and tp in starts:
                        bar.update(max(0, p.low_watermark - starts[tp]))
                yield tp, p.error_code, p.low_watermark
        bar.set_postfix(f"{len(done)}/{len(offsets)} partitions")

    with connect(args) as client, \
            ProgressBar(None, COMMAND, unit="records", force=args.progress or None) as bar:
        router = AdminRouter(client)
        if bar.enabled:
            starts = _records_to_delete(client, router, offsets, bar)
        # each partition to its leader, resent to the new one after a move
        for tp, (code, low) in router.to_leaders(
                DELETE_RECORDS, list(offsets), build, outcomes).items():
            results[tp] = f"error: {error_name(code)}" if code else f"low_watermark: {low}"
    print("Records delete operation completed:")
    for (t, p), text in sorted(results.items()):
        print(f"partition: {t}-{p}\t{text}")
    return 1 if any(v.startswith("error") for v in results.values()) else 0


def _records_to_delete(client, router: AdminRouter, offsets: dict[tuple[str, int], int],
                       bar: ProgressBar) -> dict[tuple[str, int], int]:
    """Log start offsets before the delete; sets the bar's total to the records below the
    requested offsets (``-1``: the high watermark). Partitions without a leader right now
    are left out (the delete itself reports them)."""
    try:
        leaders = router.leaders(sorted({t for t, _ in offsets}))
        tps = [tp for tp in offsets if leaders.get(tp, -1) >= 0]
        if not tps:
            return {}
        starts = list_offsets(client, tps, EARLIEST)
        ends = list_offsets(client, tps, LATEST)
    except ToolError:  # the delete itself reports the partition's error
        return {}
    targets = {tp: ends[tp] if offsets[tp] < 0 else min(offsets[tp], ends[tp]) for tp in tps}
    bar.set_total(sum(max(0, targets[tp] - starts[tp]) for tp in tps))
    return starts
