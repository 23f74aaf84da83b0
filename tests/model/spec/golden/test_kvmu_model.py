"""The golden KVMU, event by event against docs/design.md §4.1."""

import re

import pytest

from heteroreason.model.spec.golden.kvmu import GoldenKvmu, KvmuState
from heteroreason.model.spec.protocol import Error, Mode, Op, Source


def drafting(pos=10, capacity=64):
    kvmu = GoldenKvmu(capacity=capacity)
    kvmu.init(pos)
    kvmu.host_token(last=True)
    return kvmu


def test_reset_state():
    assert GoldenKvmu(capacity=8).state() == KvmuState(0, 0, 0, Mode.INITIALIZATION, False, False,
                                                 Error.NONE)


@pytest.mark.parametrize("capacity", [0, -1, 2.5, True, "8"])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match=rf"^capacity must be a positive integer, not "
                                         rf"{re.escape(repr(capacity))}$"):
        GoldenKvmu(capacity=capacity)


def test_init_and_host_tokens():
    kvmu = GoldenKvmu(capacity=64)
    assert kvmu.init(5).flushed
    assert kvmu.host_token(last=False).write_pos == 5
    assert kvmu.state() == KvmuState(5, 5, 6, Mode.INITIALIZATION, False, False, Error.NONE)
    kvmu.host_token(last=True)
    assert kvmu.state() == KvmuState(7, 7, 7, Mode.SPECULATION, False, False, Error.NONE)


def test_step_end_submits_then_stalls():
    kvmu = drafting()
    kvmu.draft_token(step_end=False)
    assert kvmu.draft_token(step_end=True).submitted == (11, 13)
    kvmu.draft_token(step_end=False)
    outcome = kvmu.draft_token(step_end=True)
    assert outcome.submitted is None and kvmu.stalled
    assert kvmu.state() == KvmuState(11, 13, 15, Mode.SPECULATION, True, True, Error.NONE)


def test_accept_without_step_ahead():
    kvmu = drafting()
    kvmu.draft_token(step_end=True)
    kvmu.draft_token(step_end=False)
    outcome = kvmu.accept()
    assert outcome.submitted is None
    assert kvmu.state() == KvmuState(12, 12, 13, Mode.ACCEPT, False, False, Error.NONE)
    kvmu.draft_token(step_end=False)
    assert kvmu.mode == Mode.SPECULATION


def test_accept_with_step_ahead_complete_submits_it():
    kvmu = drafting()
    kvmu.draft_token(step_end=True)
    kvmu.draft_token(step_end=True)
    assert kvmu.accept().submitted == (12, 13)
    assert kvmu.state() == KvmuState(12, 13, 13, Mode.ACCEPT, True, False, Error.NONE)


def test_reject_rolls_back():
    kvmu = drafting()
    kvmu.draft_token(step_end=True)
    kvmu.draft_token(step_end=True)
    assert kvmu.reject().flushed
    assert kvmu.state() == KvmuState(11, 11, 11, Mode.ROLLBACK, False, False, Error.NONE)


@pytest.mark.parametrize("make, code", [
    (lambda k: k.accept(), Error.ACCEPT_WITHOUT_PENDING),
    (lambda k: k.reject(), Error.REJECT_WITHOUT_PENDING),
    (lambda k: k.init(65), Error.INIT_BEYOND_CAPACITY),
    (lambda k: k.host_token(last=False), Error.HOST_TOKEN_IN_SPECULATION),
])
def test_illegal_events_change_nothing(make, code):
    kvmu = drafting()
    before = kvmu.state()
    outcome = make(kvmu)
    assert outcome.error == code and not outcome.flushed and outcome.submitted is None
    after = kvmu.state()
    assert (after.valid, after.curr, after.ahead, after.mode) == (
        before.valid, before.curr, before.ahead, before.mode)
    assert after.error == code


def test_draft_outside_speculation_and_while_stalled_and_at_capacity():
    kvmu = GoldenKvmu(capacity=4)
    assert kvmu.draft_token(step_end=False).error == Error.DRAFT_TOKEN_OUTSIDE_SPECULATION
    kvmu.clear_error()
    kvmu.init(1)
    kvmu.host_token(last=True)
    kvmu.draft_token(step_end=True)
    kvmu.draft_token(step_end=True)
    assert kvmu.draft_token(step_end=False).error == Error.DRAFT_TOKEN_WHILE_STALLED
    kvmu.clear_error()
    kvmu.accept()
    assert kvmu.ahead == 4
    assert kvmu.draft_token(step_end=False).error == Error.WRITE_AT_CAPACITY
    assert kvmu.ahead == 4


def test_error_is_sticky_first_wins_until_clear():
    kvmu = GoldenKvmu(capacity=8)
    kvmu.accept()
    kvmu.reject()
    assert kvmu.error == Error.ACCEPT_WITHOUT_PENDING
    kvmu.command(Op.CLEAR_ERROR)
    assert kvmu.error == Error.NONE


def test_error_precedence_mode_before_capacity():
    kvmu = GoldenKvmu(capacity=2)
    kvmu.init(2)
    assert kvmu.token(Source.DRAFT, step_end=True).error == Error.DRAFT_TOKEN_OUTSIDE_SPECULATION


def test_init_at_capacity_is_legal_and_init_negative_is_a_caller_bug():
    kvmu = GoldenKvmu(capacity=8)
    assert kvmu.init(8).error == Error.NONE
    with pytest.raises(ValueError, match=r"^pos must be a non-negative integer, not -1$"):
        kvmu.init(-1)


def test_event_arguments_of_the_wrong_type_are_caller_bugs():
    kvmu = GoldenKvmu(capacity=8)
    with pytest.raises(ValueError, match=r"^pos must be a non-negative integer, not 2\.5$"):
        kvmu.init(2.5)
    with pytest.raises(ValueError, match=r"^last must be a bool, not 'no'$"):
        kvmu.host_token(last="no")
    with pytest.raises(ValueError, match=r"^step_end must be a bool, not 1$"):
        kvmu.draft_token(step_end=1)
    assert kvmu.state() == GoldenKvmu(capacity=8).state(), "a refused call changes nothing"
