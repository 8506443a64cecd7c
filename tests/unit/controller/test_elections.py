"""Leader election algorithms: who is elected and how the epochs move."""

from controller.elections import next_state, offline_election, preferred_election
from controller.zk_data import LeaderIsrAndControllerEpoch as S
from protocol.errors import ErrorCode


def test_next_state_epochs():
    assert next_state(None, 1, (1,), 3) == S(1, 0, (1,), 3, 0)
    assert next_state(S(2, 4, (2, 1), 1, 7), 1, (1,), 3) == S(1, 5, (1,), 3, 8)


def test_offline_election_clean_then_unclean():
    st = S(2, 4, (2, 3), 1, 0)
    # 3 is live and in the ISR: clean election, ISR shrinks to live members
    assert offline_election((1, 2, 3), st, {1, 3}, False, 9) == S(3, 5, (3,), 9, 1)
    # only 1 is live and it is not in the ISR: none unless unclean is allowed
    assert offline_election((1, 2, 3), st, {1}, False, 9) is None
    assert offline_election((1, 2, 3), st, {1}, True, 9) == S(1, 5, (1,), 9, 1)
    assert offline_election((1, 2), st, set(), True, 9) is None
    # no state yet: the first live replica, epoch 0
    assert offline_election((2, 1), None, {1}, False, 4) == S(1, 0, (1,), 4, 0)


def test_preferred_election():
    assert preferred_election((1, 2), S(1, 0, (1, 2), 1, 0), {1, 2}, 2) == (
        ErrorCode.ELECTION_NOT_NEEDED, None)
    assert preferred_election((1, 2), S(2, 3, (2,), 1, 0), {1, 2}, 2) == (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    assert preferred_election((1, 2), S(2, 3, (2, 1), 1, 0), {2}, 2) == (
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None)
    assert preferred_election((1, 2), S(2, 3, (2, 1), 1, 5), {1, 2}, 2) == (
        ErrorCode.NONE, S(1, 4, (2, 1), 2, 6))
