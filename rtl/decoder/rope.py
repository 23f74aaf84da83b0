"""RoPE unit: rotates one head vector by the integer phase tables of the reference."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model.numerics.qwen2_int8 import COS, ROPE_BITS, SIN
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import saturate

__all__ = ["Rope"]


class Rope(wiring.Component):
    """``x1' = sat8(rshift_round(x1 C - x2 S, 14))``, ``x2' = sat8(rshift_round(x2 C + x1 S, 14))``
    with ``C, S`` read at ``idx = ((pos * inc_f + 2**21) >> 22) mod 1024`` for frequency ``f``
    (:mod:`heteroreason.model.numerics.qwen2_int8`, *RoPE*).

    A beat on ``cmd`` gives the position; then ``head_dim`` elements of one head arrive on ``x``
    (into a buffer), ``width`` a beat, and the rotated head leaves on ``y`` in the same order and
    beats. Heads follow each other without a new ``cmd`` until ``last``.

    Parameters
    ----------
    head_dim : int
        Even head dimension.
    increments : sequence of int
        The phase increment ``inc_f`` of each of the ``head_dim / 2`` frequencies (uint32).
    max_position : int
        Largest position.
    width : int
        Elements per beat; must divide ``head_dim / 2`` (a beat's partners form one beat).

    Members
    -------
    cmd : In(stream.Signature(range(max_position + 1)))
    x : In(stream.Signature(StructLayout value ArrayLayout(signed(8), width), last))
    y : Out(stream.Signature(StructLayout value ArrayLayout(signed(8), width), last))

    Latency
    -------
    A head's first beat out the cycle after its last beat in.

    Throughput
    ----------
    ``width`` elements per cycle in and out, alternately: ``2 head_dim / width`` cycles a head.
    """

    def __init__(self, *, head_dim, increments, max_position, width=1):
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0 or \
                head_dim % 2:
            raise TypeError(f"head_dim must be a positive even integer, not {head_dim!r}")
        increments = [int(v) for v in increments]
        if len(increments) != head_dim // 2 or any(not 0 <= v < 2**32 for v in increments):
            raise ValueError(f"increments must be {head_dim // 2} uint32 values")
        if isinstance(max_position, bool) or not isinstance(max_position, int) or \
                max_position <= 0:
            raise TypeError(f"max_position must be a positive integer, not {max_position!r}")
        if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
            raise TypeError(f"width must be a positive integer, not {width!r}")
        if (head_dim // 2) % width:
            raise ValueError(f"width ({width}) must divide head_dim / 2 ({head_dim // 2})")
        self._head_dim = head_dim
        self._increments = tuple(increments)
        self._max_position = max_position
        self._width = width
        element = data.StructLayout({"value": data.ArrayLayout(signed(8), width), "last": 1})
        super().__init__({
            "cmd": In(stream.Signature(range(max_position + 1))),
            "x": In(stream.Signature(element)),
            "y": Out(stream.Signature(element)),
        })

    @property
    def head_dim(self):
        return self._head_dim

    @property
    def width(self):
        return self._width

    def elaborate(self, platform):
        m = Module()
        width, half = self._width, self.head_dim // 2
        beats, half_beats = self.head_dim // width, half // width
        vector = data.ArrayLayout(signed(8), width)
        m.submodules.buffer = buffer = memory.Memory(shape=vector, depth=beats, init=[])
        write = buffer.write_port()
        own = buffer.read_port(domain="comb")
        partner = buffer.read_port(domain="comb")
        # the increments of the frequencies of one beat, a row each (at least two rows: a
        # one-row memory would have a zero-width address)
        m.submodules.increments = incs = memory.Memory(
            shape=data.ArrayLayout(unsigned(32), width), depth=max(half_beats, 2),
            init=[list(self._increments[b * width:(b + 1) * width]) for b in range(half_beats)])
        inc = incs.read_port(domain="comb")
        m.submodules.cos = cos_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in COS])
        m.submodules.sin = sin_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in SIN])
        cos_rds = [cos_rom.read_port(domain="comb") for _ in range(width)]
        sin_rds = [sin_rom.read_port(domain="comb") for _ in range(width)]

        position = Signal(range(self._max_position + 1))
        have_position = Signal()
        loading = Signal(init=1)
        index = Signal(range(beats + 1))  # beats of the head
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
                with m.If(equals(index, beats - 1)):
                    m.d.sync += [index.eq(0), loading.eq(0), last.eq(self.x.payload.last)]
        with m.Else():
            second = index >= half_beats
            freq = Signal(range(max(half_beats, 2)))
            m.d.comb += freq.eq(index - second * half_beats)
            m.d.comb += [inc.addr.eq(freq), own.addr.eq(index),
                         partner.addr.eq(freq + (~second) * half_beats)]
            for k in range(width):
                phase = Signal(unsigned(32), name=f"phase{k}")
                m.d.comb += phase.eq(position * inc.data[k] + (1 << (31 - ROPE_BITS)))
                m.d.comb += [cos_rds[k].addr.eq(phase[32 - ROPE_BITS:]),
                             sin_rds[k].addr.eq(phase[32 - ROPE_BITS:])]
                mine, other = own.data[k], partner.data[k]
                c, s = cos_rds[k].data, sin_rds[k].data
                mixed = Signal(signed(26), name=f"mixed{k}")
                with m.If(second):  # x2' = x2 C + x1 S
                    m.d.comb += mixed.eq(mine * c + other * s)
                with m.Else():      # x1' = x1 C - x2 S
                    m.d.comb += mixed.eq(mine * c - other * s)
                rounded = Signal(signed(27), name=f"rounded{k}")
                m.d.comb += rounded.eq((mixed + Const(1 << 13, 15)) >> 14)
                m.d.comb += self.y.payload.value[k].eq(saturate(m, rounded, 8))
            final = equals(index, beats - 1)
            m.d.comb += [self.y.valid.eq(1), self.y.payload.last.eq(final & last)]
            with m.If(self.y.ready):
                m.d.sync += index.eq(index + 1)
                with m.If(final):
                    m.d.sync += [index.eq(0), loading.eq(1)]
                    with m.If(last):
                        m.d.sync += have_position.eq(0)
        return m
