# amaranth: UnusedElaboratable=no
"""The SwiGLU unit against the integer reference's ``requant(SILU[g] * u)``."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_config import qwen2_config
from heteroreason.model.spec.numerics.qwen2_float import random_weights
from heteroreason.model.spec.numerics.qwen2_int8 import activation_scales, quantize, requant
from heteroreason.rtl.decoder.swiglu import LATENCY, SwiGlu


def _table_and_params(seed):
    config = qwen2_config("test-tiny")
    weights = random_weights(config, seed=seed)
    return quantize(weights, activation_scales(weights, seed=seed + 1, sequences=1,
                                               length=32)).layers[1]


async def _load(ctx, dut, layer):
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


def _set_lanes(ctx, field, values):
    if len(values) == 1:
        ctx.set(field, int(values[0]))
    else:
        for lane, v in enumerate(values):
            ctx.set(field[lane], int(v))


@pytest.mark.parametrize("seed, idle, backpressure, width", [
    (3, 0.0, 0.0, 1), (4, 0.3, 0.4, 1), (5, 0.0, 0.0, 2), (6, 0.3, 0.4, 2), (7, 0.2, 0.3, 4)])
def test_every_gate_value_against_the_reference(seed, idle, backpressure, width):
    """Every gate value and 500 random pairs, ``width`` a beat, with random gaps on ``x`` and
    backpressure on ``y``: every result matched in order (lane by lane), ``last`` on the final
    beat, nothing left over."""
    layer = _table_and_params(seed)
    rng = np.random.default_rng(seed + 2)
    stall = random.Random(seed)
    gate = np.concatenate([np.arange(-128, 128), rng.integers(-128, 128, 500)])
    up = rng.integers(-128, 128, gate.size)
    expected = [int(v) for v in requant(layer.silu[gate + 128] * up, layer.act_req, 8)]
    dut = SwiGlu(width=width)
    beats = gate.size // width
    got = []
    loaded = []

    async def driver(ctx):
        await _load(ctx, dut, layer)
        loaded.append(True)
        for k in range(beats):
            while stall.random() < idle:
                ctx.set(dut.x.valid, 0)
                await ctx.tick()
            _set_lanes(ctx, dut.x.payload.gate, gate[k * width:(k + 1) * width])
            _set_lanes(ctx, dut.x.payload.up, up[k * width:(k + 1) * width])
            ctx.set(dut.x.payload.last, int(k == beats - 1))
            ctx.set(dut.x.valid, 1)
            await ctx.tick().until(dut.x.ready)
        ctx.set(dut.x.valid, 0)

    async def monitor(ctx):
        while len(got) < len(expected) + 1:
            ctx.set(dut.y.ready, int(stall.random() >= backpressure))
            _, _, valid, ready, value, last = await ctx.tick().sample(
                dut.y.valid, dut.y.ready, dut.y.payload.value, dut.y.payload.last)
            if valid and ready:
                assert loaded, "a result before any input"
                got.extend([int(value)] if width == 1 else [int(v) for v in value])
                assert bool(last) == (len(got) == len(expected)), f"seed={seed}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor, background=True)
    sim.run_until(1e-8 * 6_000)
    assert got == expected, f"seed={seed} width={width}"


@pytest.mark.parametrize("width", [1, 4])
def test_latency_is_the_documented_one(width):
    layer = _table_and_params(3)
    dut = SwiGlu(width=width)
    seen = []

    async def bench(ctx):
        await _load(ctx, dut, layer)
        ctx.set(dut.y.ready, 1)
        _set_lanes(ctx, dut.x.payload.gate, [7] * width)
        _set_lanes(ctx, dut.x.payload.up, [-3] * width)
        ctx.set(dut.x.valid, 1)
        await ctx.tick()
        ctx.set(dut.x.valid, 0)
        for cycle in range(1, 40):
            _, _, valid = await ctx.tick().sample(dut.y.valid)
            if valid:
                seen.append(cycle)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run_until(1e-8 * 400)
    assert seen == [LATENCY]


@pytest.mark.parametrize("width", [0, 3, 6, True, 2.0])
def test_width_is_validated(width):
    with pytest.raises(ValueError,
                       match=rf"^width must be a power of two <= 4,096, not {width!r}$"):
        SwiGlu(width=width)
