# amaranth: UnusedElaboratable=no
"""The SwiGLU unit against the integer reference's ``requant(SILU[g] * u)``."""

import numpy as np
from amaranth.sim import Simulator

from heteroreason.model.numerics.qwen2_config import qwen2_config
from heteroreason.model.numerics.qwen2_float import random_weights
from heteroreason.model.numerics.qwen2_int8 import activation_scales, quantize, requant
from heteroreason.rtl.decoder.swiglu import SwiGlu


def test_every_gate_value_against_the_reference():
    config = qwen2_config("test-tiny")
    weights = random_weights(config, seed=3)
    layer = quantize(weights, activation_scales(weights, seed=4, sequences=1, length=32)).layers[1]
    rng = np.random.default_rng(5)
    gate = np.concatenate([np.arange(-128, 128), rng.integers(-128, 128, 500)])
    up = rng.integers(-128, 128, gate.size)
    expected = requant(layer.silu[gate + 128] * up, layer.act_req, 8)
    dut = SwiGlu()
    got = []

    async def bench(ctx):
        for addr in range(256):
            ctx.set(dut.table.payload.addr, addr)
            ctx.set(dut.table.payload.value, int(layer.silu[addr]))
            ctx.set(dut.table.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.valid, 0)
        ctx.set(dut.params.payload.mult, int(layer.act_req[0]))
        ctx.set(dut.params.payload.shift, int(layer.act_req[1]))
        ctx.set(dut.params.valid, 1)
        await ctx.tick()
        ctx.set(dut.params.valid, 0)
        ctx.set(dut.y.ready, 1)
        for g, u in zip(gate, up, strict=True):
            ctx.set(dut.x.payload.gate, int(g))
            ctx.set(dut.x.payload.up, int(u))
            ctx.set(dut.x.valid, 1)
            got.append(ctx.get(dut.y.payload.value))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-8 * 2_000)
    assert got == [int(v) for v in expected]
