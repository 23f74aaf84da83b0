"""A registered I/O ring for place-and-route of a block whose ports outnumber the package's pins.

Every input bit of the block comes from a flip-flop of one long shift chain fed by a single pin;
every output bit is captured in a flip-flop and the captures are folded to one pin by an XOR tree
registered at each level (four inputs a LUT4). The block's own paths are then exactly register to
register, as inside a larger design, and nothing of it can be optimized away.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

__all__ = ["IoRing"]


class IoRing(Elaboratable):
    """``dut`` with its ports behind registers: ports ``din`` (the chain's input) and ``dout``.

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

    @property
    def dut(self) -> wiring.Component:
        return self._dut

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self._dut
        inputs, outputs = [], []
        for _path, member, value in dut.signature.flatten(dut):
            (inputs if member.flow == wiring.In else outputs).append(Value.cast(value))
        in_bits = sum(len(v) for v in inputs)
        if in_bits:
            chain = Signal(in_bits)
            m.d.sync += chain.eq(Cat(self.din, chain[:-1]))
            offset = 0
            for value in inputs:
                m.d.comb += value.eq(chain[offset:offset + len(value)])
                offset += len(value)
        level = [Signal(len(v), name=f"capture{k}") for k, v in enumerate(outputs)]
        for capture, value in zip(level, outputs, strict=True):
            m.d.sync += capture.eq(value)
        bits = Cat(*level) if level else self.din
        while len(bits) > 1:
            folded = Signal((len(bits) + 3) // 4)
            m.d.sync += [folded[k].eq(bits[4 * k:4 * k + 4].xor())
                         for k in range(len(folded))]
            bits = folded
        m.d.comb += self.dout.eq(bits)
        return m
