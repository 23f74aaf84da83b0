# amaranth: UnusedElaboratable=no
"""The argmax sampler against numpy's argmax (lowest index on ties)."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_float import greedy
from heteroreason.rtl.decoder.sampler import LATENCY, ArgmaxSampler, latency
from heteroreason.sim.verify.amaranth_run import run_until_done


@pytest.mark.parametrize("seed, vocab, width", [
    (1, 37, 1), (2, 37, 1), (3, 38, 2), (4, 36, 4), (5, 40, 8), (6, 32, 32)])
def test_argmax_with_ties_and_marks(seed, vocab, width):
    """``width`` logits a beat, ties at the maximum within and across beats, random gaps and
    backpressure: every token numpy's argmax, with its marks."""
    dut = ArgmaxSampler(vocab=vocab, delimiters=(5, 9), eos=2, width=width)
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
            for k in range(vocab // width):
                while gaps.random() < 0.2:
                    ctx.set(dut.logits.valid, 0)
                    await ctx.tick()
                if width == 1:
                    ctx.set(dut.logits.payload.value, int(v[k]))
                else:
                    for lane in range(width):
                        ctx.set(dut.logits.payload.value[lane], int(v[k * width + lane]))
                ctx.set(dut.logits.payload.last, int(k == vocab // width - 1))
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
    assert got == expected, f"seed={seed} width={width}"
    assert any(e[1] for e in expected) and any(e[2] for e in expected)


@pytest.mark.parametrize("width", [1, 2, 8])
def test_latency_is_the_documented_one(width):
    """A vector of one beat or several: the token offered ``latency(width)`` cycles after the
    last beat is taken."""
    vocab = 16
    dut = ArgmaxSampler(vocab=vocab, width=width)
    seen = []

    async def bench(ctx):
        ctx.set(dut.token.ready, 1)
        beats = vocab // width
        for k in range(beats):
            if width == 1:
                ctx.set(dut.logits.payload.value, k % 5)
            else:
                for lane in range(width):
                    ctx.set(dut.logits.payload.value[lane], (k * width + lane) % 5)
            ctx.set(dut.logits.payload.last, int(k == beats - 1))
            ctx.set(dut.logits.valid, 1)
            await ctx.tick()
        ctx.set(dut.logits.valid, 0)
        for cycle in range(1, 20):
            _, _, valid, token = await ctx.tick().sample(dut.token.valid, dut.token.payload.token)
            if valid:
                seen.append((cycle, int(token)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-8 * 100)
    assert seen and seen[0] == (latency(width), 4), seen
    assert latency(1) == LATENCY


def test_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^delimiters must be token ids in \[0, 8\), not 9$"):
        ArgmaxSampler(vocab=8, delimiters=(9,))
    with pytest.raises(TypeError, match=r"^vocab must be an integer in \[2, 1,048,576\], not 1$"):
        ArgmaxSampler(vocab=1)
    for width in (0, 3, True):
        with pytest.raises(ValueError, match=rf"^width must be a power of two <= 4,096 that "
                                             rf"divides vocab \(12\), not {width!r}$"):
            ArgmaxSampler(vocab=12, width=width)
    with pytest.raises(ValueError, match=r"^width must be a power of two <= 4,096 that divides "
                                         r"vocab \(12\), not 8$"):
        ArgmaxSampler(vocab=12, width=8)
    with pytest.raises(ValueError, match=r"^delimiters must be at most 256 token ids \(a "
                                         r"comparator each\), not 300$"):
        ArgmaxSampler(vocab=1024, delimiters=range(300))
    with pytest.raises(ValueError, match=r"^width must be a power of two, not 6$"):
        latency(6)
