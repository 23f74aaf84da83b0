"""RoPE unit: rotates one head vector by the integer phase tables of the reference."""

from types import SimpleNamespace

from amaranth.hdl import Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.tables import COS, ROPE_BITS, SIN
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.arith import saturate
from heteroreason.rtl.decoder.pipeline import StallingPipeline
from heteroreason.rtl.limits import SIZE_LIMIT, WIDTH_LIMIT

__all__ = ["LATENCY", "Rope"]

# cycles from a beat issued to the pipeline to its rotation on ``y``: the buffer and increment
# reads, the increments registered, the phase's two products (M and P registers) and sum, the
# table read and its register, the two rotation products (M and P), their sum, rounding and
# saturation
LATENCY = 11


class Rope(wiring.Component):
    """``x1' = sat8(rshift_round(x1 C - x2 S, 14))``, ``x2' = sat8(rshift_round(x2 C + x1 S, 14))``
    with ``C, S`` read at ``idx = ((pos * inc_f + 2**21) >> 22) mod 1024`` for frequency ``f``
    (:mod:`heteroreason.model.spec.numerics.qwen2_int8`, *RoPE*).

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
    A head's beats enter the output pipeline from the cycle after its last beat in, and each
    leaves :data:`LATENCY` cycles after it entered.

    Throughput
    ----------
    ``width`` elements per cycle in and out, alternately: ``2 head_dim / width`` cycles a head
    (the next head loads while the previous one drains); the pipeline stalls as a whole while
    ``y`` is held back.
    """

    def __init__(self, *, head_dim, increments, max_position, width=1):
        checks.integer("head_dim", head_dim, low=2, high=WIDTH_LIMIT, error=TypeError)
        if head_dim % 2:
            raise TypeError(f"head_dim must be even, not {head_dim!r}")
        increments = [int(v) for v in increments]
        if len(increments) != head_dim // 2 or any(not 0 <= v < 2**32 for v in increments):
            raise ValueError(f"increments must be {head_dim // 2} uint32 values")
        checks.integer("max_position", max_position, low=1, high=SIZE_LIMIT, error=TypeError)
        checks.integer("width", width, low=1, high=WIDTH_LIMIT, error=TypeError)
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
        own = buffer.read_port()
        partner = buffer.read_port()
        # the increments of the frequencies of one beat, a row each (at least two rows: a
        # one-row memory would have a zero-width address)
        m.submodules.increments = incs = memory.Memory(
            shape=data.ArrayLayout(unsigned(32), width), depth=max(half_beats, 2),
            init=[list(self._increments[b * width:(b + 1) * width]) for b in range(half_beats)])
        inc = incs.read_port()
        m.submodules.cos = cos_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in COS])
        m.submodules.sin = sin_rom = memory.Memory(shape=signed(16), depth=2**ROPE_BITS,
                                                   init=[int(v) for v in SIN])
        cos_rds = [cos_rom.read_port() for _ in range(width)]
        sin_rds = [sin_rom.read_port() for _ in range(width)]

        position = Signal(range(self._max_position + 1))
        have_position = Signal()
        loading = Signal(init=1)
        index = Signal(range(beats + 1))  # beats of the head
        last = Signal()

        # the output pipeline advances as a whole while its last stage is empty or leaving
        pipe = StallingPipeline(m, LATENCY, ready=self.y.ready, name="rope")
        advance, stage = pipe.advance, pipe.stage

        # a new position once the previous command's last beat has been issued and has left
        # the pipeline (its beats use the position on the way)
        m.d.comb += self.cmd.ready.eq(~have_position & ~pipe.busy)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [position.eq(self.cmd.payload), have_position.eq(1)]

        second = index >= half_beats
        freq = Signal(range(max(half_beats, 2)))
        m.d.comb += freq.eq(index - second * half_beats)
        with m.If(loading):
            m.d.comb += [self.x.ready.eq(have_position), write.addr.eq(index),
                         write.data.eq(self.x.payload.value),
                         write.en.eq(self.x.valid & have_position)]
            with m.If(self.x.valid & have_position):
                m.d.sync += index.eq(index + 1)
                with m.If(equals(index, beats - 1)):
                    m.d.sync += [index.eq(0), loading.eq(0), last.eq(self.x.payload.last)]
        with m.Else():  # issue the head's beats into the pipeline, then load the next head
            final = equals(index, beats - 1)
            m.d.comb += [pipe.issue.eq(1), pipe.issue_tag.eq(final & last)]
            with m.If(advance):
                m.d.sync += index.eq(index + 1)
                with m.If(final):
                    m.d.sync += [index.eq(0), loading.eq(1)]
                    with m.If(last):
                        m.d.sync += have_position.eq(0)
        st = SimpleNamespace()  # what the stages share
        vars(st).update(own=own, partner=partner, inc=inc, cos_rds=cos_rds, sin_rds=sin_rds)
        vars(st).update(position=position, index=index, pipe=pipe, second=second, freq=freq)
        vars(st).update(width=width, half_beats=half_beats, advance=advance, stage=stage)
        self._rotate(m, st)
        return m

    def _rotate(self, m, st):
        """The pipeline's stages: the beat, its partner and the increments read, rotated and
        rounded out."""
        own, partner, inc, cos_rds, sin_rds = st.own, st.partner, st.inc, st.cos_rds, st.sin_rds
        position, index, pipe, second, freq = st.position, st.index, st.pipe, st.second, st.freq
        width, half_beats, stage = st.width, st.half_beats, st.stage
        # stage 1: the beat, its partner and the increments (synchronous reads)
        m.d.comb += [inc.addr.eq(freq), own.addr.eq(index),
                     partner.addr.eq(freq + (~second) * half_beats),
                     *(rd.en.eq(pipe.enable(Value.cast(rd.data).shape().width))
                       for rd in (inc, own, partner))]
        second_1 = stage(second, "second_1")
        for k in range(width):
            # stages 2: the increments; 3-4: pos * inc mod 2**32 from two registered partial
            # products; 5: their sum
            inc_k = stage(inc.data[k], f"inc{k}")  # the multipliers' B register
            lo = stage(stage(position * inc_k[:17], f"lo_m{k}"), f"lo_p{k}")
            hi = stage(stage(position * inc_k[17:], f"hi_m{k}"), f"hi_p{k}")
            phase = stage((lo + (hi << 17))[:32], f"phase{k}", unsigned(32))
            # stage 6: the tables at ((phase + 2**21) >> 22) mod 1024
            table_index = Signal(ROPE_BITS, name=f"table_index{k}")
            m.d.comb += [table_index.eq((phase[31 - ROPE_BITS:] + 1)[1:ROPE_BITS + 1]),
                         cos_rds[k].addr.eq(table_index), sin_rds[k].addr.eq(table_index),
                         *(rd.en.eq(pipe.enable(Value.cast(rd.data).shape().width))
                           for rd in (cos_rds[k], sin_rds[k]))]
            mine, other, sub = own.data[k], partner.data[k], ~second_1
            for n in range(2, 8):
                mine = stage(mine, f"mine{n}_{k}")
                other = stage(other, f"other{n}_{k}")
            for n in range(2, 9):
                sub = stage(sub, f"sub{n}_{k}")
            # stage 7: the table entries registered (the multipliers' A and B registers: a
            # block RAM's output is slow); 8-9: the two products; 10: x1 C - x2 S or
            # x2 C + x1 S; 11: round and saturate
            c = stage(cos_rds[k].data, f"cos{k}")
            s = stage(sin_rds[k].data, f"sin{k}")
            cc = stage(stage(mine * c, f"mc_m{k}"), f"mc_p{k}")
            ss = stage(stage(other * s, f"os_m{k}"), f"os_p{k}")
            sub = stage(sub, f"sub9_{k}")
            mixed = stage(Mux(sub, cc - ss, cc + ss), f"mixed{k}", signed(26))
            rounded = Signal(signed(27), name=f"rounded{k}")
            m.d.comb += rounded.eq((mixed + Const(1 << 13, 15)) >> 14)
            out = stage(saturate(m, rounded, 8), f"out{k}")
            m.d.comb += self.y.payload.value[k].eq(out)
        m.d.comb += [self.y.valid.eq(pipe.out_valid), self.y.payload.last.eq(pipe.out_tag)]
