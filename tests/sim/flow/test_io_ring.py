# amaranth: UnusedElaboratable=no
"""The registered I/O ring: its ports, and around a reset tree (which defines the ``sync``
domain itself, clocked from its ``clk`` input) a clock port of its own instead of a loop
through the ring's chain."""

import re

from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.reset_tree import ResetTree
from heteroreason.sim.flow.io_ring import IoRing


class Counter(wiring.Component):
    step: In(4)
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        total = Signal(8)
        m.d.sync += total.eq(total + self.step)
        m.d.comb += self.count.eq(total)
        return m


def test_a_plain_block_has_the_chain_ports_only():
    ring = IoRing(Counter())
    assert ring.ports == [ring.din, ring.dout]
    text = verilog.convert(ring, name="top", ports=ring.ports, emit_src=False)
    assert re.search(r"input\s+din", text) and re.search(r"output\s+dout", text)


def test_a_reset_tree_is_clocked_from_a_port_of_the_ring():
    """Converting used to fail with a combinational cycle (the tree's clock from the chain,
    the chain's flip-flops on the tree's clock); now the ring has a ``clk`` port that is the
    tree's clock, and ``rst`` is one more input on the chain."""
    tree = ResetTree(Counter())
    ring = IoRing(tree)
    assert ring.ports == [ring.din, ring.dout, ring.clk]
    text = verilog.convert(ring, name="top", ports=ring.ports, emit_src=False)
    assert re.search(r"input\s+clk", text)
    assert len(re.findall(r"always @\(posedge clk\)", text)) >= 2  # the ring's and the tree's
