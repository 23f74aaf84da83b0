# amaranth: UnusedElaboratable=no
"""The argmax sampler against numpy's argmax (lowest index on ties)."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.numerics.qwen2_float import greedy
from heteroreason.rtl.decoder.sampler import ArgmaxSampler
from heteroreason.sim.verify.amaranth_run import run_until_done


@pytest.mark.parametrize("seed", [1, 2])
def test_argmax_with_ties_and_marks(seed):
    vocab = 37
    dut = ArgmaxSampler(vocab=vocab, delimiters=(5, 9), eos=2)
    rng = np.random.default_rng(seed)
    gaps = random.Random(seed)
    vectors = []
    for i in range(150):
        spread = [3, 2**31 - 1][i % 2]
        v = rng.integers(-spread, spread + 1, vocab)
        if i % 5 == 0:
            v[rng.integers(0, vocab, 3)] = v.max()  # ties at the maximum
        if i % 7 == 0:
            v[[2, 5, 9][i % 3]] = 2**31 - 1
        vectors.append(v)
    got = []

    async def driver(ctx):
        for v in vectors:
            for k, value in enumerate(v):
                while gaps.random() < 0.2:
                    ctx.set(dut.logits.valid, 0)
                    await ctx.tick()
                ctx.set(dut.logits.payload.value, int(value))
                ctx.set(dut.logits.payload.last, int(k == vocab - 1))
                ctx.set(dut.logits.valid, 1)
                await ctx.tick().until(dut.logits.ready)
            ctx.set(dut.logits.valid, 0)

    async def monitor(ctx):
        while len(got) < len(vectors):
            ctx.set(dut.token.ready, int(gaps.random() >= 0.3))
            _, _, valid, ready, token, step_end, eos = await ctx.tick().sample(
                dut.token.valid, dut.token.ready, dut.token.payload.token,
                dut.token.payload.step_end, dut.token.payload.eos)
            if valid and ready:
                got.append((int(token), int(step_end), int(eos)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    run_until_done(sim, lambda: len(got) == len(vectors), clock_period_s=1e-8,
                   max_cycles=50_000)
    expected = []
    for v in vectors:
        t = greedy(v)
        expected.append((t, int(t in (5, 9, 2)), int(t == 2)))
    assert got == expected, f"seed={seed}"
    assert any(e[1] for e in expected) and any(e[2] for e in expected)


def test_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^delimiters must be token ids in \[0, 8\), not 9$"):
        ArgmaxSampler(vocab=8, delimiters=(9,))
    with pytest.raises(TypeError, match=r"^vocab must be an integer above 1, not 1$"):
        ArgmaxSampler(vocab=1)
