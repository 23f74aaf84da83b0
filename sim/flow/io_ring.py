"""A registered I/O ring for place-and-route of a block whose ports outnumber the package's pins.

Every input bit of the block comes from a flip-flop of one long shift chain fed by a single pin;
every output bit is captured in a flip-flop and the captures are folded to one pin by an XOR tree
registered at each level (four inputs a LUT4). The block's own paths are then exactly register to
register, as inside a larger design, and nothing of it can be optimized away.
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

from heteroreason.rtl.reset_tree import ResetTree

__all__ = ["IoRing"]


class IoRing(Elaboratable):
    """``dut`` with its ports behind registers: ports ``din`` (the chain's input) and ``dout``
    (:attr:`ports`).

    A :class:`~heteroreason.rtl.reset_tree.ResetTree` defines the ``sync`` domain itself, its
    clock its ``clk`` input: ``clk`` is then a port of the ring, which clocks both the tree and
    the ring's own registers (a domain ``ring`` of the ring's; ``rst`` comes from the chain
    like any input). From the chain, the clock would be a loop through the ring's flip-flops.

    Parameters
    ----------
    dut : wiring.Component
        The block to place and route.
    """

    def __init__(self, dut: wiring.Component):
        if not isinstance(dut, wiring.Component):
            raise TypeError(f"IoRing needs a wiring.Component, not {dut!r}")
        self._dut = dut
        self.din = Signal()
        self.dout = Signal()
        self.clk = Signal() if isinstance(dut, ResetTree) else None

    @property
    def ports(self) -> list[Signal]:
        """The ring's ports: ``din``, ``dout`` and, around a reset tree, its clock."""
        return [self.din, self.dout] + ([self.clk] if self.clk is not None else [])

    @property
    def dut(self) -> wiring.Component:
        return self._dut

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        if self.clk is None:
            sync = m.d.sync
        else:
            m.domains.ring = ClockDomain("ring", reset_less=True)
            m.d.comb += ClockSignal("ring").eq(self.clk)
            sync = m.d.ring
        inputs, outputs = [], []
        for path, member, value in dut.signature.flatten(dut):
            if self.clk is not None and path == ("clk",):
                m.d.comb += value.eq(self.clk)
                continue
            (inputs if member.flow == wiring.In else outputs).append(Value.cast(value))
        in_bits = sum(len(v) for v in inputs)
        if in_bits:
            chain = Signal(in_bits)
            sync += chain.eq(Cat(self.din, chain[:-1]))
            offset = 0
            for value in inputs:
                m.d.comb += value.eq(chain[offset:offset + len(value)])
                offset += len(value)
        level = [Signal(len(v), name=f"capture{k}") for k, v in enumerate(outputs)]
        for capture, value in zip(level, outputs, strict=True):
            sync += capture.eq(value)
        bits = Cat(*level) if level else self.din
        while len(bits) > 1:
            folded = Signal((len(bits) + 3) // 4)
            sync += [folded[k].eq(bits[4 * k:4 * k + 4].xor()) for k in range(len(folded))]
            bits = folded
        m.d.comb += self.dout.eq(bits)
        return m
