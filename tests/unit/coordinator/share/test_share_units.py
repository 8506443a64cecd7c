"""Pure helpers of coordinator.share: config parsing, backoff, batch overlay, txn filtering, assignor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.share.assignor import assign_share_group
from coordinator.share.config import (
    AutoOffsetReset,
    SharePartitionConfig,
    parse_auto_offset_reset,
    parse_iso8601_duration_ms,
)
from coordinator.share.dead_letter import (
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_REASON,
    HEADER_TOPIC,
    build_dead_letter,
    dead_letter_partition,
)
from coordinator.share.state import (
    AbortedTransaction,
    DeadLetterIntent,
    DeadLetterReason,
    FetchedBatch,
    StateBatch,
)
from coordinator.share.state_batches import overlay
from coordinator.share.transactions import skipped_ranges


@pytest.mark.parametrize("text,ms", [
    ("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT0.5S", 500), ("P1DT2H3M4S", 93_784_000),
    ("pt15m", 900_000),
])
def test_iso8601_durations(text, ms):
    assert parse_iso8601_duration_ms(text) == ms


@pytest.mark.parametrize("bad", ["P", "PT", "1H", "-PT1H", "PT1X", ""])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_iso8601_duration_ms(bad)


def test_auto_offset_reset_values():
    assert parse_auto_offset_reset("earliest") == AutoOffsetReset("earliest")
    assert parse_auto_offset_reset(" LATEST ") == AutoOffsetReset("latest")
    assert parse_auto_offset_reset("by_duration:PT10M") == AutoOffsetReset("by_duration", 600_000)
    with pytest.raises(ValueError, match="share.auto.offset.reset"):
        parse_auto_offset_reset("none")
    with pytest.raises(ValueError, match="share.auto.offset.reset"):
        parse_auto_offset_reset("by_duration:soon")


@pytest.mark.parametrize("kwargs,key", [
    ({"record_lock_duration_ms": 0}, "share.record.lock.duration.ms"),
    ({"delivery_count_limit": 1}, "share.delivery.count.limit"),
    ({"delivery_count_limit": 11}, "share.delivery.count.limit"),
    ({"max_record_locks": 0}, "share.partition.max.record.locks"),
    ({"isolation_level": "snapshot"}, "share.isolation.level"),
    ({"redelivery_backoff_ms": -1}, "share.redelivery.backoff.ms"),
    ({"redelivery_backoff_ms": 5000, "redelivery_backoff_max_ms": 1000}, "share.redelivery.backoff.max.ms"),
    ({"dead_letter_topic": " "}, "errors.deadletterqueue.topic.name"),
])
def test_config_validation_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        SharePartitionConfig(**kwargs)


def test_redelivery_backoff_is_exponential_per_attempt_and_capped():
    cfg = SharePartitionConfig(redelivery_backoff_ms=100, redelivery_backoff_max_ms=1000)
    assert [cfg.redelivery_delay_ms(n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    assert cfg.redelivery_delay_ms(10_000) == 1000
    assert SharePartitionConfig().redelivery_delay_ms(3) == 0  # off by default


def sb(first, last, state, count):
    return StateBatch(first, last, state, count)


def test_overlay_newer_wins_and_coalesces():
    base = [sb(0, 9, 0, 1)]
    assert overlay(base, [sb(3, 5, 2, 1)]) == [sb(0, 2, 0, 1), sb(3, 5, 2, 1), sb(6, 9, 0, 1)]
    assert overlay(base, [sb(3, 5, 2, 1), sb(0, 2, 2, 1), sb(6, 9, 2, 1)]) == [sb(0, 9, 2, 1)]
    # Later updates in the same list win over earlier ones.
    assert overlay([], [sb(0, 4, 0, 1), sb(2, 2, 4, 1)]) == [sb(0, 1, 0, 1), sb(2, 2, 4, 1), sb(3, 4, 0, 1)]
    # Spanning several old runs, and extending past them.
    assert overlay([sb(0, 1, 0, 1), sb(5, 6, 4, 2)], [sb(1, 8, 2, 3)]) == [sb(0, 0, 0, 1), sb(1, 8, 2, 3)]


def test_overlay_prunes_below_start_offset():
    assert overlay([sb(0, 9, 0, 1)], [sb(12, 14, 4, 1)], start_offset=5) == [sb(5, 9, 0, 1), sb(12, 14, 4, 1)]
    assert overlay([sb(0, 4, 2, 1)], [sb(0, 2, 4, 1)], start_offset=5) == []


def test_skipped_ranges_control_batches_and_aborted_transactions():
    fetched = [
        FetchedBatch(0, 4),                                           # plain data
        FetchedBatch(5, 7, producer_id=7, is_transactional=True),      # aborted txn of 7
        FetchedBatch(8, 9, producer_id=8, is_transactional=True),      # committed txn of 8
        FetchedBatch(10, 10, producer_id=7, is_transactional=True, is_control=True),  # abort
        FetchedBatch(11, 11, producer_id=8, is_transactional=True, is_control=True),  # commit
        FetchedBatch(12, 14, producer_id=7, is_transactional=True),    # next txn of 7 (committed)
    ]
    aborted = [AbortedTransaction(7, 5)]
    assert skipped_ranges(fetched, aborted, read_committed=True) == [(5, 7), (10, 11)]
    # read_uncommitted delivers aborted data, but never the markers.
    assert skipped_ranges(fetched, aborted, read_committed=False) == [(10, 11)]


def test_dead_letter_record_keeps_the_source_and_names_it():
    intent = DeadLetterIntent(3, 42, 5, DeadLetterReason.DELIVERY_COUNT_LIMIT)
    dl = build_dead_letter(intent, group_id="g", topic="orders", partition=2, key=b"k",
                           value=b"v", headers=[("trace", b"1")], timestamp_ms=77)
    assert (dl.key, dl.value, dl.timestamp_ms) == (b"k", b"v", 77)
    headers = dict(dl.headers)
    assert dl.headers[0] == ("trace", b"1")
    assert headers[HEADER_TOPIC] == b"orders"
    assert headers[HEADER_PARTITION] == b"2"
    assert headers[HEADER_OFFSET] == b"42"
    assert headers[HEADER_GROUP] == b"g"
    assert headers[HEADER_DELIVERY_COUNT] == b"5"
    assert headers[HEADER_REASON] == b"DELIVERY_COUNT_LIMIT_REACHED"
    missing = build_dead_letter(intent, group_id="g", topic="t", partition=0, key=b"k",
                                value=b"v", source_missing=True)
    assert (missing.key, missing.value) == (None, None)


def test_dead_letter_partition_is_stable():
    p = dead_letter_partition("g", "tid", 3, 12)
    assert p == dead_letter_partition("g", "tid", 3, 12)
    assert 0 <= p < 12
    with pytest.raises(ValueError):
        dead_letter_partition("g", "tid", 3, 0)


def test_assignor_gives_every_member_every_subscribed_partition():
    subs = {"a": ["t1"], "b": ["t1", "t2"], "c": ["t2"]}
    got = assign_share_group(subs, {"t1": 3, "t2": 2})
    assert got == {"a": {"t1": [0, 1, 2]}, "b": {"t1": [0, 1, 2], "t2": [0, 1]}, "c": {"t2": [0, 1]}}
    # A topic that does not exist (yet) is skipped; a member may end with nothing.
    assert assign_share_group({"a": ["nope"]}, {}) == {"a": {}}


def _sharing(got, topic, n_parts):
    return [sum(p in a.get(topic, []) for a in got.values()) for p in range(n_parts)]


def test_assignor_falls_back_to_simple_rules_with_many_members():
    members = {f"m{i:02d}": ["t"] for i in range(7)}
    got = assign_share_group(members, {"t": 3}, all_members_limit=4)
    # ceil(7 / 3) = 3 members per partition; counts per member differ by at most one.
    assert _sharing(got, "t", 3) == [3, 3, 3]
    counts = sorted(len(a["t"]) for a in got.values())
    assert counts[-1] - counts[0] <= 1 and min(counts) >= 1
    # Fewer members than partitions: each partition to exactly one member (consumer-group like).
    got = assign_share_group({f"m{i}": ["t"] for i in range(5)}, {"t": 10}, all_members_limit=2)
    assert _sharing(got, "t", 10) == [1] * 10
    assert sorted(len(a["t"]) for a in got.values()) == [2] * 5


def test_simple_rules_are_sticky():
    members = {f"m{i}": ["t"] for i in range(4)}
    first = assign_share_group(members, {"t": 8}, all_members_limit=1)
    members["m4"] = ["t"]
    second = assign_share_group(members, {"t": 8}, current=first, all_members_limit=1)
    moved = sum(len(set(first[m]["t"]) - set(second[m]["t"])) for m in first)
    assert moved <= 2  # only what the newcomer needs to reach its share
    assert sum(len(a["t"]) for a in second.values()) == 8
    assert len(second["m4"]["t"]) >= 1


def _naive(base, updates, start):
    cells = {}
    for r in list(base) + list(updates):
        for o in range(r.first_offset, r.last_offset + 1):
            cells[o] = (r.delivery_state, r.delivery_count)
    return {o: v for o, v in cells.items() if start < 0 or o >= start}


def _cells(runs):
    return {o: (r.delivery_state, r.delivery_count) for r in runs
            for o in range(r.first_offset, r.last_offset + 1)}


_run = st.builds(lambda f, n, s, c: StateBatch(f, f + n, s, c), st.integers(0, 60),
                 st.integers(0, 8), st.sampled_from((0, 2, 4)), st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(base=st.lists(_run, max_size=6), updates=st.lists(_run, max_size=8),
       start=st.integers(-1, 40))
def test_overlay_matches_offset_by_offset_painting(base, updates, start):
    disjoint_base = overlay([], base)  # a valid stored state: sorted, disjoint
    got = overlay(disjoint_base, updates, start)
    assert _cells(got) == _naive(disjoint_base, updates, start)
    assert all(a.last_offset < b.first_offset for a, b in zip(got, got[1:], strict=False))
    # Coalesced: no two neighbours could be joined.
    assert not any(a.last_offset + 1 == b.first_offset and a.delivery_state == b.delivery_state
                   and a.delivery_count == b.delivery_count for a, b in zip(got, got[1:], strict=False))
