"""SwiGLU unit: ``act = requant8(SILU[gate] * up)`` with a loadable 256-entry SiLU table."""

from amaranth.hdl import Cat, Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.rtl.decoder.pipeline import REQUANT_LATENCY, requantize_pipelined

__all__ = ["LATENCY", "SwiGlu"]

LATENCY = 2 + 2 + REQUANT_LATENCY


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
    :data:`LATENCY` cycles from a beat taken on ``x`` to its result on ``y``: the table read
    and its register, the product (a multiplier with its M and P registers) and the
    requantizer's stages.

    Throughput
    ----------
    One element per cycle; the pipeline stalls as a whole while ``y`` is held back.
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
        read = silu.read_port()
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

        # the stages advance together while the last is empty or handing its result over
        advance = Signal()
        valid = Signal(LATENCY)
        last = Signal(LATENCY)
        m.d.comb += [advance.eq(~valid[-1] | self.y.ready), self.x.ready.eq(advance)]
        with m.If(advance):
            m.d.sync += [valid.eq(Cat(self.x.valid, valid[:-1])),
                         last.eq(Cat(self.x.payload.last, last[:-1]))]
        # stage 1: the table read and the up value; 2: both registered again (the multiplier's
        # A and B registers: a block RAM's output is slow); 3-4: the product
        m.d.comb += [read.addr.eq(self.x.payload.gate.as_unsigned() ^ 0x80), read.en.eq(advance)]
        up = Signal(signed(8), reset_less=True)
        up_2 = Signal(signed(8), reset_less=True)
        silu_2 = Signal(signed(16), reset_less=True)
        product_m = Signal(signed(24), reset_less=True)
        product = Signal(signed(24), reset_less=True)
        with m.If(advance):
            m.d.sync += [up.eq(self.x.payload.up), up_2.eq(up), silu_2.eq(read.data),
                         product_m.eq(silu_2 * up_2), product.eq(product_m)]
        value = requantize_pipelined(m, product, mult, shift, Const(0, 2), widths=(8,),
                                     en=advance, name="act")
        m.d.comb += [
            self.y.valid.eq(valid[-1]),
            self.y.payload.value.eq(value),
            self.y.payload.last.eq(last[-1]),
        ]
        return m
