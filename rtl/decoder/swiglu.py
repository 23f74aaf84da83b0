"""SwiGLU unit: ``act = requant8(SILU[gate] * up)`` with a loadable 256-entry SiLU table."""

from amaranth.hdl import Const, Module, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    StallingPipeline,
    requantize_pipelined,
)
from heteroreason.rtl.limits import WIDTH_LIMIT

__all__ = ["LATENCY", "SwiGlu"]

LATENCY = 2 + 2 + REQUANT_LATENCY


class SwiGlu(wiring.Component):
    """The integer reference's SwiGLU product (:mod:`heteroreason.model.spec.numerics.qwen2_int8`).

    ``table`` writes the layer's 16-bit SiLU table (index ``gate + 128``); ``params`` holds the
    requantization multiplier and shift, applied to every element until changed. Each beat on
    ``x`` pairs ``width`` gates with as many up values; ``y`` carries their int8 products, in
    order.

    Parameters
    ----------
    width : int
        Elements a beat (a power of two). Each has its own lane: its own read port on the
        one table, its own multiplier and requantizer. At 1 the payloads are scalars.

    Members
    -------
    table : In(stream.Signature(StructLayout addr unsigned(8), value signed(16)))
    params : In(stream.Signature(StructLayout mult unsigned(31), shift unsigned(6)))
    x : In(stream.Signature(StructLayout gate signed(8) [x width], up signed(8) [x width],
        last))
    y : Out(stream.Signature(StructLayout value signed(8) [x width], last))

    Latency
    -------
    :data:`LATENCY` cycles from a beat taken on ``x`` to its results on ``y``: the table read
    and its register, the product (a multiplier with its M and P registers) and the
    requantizer's stages.

    Throughput
    ----------
    ``width`` elements per cycle; the pipeline stalls as a whole while ``y`` is held back.
    """

    def __init__(self, *, width=1):
        checks.power_of_two("width", width, high=WIDTH_LIMIT)
        self._width = width

        def lanes(shape):
            return shape if width == 1 else data.ArrayLayout(shape, width)

        super().__init__({
            "table": In(stream.Signature(data.StructLayout({
                "addr": unsigned(8), "value": signed(16)}))),
            "params": In(stream.Signature(data.StructLayout({
                "mult": unsigned(31), "shift": unsigned(6)}))),
            "x": In(stream.Signature(data.StructLayout({
                "gate": lanes(signed(8)), "up": lanes(signed(8)), "last": 1}))),
            "y": Out(stream.Signature(data.StructLayout({
                "value": lanes(signed(8)), "last": 1}))),
        })

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        k = self._width
        m.submodules.silu = silu = memory.Memory(shape=signed(16), depth=256, init=[])
        write = silu.write_port()
        reads = []
        for _ in range(k):
            read = silu.read_port()  # (the variable's name is the port's)
            reads.append(read)
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
        pipe = StallingPipeline(m, LATENCY, ready=self.y.ready, name="swiglu")
        m.d.comb += [self.x.ready.eq(pipe.advance), pipe.issue.eq(self.x.valid),
                     pipe.issue_tag.eq(self.x.payload.last)]
        # stage 1: the table read and the up value; 2: both registered again (the multiplier's
        # A and B registers: a block RAM's output is slow); 3-4: the product
        values = []
        for lane, read in enumerate(reads):
            tag = "" if k == 1 else str(lane)  # (one lane: the names of a single lane)
            gate = self.x.payload.gate if k == 1 else self.x.payload.gate[lane]
            up = self.x.payload.up if k == 1 else self.x.payload.up[lane]
            m.d.comb += [read.addr.eq(gate.as_unsigned() ^ 0x80),
                         read.en.eq(pipe.enable(Value.cast(read.data).shape().width))]
            up_2 = pipe.stage(pipe.stage(up, f"up{tag}"), f"up{tag}_2")
            silu_2 = pipe.stage(read.data, f"silu{tag}_2")
            product = pipe.stage(pipe.stage(silu_2 * up_2, f"product{tag}_m"), f"product{tag}",
                                 signed(24))
            values.append(requantize_pipelined(m, product, mult, shift, Const(0, 2),
                                               widths=(8,), en=pipe, name=f"act{tag}"))
        value = self.y.payload.value
        m.d.comb += [
            self.y.valid.eq(pipe.out_valid),
            *([value.eq(values[0])] if k == 1 else [value[t].eq(v) for t, v in enumerate(values)]),
            self.y.payload.last.eq(pipe.out_tag),
        ]
        return m
