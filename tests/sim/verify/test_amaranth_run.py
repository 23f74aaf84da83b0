"""run_until_done: stops when the testbench is done, or at the bound."""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from heteroreason.sim.verify.amaranth_run import run_until_done


def counter_sim(stop_at):
    m = Module()
    count = Signal(16)
    m.d.sync += count.eq(count + 1)
    sim = Simulator(m)
    sim.add_clock(1e-8)
    seen = []

    async def watch(ctx):
        async for _, _, value in ctx.tick().sample(count):
            if value >= stop_at:
                seen.append(value)
                return

    sim.add_testbench(watch)
    return sim, seen


def test_stops_after_the_chunk_in_which_it_is_done():
    sim, seen = counter_sim(1234)
    assert run_until_done(sim, lambda: bool(seen), clock_period_s=1e-8, max_cycles=100_000,
                          chunk_cycles=500) == 1500
    assert seen == [1234]


def test_stops_at_the_bound_when_never_done():
    sim, seen = counter_sim(60_000)
    assert run_until_done(sim, lambda: bool(seen), clock_period_s=1e-8, max_cycles=2_000,
                          chunk_cycles=700) == 2_000
    assert seen == []


@pytest.mark.parametrize("field, kwargs", [("max_cycles", {"max_cycles": 0}),
                                           ("chunk_cycles", {"max_cycles": 5, "chunk_cycles": -1})])
def test_bad_bounds_are_named(field, kwargs):
    with pytest.raises(ValueError, match=rf"^{field} must be a positive integer, not -?\d+$"):
        run_until_done(None, lambda: False, clock_period_s=1e-8, **kwargs)
