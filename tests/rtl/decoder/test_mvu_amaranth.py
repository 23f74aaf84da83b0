# amaranth: UnusedElaboratable=no
"""The matrix-vector unit in Amaranth's simulator, bit-exact against the integer reference."""

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from heteroreason.model.spec.numerics.qwen2_int8 import quant_multiplier, requant
from heteroreason.rtl.decoder.mvu import PACKED_LOW_BITS, MatVecUnit, OutBits
from heteroreason.rtl.decoder.weight_schedule import linear_schedule
from heteroreason.sim.verify.amaranth_run import run_until_done
from heteroreason.sim.verify.mvu_model import VectorBuffers

BITS = {OutBits.INT8: 8, OutBits.INT16: 16, OutBits.INT32: 32}


def random_job(rng: np.random.Generator, lanes: int, k: int, max_cols: int, max_groups: int,
               x=None):
    """A random job of row groups of ``k`` rows: its schedule, vector, width and results;
    with ``x`` given, one on that vector (the unit may reuse its buffer)."""
    rows = k * int(rng.integers(1, max_groups + 1))
    cols = int(rng.integers(1, max_cols + 1)) if x is None else x.size
    w = rng.integers(-127, 128, (rows, cols))
    x = rng.integers(-128, 128, cols) if x is None else x
    bias = rng.integers(-2**20, 2**20, rows)
    factor = np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), rows))
    mult, shift = quant_multiplier(factor)
    out_bits = OutBits(int(rng.integers(0, 3)))
    sched = linear_schedule(w, lanes=lanes, bias=bias, multiplier=mult, shift=shift,
                            rows_per_beat=k)
    expected = requant(w @ x + bias, (mult, shift), BITS[out_bits])
    return sched, x, out_bits, [int(v) for v in expected]


def random_jobs(rng, lanes, k, max_cols, max_groups, count):
    """``count`` jobs, about a third of them reusing the previous job's vector."""
    jobs, reuse = [], []
    for _ in range(count):
        again = bool(jobs) and rng.random() < 0.35
        jobs.append(random_job(rng, lanes, k, max_cols, max_groups,
                               jobs[-1][1] if again else None))
        reuse.append(again)
    assert 5 < sum(reuse) < count - 5
    return jobs, reuse


def set_params(ctx, dut, sched, group):
    """The parameters of row group ``group`` on ``rowparam`` (one struct, or k of them)."""
    k = dut.rows_per_beat
    for j in range(k):
        r = group * k + j
        port = dut.rowparam.payload if k == 1 else dut.rowparam.payload[j]
        ctx.set(port.bias, int(sched.bias[r]))
        ctx.set(port.mult, int(sched.multiplier[r]))
        ctx.set(port.shift, int(sched.shift[r]))


def results_of(value, k):
    return [int(value)] if k == 1 else [int(value[j]) for j in range(k)]


async def feed_vector(ctx, dut, x, beats: int, stall: random.Random | None = None):
    """Vector ``x`` on ``vec``, ``beats`` beats of the unit's lanes (zeros past its end), with
    random gaps when ``stall`` is given."""
    lanes = dut.lanes
    padded = np.zeros(beats * lanes, dtype=np.int64)
    padded[:len(x)] = x
    for b in range(beats):
        while stall is not None and stall.random() < 0.15:
            ctx.set(dut.vec.valid, 0)
            await ctx.tick()
        ctx.set(dut.vec.payload, [int(v) for v in padded[b * lanes:(b + 1) * lanes]])
        ctx.set(dut.vec.valid, 1)
        await ctx.tick().until(dut.vec.ready)
    ctx.set(dut.vec.valid, 0)


async def feed_rows(ctx, dut, sched, stall: random.Random):
    """A job's row parameters and weight beats, with random gaps in both streams; a group's
    parameters are offered with its first weight beat and taken no later."""
    beat = 0
    for g in range(sched.groups):
        while stall.random() < 0.1:  # a gap in the parameter stream
            await ctx.tick()
        set_params(ctx, dut, sched, g)
        ctx.set(dut.rowparam.valid, 1)
        for _ in range(sched.beats_per_row):
            while stall.random() < 0.2:  # random gaps in the weight stream
                ctx.set(dut.weights.valid, 0)
                await ctx.tick()
            ctx.set(dut.weights.payload, [int(v) for v in sched.beats[beat]])
            ctx.set(dut.weights.valid, 1)
            await ctx.tick().until(dut.weights.ready)
            ctx.set(dut.rowparam.valid, 0)
            beat += 1
        ctx.set(dut.weights.valid, 0)


async def collect_results(ctx, dut, count: int, per_beat: int, stall: random.Random):
    """``count`` results from ``out`` (``per_beat`` a beat) under random backpressure, each
    beat's ``last`` checked against the job's end."""
    got = []
    while len(got) < count:
        ctx.set(dut.out.ready, int(stall.random() >= 0.3))
        _, _, valid, ready, value, last = await ctx.tick().sample(
            dut.out.valid, dut.out.ready, dut.out.payload.value, dut.out.payload.last)
        if valid and ready:
            got += results_of(value, per_beat)
            assert bool(last) == (len(got) == count)
    return got


@pytest.mark.parametrize("lanes, k, seed", [(4, 1, 1), (8, 1, 2), (16, 1, 3), (4, 2, 11),
                                            (8, 4, 12), (1, 3, 13)])
def test_random_jobs_match_the_reference(lanes, k, seed):
    """Random jobs of ``k`` rows a weight beat (the schedule's interleaved order), with random
    gaps in the weight and parameter streams and backpressure on ``out``."""
    max_cols, max_groups = 40, 12 // k
    dut = MatVecUnit(lanes=lanes, max_beats=-(-max_cols // lanes), max_rows=max_groups,
                     rows_per_beat=k)
    assert dut.rows_per_beat == k
    rng = np.random.default_rng(seed)
    stall = random.Random(seed)
    jobs, reuse = random_jobs(rng, lanes, k, max_cols, max_groups, 40)
    results = []

    async def driver(ctx):
        for (sched, x, out_bits, _), again in zip(jobs, reuse, strict=True):
            assert sched.groups * k == sched.rows
            ctx.set(dut.cmd.payload.rows, sched.groups)
            ctx.set(dut.cmd.payload.beats, sched.beats_per_row)
            ctx.set(dut.cmd.payload.out_bits, out_bits)
            ctx.set(dut.cmd.payload.reuse, again)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            if not again:
                await feed_vector(ctx, dut, x, sched.beats_per_row)
            await feed_rows(ctx, dut, sched, stall)

    async def monitor(ctx):
        for _, _, _, expected in jobs:
            results.append(await collect_results(ctx, dut, len(expected), k, stall))

    run_jobs(dut, driver, monitor, results, [job[3] for job in jobs], seed=seed,
             max_cycles=200_000)


def run_jobs(dut, driver, monitor, results, expected, *, seed, max_cycles):
    """Run the job driver and the result monitor to the end of every job; each job's results
    (``results``, filled by the monitor) equal its ``expected`` ones."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    run_until_done(sim, lambda: len(results) == len(expected), clock_period_s=1e-8,
                   max_cycles=max_cycles)
    assert len(results) == len(expected), f"seed={seed}: only {len(results)} jobs finished"
    for i, (want, got) in enumerate(zip(expected, results, strict=True)):
        assert got == want, f"seed={seed} job {i}"


def test_parameters_are_validated():
    with pytest.raises(TypeError, match=r"^lanes must be an integer in \[1, 4,096\], not 0$"):
        MatVecUnit(lanes=0, max_beats=4, max_rows=4)
    with pytest.raises(TypeError,
                       match=r"^max_rows must be an integer in \[1, 1,048,576\], not None$"):
        MatVecUnit(lanes=4, max_beats=4, max_rows=None)
    # sizes past heteroreason.rtl.limits are refused before anything is built
    with pytest.raises(TypeError, match=r"^lanes must be an integer in \[1, 4,096\], not 4097$"):
        MatVecUnit(lanes=4097, max_beats=4, max_rows=4)
    with pytest.raises(TypeError, match=r"^max_beats must be an integer in \[1, 1,048,576\], "
                                        r"not 1000000000000$"):
        MatVecUnit(lanes=4, max_beats=10**12, max_rows=4)


def test_schedule_rejects_bad_weights():
    with pytest.raises(ValueError, match=r"^weights must be int8 values$"):
        linear_schedule(np.array([[300]]), lanes=4, multiplier=2**30, shift=10)
    with pytest.raises(ValueError, match=r"^lanes must be a positive integer, not 0$"):
        linear_schedule(np.zeros((2, 2)), lanes=0, multiplier=2**30, shift=10)
    with pytest.raises(ValueError, match=r"^multipliers must lie in \[2\*\*30, 2\*\*31\) and "
                                         r"shifts in \[1, 62\]$"):
        linear_schedule(np.zeros((2, 2)), lanes=2, multiplier=5, shift=10)


def one_beat_rows(rng, rows, lanes):
    """Random weights, vector, biases and requantizers of ``rows`` one-beat rows, and the
    results the reference gives for them."""
    w = rng.integers(-127, 128, (rows, lanes))
    x = rng.integers(-128, 128, lanes)
    bias = rng.integers(-2**20, 2**20, rows)
    mult, shift = quant_multiplier(np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), rows)))
    return w, x, bias, mult, shift, [int(v) for v in requant(w @ x + bias, (mult, shift), 16)]


async def feed_one_beat_rows(ctx, dut, w, x, bias, mult, shift):
    """A job of one-beat rows (``w``'s rows against ``x``, 16-bit results; ``x`` a vector, or
    one a row with several vectors a beat) in groups of the unit's ``rows_per_beat``, each
    group's weight beat offered with its parameters as soon as the unit takes the previous
    one."""
    k, xs = dut.rows_per_beat, np.atleast_2d(x)
    sched = linear_schedule(w, lanes=xs.shape[1], bias=bias, multiplier=mult, shift=shift,
                            rows_per_beat=k)
    ctx.set(dut.cmd.payload.rows, sched.groups)
    ctx.set(dut.cmd.payload.beats, 1)
    ctx.set(dut.cmd.payload.out_bits, OutBits.INT16)
    if dut.vectors > 1:
        ctx.set(dut.cmd.payload.vectors, len(xs))
    ctx.set(dut.cmd.valid, 1)
    await ctx.tick().until(dut.cmd.ready)
    ctx.set(dut.cmd.valid, 0)
    for vector in xs:
        await feed_vector(ctx, dut, vector, 1)
    for g in range(sched.groups):
        set_params(ctx, dut, sched, g)
        ctx.set(dut.rowparam.valid, 1)
        ctx.set(dut.weights.payload, [int(v) for v in sched.beats[g]])
        ctx.set(dut.weights.valid, 1)
        await ctx.tick().until(dut.weights.ready)
    ctx.set(dut.weights.valid, 0)
    ctx.set(dut.rowparam.valid, 0)


@pytest.mark.parametrize("lanes, k", [(1, 1), (8, 1), (64, 1), (8, 4)])
def test_latency_and_throughput_are_the_documented_ones(lanes, k):
    """One-beat rows (row groups) back to back with ``out`` always ready: every weight beat is
    taken the cycle it is offered, and each result leaves ``result_latency`` cycles after its
    beat."""
    groups = 40 // k
    dut = MatVecUnit(lanes=lanes, max_beats=2, max_rows=groups, rows_per_beat=k)
    rng = np.random.default_rng(lanes)
    w, x, bias, mult, shift, expected = one_beat_rows(rng, groups * k, lanes)
    left = assert_back_to_back(dut, w, x, bias, mult, shift, groups)
    assert [v for values in left for v in values] == expected


def assert_back_to_back(dut, w, x, bias, mult, shift, groups: int):
    """Feed one-beat row groups with ``out`` always ready; check every weight beat is taken the
    cycle after the one before, and every group's results leave ``result_latency`` cycles
    after its beat. Returns each group's results."""
    per_beat = dut.rows_per_beat * dut.vectors
    taken, left = [], []

    async def driver(ctx):
        ctx.set(dut.out.ready, 1)
        await feed_one_beat_rows(ctx, dut, w, x, bias, mult, shift)

    async def monitor(ctx):
        cycle = 0
        while len(left) < groups:
            _, _, wv, wr, ov, value = await ctx.tick().sample(
                dut.weights.valid, dut.weights.ready, dut.out.valid, dut.out.payload.value)
            if wv and wr:
                taken.append(cycle)
            if ov:
                left.append((cycle, results_of(value, per_beat)))
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    sim.run_until(1e-8 * (groups + 20 * len(np.atleast_2d(x)) + 200))
    assert taken == list(range(taken[0], taken[0] + groups)), "a beat waited"
    assert [c - t for (c, _), t in zip(left, taken, strict=True)] == \
        [dut.result_latency] * groups
    return [values for _, values in left]


@pytest.mark.parametrize("seed", [5, 6])
def test_a_stalled_output_fills_the_queue_and_loses_nothing(seed):
    """One-beat rows against an output that is rarely ready: the unit takes final beats until
    exactly :attr:`result_buffer` results are in flight, never more, and every result leaves
    in order (the queue's ``room`` flag at its edges: one place left, full, full and leaving)."""
    rows, lanes = 60, 4
    dut = MatVecUnit(lanes=lanes, max_beats=2, max_rows=rows)
    rng = np.random.default_rng(seed)
    gaps = random.Random(seed)
    w, x, bias, mult, shift, expected = one_beat_rows(rng, rows, lanes)
    got, in_flight = [], []

    async def driver(ctx):
        await feed_one_beat_rows(ctx, dut, w, x, bias, mult, shift)

    async def monitor(ctx):
        taken = 0
        while len(got) < rows:
            # long stalls with short bursts: the queue fills, then drains a little
            ctx.set(dut.out.ready, int(gaps.random() < (0.5 if len(got) % 9 < 3 else 0.04)))
            _, _, wv, wr, ov, orr, value = await ctx.tick().sample(
                dut.weights.valid, dut.weights.ready, dut.out.valid, dut.out.ready,
                dut.out.payload.value)
            taken += bool(wv and wr)
            if ov and orr:
                got.append(int(value))
            in_flight.append(taken - len(got))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(driver)
    sim.add_testbench(monitor)
    run_until_done(sim, lambda: len(got) == rows, clock_period_s=1e-8, max_cycles=20_000)
    assert got == expected, f"seed={seed}"
    assert max(in_flight) == dut.result_buffer, f"seed={seed}"


def test_rows_per_beat_is_validated():
    with pytest.raises(TypeError, match=r"^rows_per_beat must be an integer in \[1, 64\], not 0$"):
        MatVecUnit(lanes=4, max_beats=4, max_rows=4, rows_per_beat=0)
    with pytest.raises(ValueError, match=r"^rows_per_beat must be a positive integer that "
                                         r"divides the rows \(6\), not 4$"):
        linear_schedule(np.zeros((6, 2)), lanes=2, multiplier=2**30, shift=10, rows_per_beat=4)


def test_interleaved_beats_hold_each_rows_beat_side_by_side():
    """The schedule's order, naively: beat ``b`` of group ``g`` is row ``g*k+j``'s lanes
    ``[b*lanes, (b+1)*lanes)`` for each ``j`` in turn, zero past the last column."""
    rng = np.random.default_rng(3)
    rows, cols, lanes, k = 6, 7, 3, 3
    w = rng.integers(-127, 128, (rows, cols))
    sched = linear_schedule(w, lanes=lanes, multiplier=2**30, shift=10, rows_per_beat=k)
    per_row = 3
    assert sched.beats.shape == (rows // k * per_row, k * lanes)
    for g in range(rows // k):
        for b in range(per_row):
            for j in range(k):
                for i in range(lanes):
                    c = b * lanes + i
                    want = w[g * k + j, c] if c < cols else 0
                    assert sched.beats[g * per_row + b, j * lanes + i] == want


def batched_values(rng, shape, extremes: bool):
    """Random int8 values; with ``extremes``, only the corners of the packed products' range."""
    if extremes:
        return rng.choice(np.array([-128, -127, -1, 0, 1, 126, 127]), shape)
    return rng.integers(-128, 128, shape)


@pytest.mark.parametrize("lanes, k, vectors, seed", [(4, 1, 2, 21), (8, 2, 3, 22),
                                                     (4, 2, 4, 23), (1, 1, 5, 24)])
def test_batched_jobs_match_the_reference(lanes, k, vectors, seed):
    """Random jobs on ``vectors`` vectors a weight beat: each loads 1 to ``vectors`` of them or
    reuses the buffers; weights and vectors sometimes only at the extremes of int8 (the packed
    products' borrow at its edges); random gaps on every input and backpressure on ``out``.
    Every vector's results are checked, those of stale buffers too."""
    max_groups, max_beats = 8 // k, 8
    max_cols = min(30, max_beats * lanes)
    dut = MatVecUnit(lanes=lanes, max_beats=max_beats, max_rows=max_groups, rows_per_beat=k,
                     vectors=vectors)
    assert dut.vectors == vectors
    rng = np.random.default_rng(seed)
    stall = random.Random(seed)
    model = VectorBuffers(vectors=vectors, max_beats=max_beats, lanes=lanes)
    jobs = []
    for _ in range(30):
        extremes = rng.random() < 0.3
        reuse = bool(jobs) and rng.random() < 0.25
        cols = jobs[-1]["cols"] if reuse else int(rng.integers(1, max_cols + 1))
        beats = -(-cols // lanes)
        count = 0 if reuse else int(rng.integers(1, vectors + 1))
        xs = [batched_values(rng, cols, extremes) for _ in range(count)]
        rows = k * int(rng.integers(1, max_groups + 1))
        w = batched_values(rng, (rows, cols), extremes)
        bias = rng.integers(-2**20, 2**20, rows)
        mult, shift = quant_multiplier(np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), rows)))
        out_bits = OutBits(int(rng.integers(0, 3)))
        model.load(xs, beats)
        expected = model.results(w, bias, mult, shift, BITS[out_bits], beats, k)
        jobs.append({"cols": cols, "beats": beats, "xs": xs, "reuse": reuse, "expected": expected,
                     "out_bits": out_bits, "sched": linear_schedule(
                         w, lanes=lanes, bias=bias, multiplier=mult, shift=shift,
                         rows_per_beat=k)})
    assert 3 < sum(job["reuse"] for job in jobs) < 20
    results = []

    async def driver(ctx):
        for job in jobs:
            sched = job["sched"]
            ctx.set(dut.cmd.payload.rows, sched.groups)
            ctx.set(dut.cmd.payload.beats, job["beats"])
            ctx.set(dut.cmd.payload.out_bits, job["out_bits"])
            ctx.set(dut.cmd.payload.reuse, job["reuse"])
            ctx.set(dut.cmd.payload.vectors, len(job["xs"]))
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            for x in job["xs"]:
                await feed_vector(ctx, dut, x, job["beats"], stall)
            await feed_rows(ctx, dut, sched, stall)

    async def monitor(ctx):
        for job in jobs:
            results.append(await collect_results(ctx, dut, len(job["expected"]), vectors * k,
                                                 stall))

    run_jobs(dut, driver, monitor, results, [job["expected"] for job in jobs], seed=seed,
             max_cycles=100_000)


@pytest.mark.parametrize("lanes, k, vectors", [(8, 1, 2), (8, 2, 3), (64, 1, 4)])
def test_batched_latency_and_throughput_are_the_documented_ones(lanes, k, vectors):
    """With several vectors a beat, one-beat row groups still go back to back, one a cycle, and
    each group's results leave ``result_latency`` cycles (two more than unpacked: a row a beat,
    one vector) after its beat."""
    groups = 24 // k
    dut = MatVecUnit(lanes=lanes, max_beats=2, max_rows=groups, rows_per_beat=k,
                     vectors=vectors)
    assert dut.result_latency == MatVecUnit(lanes=lanes, max_beats=2,
                                            max_rows=groups).result_latency + 2
    rng = np.random.default_rng(lanes + vectors)
    w = rng.integers(-127, 128, (groups * k, lanes))
    xs = rng.integers(-128, 128, (vectors, lanes))
    bias = rng.integers(-2**20, 2**20, groups * k)
    mult, shift = quant_multiplier(np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), groups * k)))
    per_vector = [requant(w @ x + bias, (mult, shift), 16) for x in xs]
    expected = [[int(per_vector[v][g * k + j]) for v in range(vectors) for j in range(k)]
                for g in range(groups)]
    assert assert_back_to_back(dut, w, xs, bias, mult, shift, groups) == expected


def test_vectors_is_validated_and_shapes_the_ports():
    with pytest.raises(TypeError, match=r"^vectors must be an integer in \[1, 64\], not 0$"):
        MatVecUnit(lanes=4, max_beats=4, max_rows=4, vectors=0)
    with pytest.raises(TypeError, match=r"^vectors must be an integer in \[1, 64\], not 65$"):
        MatVecUnit(lanes=4, max_beats=4, max_rows=4, vectors=65)
    with pytest.raises(TypeError, match=r"^vectors must be an integer in \[1, 64\], not True$"):
        MatVecUnit(lanes=4, max_beats=4, max_rows=4, vectors=True)
    one = MatVecUnit(lanes=4, max_beats=4, max_rows=4, rows_per_beat=2)
    three = MatVecUnit(lanes=4, max_beats=4, max_rows=4, rows_per_beat=2, vectors=3)
    assert "vectors" not in one.cmd.payload.shape().members
    assert three.cmd.payload.shape().members["vectors"] == range(4)
    assert three.out.payload.shape().members["value"].length == 6
    assert three.weights.payload.shape() == one.weights.payload.shape()


def test_the_packed_product_splits_exactly_over_every_int8_pair():
    """The packing's arithmetic, naively over all of int8: ``w * (a * 2**18 + b)`` holds ``w * b``
    in its low 18 bits (as a signed number) and ``w * a`` in its high bits once the low part's
    sign is added back — for every weight and every pair of activations at the extremes, and
    for every weight and activation against a fixed partner."""
    low = PACKED_LOW_BITS
    values = range(-128, 128)
    for w in values:
        for a in values:
            for b in (-128, -1, 0, 1, 127, a):
                both = w * ((a << low) + b)
                low_part = both & ((1 << low) - 1)
                low_part -= (1 << low) if low_part >> (low - 1) else 0
                high = (both >> low) + ((both >> (low - 1)) & 1)
                assert (high, low_part) == (w * a, w * b), (w, a, b)


@pytest.mark.parametrize("lanes, k, seed", [(8, 2, 31), (4, 3, 32), (16, 4, 33)])
def test_row_packed_products_are_exact_at_the_extremes(lanes, k, seed):
    """With one vector and ``k`` > 1 rows a beat, two rows' weights share a multiplier and the
    vector's element (an odd row alone): weights and activations at the corners of int8, one-beat
    row groups back to back, each group's results ``result_latency`` cycles (two more than a
    row a beat) after its beat, equal to the reference's."""
    groups = 24 // k
    dut = MatVecUnit(lanes=lanes, max_beats=2, max_rows=groups, rows_per_beat=k)
    assert dut.result_latency == MatVecUnit(lanes=lanes, max_beats=2,
                                            max_rows=groups).result_latency + 2
    rng = np.random.default_rng(seed)
    w = batched_values(rng, (groups * k, lanes), extremes=True)
    x = batched_values(rng, lanes, extremes=True)
    bias = rng.integers(-2**20, 2**20, groups * k)
    mult, shift = quant_multiplier(np.exp(rng.uniform(np.log(1e-6), np.log(1e-2), groups * k)))
    reference = requant(w @ x + bias, (mult, shift), 16)
    expected = [[int(reference[g * k + j]) for j in range(k)] for g in range(groups)]
    assert assert_back_to_back(dut, w, x, bias, mult, shift, groups) == expected, seed


def test_write_groups_cover_the_lanes_within_the_bound():
    """A write-enable bit covers the most lanes that divide the vector and fit GROUP_BITS."""
    from heteroreason.rtl.decoder.mvu import write_group_lanes
    from heteroreason.rtl.decoder.pipeline import GROUP_BITS
    for lanes in (1, 7, 16, 64, 128, 448, 512, 896, 1000):
        group = write_group_lanes(lanes)
        assert lanes % group == 0 and group * 8 <= GROUP_BITS
        assert all(lanes % g for g in range(group + 1, GROUP_BITS // 8 + 1)), lanes
    assert write_group_lanes(448) == 112


@pytest.mark.parametrize("vectors", [1, 3])
def test_jobs_match_the_reference_with_the_buffer_written_in_groups(monkeypatch, vectors):
    """With a column of 2 lanes (16 bits), so that an 8-lane buffer is 4 memories a vector, each
    written through its own copy of the load flag and addressed by its own copy of the beat,
    loads and reloads still give the reference's results."""
    import heteroreason.rtl.decoder.mvu as mvu
    monkeypatch.setattr(mvu, "GROUP_BITS", 16)
    assert mvu.write_group_lanes(8) == 2
    if vectors == 1:
        test_random_jobs_match_the_reference(8, 2, 31)
    else:
        test_batched_jobs_match_the_reference(8, 2, vectors, 22)


def test_each_buffer_column_has_its_own_beat_and_load_flag(monkeypatch):
    """In the Verilog of an 8-lane unit of 2-lane columns and 3 vectors: 12 column memories,
    each addressed by its own copy of the beat (12 copies) and enabled by one of the 4 copies
    of the load flag."""
    import re

    from amaranth.back import verilog

    import heteroreason.rtl.decoder.mvu as mvu
    monkeypatch.setattr(mvu, "GROUP_BITS", 16)
    text = verilog.convert(mvu.MatVecUnit(lanes=8, max_beats=5, max_rows=3, vectors=3),
                           name="top")
    assert set(re.findall(r"\bbeat_copy(\d+)\b", text)) == {str(k) for k in range(12)}
    assert set(re.findall(r"\bload_write_copy(\d+)\b", text)) == {str(k) for k in range(4)}
    assert set(re.findall(r"\bbuffer(\d_\d)\b", text)) == {
        f"{v}_{c}" for v in range(3) for c in range(4)}
