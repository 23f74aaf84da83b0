"""RMSNorm unit: int16 residual in, int8 normalized activations out, by the integer reference's
rules (:mod:`heteroreason.model.numerics.qwen2_int8`, *RMSNorm*)."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.numerics.qwen2_int8 import RSQRT
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import requantize, round_shift, tree_sum

__all__ = ["RmsNorm"]

_IDLE, _SUM, _DIVIDE, _SCALE, _EMIT = range(5)
_SUM_BITS = 48


class RmsNorm(wiring.Component):
    """``y_i = sat8(rshift_round(n_i * mult_i, shift_i))`` with ``n_i = r_i / sqrt(var)`` in Q.15.

    A job (``cmd``: length ``n``, a multiple of ``width``, and ``eps_q``) takes ``n`` residual
    elements on ``x`` (``width`` a beat) into a buffer while summing their squares;
    ``var = sum // n + eps_q`` by a restoring divider (one quotient bit per cycle); the
    reciprocal square root comes from the 256-entry table of the reference after normalizing
    ``var`` by an even shift; then, one per cycle, each element is scaled and requantized with
    its channel's ``gain`` beat (multiplier and shift, the RMSNorm weight folded in) and
    emitted on ``y`` (``last`` on the final one).

    Parameters
    ----------
    max_length : int
        Longest vector (the hidden size); a multiple of ``width``.
    width : int
        Elements per ``x`` beat.

    Members
    -------
    cmd : In(stream.Signature(StructLayout length, eps_q))
    x : In(stream.Signature(ArrayLayout(signed(16), width)))
    gain : In(stream.Signature(StructLayout mult unsigned(31), shift unsigned(6)))
    y : Out(stream.Signature(StructLayout value signed(8), last))

    Latency
    -------
    ``n / width`` cycles in, 48 divider cycles, 1 cycle for the table, then ``n`` cycles out.

    Throughput
    ----------
    ``width`` elements per cycle in, one per cycle out (each needs its own gain beat).
    """

    def __init__(self, *, max_length, width=1):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0:
            raise TypeError(f"max_length must be a positive integer, not {max_length!r}")
        if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
            raise TypeError(f"width must be a positive integer, not {width!r}")
        if max_length % width:
            raise ValueError(f"width ({width}) must divide max_length ({max_length})")
        self._max_length = max_length
        self._width = width
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({
                "length": range(1, max_length + 1), "eps_q": unsigned(32)}))),
            "x": In(stream.Signature(data.ArrayLayout(signed(16), width))),
            "gain": In(stream.Signature(data.StructLayout({
                "mult": unsigned(31), "shift": unsigned(6)}))),
            "y": Out(stream.Signature(data.StructLayout({"value": signed(8), "last": 1}))),
        })

    @property
    def max_length(self):
        return self._max_length

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        width = self._width
        m.submodules.buffer = buffer = memory.Memory(
            shape=data.ArrayLayout(signed(16), width), depth=self.max_length // width, init=[])
        write = buffer.write_port()
        read = buffer.read_port(domain="comb")
        m.submodules.table = table = memory.Memory(shape=unsigned(24), depth=256,
                                                   init=[int(v) for v in RSQRT])
        lookup = table.read_port(domain="comb")

        state = Signal(range(5))
        length = Signal(range(self.max_length + 1))
        eps_q = Signal(unsigned(32))
        index = Signal(range(self.max_length + 1))  # elements in or out
        row = Signal(range(self.max_length // width + 1))  # buffer rows
        lane = Signal(range(max(width, 2)))  # the element out within its row
        total = Signal(unsigned(_SUM_BITS))
        # restoring division total // length
        remainder = Signal(unsigned(_SUM_BITS + 1))
        quotient = Signal(unsigned(_SUM_BITS))
        bit = Signal(range(_SUM_BITS + 1))
        var = Signal(unsigned(_SUM_BITS + 1))
        inv = Signal(unsigned(24))
        amount = Signal(signed(8))  # 8 + s/2: the shift that yields Q.15

        m.d.comb += [read.addr.eq(row), write.addr.eq(row), write.data.eq(self.x.payload)]

        with m.If(equals(state, _IDLE)):
            m.d.comb += self.cmd.ready.eq(1)
            with m.If(self.cmd.valid):
                m.d.sync += [length.eq(self.cmd.payload.length),
                             eps_q.eq(self.cmd.payload.eps_q), index.eq(0), row.eq(0),
                             total.eq(0), state.eq(_SUM)]

        with m.If(equals(state, _SUM)):
            m.d.comb += [self.x.ready.eq(1), write.en.eq(self.x.valid)]
            with m.If(self.x.valid):
                squares = Signal(unsigned(32 + (width - 1).bit_length()))
                m.d.comb += squares.eq(tree_sum(self.x.payload[k] * self.x.payload[k]
                                                for k in range(width)))
                m.d.sync += [total.eq(total + squares), index.eq(index + width),
                             row.eq(row + 1)]
                with m.If(index == length - width):
                    m.d.sync += [state.eq(_DIVIDE), remainder.eq(0), quotient.eq(0),
                                 bit.eq(_SUM_BITS)]

        with m.If(equals(state, _DIVIDE)):
            with m.If(bit != 0):
                position = Signal(range(_SUM_BITS))
                shifted = Signal(unsigned(_SUM_BITS + 1))
                m.d.comb += [position.eq(bit - 1),
                             shifted.eq((remainder << 1) | total.bit_select(position, 1))]
                with m.If(shifted >= length):
                    m.d.sync += [remainder.eq(shifted - length),
                                 quotient.eq(quotient | (Const(1, _SUM_BITS) << position))]
                with m.Else():
                    m.d.sync += remainder.eq(shifted)
                m.d.sync += bit.eq(bit - 1)
            with m.Else():
                m.d.sync += [var.eq(quotient + eps_q), state.eq(_SCALE)]

        with m.If(equals(state, _SCALE)):
            # e = bit_length(var); s = e - 8 rounded up to even; m = var >> s (or << -s)
            e = Signal(range(_SUM_BITS + 2))
            for i in range(_SUM_BITS + 1):
                with m.If(var.bit_select(i, 1)):
                    m.d.comb += e.eq(i + 1)
            s = Signal(signed(8))
            m.d.comb += s.eq(e - 8 + ((e - 8) & 1))
            mant = Signal(unsigned(8))
            with m.If(s >= 0):
                m.d.comb += mant.eq(var >> s.as_unsigned())
            with m.Else():
                m.d.comb += mant.eq(var << (-s).as_unsigned())
            m.d.comb += lookup.addr.eq(mant)
            m.d.sync += [inv.eq(lookup.data), amount.eq(8 + (s >> 1)), index.eq(0),
                         row.eq(0), lane.eq(0), state.eq(_EMIT)]

        with m.If(equals(state, _EMIT)):
            scaled = Signal(signed(16 + 25))
            element = Signal(signed(16))
            if width > 1:
                m.d.comb += element.eq(read.data.as_value().word_select(lane, 16).as_signed())
            else:
                m.d.comb += element.eq(read.data[0])
            m.d.comb += scaled.eq(element * inv)
            normalized = Signal(signed(16 + 25 + 1))
            with m.If(amount >= 1):
                m.d.comb += normalized.eq(round_shift(m, scaled, amount.as_unsigned()))
            with m.Else():
                m.d.comb += normalized.eq(scaled << (-amount).as_unsigned())
            value = requantize(m, normalized, self.gain.payload.mult, self.gain.payload.shift, 8)
            m.d.comb += [
                self.y.valid.eq(self.gain.valid),
                self.y.payload.value.eq(value),
                self.y.payload.last.eq(index == length - 1),
                self.gain.ready.eq(self.y.ready),
            ]
            with m.If(self.y.valid & self.y.ready):
                m.d.sync += [index.eq(index + 1), lane.eq(lane + 1)]
                with m.If(equals(lane, width - 1)):
                    m.d.sync += [lane.eq(0), row.eq(row + 1)]
                with m.If(index == length - 1):
                    m.d.sync += state.eq(_IDLE)
        return m
