"""RMSNorm unit: int16 residual in, int8 normalized activations out, by the integer reference's
rules (:mod:`heteroreason.model.spec.numerics.qwen2_int8`, *RMSNorm*)."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from heteroreason.model import checks
from heteroreason.model.spec.numerics.tables import RSQRT
from heteroreason.rtl.compare import equals
from heteroreason.rtl.decoder.pipeline import (
    REQUANT_LATENCY,
    StallingPipeline,
    delay,
    requantize_pipelined,
    tree_latency,
    tree_sum_pipelined,
)
from heteroreason.rtl.limits import SIZE_LIMIT, WIDTH_LIMIT

__all__ = ["DIVIDER_CYCLES", "EMIT_LATENCY", "SCALE_CYCLES", "RmsNorm", "square_latency"]

_IDLE, _SUM, _DRAIN, _DIVIDE, _SCALE, _EMIT = range(6)
_SUM_BITS = 48
DIVIDER_CYCLES = _SUM_BITS + 1  # a quotient bit a cycle, then var = quotient + eps_q
# bit length, the even shift, the mantissa's byte window, the mantissa, the table read, its
# register
SCALE_CYCLES = 6
EMIT_LATENCY = 7 + REQUANT_LATENCY  # from an element issued to its result on ``y``


class RmsNorm(wiring.Component):
    """``y_i = sat8(rshift_round(n_i * mult_i, shift_i))`` with ``n_i = r_i / sqrt(var)`` in Q.15.

    A job (``cmd``: length ``n``, a multiple of ``width``, and ``eps_q``) takes ``n`` residual
    elements on ``x`` (``width`` a beat) into a buffer while summing their squares;
    ``var = sum // n + eps_q`` by a restoring divider (one quotient bit per cycle); the
    reciprocal square root comes from the 256-entry table of the reference after normalizing
    ``var`` by an even shift; then, ``gains`` per cycle, each element is scaled and requantized
    with its channel's gain (multiplier and shift, the RMSNorm weight folded in; a ``gain`` beat
    holds ``gains`` channels') and emitted on ``y`` (``gains`` elements a beat, ``last`` on the
    final one).

    Parameters
    ----------
    max_length : int
        Longest vector (the hidden size); a multiple of ``width``.
    width : int
        Elements per ``x`` beat.
    gains : int
        Elements per ``gain`` and ``y`` beat: a power of two that divides ``width``. With one,
        ``gain`` is a single (mult, shift) and ``y.value`` a single int8; with more, arrays.

    Members
    -------
    cmd : In(stream.Signature(StructLayout length, eps_q))
    x : In(stream.Signature(ArrayLayout(signed(16), width)))
    gain : In(stream.Signature(StructLayout mult unsigned(31), shift unsigned(6)) [x gains])
    y : Out(stream.Signature(StructLayout value signed(8) [x gains], last))

    Latency
    -------
    ``n / width`` cycles in, :func:`square_latency` for the last squares to reach the total,
    :data:`DIVIDER_CYCLES` for the division, :data:`SCALE_CYCLES` for the reciprocal square
    root, then ``n / gains`` beats issued a cycle each, each on ``y`` :data:`EMIT_LATENCY`
    cycles after its issue.

    Throughput
    ----------
    ``width`` elements per cycle in, ``gains`` per cycle out (each needs its own gain); the
    output pipeline stalls as a whole while ``y`` is held back.
    """

    def __init__(self, *, max_length, width=1, gains=1):
        checks.integer("max_length", max_length, low=1, high=SIZE_LIMIT, error=TypeError)
        checks.integer("width", width, low=1, high=WIDTH_LIMIT, error=TypeError)
        if max_length % width:
            raise ValueError(f"width ({width}) must divide max_length ({max_length})")
        checks.power_of_two("gains", gains, divides=(width, "width"))
        self._max_length = max_length
        self._width = width
        self._gains = gains
        gain = data.StructLayout({"mult": unsigned(31), "shift": unsigned(6)})
        super().__init__({
            "cmd": In(stream.Signature(data.StructLayout({
                "length": range(1, max_length + 1), "eps_q": unsigned(32)}))),
            "x": In(stream.Signature(data.ArrayLayout(signed(16), width))),
            "gain": In(stream.Signature(gain if gains == 1 else data.ArrayLayout(gain, gains))),
            "y": Out(stream.Signature(data.StructLayout({
                "value": signed(8) if gains == 1 else data.ArrayLayout(signed(8), gains),
                "last": 1}))),
        })

    @property
    def max_length(self):
        return self._max_length

    @property
    def width(self):
        return self._width

    @property
    def gains(self):
        return self._gains

    def elaborate(self, platform):
        m = Module()
        width = self._width
        m.submodules.buffer = buffer = memory.Memory(
            shape=data.ArrayLayout(signed(16), width), depth=self.max_length // width, init=[])
        write = buffer.write_port()
        read = buffer.read_port()
        m.submodules.table = table = memory.Memory(shape=unsigned(24), depth=256,
                                                   init=[int(v) for v in RSQRT])
        lookup = table.read_port()

        state = Signal(range(6))
        length = Signal(range(self.max_length + 1))
        eps_q = Signal(unsigned(32))
        index = Signal(range(self.max_length + 1))  # elements in or out
        row = Signal(range(self.max_length // width + 1))  # buffer rows
        lane = Signal(range(max(width, 2)))  # the element out within its row
        total = Signal(unsigned(_SUM_BITS))
        # restoring division total // length: the remainder stays below the divisor
        remainder = Signal(range(2 * self.max_length + 1))
        quotient = Signal(unsigned(_SUM_BITS))
        dividend = Signal(unsigned(_SUM_BITS))  # total, shifted out from the top
        bit = Signal(range(_SUM_BITS + 1))
        var = Signal(unsigned(_SUM_BITS + 1))
        step = Signal(range(SCALE_CYCLES + 1))
        e = Signal(range(_SUM_BITS + 2))
        # t = s + 8 for the even shift s: the mantissa is bits [t, t + 8) of var << 8
        t = Signal(range(_SUM_BITS + 3))
        window = Signal(unsigned(16))  # bits [8 (t // 8), + 16) of var << 8
        mant = Signal(unsigned(8))
        inv = Signal(unsigned(24))
        amount = Signal(range(32))  # 8 + s/2 (4..29): the shift that yields Q.15

        m.d.comb += [write.addr.eq(row), write.data.eq(self.x.payload)]

        st = SimpleNamespace()  # what the stages share
        vars(st).update(width=width, write=write, read=read, lookup=lookup, state=state)
        vars(st).update(length=length, eps_q=eps_q, index=index, row=row, lane=lane, total=total)
        vars(st).update(remainder=remainder, quotient=quotient, dividend=dividend, bit=bit, var=var)
        vars(st).update(step=step, e=e, t=t, window=window, mant=mant, inv=inv, amount=amount)
        self._sum_squares(m, st)
        self._count_and_divide(m, st)
        self._scale_and_issue(m, st)
        self._emit(m, st)
        return m

    def _sum_squares(self, m, st):
        """The squares' pipeline into the total (it never stalls: ``x`` is always ready while
        summing)."""
        width, total = st.width, st.total
        # the squares' pipeline (it never stalls: x is always ready while summing)
        take = Signal()
        squares = [Signal(unsigned(32), name=f"square{k}", reset_less=True) for k in range(width)]
        squares_p = [Signal(unsigned(32), name=f"square_p{k}", reset_less=True)
                     for k in range(width)]
        x_in = Signal(data.ArrayLayout(signed(16), width), reset_less=True)
        m.d.sync += x_in.eq(self.x.payload)  # the multipliers' A and B registers
        for k in range(width):
            m.d.sync += [squares[k].eq(x_in[k] * x_in[k]), squares_p[k].eq(squares[k])]
        summed = tree_sum_pipelined(m, squares_p, name="squares")
        in_sum = delay(m, take, square_latency(width), name="sum_valid")
        pending = Signal(square_latency(width))
        m.d.sync += pending.eq(Cat(take, pending[:-1]))
        with m.If(in_sum):
            m.d.sync += total.eq(total + summed)
        vars(st).update(take=take, in_sum=in_sum, pending=pending)

    def _count_and_divide(self, m, st):
        """The output pipeline, the elements in and the total's division by the length."""
        width, write, state, length, eps_q = st.width, st.write, st.state, st.length, st.eps_q
        index, row, total, remainder = st.index, st.row, st.total, st.remainder
        quotient, dividend, bit, var, step = st.quotient, st.dividend, st.bit, st.var, st.step
        take, in_sum, pending = st.take, st.in_sum, st.pending
        # the output pipeline: it advances as a whole while its last stage is empty or leaving
        pipe = StallingPipeline(m, EMIT_LATENCY, ready=self.y.ready, name="emit")
        advance, stage = pipe.advance, pipe.stage

        with m.If(equals(state, _IDLE)):
            # a new vector once the previous one has left (its elements use inv and amount)
            m.d.comb += self.cmd.ready.eq(~pipe.busy)
            with m.If(self.cmd.valid & ~pipe.busy):
                m.d.sync += [length.eq(self.cmd.payload.length),
                             eps_q.eq(self.cmd.payload.eps_q), index.eq(0), row.eq(0),
                             total.eq(0), state.eq(_SUM)]

        with m.If(equals(state, _SUM)):
            m.d.comb += [self.x.ready.eq(1), write.en.eq(self.x.valid), take.eq(self.x.valid)]
            with m.If(self.x.valid):
                m.d.sync += [index.eq(index + width), row.eq(row + 1)]
                with m.If(index == length - width):
                    m.d.sync += state.eq(_DRAIN)

        # the last squares into the total, then the division
        with m.If(equals(state, _DRAIN) & ~pending.any() & ~in_sum):
            m.d.sync += [state.eq(_DIVIDE), remainder.eq(0), quotient.eq(0),
                         dividend.eq(total), bit.eq(_SUM_BITS)]

        with m.If(equals(state, _DIVIDE)):
            with m.If(bit != 0):
                shifted = Signal(range(2 * self.max_length + 1))
                m.d.comb += shifted.eq(Cat(dividend[-1], remainder))
                with m.If(shifted >= length):
                    m.d.sync += [remainder.eq(shifted - length),
                                 quotient.eq(Cat(1, quotient[:-1]))]
                with m.Else():
                    m.d.sync += [remainder.eq(shifted), quotient.eq(Cat(0, quotient[:-1]))]
                m.d.sync += [bit.eq(bit - 1), dividend.eq(dividend << 1)]
            with m.Else():
                m.d.sync += [var.eq(quotient + eps_q), state.eq(_SCALE), step.eq(0)]
        vars(st).update(pipe=pipe, advance=advance, stage=stage, shifted=shifted)

    def _scale_and_issue(self, m, st):
        """The inverse square root's lookup and scale, then the elements issued with their
        gains."""
        width, read, lookup, state, length = st.width, st.read, st.lookup, st.state, st.length
        index, row, lane, var, step, e, t = st.index, st.row, st.lane, st.var, st.step, st.e, st.t
        window, mant, inv, amount, pipe = st.window, st.mant, st.inv, st.amount, st.pipe
        advance = st.advance
        # the table is read every cycle from a register (a small table may become logic)
        m.d.comb += lookup.addr.eq(mant)
        with m.If(equals(state, _SCALE)):
            # e = bit_length(var); s = e - 8 rounded up to even; m = var >> s (or << -s),
            # as bits [t, t + 8) of var << 8 with t = s + 8 = e + e % 2, a byte window then
            # an even shift within it (no wide shifter in one cycle); the table; a step a cycle
            m.d.sync += step.eq(step + 1)
            wide = Cat(Const(0, 8), var, Const(0, 16))
            with m.Switch(step):
                with m.Case(0):
                    m.d.sync += e.eq(bit_length(m, var))
                with m.Case(1):
                    m.d.sync += t.eq(e + e[0])
                with m.Case(2):
                    with m.Switch(t[3:]):
                        for k in range((len(wide) - 16) // 8 + 1):
                            with m.Case(k):
                                m.d.sync += window.eq(wide[8 * k:8 * k + 16])
                    m.d.sync += amount.eq(4 + t[1:])  # 8 + s / 2
                with m.Case(3), m.Switch(t[1:3]):
                    for k in range(4):
                        with m.Case(k):
                            m.d.sync += mant.eq(window[2 * k:2 * k + 8])
                with m.Case(5):  # (step 4 read the table at mant)
                    m.d.sync += [inv.eq(lookup.data), index.eq(0), row.eq(0), lane.eq(0),
                                 state.eq(_EMIT)]

        g = self._gains
        with m.If(equals(state, _EMIT)):  # issue ``gains`` elements with their gain beat
            final = index == length - g
            m.d.comb += [self.gain.ready.eq(advance), pipe.issue.eq(self.gain.valid),
                         pipe.issue_tag.eq(self.gain.valid & final)]
            with m.If(advance & self.gain.valid):
                m.d.sync += [index.eq(index + g), lane.eq(lane + g)]
                with m.If(equals(lane, width - g)):
                    m.d.sync += [lane.eq(0), row.eq(row + 1)]
                with m.If(final):
                    m.d.sync += state.eq(_IDLE)
        m.d.comb += [read.addr.eq(row),
                     read.en.eq(pipe.enable(Value.cast(read.data).shape().width))]
        vars(st).update(g=g)

    def _emit(self, m, st):
        """The output pipeline's stages: each element times the inverse root, rounded out."""
        width, read, lane, inv, amount = st.width, st.read, st.lane, st.inv, st.amount
        pipe, stage, shifted, g = st.pipe, st.stage, st.shifted, st.g
        # stage 1: the buffer row, the lane, the gain; 2: the element; 3-4: element * inv as two
        # registered partial products; 5: their sum; 6: its shift less one; 7: rounded
        lane_1 = stage(lane, "lane_1")
        values = []
        for t in range(g):
            tag = "" if g == 1 else str(t)  # (one gain: the names of a single lane)
            entry = self.gain.payload if g == 1 else self.gain.payload[t]
            mult, shift = entry.mult, entry.shift
            for n in range(1, 8):
                mult, shift = stage(mult, f"mult{tag}_{n}"), stage(shift, f"shift{tag}_{n}")
            if width == g:
                word = read.data[t]
            elif g == 1:
                word = read.data.as_value().word_select(lane_1, 16).as_signed()
            else:  # the gains' group of the row (``lane_1`` is a multiple of ``gains``)
                word = read.data.as_value().word_select(
                    lane_1[g.bit_length() - 1:], 16 * g).word_select(t, 16).as_signed()
            element = stage(word, f"element{tag}", signed(16))
            low = stage(stage(element * inv[:17], f"scaled_lo_m{tag}"), f"scaled_lo_p{tag}")
            high = stage(stage(element * inv[17:], f"scaled_hi_m{tag}"), f"scaled_hi_p{tag}")
            scaled = stage(low + (high << 17), f"scaled{tag}", signed(16 + 25))
            if t == 0:
                amount_m1 = Signal(5)
                m.d.comb += amount_m1.eq(amount - 1)
            shifted = stage(scaled >> amount_m1, f"shifted{tag}", signed(16 + 25))
            normalized = stage((shifted + 1) >> 1, f"normalized{tag}", signed(16 + 25))
            values.append(requantize_pipelined(m, normalized, mult, shift, Const(0, 2),
                                               widths=(8,), en=pipe, name=f"out{tag}"))
        value = self.y.payload.value
        m.d.comb += [self.y.valid.eq(pipe.out_valid),
                     *([value.eq(values[0])] if g == 1 else
                       [value[t].eq(v) for t, v in enumerate(values)]),
                     self.y.payload.last.eq(pipe.out_tag)]


def square_latency(width: int) -> int:
    """Cycles from a beat on ``x`` to its squares in the total: the beat registered, the
    products' M and P registers and the registered adder tree."""
    return 3 + tree_latency(width)


def bit_length(m, value):
    """``value.bit_length()`` as a one-hot-free priority encoder: groups of eight bits, each
    with its own short priority chain, and the highest non-empty group."""
    groups = [value[k:k + 8] for k in range(0, len(value), 8)]
    result = Signal(range(len(value) + 1), name="bit_length")
    for g, bits in enumerate(groups):
        local = Signal(range(9), name=f"bit_length{g}")
        for i in range(len(bits)):
            with m.If(bits[i]):
                m.d.comb += local.eq(i + 1)
        with m.If(bits.any()):
            m.d.comb += result.eq(8 * g + local)
    return result
