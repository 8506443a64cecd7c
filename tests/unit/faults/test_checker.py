"""The fault harness's history checker against recorded histories with planted faults: a
clean history is valid, and each planted loss, duplicate, reordering, disappearance, consumer
regression or early commit is caught (and only that)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.faults.checker import PROBLEM_KEYS, check
from tests.faults.history import History, load


def clean_history(partitions: int = 3, per_producer: int = 12) -> list[dict]:
    """Two producers writing round-robin, one consumer reading everything in order and
    committing after each record, a final read equal to what was acknowledged."""
    h = History(clock=iter(range(10**6)).__next__)
    logs: dict[int, list[str]] = {p: [] for p in range(partitions)}
    sent = []
    for n in range(per_producer):
        for proc in ("ck0", "kp0"):
            v, p = f"{proc}-{n}", n % partitions
            h.add("invoke", process=proc, value=v, partition=p)
            sent.append((v, p))
    for v, p in sent:  # stored and acknowledged in send order
        logs[p].append(v)
        h.add("ok", process=v.split("-")[0], value=v, partition=p, offset=len(logs[p]) - 1)
    h.add("nemesis", kind="kill", phase="start", detail={"broker": 1})
    h.add("nemesis", kind="kill", phase="end", detail={"broker": 1})
    h.add("assign", member="cc0", partitions=list(range(partitions)))
    for p, values in logs.items():
        for o, v in enumerate(values):
            h.add("poll", member="cc0", partition=p, offset=o, value=v)
            h.add("commit", member="cc0", partition=p, offset=o + 1)
    for p, values in logs.items():
        for o, v in enumerate(values):
            h.add("final", partition=p, offset=o, value=v)
        h.add("final_end", partition=p, log_start=0, high_watermark=len(values))
    return h.events


def only_problems(results) -> dict:
    return {k: results[k] for k in PROBLEM_KEYS if results[k]}


def test_clean_history_is_valid():
    r = check(clean_history())
    assert r["valid"], r["problems"]
    assert r["acknowledged"] == r["attempted"] == 24
    assert r["final_records"] == 24 and r["polled"] == 24 and r["committed"] == 24
    assert r["nemesis_events"] == {"kill": 1}


def _drop_final(events, value):
    # the record is gone from the log and the offsets after it move down (a truncation)
    victim = next(e for e in events if e["type"] == "final" and e["value"] == value)
    out = []
    for e in events:
        if e is victim:
            continue
        if e["type"] == "final" and e["partition"] == victim["partition"] \
                and e["offset"] > victim["offset"]:
            e = {**e, "offset": e["offset"] - 1}
        out.append(e)
    return out


def test_planted_loss_of_an_acknowledged_value():
    events = clean_history()
    # lose the last record of partition 0 and no one read it: only 'lost'
    last = max((e for e in events if e["type"] == "final" and e["partition"] == 0),
               key=lambda e: e["offset"])
    events = [e for e in events if not (e["type"] in ("poll", "commit") and e["partition"] == 0
                                        and e["offset"] >= last["offset"])]
    events = [e for e in events if e is not last]
    r = check(events)
    assert only_problems(r) == {"lost": 1}
    assert r["examples"]["lost"] == [last["value"]] and not r["valid"]


def test_planted_loss_in_the_middle_is_also_a_disappearance_and_mismatch():
    r = check(_drop_final(clean_history(), "kp0-3"))
    problems = only_problems(r)
    assert problems["lost"] == 1
    assert problems["disappeared"] >= 1  # read at an offset that now holds another value
    assert problems["offset_mismatch"] >= 1  # later values moved down
    assert not r["valid"]


def test_indeterminate_write_may_be_absent_or_present():
    events = clean_history()
    ok = next(e for e in events if e["type"] == "ok" and e["value"] == "kp0-11")
    events[events.index(ok)] = {**ok, "type": "info", "error": "timed out"}
    assert check(events)["valid"]  # present: fine
    # absent (the last record of partition 2, offset 7): fine too
    trimmed = [e for e in events if not (e.get("value") == "kp0-11"
                                         and e["type"] in ("final", "poll"))]
    trimmed = [e for e in trimmed if not (e["type"] == "commit" and e["partition"] == 2
                                          and e["offset"] == 8)]
    end = next(e for e in trimmed if e["type"] == "final_end" and e["partition"] == 2)
    end["high_watermark"] = 7
    r = check(trimmed)
    assert r["valid"], r["problems"]
    assert r["indeterminate"] == 1 and r["indeterminate_present"] == 0


def test_planted_duplicate():
    events = clean_history()
    end = next(e for e in events if e["type"] == "final_end" and e["partition"] == 1)
    dup = {"t": end["t"] - 0.5, "type": "final", "partition": 1,
           "offset": end["high_watermark"], "value": "ck0-1"}
    end["high_watermark"] += 1
    events.append(dup)
    r = check(events)
    assert only_problems(r) == {"duplicated": 1}
    assert sorted(r["examples"]["duplicated"]["ck0-1"]) == [(1, 0), (1, 8)]


def test_planted_reordering_of_one_producer():
    events = clean_history()
    # swap ck0-0 and ck0-3 in partition 0's log: ack offsets disagree too
    f = {e["value"]: e for e in events if e["type"] == "final"}
    f["ck0-0"]["value"], f["ck0-3"]["value"] = "ck0-3", "ck0-0"
    r = check(events)
    assert r["reordered"] >= 1
    assert any(x["rule"] == "producer order" for x in r["examples"]["reordered"])
    assert not r["valid"]


def test_planted_real_time_reordering_across_producers():
    """kp0-0 was acknowledged before ck0-3 was sent, yet ck0-3 is stored before it."""
    h = History(clock=iter(range(1000)).__next__)
    h.add("invoke", process="kp0", value="kp0-0", partition=0)
    h.add("ok", process="kp0", value="kp0-0", partition=0, offset=1)
    h.add("invoke", process="ck0", value="ck0-3", partition=0)
    h.add("ok", process="ck0", value="ck0-3", partition=0, offset=0)
    h.add("final", partition=0, offset=0, value="ck0-3")
    h.add("final", partition=0, offset=1, value="kp0-0")
    h.add("final_end", partition=0, log_start=0, high_watermark=2)
    r = check(h.events)
    assert only_problems(r) == {"reordered": 1}
    assert r["examples"]["reordered"][0]["rule"] == "real-time order"


def test_planted_consumer_going_backwards_within_a_session():
    events = clean_history()
    i = max(k for k, e in enumerate(events) if e["type"] == "poll")
    again = copy.deepcopy(next(e for e in events if e["type"] == "poll" and e["offset"] == 2
                               and e["partition"] == 2))
    again["t"] = events[i]["t"] + 0.1
    events.insert(i + 1, again)
    r = check(events)
    assert only_problems(r) == {"consumer_offsets_backwards": 1}


def test_rereading_after_a_new_assignment_is_not_backwards():
    events = clean_history()
    i = max(k for k, e in enumerate(events) if e["type"] == "poll")
    t = events[i]["t"]
    events[i + 1:i + 1] = [
        {"t": t + 0.1, "type": "revoke", "member": "cc0", "partitions": [2]},
        {"t": t + 0.2, "type": "assign", "member": "cc0", "partitions": [2]},
        {"t": t + 0.3, "type": "poll", "member": "cc0", "partition": 2, "offset": 0,
         "value": next(e["value"] for e in events if e["type"] == "final"
                       and e["partition"] == 2 and e["offset"] == 0)},
    ]
    assert check(events)["valid"]


def test_planted_commit_ahead_of_reads_and_beyond_the_log():
    events = clean_history()
    t = events[-1]["t"]
    events.append({"t": t + 1, "type": "commit", "member": "cc9", "partition": 0, "offset": 5})
    events.append({"t": t + 2, "type": "commit", "member": "cc0", "partition": 1,
                   "offset": 99})
    r = check(events)
    assert only_problems(r) == {"commits_ahead_of_reads": 2, "commits_beyond_log": 1}


def test_planted_unexpected_and_failed_but_present_values():
    events = clean_history()
    ok = next(e for e in events if e["type"] == "ok" and e["value"] == "kp0-4")
    events[events.index(ok)] = {**ok, "type": "fail", "error": "MSG_SIZE_TOO_LARGE"}
    f = next(e for e in events if e["type"] == "final" and e["value"] == "ck0-5")
    f["value"] = "zz-1"
    r = check(events)
    problems = only_problems(r)
    assert problems["failed_but_present"] == 1
    assert problems["unexpected"] == 1 and problems["lost"] == 1  # ck0-5 replaced


def test_incomplete_final_read_and_no_progress_are_invalid():
    events = [e for e in clean_history() if not (e["type"] == "final_end"
                                                 and e["partition"] == 2)]
    r = check(events)
    assert not r["valid"] and any("final read incomplete" in p for p in r["problems"])
    r = check([{"t": 0, "type": "final_end", "partition": 0, "log_start": 0,
                "high_watermark": 0}], partitions=[0])
    assert not r["valid"] and r["problems"] == ["nothing was acknowledged (no progress)"]


def test_history_file_round_trip_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "history.jsonl"
    h = History(path)
    for e in clean_history():
        h.add(e["type"], **{k: v for k, v in e.items() if k not in ("t", "type")})
    h.close()
    with open(path, "a") as f:
        f.write('{"t": 1.0, "type": "ok", "val')  # the harness died mid-write
    events = load(path)
    assert len(events) == len(clean_history())
    assert check(events)["valid"]
    assert json.loads(path.read_text().splitlines()[0])["type"] == "invoke"


@pytest.mark.parametrize("n", [1, 5])
def test_loss_count_is_exact(n):
    events = clean_history()
    finals = [e for e in events if e["type"] == "final" and e["partition"] == 1]
    victims = sorted(finals, key=lambda e: e["offset"])[-n:]
    gone = {(v["partition"], v["offset"]) for v in victims}
    events = [e for e in events if not (e["type"] in ("final", "poll")
                                        and (e["partition"], e["offset"]) in gone)]
    events = [e for e in events if not (e["type"] == "commit" and e["partition"] == 1
                                        and e["offset"] > min(o for _, o in gone))]
    r = check(events)
    assert only_problems(r) == {"lost": n}


# ---- the transactional workload ------------------------------------------------------------
def txn_history(outcomes=("committed", "aborted", "committed", "unknown")) -> list[dict]:
    """Transactions of 3 values on 2 partitions; the final read_committed read holds the
    committed ones (and, for unknown outcomes, the whole transaction); a read_committed
    consumer read exactly those."""
    h = History(clock=iter(range(10**6)).__next__)
    for e in clean_history():  # the queue workload runs beside it
        h.add(e["type"], **{k: v for k, v in e.items() if k not in ("t", "type")})
    offsets = {0: 0, 1: 0}
    stored = []
    for n, outcome in enumerate(outcomes):
        txn = f"t0.0-{n}"
        vals = [f"{txn}-{i}" for i in range(3)]
        h.add("txn_begin", txn=txn, values=vals)
        h.add(f"txn_{outcome}", txn=txn)
        if outcome in ("committed", "unknown"):
            for i, v in enumerate(vals):
                stored.append((i % 2, offsets[i % 2], v))
                offsets[i % 2] += 1
    for p, o, v in stored:
        h.add("txn_poll", member="tc0", partition=p, offset=o, value=v)
    for p, o, v in stored:
        h.add("txn_final", partition=p, offset=o, value=v)
    for p in (0, 1, 2):
        h.add("txn_final_end", partition=p, log_start=0,
              high_watermark=offsets.get(p, 0) + 4)
    return h.events


def txn_problems(r) -> dict:
    from tests.faults.checker import TXN_PROBLEM_KEYS
    return {k: r[k] for k in TXN_PROBLEM_KEYS if r[k]}


def test_clean_transactional_history_is_valid():
    r = check(txn_history(), partitions=range(3))
    assert r["valid"], r["problems"]
    assert (r["txn_committed"], r["txn_aborted"], r["txn_unknown"]) == (2, 1, 1)
    assert r["txn_polled"] == 9


def test_planted_aborted_transaction_visible_and_dirty_read():
    events = txn_history()
    t = events[-1]["t"]
    events.append({"t": t + 1, "type": "txn_final", "partition": 0, "offset": 50,
                   "value": "t0.0-1-0"})
    events.append({"t": t + 2, "type": "txn_poll", "member": "tc0", "partition": 0,
                   "offset": 50, "value": "t0.0-1-0"})
    r = check(events, partitions=range(3))
    assert txn_problems(r) == {"txn_aborted_visible": 1, "txn_partial": 1,
                               "txn_dirty_reads": 1}
    assert not r["valid"]


def test_planted_committed_transaction_lost_partially():
    events = [e for e in txn_history() if not (e["type"] == "txn_final"
                                               and e["value"] == "t0.0-2-1")]
    r = check(events, partitions=range(3))
    # lost, partial, and the consumer's reads of its other values are now dirty
    assert txn_problems(r) == {"txn_lost": 1, "txn_partial": 1, "txn_dirty_reads": 3}


def test_unknown_outcome_must_be_all_or_nothing():
    events = [e for e in txn_history() if e.get("value") not in ("t0.0-3-0", "t0.0-3-1",
                                                                 "t0.0-3-2")]
    assert check(events, partitions=range(3))["valid"]  # none of it: fine
    events = [e for e in txn_history() if e.get("value") != "t0.0-3-2"]
    assert txn_problems(check(events, partitions=range(3))) == {"txn_partial": 1,
                                                               "txn_dirty_reads": 2}


def test_planted_transactional_duplicate_and_missing_final_end():
    events = txn_history()
    t = events[-1]["t"]
    events.append({"t": t + 1, "type": "txn_final", "partition": 1, "offset": 40,
                   "value": "t0.0-0-1"})
    r = check(events, partitions=range(3))
    assert txn_problems(r) == {"txn_duplicated": 1}
    events = [e for e in txn_history() if not (e["type"] == "txn_final_end"
                                               and e["partition"] == 1)]
    r = check(events, partitions=range(2))
    assert any("transactional final read incomplete" in p for p in r["problems"])


def test_implicitly_acknowledged_value_has_no_offset_but_must_not_be_lost():
    """librdkafka acknowledges messages of a failed request implicitly when a later batch of
    the same idempotent producer succeeds; their offset is unknown (None)."""
    events = clean_history()
    ok = next(e for e in events if e["type"] == "ok" and e["value"] == "kp0-7")
    ok["offset"] = None
    assert check(events)["valid"]
    events = [e for e in events if not (e["type"] in ("final", "poll", "commit")
                                        and e["partition"] == 1 and e["offset"] >= 4)]
    last = next(e for e in events if e["type"] == "final_end" and e["partition"] == 1)
    last["high_watermark"] = 4
    r = check(events)
    assert r["lost"] >= 1 and "kp0-7" in r["examples"]["lost"]
