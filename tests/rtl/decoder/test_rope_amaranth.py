# amaranth: UnusedElaboratable=no
"""The RoPE unit against the integer reference's rotation."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import activation_scales, int_rope, quantize
from heteroreason.rtl.decoder.rope import Rope
from heteroreason.sim.verify.amaranth_run import run_until_done


@pytest.mark.parametrize("width", [1, 2, 8])
def test_heads_at_random_positions(width):
    config = qwen2_config("test-tiny")
    weights = random_weights(config, seed=1)
    model = quantize(weights, activation_scales(weights, seed=2, sequences=1, length=16))
    hd = config.head_dim
    rng = np.random.default_rng(6)
    gaps = random.Random(6)
    cases = []
    for _ in range(40):
        pos = int(rng.choice([0, 1, int(rng.integers(0, 30000))]))
        heads = rng.integers(-128, 128, (int(rng.integers(1, 4)), hd))
        expected = int_rope(heads[None], np.array([pos]), model.rope_inc)[0]
        cases.append((pos, heads, expected))
    dut = Rope(head_dim=hd, increments=model.rope_inc, max_position=32767, width=width)
    got = []

    async def driver(ctx):
        for pos, heads, _ in cases:
            ctx.set(dut.cmd.payload, pos)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            flat = heads.ravel()
            for k in range(0, flat.size, width):
                while gaps.random() < 0.2:
                    ctx.set(dut.x.valid, 0)
                    await ctx.tick()
                ctx.set(dut.x.payload.value, [int(v) for v in flat[k:k + width]])
                ctx.set(dut.x.payload.last, int(k + width == flat.size))
                ctx.set(dut.x.valid, 1)
                await ctx.tick().until(dut.x.ready)
            ctx.set(dut.x.valid, 0)

    async def monitor(ctx):
        total = sum(h.size for _, h, _ in cases)
        while len(got) < total:
            ctx.set(dut.y.ready, int(gaps.random() >= 0.3))
            _, _, valid, ready, value = await ctx.tick().sample(
                dut.y.valid, dut.y.ready, dut.y.payload.value)
            if valid and ready:
                got.extend(int(v) for v in value)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    expected = [int(v) for _, _, e in cases for v in e.ravel()]
    run_until_done(sim, lambda: len(got) == len(expected), clock_period_s=1e-8,
                   max_cycles=40_000)
    assert got == expected


def test_parameters_are_validated():
    incs = [1] * 8
    with pytest.raises(TypeError, match=r"^width must be an integer in \[1, 4,096\], not 0$"):
        Rope(head_dim=16, increments=incs, max_position=10, width=0)
    with pytest.raises(ValueError, match=r"^width \(16\) must divide head_dim / 2 \(8\)$"):
        Rope(head_dim=16, increments=incs, max_position=10, width=16)
