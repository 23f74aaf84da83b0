# amaranth: UnusedElaboratable=no
"""A crossing's two halves in Amaranth's simulator: every beat once, in order, under random
idles and backpressure; its latency and its throughput the documented ones; and in the
Verilog, every wire of the link a register's output landing in a register."""

import random
import shutil

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from heteroreason.rtl.decoder.crossing import (
    CREDIT_ROUND_TRIP,
    CROSSING_LATENCY,
    CrossingReceiver,
    CrossingSender,
)


class Pair(wiring.Component):
    """A sender and a receiver joined by their link."""

    def __init__(self, *, width, depth):
        self._width, self._depth = width, depth
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = CrossingSender(shape=self._width, depth=self._depth)
        m.submodules.rx = rx = CrossingReceiver(shape=self._width, depth=self._depth)
        wiring.connect(m, tx.link, rx.link)
        wiring.connect(m, wiring.flipped(self.i), tx.stream)
        wiring.connect(m, rx.stream, wiring.flipped(self.o))
        return m


def run(pair, cycles, offer, accept, seed):
    """Drive ``pair`` for ``cycles``: a new beat offered with probability ``offer``, ``o``
    ready with ``accept``; return the beats sent and received with their cycles."""
    rng = random.Random(seed)
    sent, got = [], []
    sim = Simulator(pair)
    sim.add_clock(1e-6)

    async def bench(ctx):
        pending = None
        for cycle in range(cycles):
            if pending is None and rng.random() < offer:
                pending = rng.getrandbits(len(pair.i.payload))
            ctx.set(pair.i.valid, pending is not None)
            ctx.set(pair.i.payload, pending or 0)
            ready = rng.random() < accept
            ctx.set(pair.o.ready, ready)
            if ctx.get(pair.o.valid) and ready:
                got.append((cycle, ctx.get(pair.o.payload)))
            if pending is not None and ctx.get(pair.i.ready):
                sent.append((cycle, pending))
                pending = None
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    return sent, got


@pytest.mark.parametrize(("seed", "depth", "offer", "accept"),
                         [(1, 8, 0.9, 0.3), (2, 8, 0.3, 0.9), (3, 2, 0.7, 0.7), (4, 1, 1, 1)])
def test_every_beat_once_in_order(seed, depth, offer, accept):
    sent, got = run(Pair(width=12, depth=depth), 800, offer, accept, seed)
    assert len(got) > 50, f"seed {seed}: too few beats went through"
    assert [v for _, v in got] == [v for _, v in sent][:len(got)], f"seed {seed}"
    assert len(sent) - len(got) <= depth, f"seed {seed}: more beats held than credits"


def test_latency_and_throughput():
    """Always offered, always taken: the first beat is on ``o`` CROSSING_LATENCY cycles after
    it was taken, and with CREDIT_ROUND_TRIP credits a beat leaves every cycle."""
    sent, got = run(Pair(width=8, depth=CREDIT_ROUND_TRIP), 200, 1, 1, 0)
    assert got[0][0] - sent[0][0] == CROSSING_LATENCY
    steady = [c for c, _ in sent[CREDIT_ROUND_TRIP:]]
    assert steady == list(range(steady[0], steady[0] + len(steady)))
    # one credit short of the round trip: a cycle lost a round trip
    sent, _ = run(Pair(width=8, depth=CREDIT_ROUND_TRIP - 1), 200, 1, 1, 0)
    assert len(sent) < 200 * (CREDIT_ROUND_TRIP - 1) / CREDIT_ROUND_TRIP + 2


@pytest.mark.skipif(shutil.which("yosys") is None, reason="no native yosys")
def test_the_link_is_registered_on_both_sides(tmp_path):
    """Synthesized for UltraScale+ with the hierarchy kept (the fit's own reading): every bit
    between the two halves comes from a flip-flop and lands only in flip-flops."""
    from amaranth.back import rtlil

    from heteroreason.sim.flow.hierarchy import synthesize_hierarchy

    (tmp_path / "pair.il").write_text(rtlil.convert(Pair(width=16, depth=8), name="pair",
                                                    emit_src=False))
    h = synthesize_hierarchy(tmp_path / "pair.il", "pair")
    between = {link: n for link, n in h.links.items() if link.units == {"tx", "rx"}}
    assert sum(between.values()) == 16 + 2  # the payload, valid and the credit
    for link in between:
        assert link.driver_registered and not link.unregistered_loads, link


def test_a_credit_pulse_lands_in_a_register():
    """A pulse on the link's credit moves no output of the sender in the same cycle."""
    sender = CrossingSender(shape=4, depth=1)
    sim = Simulator(sender)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        ctx.set(sender.stream.valid, 1)
        await ctx.tick()  # the credit spent
        seen.append(ctx.get(sender.stream.ready))
        ctx.set(sender.link.credit, 1)
        seen.append(ctx.get(sender.stream.ready))  # not yet: the pulse lands in a register
        await ctx.tick()
        ctx.set(sender.link.credit, 0)
        await ctx.tick()
        seen.append(ctx.get(sender.stream.ready))

    sim.add_testbench(bench)
    sim.run()
    assert seen == [0, 0, 1]


@pytest.mark.parametrize("cls", [CrossingSender, CrossingReceiver])
def test_bad_depth_is_refused(cls):
    with pytest.raises(TypeError, match="depth"):
        cls(shape=8, depth=0)
