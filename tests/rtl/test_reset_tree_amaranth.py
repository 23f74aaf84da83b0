# amaranth: UnusedElaboratable=no
"""The reset tree in Amaranth's simulator: a top's registers go back to their initial values
one cycle after ``rst`` (and only those with a reset), every copy resets at most GROUP_BITS
bits, and the Verilog's only loads of ``rst`` are the copies."""

import random
import re

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from heteroreason.rtl.decoder.pipeline import GROUP_BITS
from heteroreason.rtl.reset_tree import RESET_LATENCY, ResetTree


class Counter(wiring.Component):
    """A counter of ``width`` bits from ``init`` adding ``step`` each cycle, and a reset-less
    register of the same sum."""

    step: In(8)
    count: Out(8)
    kept: Out(8)

    def __init__(self, *, width: int, init: int):
        self._width, self._init = width, init
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        wide = Signal(self._width, init=self._init)  # wide: split over several copies
        kept = Signal(8, reset_less=True)
        m.d.sync += [wide.eq(wide + self.step), kept.eq(kept + self.step)]
        m.d.comb += [self.count.eq(wide[:8]), self.kept.eq(kept)]
        return m


class Pair(wiring.Component):
    step: In(8)
    a: Out(8)
    b: Out(8)
    kept: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.first = first = Counter(width=8, init=3)
        m.submodules.second = second = Counter(width=3 * GROUP_BITS // 2, init=200)
        m.d.comb += [first.step.eq(self.step), second.step.eq(first.count),
                     self.a.eq(first.count), self.b.eq(second.count), self.kept.eq(first.kept)]
        return m


@pytest.mark.parametrize("seed", [1, 2])
def test_registers_reset_a_cycle_after_rst(seed):
    """Random steps and reset pulses against a plain model of the two counters, the reset
    taking effect RESET_LATENCY cycle late and leaving the reset-less register alone."""
    rng = random.Random(seed)
    dut = ResetTree(Pair())
    steps = [rng.randrange(256) for _ in range(60)]
    resets = [rng.random() < 0.15 for _ in range(60)]
    a, b, kept = 3, 200, 0  # the model: its state after each rising edge
    expected = []
    for cycle, step in enumerate(steps):
        held = resets[cycle - RESET_LATENCY] if cycle >= RESET_LATENCY else True
        kept = (kept + step) % 256
        a, b = (3, 200) if held else ((a + step) % 256, (b + a) % 256)
        expected.append((a, b, kept))
    got = []

    async def bench(ctx):
        for cycle, step in enumerate(steps):
            ctx.set(dut.step, step)
            ctx.set(dut.rst, resets[cycle])
            ctx.set(dut.clk, 1)
            await ctx.delay(1e-6)
            got.append((ctx.get(dut.a), ctx.get(dut.b), ctx.get(dut.kept)))
            ctx.set(dut.clk, 0)
            await ctx.delay(1e-6)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert got == expected, f"seed={seed}"


def test_each_copy_resets_at_most_a_group():
    dut = ResetTree(Pair())
    text = verilog.convert(dut, name="pair", emit_src=False)
    # the first counter's 8 bits, the second's 1.5 groups in two copies
    assert sorted(dut.copy_bits) == sorted([8, GROUP_BITS, GROUP_BITS // 2])
    assert max(dut.copy_bits) <= GROUP_BITS
    # rst enters every module, where it is read only by its copies' registers
    reads = [line for line in text.splitlines()
             if re.search(r"\brst\b", line) and not line.startswith("module ")
             and not re.search(r"(input|wire) rst;|\.rst\(rst\)", line)]
    assert reads and all("rst_copy" in line for line in reads), reads
    assert "input clk;" in text and "input rst;" in text


def test_a_top_with_its_own_clock_or_reset_member_is_refused():
    class WithRst(wiring.Component):
        rst: In(1)

        def elaborate(self, platform):
            return Module()

    with pytest.raises(ValueError, match="already has a member named 'rst'"):
        ResetTree(WithRst())
    with pytest.raises(TypeError, match=r"must be a wiring\.Component"):
        ResetTree(Module())

    class WithClk(wiring.Component):
        clk: In(1)

        def elaborate(self, platform):
            return Module()

    with pytest.raises(ValueError, match="already has a member named 'clk'"):
        ResetTree(WithClk())


def test_a_top_that_defines_the_sync_domain_is_refused():
    """The tree's domain is its own: a top with its own ``sync`` is refused when built."""
    from amaranth.hdl import ClockDomain

    class OwnDomain(wiring.Component):
        o: Out(1)

        def elaborate(self, platform):
            m = Module()
            m.domains.sync = ClockDomain("sync")
            r = Signal()
            m.d.sync += r.eq(~r)
            m.d.comb += self.o.eq(r)
            return m

    with pytest.raises(ValueError, match="defines the sync domain itself"):
        verilog.convert(ResetTree(OwnDomain()), name="own", emit_src=False)
