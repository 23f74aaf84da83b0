"""cocotb testbench of the KVMU against the golden model
:class:`heteroreason.model.spec.golden.kvmu.GoldenKvmu`.

Every cycle the RTL's registers are compared with the golden model, every transfer on ``cmd``
and ``alloc`` is applied to the model, ``write_pos``/``attn_len``/``flush`` are checked in the
cycle of the transfer, the readiness of both input streams is predicted exactly, and every beat
on ``submit`` is matched in order against the spans the model submitted: the testbench class
(:class:`~heteroreason.sim.verify.tb.kvmu_env.KvmuTB`) does the checks, this module's directed
scenarios and random test drive it.
"""

from __future__ import annotations

import cocotb

from heteroreason.model.spec.golden.kvmu import KvmuState
from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.sim.verify.tb.common import TRAFFIC_PROFILES, run_random_events, stimulus
from heteroreason.sim.verify.tb.kvmu_env import KvmuTB, prime, start

# ---------------------------------------------------------------- directed: the event table

@cocotb.test()
async def init_sets_every_pointer(dut):
    tb = await start(dut, "init_sets_every_pointer")
    outcome = await tb.command(Op.INIT, 7)
    assert outcome.flushed and outcome.error == Error.NONE
    assert tb.rtl_state() == KvmuState(7, 7, 7, Mode.INITIALIZATION, False, False, Error.NONE)
    await tb.command(Op.INIT, tb.capacity)
    assert tb.rtl_state().ahead == tb.capacity
    await tb.drain()


@cocotb.test()
async def host_tokens_then_last_start_speculation(dut):
    tb = await start(dut, "host_tokens_then_last_start_speculation")
    await tb.command(Op.INIT, 4)
    outcome = await tb.token(Source.HOST)
    assert outcome.write_pos == 4
    assert tb.rtl_state() == KvmuState(4, 4, 5, Mode.INITIALIZATION, False, False, Error.NONE)
    await tb.token(Source.HOST, last=True)
    assert tb.rtl_state() == KvmuState(6, 6, 6, Mode.SPECULATION, False, False, Error.NONE)
    await tb.drain()


@cocotb.test()
async def draft_tokens_advance_only_ahead(dut):
    tb = await start(dut, "draft_tokens_advance_only_ahead")
    await prime(tb, 3, 1)
    for _ in range(5):
        await tb.token(Source.DRAFT)
    assert tb.rtl_state() == KvmuState(4, 4, 9, Mode.SPECULATION, False, False, Error.NONE)
    await tb.drain()


@cocotb.test()
async def step_end_submits_step(dut):
    tb = await start(dut, "step_end_submits_step")
    await prime(tb, 3, 1)
    await tb.token(Source.DRAFT)
    outcome = await tb.token(Source.DRAFT, step_end=True)
    assert outcome.submitted == (4, 6)
    assert tb.rtl_state() == KvmuState(4, 6, 6, Mode.SPECULATION, True, False, Error.NONE)
    await tb.drain()
    assert tb.submits_seen == 1


@cocotb.test()
async def step_end_while_pending_stalls(dut):
    tb = await start(dut, "step_end_while_pending_stalls")
    await prime(tb, 0, 1)
    await tb.token(Source.DRAFT, step_end=True)          # step [1, 2) submitted
    await tb.token(Source.DRAFT)
    outcome = await tb.token(Source.DRAFT, step_end=True)  # step-ahead step [2, 4) complete
    assert outcome.submitted is None
    assert tb.rtl_state() == KvmuState(1, 2, 4, Mode.SPECULATION, True, True, Error.NONE)
    await tb.drain()


@cocotb.test()
async def accept_commits_and_waits_for_next_step_end(dut):
    tb = await start(dut, "accept_commits_and_waits_for_next_step_end")
    await prime(tb, 0, 1)
    await tb.token(Source.DRAFT, step_end=True)
    await tb.token(Source.DRAFT)
    await tb.command(Op.ACCEPT)
    assert tb.rtl_state() == KvmuState(2, 2, 3, Mode.ACCEPT, False, False, Error.NONE)
    outcome = await tb.token(Source.DRAFT, step_end=True)
    assert outcome.submitted == (2, 4)
    assert tb.rtl_state().mode == Mode.SPECULATION
    await tb.drain()


@cocotb.test()
async def accept_with_step_ahead_complete_submits_at_once(dut):
    tb = await start(dut, "accept_with_step_ahead_complete_submits_at_once")
    await prime(tb, 0, 1)
    await tb.token(Source.DRAFT, step_end=True)
    await tb.token(Source.DRAFT, step_end=True)
    outcome = await tb.command(Op.ACCEPT)
    assert outcome.submitted == (2, 3)
    assert tb.rtl_state() == KvmuState(2, 3, 3, Mode.ACCEPT, True, False, Error.NONE)
    await tb.drain()
    assert tb.submits_seen == 2


@cocotb.test()
async def reject_rolls_back(dut):
    tb = await start(dut, "reject_rolls_back")
    await prime(tb, 5, 2)
    await tb.token(Source.DRAFT, step_end=True)
    await tb.token(Source.DRAFT)
    await tb.token(Source.DRAFT, step_end=True)
    outcome = await tb.command(Op.REJECT)
    assert outcome.flushed
    assert tb.rtl_state() == KvmuState(7, 7, 7, Mode.ROLLBACK, False, False, Error.NONE)
    await tb.drain()


@cocotb.test()
async def illegal_events_change_nothing(dut):
    tb = await start(dut, "illegal_events_change_nothing")
    cap = tb.capacity
    cases = [
        (lambda: tb.command(Op.ACCEPT), Error.ACCEPT_WITHOUT_PENDING),
        (lambda: tb.command(Op.REJECT), Error.REJECT_WITHOUT_PENDING),
        (lambda: tb.token(Source.DRAFT), Error.DRAFT_TOKEN_OUTSIDE_SPECULATION),
    ]
    if cap + 1 < (1 << cap.bit_length()):
        cases.append((lambda: tb.command(Op.INIT, cap + 1), Error.INIT_BEYOND_CAPACITY))
    await tb.command(Op.INIT, 2)
    for make, code in cases:
        before = tb.rtl_state()
        outcome = await make()
        assert outcome.error == code, (outcome, code)
        after = tb.rtl_state()
        assert after == KvmuState(before.valid, before.curr, before.ahead, before.mode,
                                  before.pending, before.stalled, code), after
        await tb.command(Op.CLEAR_ERROR)
        assert tb.rtl_state().error == Error.NONE
    # Speculation: a host token is illegal; stalled: a draft token is illegal
    await tb.token(Source.HOST, last=True)
    assert (await tb.token(Source.HOST)).error == Error.HOST_TOKEN_IN_SPECULATION
    await tb.command(Op.CLEAR_ERROR)
    await tb.token(Source.DRAFT, step_end=True)
    await tb.token(Source.DRAFT, step_end=True)
    before = tb.rtl_state()
    assert (await tb.token(Source.DRAFT)).error == Error.DRAFT_TOKEN_WHILE_STALLED
    assert tb.rtl_state().ahead == before.ahead
    # the first error sticks until cleared
    assert (await tb.token(Source.HOST)).error == Error.HOST_TOKEN_IN_SPECULATION
    assert tb.rtl_state().error == Error.DRAFT_TOKEN_WHILE_STALLED
    await tb.command(Op.CLEAR_ERROR)
    # a write at capacity
    await tb.command(Op.INIT, cap - 1)
    await tb.token(Source.HOST, last=True)
    before = tb.rtl_state()
    assert (await tb.token(Source.DRAFT)).error == Error.WRITE_AT_CAPACITY
    assert tb.rtl_state() == KvmuState(cap, cap, cap, Mode.SPECULATION, False, False,
                                       Error.WRITE_AT_CAPACITY), before
    await tb.command(Op.INIT, cap)
    assert (await tb.token(Source.HOST, last=True)).error == Error.WRITE_AT_CAPACITY
    await tb.drain()


# ---------------------------------------------------------------- directed: the paper's scenarios

@cocotb.test()
async def scenario_accept(dut):
    """Prompt migrated, first token, step 1 drafted and accepted while step 2 drafts ahead."""
    tb = await start(dut, "scenario_accept")
    await prime(tb, 20, 1)                        # prompt KV in [0, 20), GPU's first token
    for _ in range(4):
        await tb.token(Source.DRAFT)
    await tb.token(Source.DRAFT, step_end=True)   # step 1 = [21, 26) submitted to the PRM
    for _ in range(3):
        await tb.token(Source.DRAFT)              # step 2 drafted ahead
    await tb.command(Op.ACCEPT)
    assert tb.rtl_state() == KvmuState(26, 26, 29, Mode.ACCEPT, False, False, Error.NONE)
    await tb.token(Source.DRAFT, step_end=True)   # step 2 = [26, 30) submitted
    await tb.command(Op.ACCEPT)
    assert tb.rtl_state() == KvmuState(30, 30, 30, Mode.ACCEPT, False, False, Error.NONE)
    await tb.drain()
    assert tb.submits_seen == 2


@cocotb.test()
async def scenario_reject_refinement(dut):
    """Step rejected: rollback, the target's refined step is shadow-ingested, drafting resumes."""
    tb = await start(dut, "scenario_reject_refinement")
    await prime(tb, 20, 1)
    for _ in range(5):
        await tb.token(Source.DRAFT)
    await tb.token(Source.DRAFT, step_end=True)   # step [21, 27)
    await tb.token(Source.DRAFT)                  # step-ahead work, to be squashed
    await tb.command(Op.REJECT)
    assert tb.rtl_state() == KvmuState(21, 21, 21, Mode.ROLLBACK, False, False, Error.NONE)
    positions = [(await tb.token(Source.HOST, last=i == 7)).write_pos for i in range(8)]
    assert positions == list(range(21, 29))
    assert tb.rtl_state() == KvmuState(29, 29, 29, Mode.SPECULATION, False, False, Error.NONE)
    await tb.token(Source.DRAFT, step_end=True)
    assert tb.rtl_state().curr == 30
    await tb.drain()


@cocotb.test()
async def scenario_reject_backtrack(dut):
    """The refined step fails too: the host backtracks with INIT to the previous step's start."""
    tb = await start(dut, "scenario_reject_backtrack")
    await prime(tb, 10, 1)
    await tb.token(Source.DRAFT, step_end=True)   # step 1 [11, 12)
    await tb.command(Op.ACCEPT)
    await tb.token(Source.DRAFT)
    await tb.token(Source.DRAFT, step_end=True)   # step 2 [12, 14)
    await tb.command(Op.REJECT)
    for i in range(3):                             # target's step 2, shadow-ingested
        await tb.token(Source.HOST, last=i == 2)
    assert tb.rtl_state().valid == 15
    outcome = await tb.command(Op.INIT, 11)        # backtrack: step 1 dropped
    assert outcome.flushed
    assert tb.rtl_state() == KvmuState(11, 11, 11, Mode.INITIALIZATION, False, False, Error.NONE)
    for i in range(4):                             # target regenerates step 1
        await tb.token(Source.HOST, last=i == 3)
    assert tb.rtl_state() == KvmuState(15, 15, 15, Mode.SPECULATION, False, False, Error.NONE)
    await tb.drain()


# ---------------------------------------------------------------- constrained random

def _random_command(tb: KvmuTB):
    g, rng = tb.golden, tb.rng
    width = tb.capacity.bit_length()
    if rng.random() < 0.01:
        return {"op": rng.choice(list(Op)), "pos": rng.randrange(1 << width)}
    if g.error != Error.NONE and rng.random() < 0.3:
        return {"op": Op.CLEAR_ERROR, "pos": 0}
    if g.pending and rng.random() < 0.15:
        return {"op": Op.ACCEPT if rng.random() < 0.75 else Op.REJECT, "pos": 0}
    if g.ahead >= tb.capacity - 3 and rng.random() < 0.2:
        return {"op": Op.INIT, "pos": rng.randint(0, g.valid)}
    if rng.random() < 0.004:
        return {"op": Op.INIT, "pos": rng.randint(0, tb.capacity)}
    return None


def _random_token(tb: KvmuTB):
    g, rng = tb.golden, tb.rng
    if rng.random() < 0.01:
        return {"source": rng.choice(list(Source)), "last": rng.randrange(2),
                "step_end": rng.randrange(2)}
    if rng.random() < 0.3 or (g.ahead == tb.capacity and rng.random() < 0.9):
        return None  # the decoder is busy, or waits for the host to make room
    if g.mode.takes_host_tokens:
        return {"source": Source.HOST, "last": int(rng.random() < 0.2), "step_end": 0}
    if not g.stalled:
        return {"source": Source.DRAFT, "last": 0, "step_end": int(rng.random() < 0.15)}
    return None


@cocotb.test()
@cocotb.parametrize(TRAFFIC_PROFILES)
async def random_sequences(dut, idle, backpressure):
    events = stimulus().random_events
    tb = await start(dut, f"random_sequences[idle={idle},bp={backpressure}]",
                     idle=idle, backpressure=backpressure)
    tb.cmd.supplier = lambda: _random_command(tb)
    tb.alloc.supplier = lambda: _random_token(tb)
    await run_random_events(tb, events)
    tb.log.info("seed=%d: %d events, %d submissions, %d cycles, legal %s, illegal %s", tb.seed,
                tb.events, tb.submits_seen, tb.cycle, dict(tb.coverage),
                {e.name: n for e, n in tb.errors_seen.items()})
    for label in ("INIT", "ACCEPT", "ACCEPT+submit", "REJECT", "CLEAR_ERROR", "HOST", "HOST+last",
                  "DRAFT", "DRAFT+submit", "DRAFT+stall"):
        assert tb.coverage[label] > 0, f"{label} never happened: {dict(tb.coverage)}"
    assert tb.submits_seen > events // 50, "too few submissions: the generator is off"
    assert len(tb.errors_seen) >= 5, f"illegal events poorly covered: {dict(tb.errors_seen)}"
