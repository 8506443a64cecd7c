"""A confluent-kafka ShareConsumer worker run as a subprocess by the share-group tests.

    python -m tests.integration.share_worker BOOTSTRAP GROUP TOPIC [options]

Explicit acknowledgement mode. For every record it prints one JSON line before acknowledging
(``{"e": "got", "v": value, "o": offset, "dc": delivery count, "t": monotonic}``), decides
ACCEPT / RELEASE / REJECT by the options, and after each ``commit_sync()`` that the broker
answered without error prints ``{"e": "acked", "vs": [[value, type], ...], "t": ...}`` (a
failed commit prints ``{"e": "commit_failed", ...}``): the test only treats a record as
acknowledged once its "acked" line is out. Options:

  --reject-mod M:R      REJECT values with v % M == R
  --release-once M:R    RELEASE values with v % M == R on their first delivery
  --release-values V,.. RELEASE these values on every delivery (poison records)
  --hold                acknowledge nothing, keep polling (to be SIGKILLed holding records)
  --seconds S           stop after S seconds (default 60); --idle S: after S s without records
  --sleep-ms MS         sleep this long per record (slow worker)
  --max-records N       max.poll.records (the ShareFetch MaxRecords; default 500)

Values are the record values as decimal integers. stdout is line-buffered JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer


def _mod(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    m, r = text.split(":")
    return int(m), int(r)


def _emit(**fields) -> None:
    fields["t"] = time.monotonic()
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("topic")
    ap.add_argument("--reject-mod")
    ap.add_argument("--release-once")
    ap.add_argument("--release-values", default="")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--sleep-ms", type=int, default=0)
    ap.add_argument("--max-records", type=int, default=500)
    args = ap.parse_args()
    reject, release_once = _mod(args.reject_mod), _mod(args.release_once)
    poison = {int(v) for v in args.release_values.split(",") if v}
    c = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                       "share.acknowledgement.mode": "explicit",
                       "max.poll.records": args.max_records,
                       "socket.timeout.ms": 10000})
    c.subscribe([args.topic])
    _emit(e="start")
    deadline = time.monotonic() + args.seconds
    last = time.monotonic()
    while time.monotonic() < deadline:
        if args.idle and time.monotonic() - last > args.idle:
            break
        try:
            msgs = c.poll(0.5)
        except KafkaException as e:
            _emit(e="poll_error", error=str(e))
            continue
        decided = []
        for m in msgs or []:
            if m.error():
                _emit(e="error", error=str(m.error()))
                continue
            last = time.monotonic()
            v = int(m.value())
            _emit(e="got", v=v, o=m.offset(), p=m.partition(), dc=m.delivery_count())
            if args.hold:
                continue
            if args.sleep_ms:
                time.sleep(args.sleep_ms / 1000)
            if v in poison or (release_once and v % release_once[0] == release_once[1]
                               and m.delivery_count() == 1):
                kind = AcknowledgeType.RELEASE
            elif reject and v % reject[0] == reject[1]:
                kind = AcknowledgeType.REJECT
            else:
                kind = AcknowledgeType.ACCEPT
            c.acknowledge(m, kind)
            decided.append([v, int(kind)])
        if decided:
            try:
                result = c.commit_sync(10)
            except KafkaException as e:
                _emit(e="commit_failed", vs=decided, error=str(e))
                continue
            failed = _failed(result)
            if failed:
                _emit(e="commit_failed", vs=decided, error=failed)
            else:
                _emit(e="acked", vs=decided)
    try:
        c.close()
    except KafkaException as e:
        _emit(e="close_error", error=str(e))
    _emit(e="end")
    return 0


def _failed(result) -> str | None:
    """commit_sync's per-partition result: the first error, else None."""
    if not result:
        return None
    items = result.items() if isinstance(result, dict) else []
    for tp, err in items:
        error = getattr(tp, "error", None) or (err if isinstance(err, Exception) else None)
        if error:
            return str(error)
    return None


if __name__ == "__main__":
    sys.exit(main())
