"""cocotb testbench of the multi-context KVMU against the golden model
:class:`heteroreason.model.spec.golden.multi_kvmu.GoldenMultiKvmu`: directed tests of the
context rules (isolation, ids out of range, contexts never initialised, KV regions, the round
robin), the paper's three scenarios interleaved across contexts, and constrained-random
sequences with every context interleaved at random under three traffic profiles. The checks
are the testbench class's (:class:`~heteroreason.sim.verify.tb.multi_kvmu_env.MultiKvmuTB`).
"""

from __future__ import annotations

import cocotb

from heteroreason.model.spec.golden.kvmu import KvmuState
from heteroreason.model.spec.golden.multi_kvmu import Activity
from heteroreason.model.spec.protocol import ContextError, Error, Mode, Op, Source
from heteroreason.sim.verify.tb.common import TRAFFIC_PROFILES, run_random_events, stimulus
from heteroreason.sim.verify.tb.multi_kvmu_env import MultiKvmuTB, prime, start

# ---------------------------------------------------------------- directed: the context rules


@cocotb.test()
async def events_to_one_context_leave_the_others(dut):
    tb = await start(dut, "events_to_one_context_leave_the_others")
    await prime(tb, 0, 5, 1)
    await prime(tb, 1, 9, 2)
    await tb.token(0, Source.DRAFT, step_end=True)        # context 0 submits [6, 7)
    for _ in range(3):
        await tb.token(1, Source.DRAFT)
    before = await tb.state_of(0)
    assert before[0] == KvmuState(6, 7, 7, Mode.SPECULATION, True, False, Error.NONE)
    outcome = await tb.command(1, Op.REJECT)              # illegal there: nothing pending
    assert outcome.outcome.error == Error.REJECT_WITHOUT_PENDING
    assert await tb.state_of(0) == before
    await tb.command(1, Op.CLEAR_ERROR)
    await tb.command(1, Op.INIT, 4)
    assert await tb.state_of(0) == before
    state, _, live = await tb.state_of(1)
    assert live and state == KvmuState(4, 4, 4, Mode.INITIALIZATION, False, False, Error.NONE)
    await tb.command(0, Op.ACCEPT)
    assert (await tb.state_of(0))[0].valid == 7
    await tb.drain()


@cocotb.test()
async def an_id_out_of_range_changes_no_context(dut):
    tb = await start(dut, "an_id_out_of_range_changes_no_context")
    await prime(tb, 0, 3, 1)
    bad = tb.contexts                                     # the first id out of range
    before = [await tb.state_of(c) for c in range(tb.contexts)]
    outcome = await tb.token(bad, Source.DRAFT)
    assert outcome.context_error == ContextError.CONTEXT_OUT_OF_RANGE
    await tb.command(tb.id_limit - 1, Op.INIT, 1)         # a second: the first id is kept
    assert int(dut.context_error.value) == ContextError.CONTEXT_OUT_OF_RANGE
    assert int(dut.bad_context.value) == bad
    assert [await tb.state_of(c) for c in range(tb.contexts)] == before
    await tb.command(tb.id_limit - 1, Op.CLEAR_ERROR)     # out of range: clears nothing
    assert int(dut.context_error.value) == ContextError.CONTEXT_OUT_OF_RANGE
    await tb.command(0, Op.CLEAR_ERROR)
    assert int(dut.context_error.value) == ContextError.NONE
    await tb.drain()


@cocotb.test()
async def a_context_never_initialised_refuses_all_but_init_and_clear(dut):
    tb = await start(dut, "a_context_never_initialised_refuses_all_but_init_and_clear")
    c = tb.contexts - 1
    for event in (lambda: tb.command(c, Op.ACCEPT), lambda: tb.command(c, Op.REJECT),
                  lambda: tb.token(c, Source.HOST, last=True)):
        outcome = await event()
        assert outcome.context_error == ContextError.CONTEXT_NOT_INITIALISED
        state, error, live = await tb.state_of(c)
        assert not live and error == ContextError.CONTEXT_NOT_INITIALISED
        assert state == KvmuState(0, 0, 0, Mode.INITIALIZATION, False, False, Error.NONE)
    outcome = await tb.command(c, Op.INIT, tb.capacity + 1)  # illegal: stays uninitialised
    assert outcome.outcome.error == Error.INIT_BEYOND_CAPACITY
    assert not (await tb.state_of(c))[2]
    await tb.command(c, Op.CLEAR_ERROR)
    assert await tb.state_of(c) == (KvmuState(0, 0, 0, Mode.INITIALIZATION, False, False,
                                              Error.NONE), ContextError.NONE, False)
    await tb.command(c, Op.INIT, 2)
    assert (await tb.state_of(c))[2]
    await tb.drain()


@cocotb.test()
async def each_context_writes_its_own_region(dut):
    tb = await start(dut, "each_context_writes_its_own_region")
    for c in range(tb.contexts):
        await tb.command(c, Op.INIT, c)
    for c in reversed(range(tb.contexts)):
        outcome = await tb.token(c, Source.HOST)
        assert outcome.outcome.write_pos == c
        assert outcome.write_address == c * tb.capacity + c
    await tb.drain()


@cocotb.test()
async def submissions_leave_in_turn(dut):
    """Every context submits while the output is stalled: each span leaves once, in turn."""
    tb = await start(dut, "submissions_leave_in_turn", backpressure=0.9)
    for c in range(tb.contexts):
        await prime(tb, c, 2 * c, 1)
    for c in range(tb.contexts):
        await tb.token(c, Source.DRAFT, step_end=True)
    for c in range(tb.contexts):
        await tb.token(c, Source.DRAFT, step_end=True)     # step ahead: stalls, no submit
        assert tb.golden.activity(c) is Activity.WAITING
    await tb.drain()
    assert tb.submits_seen == tb.contexts


# ---------------------------------------------------------------- the scenarios interleaved

@cocotb.test()
async def scenarios_interleaved(dut):
    """Accept in context 0, reject and refinement in 1, backtrack in 2, token by token."""
    tb = await start(dut, "scenarios_interleaved", idle=0.3, backpressure=0.3)
    await prime(tb, 0, 20, 1)
    await prime(tb, 1, 20, 1)
    await prime(tb, 2 % tb.contexts, 10, 1)
    for _ in range(4):
        await tb.token(0, Source.DRAFT)
        await tb.token(1, Source.DRAFT)
    await tb.token(0, Source.DRAFT, step_end=True)        # 0: [21, 26)
    await tb.token(1, Source.DRAFT, step_end=True)        # 1: [21, 26)
    await tb.token(2 % tb.contexts, Source.DRAFT, step_end=True)
    await tb.command(2 % tb.contexts, Op.ACCEPT)
    await tb.command(1, Op.REJECT)
    for i in range(3):
        await tb.token(0, Source.DRAFT)
        await tb.token(1, Source.HOST, last=i == 2)       # the target's step, shadow-ingested
    await tb.command(0, Op.ACCEPT)
    assert (await tb.state_of(0))[0] == KvmuState(26, 26, 29, Mode.ACCEPT, False, False,
                                                  Error.NONE)
    assert (await tb.state_of(1))[0] == KvmuState(24, 24, 24, Mode.SPECULATION, False, False,
                                                  Error.NONE)
    if tb.contexts > 2:
        await tb.token(2, Source.DRAFT, step_end=True)
        await tb.command(2, Op.REJECT)
        await tb.token(2, Source.HOST, last=True)
        await tb.command(2, Op.INIT, 11)                  # backtrack
        assert (await tb.state_of(2))[0] == KvmuState(11, 11, 11, Mode.INITIALIZATION, False,
                                                      False, Error.NONE)
    await tb.drain()


# ---------------------------------------------------------------- constrained random

def _late(tb: MultiKvmuTB) -> int | None:
    """The context that arrives late: sent only stray events for the first half of the run (it
    is never initialised until then), or None once it may start."""
    late = tb.contexts - 1
    return late if tb.contexts > 1 and tb.events < stimulus().random_events // 2 else None


def _random_command(tb: MultiKvmuTB):
    g, rng = tb.golden, tb.rng
    if rng.random() < 0.02:
        return {"ctx": rng.randrange(tb.id_limit), "op": rng.choice(list(Op)),
                "pos": rng.randrange(1 << tb.capacity.bit_length())}
    c = rng.randrange(tb.contexts)
    if c == _late(tb):
        return {"ctx": c, "op": rng.choice([Op.ACCEPT, Op.REJECT]), "pos": 0} \
            if rng.random() < 0.2 else None
    state = g.state(c)
    if not g.initialised(c):
        return {"ctx": c, "op": Op.INIT, "pos": rng.randint(0, tb.capacity // 2)}
    if (state.error != Error.NONE or g.error(c) != ContextError.NONE) and rng.random() < 0.3:
        return {"ctx": c, "op": Op.CLEAR_ERROR, "pos": 0}
    if state.pending and rng.random() < 0.3:
        return {"ctx": c, "op": Op.ACCEPT if rng.random() < 0.75 else Op.REJECT, "pos": 0}
    if state.ahead >= tb.capacity - 3 and rng.random() < 0.3:
        return {"ctx": c, "op": Op.INIT, "pos": rng.randint(0, state.valid)}
    return None


def _random_token(tb: MultiKvmuTB):
    """A token of a context that can take one (the pass scheduler's choice), rarely not."""
    g, rng = tb.golden, tb.rng
    if rng.random() < 0.02:
        return {"ctx": rng.randrange(tb.id_limit), "source": rng.choice(list(Source)),
                "last": rng.randrange(2), "step_end": rng.randrange(2)}
    if _late(tb) is not None and rng.random() < 0.01:
        return {"ctx": _late(tb), "source": Source.HOST, "last": 0, "step_end": 0}
    ready = [c for c in range(tb.contexts) if g.activity(c) in (Activity.INGESTING,
                                                                Activity.DRAFTING)
             and g.state(c).ahead < tb.capacity]
    if not ready or rng.random() < 0.2:
        return None
    c = rng.choice(ready)
    if g.activity(c) is Activity.INGESTING:
        return {"ctx": c, "source": Source.HOST, "last": int(rng.random() < 0.2), "step_end": 0}
    return {"ctx": c, "source": Source.DRAFT, "last": 0, "step_end": int(rng.random() < 0.15)}


@cocotb.test()
@cocotb.parametrize(TRAFFIC_PROFILES)
async def random_interleaved_contexts(dut, idle, backpressure):
    events = stimulus().random_events
    tb = await start(dut, f"random_interleaved_contexts[idle={idle},bp={backpressure}]",
                     idle=idle, backpressure=backpressure)
    tb.cmd.supplier = lambda: _random_command(tb)
    tb.alloc.supplier = lambda: _random_token(tb)
    await run_random_events(tb, events)
    tb.log.info("seed=%d: %d events, %d submissions (one waited behind at most %d), %d cycles, "
                "legal %s, illegal %s", tb.seed, tb.events, tb.submits_seen, tb.most_passed,
                tb.cycle, dict(tb.coverage), dict(tb.errors_seen))
    for label in ("INIT", "ACCEPT", "ACCEPT+submit", "REJECT", "CLEAR_ERROR", "HOST", "DRAFT",
                  "DRAFT+submit"):
        assert tb.coverage[label] > 0, f"{label} never happened: {dict(tb.coverage)}"
    for error in ("CONTEXT_OUT_OF_RANGE", "CONTEXT_NOT_INITIALISED"):
        assert tb.errors_seen[error] > 0, f"{error} never happened: {dict(tb.errors_seen)}"
    assert tb.submits_seen > events // 50, "too few submissions: the generator is off"
    if backpressure >= 0.5 and tb.contexts > 1:
        assert tb.most_passed >= 1, "no submission ever waited for another's: no contention"
