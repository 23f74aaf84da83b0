# amaranth: UnusedElaboratable=no
"""The attention unit against the integer reference's ``attend``."""

import math
import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import attend, quant_multiplier
from heteroreason.rtl.decoder.attention import Attention, job_cycles, jobs_cycles
from heteroreason.rtl.decoder.crossing import CROSSING_LATENCY, Across
from heteroreason.sim.verify.amaranth_hbm import kv_memory_processes
from heteroreason.sim.verify.amaranth_run import run_until_done


def attention(*, crossings=False, **kwargs):
    """An attention unit with stream ports: alone, or (``crossings``) as the decoder core
    builds it, every stream through a crossing whose far half is outside it."""
    return Across(Attention(crossings=True, **kwargs)) if crossings else Attention(**kwargs)


def random_jobs(rng, keys, values, heads, count=30):
    """Attention jobs on the cache (layer, KV head, length, queries, multipliers) and the
    reference's outputs for each."""
    layers, kv_heads, max_context, head_dim = keys.shape
    cases = []
    for _ in range(count):
        layer, kv, length = int(rng.integers(layers)), int(rng.integers(kv_heads)), \
            int(rng.integers(1, max_context + 1))
        q = rng.integers(-128, 128, (heads, head_dim))
        s_qk = float(rng.uniform(0.0005, 0.02))
        exp_req = quant_multiplier(s_qk / math.sqrt(head_dim) * 32)
        attn_req = quant_multiplier(float(rng.uniform(0.005, 0.05)) / 2**16 / 0.01)
        expected = attend(q[None], np.repeat(keys[layer, kv, :length][:, None], heads, 1),
                          np.repeat(values[layer, kv, :length][:, None], heads, 1),
                          np.ones((1, length), bool), exp_req, attn_req)[0].ravel()
        cases.append((layer, kv, length, q, exp_req, attn_req, expected))
    return cases


async def write_row(ctx, dut, keys, values, layer, kv, pos):
    """Offer the cache rows of ``pos`` on ``kv_write`` until they are taken."""
    p = dut.kv_write.payload
    ctx.set(p.layer, layer)
    ctx.set(p.kv_head, kv)
    ctx.set(p.pos, pos)
    ctx.set(p.k, [int(v) for v in keys[layer, kv, pos]])
    ctx.set(p.v, [int(v) for v in values[layer, kv, pos]])
    ctx.set(dut.kv_write.valid, 1)
    await ctx.tick().until(dut.kv_write.ready)


@pytest.mark.parametrize("seed, head_dim, heads, external_kv, width, kv_rows, crossings", [
    (1, 8, 1, False, 1, 1, False), (2, 16, 1, False, 1, 1, True), (3, 8, 3, False, 1, 1, False),
    (4, 16, 2, False, 4, 1, True), (5, 8, 2, True, 1, 1, False), (6, 8, 3, True, 8, 1, True),
    # several rows a cycle: on-chip banks, and memory beats whose rows past the length are
    # random bytes
    (7, 8, 2, False, 1, 4, False), (8, 8, 3, True, 8, 4, True), (9, 16, 1, True, 4, 2, False),
    (10, 8, 1, False, 2, 8, True), (11, 8, 3, True, 8, 4, False)])
def test_queries_against_the_reference(seed, head_dim, heads, external_kv, width, kv_rows,
                                       crossings):
    layers, kv_heads, max_context = 2, 2, 48
    rng = np.random.default_rng(seed)
    gaps = random.Random(seed)
    keys = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    values = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    cases = random_jobs(rng, keys, values, heads)
    dut = attention(head_dim=head_dim, kv_heads=kv_heads, layers=layers,
                    max_context=max_context, heads=heads, external_kv=external_kv,
                    width=width, kv_rows=kv_rows, crossings=crossings)
    got = []

    async def driver(ctx):
        for layer in range(layers):
            for kv in range(kv_heads):
                for pos in range(max_context):
                    await write_row(ctx, dut, keys, values, layer, kv, pos)
        ctx.set(dut.kv_write.valid, 0)
        for layer, kv, length, q, exp_req, attn_req, _ in cases:
            c = dut.cmd.payload
            ctx.set(c.layer, layer)
            ctx.set(c.kv_head, kv)
            ctx.set(c.length, length)
            ctx.set(c.exp_mult, int(exp_req[0]))
            ctx.set(c.exp_shift, int(exp_req[1]))
            ctx.set(c.out_mult, int(attn_req[0]))
            ctx.set(c.out_shift, int(attn_req[1]))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            while gaps.random() < 0.3:
                await ctx.tick()
            for head in q:
                ctx.set(dut.q.payload, [int(v) for v in head])
                ctx.set(dut.q.valid, 1)
                await ctx.tick().until(dut.q.ready)
                ctx.set(dut.q.valid, 0)
                while gaps.random() < 0.3:
                    await ctx.tick()

    async def monitor(ctx):
        total = len(cases) * heads * head_dim
        while len(got) < total:
            ctx.set(dut.out.ready, int(gaps.random() >= 0.3))
            _, _, valid, ready, value, last = await ctx.tick().sample(
                dut.out.valid, dut.out.ready, dut.out.payload.value, dut.out.payload.last)
            if valid and ready:
                got.extend(int(v) for v in value)
                assert bool(last) == (len(got) % (heads * head_dim) == 0), f"seed={seed}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    if external_kv:  # the cache in a memory with latency and gaps
        processes, stored = kv_memory_processes(dut, rng=gaps, stall=0.3, latency=7,
                                                kv_rows=kv_rows)
        for process in processes:
            sim.add_process(process)
    total = len(cases) * heads * head_dim
    run_until_done(sim, lambda: len(got) == total, clock_period_s=1e-8,
                   max_cycles=60_000 * heads)
    if external_kv:
        assert len(stored) == layers * kv_heads * max_context
    expected = [int(v) for *_, e in cases for v in e]
    assert got == expected, f"seed={seed}"
    assert len(set(expected)) > 10, "outputs are not degenerate"


def test_parameters_are_validated():
    with pytest.raises(ValueError, match=r"^max_context must be at most 65536, not 70000$"):
        Attention(head_dim=8, kv_heads=1, layers=1, max_context=70000)
    with pytest.raises(TypeError, match=r"^head_dim must be an integer in \[1, 4,096\], not 0$"):
        Attention(head_dim=0, kv_heads=1, layers=1, max_context=8)
    with pytest.raises(TypeError, match=r"^heads must be an integer in \[1, 4,096\], not 0$"):
        Attention(head_dim=8, kv_heads=1, layers=1, max_context=8, heads=0)
    with pytest.raises(ValueError, match=r"^width \(3\) must divide head_dim \(8\)$"):
        Attention(head_dim=8, kv_heads=1, layers=1, max_context=8, width=3)
    with pytest.raises(ValueError, match=r"^kv_rows must be a power of two .*not 3$"):
        Attention(head_dim=8, kv_heads=1, layers=1, max_context=48, kv_rows=3)
    with pytest.raises(ValueError, match=r"^kv_rows \(16\) must divide max_context \(40\)$"):
        Attention(head_dim=8, kv_heads=1, layers=1, max_context=40, kv_rows=16)


@pytest.mark.parametrize("jobs, head_dim, heads, width, length, kv_rows", [
    (1, 8, 2, 1, 5, 1), (1, 16, 1, 4, 20, 1), (1, 8, 2, 1, 5, 4), (1, 16, 3, 4, 21, 2),
    (1, 8, 1, 8, 32, 8),
    # back to back: a job's scores while the one before it is in the second stage
    (2, 8, 2, 1, 5, 1), (3, 16, 1, 4, 20, 1), (4, 8, 2, 1, 9, 4), (3, 16, 3, 4, 21, 2),
    (2, 8, 1, 8, 32, 8)])
@pytest.mark.parametrize("crossings", [False, True])
def test_jobs_take_the_documented_cycles(jobs, head_dim, heads, width, length, kv_rows,
                                         crossings):
    """Without stalls, a job's last output leaves :func:`job_cycles` after its last query;
    ``jobs`` jobs offered back to back, the last one's :func:`jobs_cycles` after the first
    one's last query; through crossings, CROSSING_LATENCY more each way."""
    dut = attention(head_dim=head_dim, kv_heads=1, layers=1, max_context=32, heads=heads,
                    width=width, kv_rows=kv_rows, crossings=crossings)
    rng = np.random.default_rng(7)
    marks = {"outs": 0, "queries": 0}

    async def driver(ctx):
        c = dut.cmd.payload
        for _ in range(jobs):
            for name, value in (("layer", 0), ("kv_head", 0), ("length", length),
                                ("exp_mult", 1 << 30), ("exp_shift", 36),
                                ("out_mult", 1 << 30), ("out_shift", 40)):
                ctx.set(getattr(c, name), value)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            for _ in range(heads):
                ctx.set(dut.q.payload, [int(v) for v in rng.integers(-128, 128, head_dim)])
                ctx.set(dut.q.valid, 1)
                await ctx.tick().until(dut.q.ready)
            ctx.set(dut.q.valid, 0)

    async def counter(ctx):
        ctx.set(dut.out.ready, 1)
        cycle = 0
        async for _, _, q_valid, q_ready, valid, last in ctx.tick().sample(
                dut.q.valid, dut.q.ready, dut.out.valid, dut.out.payload.last):
            cycle += 1
            if q_valid and q_ready:
                marks["queries"] += 1
                if marks["queries"] == heads:  # the first job's last query
                    marks["query"] = cycle
            if valid and last:
                marks["outs"] += 1
                if marks["outs"] == jobs:
                    marks["out"] = cycle
                    return

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(counter)
    sim.run_until(1e-8 * 2000 * jobs)
    args = dict(head_dim=head_dim, heads=heads, width=width, length=length, kv_rows=kv_rows)
    expected = job_cycles(**args) if jobs == 1 else jobs_cycles(jobs=jobs, **args)
    expected += 2 * CROSSING_LATENCY if crossings else 0
    assert marks["out"] - marks["query"] == expected


@pytest.mark.parametrize("kv_heads, layers, kv_rows, crossings",
                         [(2, 3, 1, False), (1, 1, 1, True), (2, 3, 4, False), (2, 3, 4, True)])
def test_a_job_right_after_a_write_reads_the_written_row(kv_heads, layers, kv_rows, crossings):
    """Each position's K and V rows are written, and the job over them offered in the very next
    cycle (the decoder's order): the job must see the row just written (the write is registered
    on its way into the on-chip cache, and the command waits for it)."""
    head_dim, max_context, seed = 8, 12, 11
    rng = np.random.default_rng(seed)
    keys = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    values = rng.integers(-128, 128, (layers, kv_heads, max_context, head_dim))
    layer, kv = layers - 1, kv_heads - 1
    exp_req = quant_multiplier(0.01 / math.sqrt(head_dim) * 32)
    attn_req = quant_multiplier(0.02 / 2**16 / 0.01)
    queries = rng.integers(-128, 128, (max_context, head_dim))
    expected = [int(v) for t in range(max_context) for v in attend(
        queries[t][None, None], keys[layer, kv, :t + 1][:, None],
        values[layer, kv, :t + 1][:, None], np.ones((1, t + 1), bool), exp_req,
        attn_req)[0].ravel()]
    dut = attention(head_dim=head_dim, kv_heads=kv_heads, layers=layers,
                    max_context=max_context, kv_rows=kv_rows, crossings=crossings)
    got = []

    async def driver(ctx):
        for t in range(max_context):
            await write_row(ctx, dut, keys, values, layer, kv, t)
            ctx.set(dut.kv_write.valid, 0)
            c = dut.cmd.payload
            for name, value in (("layer", layer), ("kv_head", kv), ("length", t + 1),
                                ("exp_mult", exp_req[0]), ("exp_shift", exp_req[1]),
                                ("out_mult", attn_req[0]), ("out_shift", attn_req[1])):
                ctx.set(getattr(c, name), int(value))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            ctx.set(dut.q.payload, [int(v) for v in queries[t]])
            ctx.set(dut.q.valid, 1)
            await ctx.tick().until(dut.q.ready)
            ctx.set(dut.q.valid, 0)
            while len(got) < (t + 1) * head_dim:
                await ctx.tick()

    async def monitor(ctx):
        ctx.set(dut.out.ready, 1)
        async for _, _, valid, value in ctx.tick().sample(dut.out.valid,
                                                          dut.out.payload.value):
            if valid:
                got.append(int(value[0]))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    run_until_done(sim, lambda: len(got) == len(expected), clock_period_s=1e-8,
                   max_cycles=40_000)
    assert got == expected, f"seed={seed}"
    assert len(set(expected)) > 5, "outputs are not degenerate"
