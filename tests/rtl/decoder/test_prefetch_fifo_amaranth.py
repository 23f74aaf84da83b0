# amaranth: UnusedElaboratable=no
"""The prefetch FIFO in Amaranth's simulator, in lockstep with Amaranth's own
``SyncFIFOBuffered`` under random writes and reads (every output, every cycle), and its
columns' widths and write enables apart."""

import random
import re

import pytest
from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from heteroreason.rtl.decoder.pipeline import GROUP_BITS
from heteroreason.rtl.decoder.prefetch_fifo import COLUMN_BITS, PrefetchFIFO, column_widths


class Both(wiring.Component):
    """A :class:`PrefetchFIFO` and a ``SyncFIFOBuffered`` of the same size fed alike."""

    def __init__(self, *, width, depth):
        self._width, self._depth = width, depth
        level = range(depth + 1)
        super().__init__({
            "w_data": In(width), "w_en": In(1), "r_en": In(1),
            "ours_w_rdy": Out(1), "ours_r_rdy": Out(1), "ours_r_data": Out(width),
            "ours_level": Out(level),
            "ref_w_rdy": Out(1), "ref_r_rdy": Out(1), "ref_r_data": Out(width),
            "ref_level": Out(level)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ours = ours = PrefetchFIFO(width=self._width, depth=self._depth)
        m.submodules.ref = ref = fifo.SyncFIFOBuffered(width=self._width, depth=self._depth)
        for name, unit in (("ours", ours), ("ref", ref)):
            m.d.comb += [unit.w_data.eq(self.w_data), unit.w_en.eq(self.w_en),
                         unit.r_en.eq(self.r_en)]
            for port in ("w_rdy", "r_rdy", "r_data"):
                m.d.comb += getattr(self, f"{name}_{port}").eq(getattr(unit, port))
            m.d.comb += getattr(self, f"{name}_level").eq(unit.r_level)
        return m


@pytest.mark.parametrize(("seed", "width", "depth"),
                         [(1, 2100, 5), (2, 40, 2), (3, 1008, 3), (4, 300, 9)])
def test_lockstep_with_sync_fifo_buffered(seed, width, depth):
    """Random write data, write and read enables (bursts and idles): both FIFOs show the same
    w_rdy, r_rdy, level and (while r_rdy) r_data every cycle, and every beat written comes out
    once, in order."""
    rng = random.Random(seed)
    dut = Both(width=width, depth=depth)
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    cycles = 600
    seen = {"written": [], "read": []}

    async def bench(ctx):
        for cycle in range(cycles):
            phase = (cycle // 50) % 3  # writes faster, alike, reads faster
            w_en = rng.random() < (0.9, 0.5, 0.2)[phase]
            r_en = rng.random() < (0.2, 0.5, 0.9)[phase]
            value = rng.getrandbits(width)
            ctx.set(dut.w_data, value)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            ours = [ctx.get(getattr(dut, f"ours_{p}")) for p in ("w_rdy", "r_rdy", "level")]
            ref = [ctx.get(getattr(dut, f"ref_{p}")) for p in ("w_rdy", "r_rdy", "level")]
            assert ours == ref, f"seed {seed}, cycle {cycle}: {ours} != {ref}"
            if ref[1]:
                assert ctx.get(dut.ours_r_data) == ctx.get(dut.ref_r_data), \
                    f"seed {seed}, cycle {cycle}: r_data differs"
                if r_en:
                    seen["read"].append(ctx.get(dut.ours_r_data))
            if w_en and ref[0]:
                seen["written"].append(value)
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    assert len(seen["read"]) > cycles // 6, f"seed {seed}: too few beats went through"
    assert seen["read"] == seen["written"][:len(seen["read"])], f"seed {seed}: order"


def test_columns_fill_memories_and_stay_in_a_group():
    widths = column_widths(14336)
    assert sum(widths) == 14336
    assert widths == [1008] * 14 + [224]
    assert all(w % COLUMN_BITS == 0 and w <= GROUP_BITS for w in widths[:-1])
    assert column_widths(40) == [40]


def test_each_column_has_its_own_write_enable():
    """In the Verilog, each column's write enable is ``w_en`` and that column's own copy of
    the room flag: the copies are distinct registers, one per column."""
    fifo_ = PrefetchFIFO(width=3000, depth=4)
    text = verilog.convert(fifo_, name="top")
    copies = set(re.findall(r"\broom_copy(\d+)\b", text))
    assert copies == {str(k) for k in range(len(column_widths(3000)))}
    assert len(column_widths(3000)) == 3


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"width": 0, "depth": 4}, "width"), ({"width": 8, "depth": 1}, "depth"),
    ({"width": 8, "depth": True}, "depth")])
def test_bad_parameters_are_refused(kwargs, message):
    with pytest.raises(TypeError, match=message):
        PrefetchFIFO(**kwargs)
