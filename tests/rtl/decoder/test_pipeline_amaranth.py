# amaranth: UnusedElaboratable=no
"""The registered arithmetic against the integer reference: the pipelined requantizer on random
accumulators of every width it takes, every shift and every output width, and the pipelined
adder tree; each result exactly ``REQUANT_LATENCY`` (``tree_latency``) cycles after its input."""

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import requant
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
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
