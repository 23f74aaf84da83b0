# amaranth: UnusedElaboratable=no
"""The RMSNorm unit in Amaranth's simulator, bit-exact against the integer reference."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import int_rmsnorm, quant_multiplier
from heteroreason.rtl.decoder.rmsnorm import RmsNorm
from heteroreason.sim.verify.amaranth_run import run_until_done


def random_vector(rng: np.random.Generator, max_length: int, width: int = 1):
    n = width * int(rng.integers(1, max_length // width + 1))
    magnitude = int(rng.choice([3, 300, 8000, 32767]))
    r = rng.integers(-magnitude, magnitude + 1, n)
    eps_q = int(rng.integers(1, 50))
    gains = rng.uniform(0.5, 1.5, n) / (2**15 * float(rng.uniform(0.005, 0.05)))
    mult, shift = quant_multiplier(gains)
    expected = int_rmsnorm(r[None, :].astype(np.int64), (mult, shift), eps_q)[0]
    return r, eps_q, mult, shift, expected


@pytest.mark.parametrize(("seed", "width", "gains"),
                         [(1, 1, 1), (2, 1, 1), (3, 4, 1), (4, 3, 1), (5, 4, 2), (6, 4, 4),
                          (7, 8, 2)])
def test_random_vectors_match_the_reference(seed, width, gains):
    max_length = 48
    dut = RmsNorm(max_length=max_length, width=width, gains=gains)
    rng = np.random.default_rng(seed)
    gaps = random.Random(seed)
    jobs = [random_vector(rng, max_length, width) for _ in range(60)]
    results = []

    async def driver(ctx):
        for r, eps_q, mult, shift, _ in jobs:
            ctx.set(dut.cmd.payload.length, r.size)
            ctx.set(dut.cmd.payload.eps_q, eps_q)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            for k in range(0, r.size, width):
                while gaps.random() < 0.2:
                    ctx.set(dut.x.valid, 0)
                    await ctx.tick()
                ctx.set(dut.x.payload, [int(v) for v in r[k:k + width]])
                ctx.set(dut.x.valid, 1)
                await ctx.tick().until(dut.x.ready)
            ctx.set(dut.x.valid, 0)
            for k in range(0, r.size, gains):
                while gaps.random() < 0.2:
                    ctx.set(dut.gain.valid, 0)
                    await ctx.tick()
                entries = [dut.gain.payload] if gains == 1 else \
                    [dut.gain.payload[e] for e in range(gains)]
                for entry, mu, sh in zip(entries, mult[k:k + gains], shift[k:k + gains],
                                         strict=True):
                    ctx.set(entry.mult, int(mu))
                    ctx.set(entry.shift, int(sh))
                ctx.set(dut.gain.valid, 1)
                await ctx.tick().until(dut.gain.ready)
            ctx.set(dut.gain.valid, 0)

    async def monitor(ctx):
        for r, *_ in jobs:
            got = []
            while len(got) < r.size:
                ctx.set(dut.y.ready, int(gaps.random() >= 0.25))
                _, _, valid, ready, value, last = await ctx.tick().sample(
                    dut.y.valid, dut.y.ready, dut.y.payload.value, dut.y.payload.last)
                if valid and ready:
                    got += [int(value)] if gains == 1 else [int(v) for v in value]
                    assert bool(last) == (len(got) == r.size), f"seed={seed}"
            results.append(got)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    run_until_done(sim, lambda: len(results) == len(jobs), clock_period_s=1e-8,
                   max_cycles=100_000)
    assert len(results) == len(jobs), f"seed={seed}: {len(results)} of {len(jobs)} finished"
    for i, ((*_, expected), got) in enumerate(zip(jobs, results, strict=True)):
        assert got == [int(v) for v in expected], f"seed={seed} vector {i}"


def test_parameters_are_validated():
    with pytest.raises(TypeError,
                       match=r"^max_length must be an integer in \[1, 1,048,576\], not 0$"):
        RmsNorm(max_length=0)
    with pytest.raises(TypeError, match=r"^width must be an integer in \[1, 4,096\], not 0$"):
        RmsNorm(max_length=8, width=0)
    with pytest.raises(ValueError, match=r"^width \(3\) must divide max_length \(8\)$"):
        RmsNorm(max_length=8, width=3)
    for gains in (0, 3, 8):
        with pytest.raises(ValueError, match=rf"^gains must be a power of two that divides width "
                                             rf"\(4\), not {gains}$"):
            RmsNorm(max_length=8, width=4, gains=gains)
