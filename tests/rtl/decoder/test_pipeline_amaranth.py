# amaranth: UnusedElaboratable=no
"""The registered arithmetic against the integer reference: the pipelined requantizer on random
accumulators of every width it takes, every shift and every output width, and the pipelined
adder tree; each result exactly ``REQUANT_LATENCY`` (``tree_latency``) cycles after its input;
the replicated controls (``Mirrored``, a stalling pipeline's advance copies) equal what they
copy every cycle."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import requant
from heteroreason.rtl.decoder.pipeline import (
    GROUP_BITS,
    REQUANT_LATENCY,
    Mirrored,
    StallingPipeline,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)


@pytest.mark.parametrize("acc_bits, widths, seed", [
    (48, (8, 16, 32), 1), (24, (8,), 2), (17, (8, 16), 3), (33, (16,), 4)])
def test_requantizer_matches_the_reference(acc_bits, widths, seed):
    rng = np.random.default_rng(seed)
    n = 600
    # accumulators near every scale, multipliers in quant_multiplier's range, shifts 1..62
    scale = rng.integers(0, acc_bits - 1, n)
    acc = [int(rng.integers(-(1 << s), 1 << s)) for s in scale]
    acc[:4] = [-(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1, 0, -1]
    mult = rng.integers(2**30, 2**31, n)
    shift = rng.integers(1, 63, n)
    select = rng.integers(0, len(widths), n)
    # the reference in int64: keep acc * mult inside it
    acc = [a if abs(a) * int(m) < 2**62 else a >> 31 for a, m in zip(acc, mult, strict=True)]
    expected = [int(requant(a, (int(m), int(k)), widths[b]))
                for a, m, k, b in zip(acc, mult, shift, select, strict=True)]

    m = Module()
    a_in = Signal(signed(acc_bits))
    m_in, k_in, b_in = Signal(unsigned(31)), Signal(unsigned(6)), Signal(2)
    out = requantize_pipelined(m, a_in, m_in, k_in, b_in, widths=widths)
    got = []

    async def bench(ctx):
        for cycle in range(n + REQUANT_LATENCY):
            if cycle < n:
                ctx.set(a_in, acc[cycle])
                ctx.set(m_in, int(mult[cycle]))
                ctx.set(k_in, int(shift[cycle]))
                ctx.set(b_in, int(select[cycle]))
            await ctx.tick()
            if cycle >= REQUANT_LATENCY - 1:
                got.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got[:n] == expected, f"seed={seed}: first difference at " \
        f"{next(i for i, (g, e) in enumerate(zip(got, expected, strict=False)) if g != e)}"


@pytest.mark.parametrize("first", [1, 2])
@pytest.mark.parametrize("terms", [1, 2, 3, 8, 13, 64])
def test_tree_sums_after_its_latency(terms, first):
    rng = np.random.default_rng(terms)
    m = Module()
    inputs = [Signal(signed(16), name=f"x{k}") for k in range(terms)]
    total = tree_sum_pipelined(m, inputs, first_stage_levels=first)
    m.d.sync += Signal(name="clocked").eq(1)  # a sync domain even when the tree has no register
    vectors = rng.integers(-2**15, 2**15, (50, terms))
    got = []

    async def bench(ctx):
        for cycle in range(len(vectors) + tree_latency(terms, first_stage_levels=first) + 1):
            if cycle < len(vectors):
                for s, v in zip(inputs, vectors[cycle], strict=True):
                    ctx.set(s, int(v))
            got.append(ctx.get(total))
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    lag = tree_latency(terms, first_stage_levels=first)
    # the stages a naive count gives: a register after level `first`, then every two, and one
    # at the root whatever its level
    levels = (terms - 1).bit_length()
    regs = {d for d in range(1, levels + 1) if d >= first and (d - first) % 2 == 0} | {levels}
    assert lag == (len(regs) if terms > 1 else 0)
    assert got[lag:lag + len(vectors)] == [int(v) for v in vectors.sum(axis=1)]


def test_tree_levels_are_checked():
    with pytest.raises(ValueError, match=r"^first_stage_levels must be 1 to 2, not 3$"):
        tree_latency(8, first_stage_levels=3)


@pytest.mark.parametrize("seed", [1, 2])
def test_mirrored_copies_equal_their_register_every_cycle(seed):
    """A register and its copies under random assignments, in branches of their own: every
    copy equals the register every cycle."""
    rng = np.random.default_rng(seed)
    m = Module()
    sel, value = Signal(2), Signal(4)
    mirrored = Mirrored(3, name="flag", shape=4, init=5)
    with m.Switch(sel):
        with m.Case(0):
            m.d.sync += mirrored.eq(value)
        with m.Case(1):
            m.d.sync += mirrored.eq(mirrored.value + 1)
        with m.Case(2):
            m.d.sync += mirrored.eq(~mirrored)

    async def bench(ctx):
        for cycle in range(300):
            ctx.set(sel, int(rng.integers(0, 4)))
            ctx.set(value, int(rng.integers(0, 16)))
            await ctx.tick()
            got = [ctx.get(mirrored.value)] + [ctx.get(mirrored.copy(k)) for k in range(3)]
            assert len(set(got)) == 1, f"seed={seed}, cycle {cycle}: {got}"

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("seed", [3, 4])
def test_the_pipelines_advance_copies_equal_its_advance(seed):
    """A stalling pipeline of three stages whose registers take 2,400 bits: three copies of
    its advance, each driving at most GROUP_BITS, each equal to the advance every cycle under
    random issue and backpressure; the data come out in order."""
    rng = np.random.default_rng(seed)
    m = Module()
    ready, issue, data_in = Signal(), Signal(), Signal(8)
    pipe = StallingPipeline(m, 3, ready=ready, name="p")
    m.d.comb += pipe.issue.eq(issue)
    value = data_in
    for stage in range(3):
        value = pipe.stage(value.replicate(100), f"wide{stage}")[:8]  # 800 bits a stage
    assert len(pipe._copies) == 3
    assert all(bits <= GROUP_BITS for _, bits in pipe._copies)

    async def bench(ctx):
        sent, got = 0, []
        for cycle in range(400):
            go = int(rng.integers(0, 2))
            ctx.set(issue, go)
            ctx.set(data_in, sent % 256)
            ctx.set(ready, int(rng.integers(0, 2)))
            advance = ctx.get(pipe.advance)
            copies = [ctx.get(c) for c, _ in pipe._copies]
            assert copies == [advance] * 3, f"seed={seed}, cycle {cycle}"
            if ctx.get(pipe.out_valid) and ctx.get(ready):
                got.append(ctx.get(value))
            if go and advance:
                sent += 1
            await ctx.tick()
        assert got == [k % 256 for k in range(len(got))] and len(got) > 50, f"seed={seed}"

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
