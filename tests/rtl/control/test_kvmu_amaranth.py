# amaranth: UnusedElaboratable=no
"""Fast feedback: the KVMU in Amaranth's simulator against the golden model."""

import random
import re

import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.golden.kvmu import GoldenKvmu, KvmuState
from heteroreason.model.spec.protocol import Error, Mode, Op, Source
from heteroreason.rtl.kvmu import Kvmu as KvmuRtl


@pytest.mark.parametrize("capacity", [0, -3, 1.5, None, True])
def test_capacity_is_validated(capacity):
    with pytest.raises(TypeError, match=rf"^capacity must be an integer in \[1, 1,048,576\], not "
                                        rf"{re.escape(repr(capacity))}$"):
        KvmuRtl(capacity=capacity)


def test_capacity_is_read_only():
    kvmu = KvmuRtl(capacity=32)
    assert kvmu.capacity == 32
    with pytest.raises(AttributeError, match=r"^property 'capacity' of 'Kvmu' object has no "
                                             r"setter$"):
        kvmu.capacity = 4


@pytest.mark.parametrize("seed", [11, 12])
def test_random_events_match_golden(seed):
    capacity = 24
    rng = random.Random(seed)
    dut = KvmuRtl(capacity=capacity)
    golden = GoldenKvmu(capacity=capacity)
    stats = {"events": 0, "submits": 0}

    async def bench(ctx):
        pending_submits = []
        for cycle in range(3000):
            cmd_valid = rng.random() < 0.3
            op = rng.choice(list(Op))
            pos = rng.randrange(1 << capacity.bit_length())
            alloc_valid = rng.random() < 0.6
            source = Source.DRAFT if rng.random() < 0.7 else Source.HOST
            last, step_end = rng.random() < 0.3, rng.random() < 0.2
            if golden.mode.takes_host_tokens and rng.random() < 0.8:
                source = Source.HOST
            ctx.set(dut.cmd.valid, cmd_valid)
            ctx.set(dut.cmd.payload.op, op)
            ctx.set(dut.cmd.payload.pos, pos)
            ctx.set(dut.alloc.valid, alloc_valid)
            ctx.set(dut.alloc.payload.source, source)
            ctx.set(dut.alloc.payload.last, last)
            ctx.set(dut.alloc.payload.step_end, step_end)
            ctx.set(dut.submit.ready, rng.random() < 0.5)
            alloc_fire = alloc_valid and ctx.get(dut.alloc.ready)
            cmd_fire = cmd_valid and ctx.get(dut.cmd.ready)
            assert not (alloc_fire and cmd_fire), f"seed={seed} cycle={cycle}: two events"
            if ctx.get(dut.submit.valid) and ctx.get(dut.submit.ready):
                span = (ctx.get(dut.submit.payload.start), ctx.get(dut.submit.payload.end))
                assert span == pending_submits.pop(0), f"seed={seed} cycle={cycle}"
                stats["submits"] += 1
            if alloc_fire:
                assert ctx.get(dut.write_pos) == golden.ahead
                outcome = golden.token(source, last=last, step_end=step_end)
            elif cmd_fire:
                outcome = golden.command(op, pos)
                assert ctx.get(dut.flush) == outcome.flushed
            else:
                outcome = None
            if outcome is not None:
                stats["events"] += 1
                if outcome.submitted:
                    pending_submits.append(outcome.submitted)
            await ctx.tick()
            state = KvmuState(ctx.get(dut.valid_ptr), ctx.get(dut.curr_ptr),
                              ctx.get(dut.ahead_ptr), Mode(ctx.get(dut.mode)),
                              bool(ctx.get(dut.pending)), bool(ctx.get(dut.stalled)),
                              Error(ctx.get(dut.error)))
            assert state == golden.state(), f"seed={seed} cycle={cycle}: {state}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-8 * 4000)
    assert stats["events"] > 1000 and stats["submits"] > 20, stats
