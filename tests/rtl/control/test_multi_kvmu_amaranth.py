# amaranth: UnusedElaboratable=no
"""Fast feedback: the multi-context KVMU in Amaranth's simulator against the golden model
(every context's state compared every cycle; submissions matched in order per context)."""

import random
import re
from collections import deque

import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.golden.kvmu import KvmuState
from heteroreason.model.spec.golden.multi_kvmu import GoldenMultiKvmu
from heteroreason.model.spec.protocol import ContextError, Error, Mode, Op, Source
from heteroreason.rtl.multi_kvmu import MultiKvmu, context_id_bits


@pytest.mark.parametrize(("name", "value", "bound"), [
    ("contexts", 0, "1,024"), ("contexts", 1025, "1,024"), ("contexts", 2.0, "1,024"),
    ("capacity", 0, "1,048,576")])
def test_parameters_are_validated(name, value, bound):
    kwargs = {"contexts": 4, "capacity": 16} | {name: value}
    with pytest.raises(TypeError, match=rf"^{name} must be an integer in \[1, {bound}\], not "
                                        rf"{re.escape(repr(value))}$"):
        MultiKvmu(**kwargs)


@pytest.mark.parametrize(("contexts", "bits"), [(1, 1), (2, 2), (3, 2), (4, 3), (16, 5)])
def test_an_id_out_of_range_can_always_be_sent(contexts, bits):
    assert context_id_bits(contexts) == bits
    assert (1 << bits) > contexts


def _state(ctx, dut, i):
    kvmu = dut.kvmus[i]
    return KvmuState(ctx.get(kvmu.valid_ptr), ctx.get(kvmu.curr_ptr), ctx.get(kvmu.ahead_ptr),
                     Mode(ctx.get(kvmu.mode)), bool(ctx.get(kvmu.pending)),
                     bool(ctx.get(kvmu.stalled)), Error(ctx.get(kvmu.error)))


def _random_event(rng, golden, contexts, capacity):
    """A command or a token, mostly legal, to a context chosen at random (rarely out of range)."""
    ctx = rng.randrange(1 << context_id_bits(contexts)) if rng.random() < 0.03 else \
        rng.randrange(contexts)
    if rng.random() < 0.35:
        if ctx < contexts and not golden.initialised(ctx) and rng.random() < 0.7:
            return "cmd", ctx, (Op.INIT, rng.randint(0, capacity // 2))
        if ctx < contexts and golden.state(ctx).ahead >= capacity - 2:
            return "cmd", ctx, (Op.INIT, rng.randint(0, golden.state(ctx).valid))
        op = rng.choice([Op.ACCEPT, Op.ACCEPT, Op.REJECT, Op.CLEAR_ERROR, Op.INIT])
        return "cmd", ctx, (op, rng.randint(0, capacity + 1) if op is Op.INIT else 0)
    host = ctx < contexts and golden.state(ctx).mode.takes_host_tokens
    source = Source.HOST if (host and rng.random() < 0.9) else Source.DRAFT
    return "tok", ctx, (source, rng.random() < 0.2, rng.random() < 0.2)


@pytest.mark.parametrize(("contexts", "seed"), [(3, 21), (4, 22), (5, 23)])
def test_random_interleaved_contexts_match_golden(contexts, seed):
    capacity = 12
    rng = random.Random(seed)
    dut = MultiKvmu(contexts=contexts, capacity=capacity)
    golden = GoldenMultiKvmu(contexts=contexts, capacity=capacity)
    stats = {"events": 0, "submits": 0, "refused": 0, "contended": 0}
    expected = {i: deque() for i in range(contexts)}

    async def bench(ctx):
        cmd = tok = None
        after = 0  # the context granted last (the round robin starts after context 0)
        for cycle in range(4000):
            where = f"seed={seed} cycle={cycle}"
            if cmd is None and rng.random() < 0.5:
                kind, c, args = _random_event(rng, golden, contexts, capacity)
                cmd = (c, args) if kind == "cmd" else None
                tok = (c, args) if kind == "tok" and tok is None else tok
            if tok is None and rng.random() < 0.4:
                kind, c, args = _random_event(rng, golden, contexts, capacity)
                tok = (c, args) if kind == "tok" else None
            ctx.set(dut.cmd.valid, cmd is not None)
            if cmd is not None:
                ctx.set(dut.cmd.payload.ctx, cmd[0])
                ctx.set(dut.cmd.payload.op, cmd[1][0])
                ctx.set(dut.cmd.payload.pos, cmd[1][1])
            ctx.set(dut.alloc.valid, tok is not None)
            if tok is not None:
                ctx.set(dut.alloc.payload.ctx, tok[0])
                ctx.set(dut.alloc.payload.source, tok[1][0])
                ctx.set(dut.alloc.payload.last, tok[1][1])
                ctx.set(dut.alloc.payload.step_end, tok[1][2])
            # backpressure at random, and held off a stretch of 120 cycles in every 200 (several
            # contexts' submissions then wait together for the round robin)
            ctx.set(dut.submit.ready, cycle % 200 >= 120 and rng.random() < 0.6)
            ctx.set(dut.view, rng.randrange(contexts))
            # the round robin, naively: the first holding context after the last granted one
            holding = [i for i in range(contexts) if ctx.get(dut.holding) >> i & 1]
            granted = [i for i, k in enumerate(dut.kvmus)
                       if ctx.get(k.submit.valid) and ctx.get(k.submit.ready)]
            if granted:
                assert granted == [min(holding, key=lambda i: (i - after - 1) % contexts)], \
                    (where, holding, after, granted)
                stats["contended"] += len(holding) > 1
                after = granted[0]
            if ctx.get(dut.submit.valid) and ctx.get(dut.submit.ready):
                c = ctx.get(dut.submit.payload.ctx)
                span = (ctx.get(dut.submit.payload.start), ctx.get(dut.submit.payload.end))
                assert expected[c] and span == expected[c].popleft(), (where, c, span)
                stats["submits"] += 1
            outcome = None
            if tok is not None and ctx.get(dut.alloc.ready):
                c, (source, last, step_end) = tok
                outcome = golden.token(c, source, last=last, step_end=step_end)
                if outcome.write_address is not None:
                    assert ctx.get(dut.write_addr) == outcome.write_address, where
                    assert ctx.get(dut.write_pos) == outcome.outcome.write_pos, where
                tok = None
            elif cmd is not None and ctx.get(dut.cmd.ready):
                c, (op, pos) = cmd
                outcome = golden.command(c, op, pos)
                flushed = outcome.outcome.flushed
                assert ctx.get(dut.flush) == flushed, where
                assert not flushed or ctx.get(dut.flush_ctx) == c, where
                cmd = None
            else:
                assert not ctx.get(dut.flush), where
            if outcome is not None:
                stats["events"] += 1
                stats["refused"] += outcome.context_error is not ContextError.NONE
                if outcome.outcome.submitted is not None:
                    expected[c].append(outcome.outcome.submitted)
            await ctx.tick()
            for i in range(contexts):
                assert _state(ctx, dut, i) == golden.state(i), (where, i)
                assert bool((ctx.get(dut.initialised) >> i) & 1) == golden.initialised(i)
                assert ContextError(ctx.get(dut.context_errors[i])) == golden.error(i), where
            assert ContextError(ctx.get(dut.context_error)) == golden.context_error, where
            if golden.bad_context is not None:
                assert ctx.get(dut.bad_context) == golden.bad_context, where
            view = ctx.get(dut.view)
            assert ctx.get(dut.view_state.ahead) == golden.state(view).ahead, where

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert stats["events"] > 1500, stats
    assert stats["submits"] > 50, stats
    assert stats["refused"] > 20, stats
    assert stats["contended"] > 5, stats  # grants among several waiting contexts
