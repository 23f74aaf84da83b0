"""The multi-context KVMU's golden model (docs/design.md §4.6): each context behaves as a
single-context KVMU fed only its own events, an event never touches another context, and the
context errors are refused without a change."""

from __future__ import annotations

import random

import pytest

from heteroreason.model.spec.golden.kvmu import GoldenKvmu
from heteroreason.model.spec.golden.multi_kvmu import Activity, ContextError, GoldenMultiKvmu
from heteroreason.model.spec.protocol import Error, Op, Source

SEED = 20261205


def _event(rng, contexts, capacity):
    ctx = rng.randrange(contexts + 1) if rng.random() < 0.05 else rng.randrange(contexts)
    roll = rng.random()
    if roll < 0.12:
        return ctx, ("command", Op.INIT, rng.randint(0, capacity + 1))
    if roll < 0.22:
        return ctx, ("command", rng.choice([Op.ACCEPT, Op.REJECT]), 0)
    if roll < 0.25:
        return ctx, ("command", Op.CLEAR_ERROR, 0)
    if roll < 0.55:
        return ctx, ("token", Source.HOST, rng.random() < 0.2)
    return ctx, ("token", Source.DRAFT, rng.random() < 0.25)


def _apply(model, ctx, event):
    kind, what, arg = event
    if kind == "command":
        return model.command(ctx, what, arg) if ctx is not None else None
    if what is Source.HOST:
        return model.token(ctx, what, last=arg)
    return model.token(ctx, what, step_end=arg)


def _apply_single(kvmu, event):
    kind, what, arg = event
    if kind == "command":
        return kvmu.command(what, arg)
    return kvmu.token(what, last=arg) if what is Source.HOST else kvmu.token(what, step_end=arg)


@pytest.mark.parametrize("contexts", [1, 2, 3, 6])
@pytest.mark.parametrize("trial", range(4))
def test_each_context_is_a_single_kvmu_of_its_own_events(contexts, trial):
    seed = SEED + 100 * contexts + trial
    rng = random.Random(seed)
    capacity = rng.choice([4, 9, 40])
    multi = GoldenMultiKvmu(contexts=contexts, capacity=capacity)
    singles = [GoldenKvmu(capacity=capacity) for _ in range(contexts)]
    started = [False] * contexts
    for step in range(3000):
        ctx, event = _event(rng, contexts, capacity)
        before = [multi.state(c) for c in range(contexts)]
        got = _apply(multi, ctx, event)
        where = f"seed {seed}, event {step}: {ctx} {event}"
        if ctx >= contexts:
            assert got.context_error is ContextError.CONTEXT_OUT_OF_RANGE, where
            assert multi.context_error is ContextError.CONTEXT_OUT_OF_RANGE, where
        elif not started[ctx] and event[:2] not in (("command", Op.INIT),
                                                   ("command", Op.CLEAR_ERROR)):
            assert got.context_error is ContextError.CONTEXT_NOT_INITIALISED, where
            assert multi.error(ctx) is ContextError.CONTEXT_NOT_INITIALISED, where
        else:
            want = _apply_single(singles[ctx], event)
            assert got.outcome == want, where
            assert got.context_error is ContextError.NONE, where
            assert got.write_address == (None if want.write_pos is None
                                         else ctx * capacity + want.write_pos), where
            if event[:2] == ("command", Op.INIT) and want.error is Error.NONE:
                started[ctx] = True
        for c in range(contexts):
            if c != ctx:  # isolation: no other context moved
                assert multi.state(c) == before[c], where
            if started[c]:
                assert multi.state(c) == singles[c].state(), where
            assert multi.initialised(c) == started[c], where


def test_an_id_out_of_range_changes_nothing_and_is_kept_until_cleared():
    multi = GoldenMultiKvmu(contexts=2, capacity=8)
    multi.command(0, Op.INIT, 3)
    before = [multi.state(c) for c in range(2)]
    out = multi.token(5, Source.HOST, last=True)
    assert out.context_error is ContextError.CONTEXT_OUT_OF_RANGE and out.write_address is None
    multi.command(7, Op.ACCEPT)
    assert (multi.context_error, multi.bad_context) == (ContextError.CONTEXT_OUT_OF_RANGE, 5)
    assert [multi.state(c) for c in range(2)] == before
    multi.command(1, Op.CLEAR_ERROR)
    assert (multi.context_error, multi.bad_context) == (ContextError.NONE, None)
    assert [multi.state(c) for c in range(2)] == before


def test_an_uninitialised_context_takes_only_init():
    multi = GoldenMultiKvmu(contexts=3, capacity=8)
    assert multi.activity(2) is Activity.IDLE
    assert multi.token(2, Source.HOST).context_error is ContextError.CONTEXT_NOT_INITIALISED
    assert multi.command(2, Op.ACCEPT).context_error is ContextError.CONTEXT_NOT_INITIALISED
    assert multi.error(2) is ContextError.CONTEXT_NOT_INITIALISED
    assert multi.error(1) is ContextError.NONE
    assert multi.command(2, Op.INIT, 9).outcome.error is Error.INIT_BEYOND_CAPACITY
    assert not multi.initialised(2)
    multi.command(2, Op.INIT, 4)
    assert multi.initialised(2) and multi.activity(2) is Activity.INGESTING
    assert multi.token(2, Source.HOST, last=True).write_address == 2 * 8 + 4
    assert multi.activity(2) is Activity.DRAFTING
    multi.token(2, Source.DRAFT, step_end=True)  # submitted: drafting goes on step-ahead
    assert multi.activity(2) is Activity.DRAFTING
    multi.token(2, Source.DRAFT, step_end=True)  # the step-ahead step ends: stalled
    assert multi.activity(2) is Activity.WAITING
    multi.command(2, Op.CLEAR_ERROR)
    assert multi.error(2) is ContextError.NONE


@pytest.mark.parametrize("kwargs, match", [
    ({"contexts": 0, "capacity": 4}, "contexts must be a positive integer, not 0"),
    ({"contexts": 2, "capacity": 0}, "capacity must be a positive integer, not 0"),
])
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GoldenMultiKvmu(**kwargs)


def test_a_query_of_an_id_out_of_range_is_refused():
    multi = GoldenMultiKvmu(contexts=2, capacity=4)
    with pytest.raises(ValueError, match=r"context id must be an integer in \[0, 1\] \(2 "
                                         r"contexts\), not 2"):
        multi.state(2)
