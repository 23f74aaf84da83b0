"""SwiGLU unit: ``act = requant8(SILU[gate] * up)`` with a loadable 256-entry SiLU table."""

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.decoder.arith import requantize

__all__ = ["SwiGlu"]


class SwiGlu(wiring.Component):
    """The integer reference's SwiGLU product (:mod:`heteroreason.model.numerics.qwen2_int8`).

    ``table`` writes the layer's 16-bit SiLU table (index ``gate + 128``); ``params`` holds the
    requantization multiplier and shift, applied to every element until changed. Each beat on
    ``x`` pairs a gate and an up value; ``y`` carries the int8 product, in order.

    Members
    -------
    table : In(stream.Signature(StructLayout addr unsigned(8), value signed(16)))
    params : In(stream.Signature(StructLayout mult unsigned(31), shift unsigned(6)))
    x : In(stream.Signature(StructLayout gate signed(8), up signed(8), last))
    y : Out(stream.Signature(StructLayout value signed(8), last))

    Latency
    -------
    Combinational from ``x`` to ``y``.

    Throughput
    ----------
    One element per cycle.
    """

    def __init__(self):
        super().__init__({
            "table": In(stream.Signature(data.StructLayout({
                "addr": unsigned(8), "value": signed(16)}))),
            "params": In(stream.Signature(data.StructLayout({
                "mult": unsigned(31), "shift": unsigned(6)}))),
            "x": In(stream.Signature(data.StructLayout({
                "gate": signed(8), "up": signed(8), "last": 1}))),
            "y": Out(stream.Signature(data.StructLayout({"value": signed(8), "last": 1}))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.silu = silu = memory.Memory(shape=signed(16), depth=256, init=[])
        write = silu.write_port()
        read = silu.read_port(domain="comb")
        mult = Signal(unsigned(31))
        shift = Signal(unsigned(6), init=1)

        m.d.comb += [
            self.table.ready.eq(1),
            write.addr.eq(self.table.payload.addr), write.data.eq(self.table.payload.value),
            write.en.eq(self.table.valid),
            self.params.ready.eq(1),
        ]
        with m.If(self.params.valid):
            m.d.sync += [mult.eq(self.params.payload.mult), shift.eq(self.params.payload.shift)]

        index = Signal(unsigned(8))
        m.d.comb += [index.eq(self.x.payload.gate.as_unsigned() ^ 0x80), read.addr.eq(index)]
        product = Signal(signed(24))
        m.d.comb += product.eq(read.data * self.x.payload.up)
        value = requantize(m, product, mult, shift, 8)
        m.d.comb += [
            self.y.valid.eq(self.x.valid),
            self.y.payload.value.eq(value),
            self.y.payload.last.eq(self.x.payload.last),
            self.x.ready.eq(self.y.ready),
        ]
        return m
