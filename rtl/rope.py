"""RoPE unit: rotates one head vector by the integer phase tables of the reference."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.qwen2_int8 import COS, ROPE_BITS, SIN
from heteroreason.rtl.arith import saturate
from heteroreason.rtl.compare import equals

__all__ = ["Rope"]


class Rope(wiring.Component):
    """``x1' = sat8(rshift_round(x1 C - x2 S, 14))``, ``x2' = sat8(rshift_round(x2 C + x1 S, 14))``
    with ``C, S`` read at ``idx = ((pos * inc_f + 2**21) >> 22) mod 1024`` for frequency ``f``
    (:mod:`heteroreason.model.qwen2_int8`, *RoPE*).

    A beat on ``cmd`` gives the position; then ``head_dim`` elements of one head arrive on ``x``
    (into a buffer) and the rotated head leaves on ``y`` in the same order, one element per cycle.
    Heads follow each other without a new ``cmd`` until ``last``.

    Parameters
    ----------
    head_dim : int
        Even head dimension.
    increments : sequence of int
        The phase increment ``inc_f`` of each of the ``head_dim / 2`` frequencies (uint32).
    max_position : int
        Largest position.

    Members
    -------
    cmd : In(stream.Signature(range(max_position + 1)))
    x : In(stream.Signature(StructLayout value signed(8), last))
    y : Out(stream.Signature(StructLayout value signed(8), last))
    """

    def __init__(self, *, head_dim, increments, max_position):
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or \
                head_dim % 2:
            raise TypeError(f"head_dim must be a positive even integer, not {head_dim!r}")
        increments = [int(v) for v in increments]
        if len(increments) != head_dim // 2 or any(not 0 <= v < 2**32 for v in increments):
            raise ValueError(f"increments must be {head_dim // 2} uint32 values")
        if isinstance(max_position, bool) or not isinstance(max_position, int) or \
                max_position <= 0:
            raise TypeError(f"max_position must be a positive integer, not {max_position!r}")
        self._head_dim = head_dim
        self._increments = tuple(increments)
        self._max_position = max_position
        element = data.StructLayout({"value": signed(8), "last": 1})
        super().__init__({
            "cmd": In(stream.Signature(range(max_position + 1))),
            "x": In(stream.Signature(element)),
            "y": Out(stream.Signature(element)),
        })

    @property
    def head_dim(self):
        return self._head_dim

    def elaborate(self, platform):
        m = Module()
        half = self.head_dim // 2
        m.submodules.buffer = buffer = memory.Memory(shape=signed(8), depth=self.head_dim,
                                                     init=[])
        write = buffer.write_port()
        own = buffer.read_port(domain="comb")
        partner = buffer.read_port(domain="comb")
        m.submodules.increments = incs = memory.Memory(shape=unsigned(32), depth=half,
                                                       init=list(self._increments))
        inc = incs.read_port(domain="comb")
        m.submodules.cos = cos_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in COS])
        m.submodules.sin = sin_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in SIN])
        cos_rd, sin_rd = cos_rom.read_port(domain="comb"), sin_rom.read_port(domain="comb")

        position = Signal(range(self._max_position + 1))
        have_position = Signal()
        loading = Signal(init=1)
        index = Signal(range(self.head_dim + 1))
        last = Signal()

        m.d.comb += self.cmd.ready.eq(~have_position)
        with m.If(self.cmd.valid & ~have_position):
            m.d.sync += [position.eq(self.cmd.payload), have_position.eq(1)]

        with m.If(loading):
            m.d.comb += [self.x.ready.eq(have_position), write.addr.eq(index),
                         write.data.eq(self.x.payload.value),
                         write.en.eq(self.x.valid & have_position)]
            with m.If(self.x.valid & have_position):
                m.d.sync += index.eq(index + 1)
                with m.If(equals(index, self.head_dim - 1)):
                    m.d.sync += [index.eq(0), loading.eq(0), last.eq(self.x.payload.last)]
        with m.Else():
            second = index >= half
            freq = Signal(range(half))
            m.d.comb += freq.eq(index - second * half)
            m.d.comb += [inc.addr.eq(freq), own.addr.eq(index),
                         partner.addr.eq(freq + (~second) * half)]
            phase = Signal(unsigned(32))
            m.d.comb += phase.eq(position * inc.data + (1 << (31 - ROPE_BITS)))
            m.d.comb += [cos_rd.addr.eq(phase[32 - ROPE_BITS:]),
                         sin_rd.addr.eq(phase[32 - ROPE_BITS:])]
            mixed = Signal(signed(26))
            with m.If(second):  # x2' = x2 C + x1 S
                m.d.comb += mixed.eq(own.data * cos_rd.data + partner.data * sin_rd.data)
            with m.Else():      # x1' = x1 C - x2 S
                m.d.comb += mixed.eq(own.data * cos_rd.data - partner.data * sin_rd.data)
            rounded = Signal(signed(27))
            m.d.comb += rounded.eq((mixed + Const(1 << 13, 15)) >> 14)
            value = saturate(m, rounded, 8)
            final = equals(index, self.head_dim - 1)
            m.d.comb += [self.y.valid.eq(1), self.y.payload.value.eq(value),
                         self.y.payload.last.eq(final & last)]
            with m.If(self.y.ready):
                m.d.sync += index.eq(index + 1)
                with m.If(final):
                    m.d.sync += [index.eq(0), loading.eq(1)]
                    with m.If(last):
                        m.d.sync += have_position.eq(0)
        return m
